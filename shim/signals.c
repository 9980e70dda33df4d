/* SPDX-License-Identifier: MIT */
/*
 * shim/signals.c — crashes.  On SIGSEGV, SIGBUS, SIGILL, SIGFPE and SIGABRT
 * the handler records the signal, the fault address and the faulting
 * thread's stack, on an alternate stack and without malloc, then lets the
 * signal do what it would have done without heisen: the program's own
 * handler if it installed one, else the default action (re-raised, so the
 * exit status and the core dump are unchanged).  Redis's crash report and
 * ASan's deadly-signal handler work the same way.
 *
 * A SIGSEGV or SIGBUS inside the guard-page pool (guarded.c) is first
 * made a use-after-free or heap-buffer-overflow finding by hs_guard_fault;
 * then it is a crash like any other, unless HEISEN_ON_HEAP_ERROR=continue
 * made the page accessible, and the faulting access is simply retried.
 *
 * Programs install crash handlers too (Python's faulthandler does).  heisen
 * stays first: sigaction() and signal() are interposed for these five
 * signals, the program's handler is kept here and called from ours, and the
 * program sees exactly the old/new actions it would have seen.  A fault that
 * the program's handler survives (it returned) is not a crash; the crash is
 * recorded when the default action is about to run, with the stack of the
 * original fault when the program's handler re-raised it (faulthandler does).
 *
 * Snapshots.  There is no ptrace in most containers, so a thread
 * records its own stack when asked: SIGRTMAX - HS_SNAPSHOT_SIGNAL_OFFSET,
 * sent with rt_tgsigqueueinfo, si_code SI_QUEUE and si_value
 * hs_snapshot_value(start_real_ns) (include/internal/snapshot_request.h:
 * the magic plus bits only a reader of this segment knows), by a hang
 * watcher (heisen-run, heisen-dump --snapshot) or by the crash path of this
 * process for every other thread.  Anything else arriving on that signal
 * — the bare magic too — is the program's own use of it and goes to the
 * program's handler, interposed like the crash signals, or to the default
 * action, which terminates as it would without heisen.  A thread that takes
 * the signal itself (blocks it, or waits in sigtimedwait) is never sent a
 * request: it would dequeue it as its own.  The
 * handler writes snap_stack and snap_flags, then snap_ns (release), never
 * blocks, and keeps errno; SA_RESTART makes most interrupted system calls
 * resume, but some (nanosleep, poll, epoll_wait, sem_timedwait...) return
 * EINTR, as under any profiler signal: README.md "Hang snapshots".
 *
 * Terminating signals.  A process killed by SIGTERM, SIGINT,
 * SIGHUP... that it left at SIG_DFL runs none of its code, so without help
 * it would look like one killed by SIGKILL (vanished).  While the program
 * leaves such a signal at SIG_DFL, heisen installs a sentinel handler in
 * its place: it records the signal and who sent it (si_pid, si_uid,
 * si_code), a last memory sample, the state word HS_STATE_SIGNALED, then
 * puts SIG_DFL back and re-raises, so the process dies of the same signal
 * (core dump included, for SIGQUIT) as it would have.  The program always
 * sees SIG_DFL in sigaction()/signal().  The moment it installs a handler
 * or SIG_IGN, that action is installed for real and heisen steps aside —
 * so an ignored signal stays ignored across exec, as nohup needs — and
 * when it puts SIG_DFL back, the sentinel returns.  A signal that is
 * ignored when the library loads is never touched.  Where the idea comes
 * from: the "who killed my process" question that only the sender's pid in
 * siginfo answers (as systemd's and the kernel's own SIGKILL tracing do).
 *
 * A vfork child (posix_spawn, CPython's subprocess) shares this library's
 * memory with its parent until it execs: its sigaction() calls go straight
 * to the kernel, so the parent's bookkeeping is never changed by them.
 */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "internal/snapshot_request.h"
#include "hooks.h"
#include "shim.h"
#include "unwind_mask.h"

#define ALTSTACK_SIZE (128 * 1024)

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

/* Signals whose default action ends the process and that others send. */
static const int term_signals[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2,
				   SIGPIPE, SIGALRM, SIGXCPU, SIGXFSZ, SIGVTALRM, SIGPROF};
HS_HOT_BSS static int term_armed[NSIG];    /* [atomic] the sentinel is installed: the program sees SIG_DFL */

HS_HOT_BSS static int installed;           /* our handler is in place */
HS_HOT_BSS static int snap_sig;            /* [atomic] the snapshot signal, 0 = not installed */

/*
 * The program's view of the action of each signal heisen keeps one for:
 * the crash signals, the terminating signals and the snapshot signal, a
 * slot each (one more for a signal none of these are, never expected).
 * 19 slots of 152 bytes among the variables every image writes
 * (HS_HOT_BSS) instead of 65 entries over three pages of .bss of their
 * own, two of them copied by every fork child of a shell that sets its
 * handlers back (bench/README.md "Process start: fewer pages, fewer
 * lookups").
 */
#define N_CRASH (sizeof crash_signals / sizeof crash_signals[0])
#define N_TERM (sizeof term_signals / sizeof term_signals[0])
#define SLOT_SNAPSHOT (N_CRASH + N_TERM)
HS_HOT_BSS static struct sigaction user_slots[N_CRASH + N_TERM + 2];

/* sig's slot of user_slots.  Async-signal-safe. */
HS_FORK_TEXT static struct sigaction *user_action_of(int sig)
{
	for (size_t i = 0; i < N_CRASH; i++)
		if (crash_signals[i] == sig)
			return &user_slots[i];
	for (size_t i = 0; i < N_TERM; i++)
		if (term_signals[i] == sig)
			return &user_slots[N_CRASH + i];
	/* the snapshot signal's number, whether or not it is installed yet */
	return &user_slots[sig == SIGRTMAX - HS_SNAPSHOT_SIGNAL_OFFSET ? SLOT_SNAPSHOT : SLOT_SNAPSHOT + 1];
}

/* The crash path asks the other threads with this bit added to the magic:
 * a snapshot "because another thread crashed".  Only this process sends it. */
#define SNAP_CRASH_BIT (1ull << 56)
#define CRASH_SNAP_WAIT_NS 200000000ull  /* how long a crash waits for the others */
#define CRASH_SNAP_MAX_TIDS 1024

static int is_crash_signal(int sig)
{
	for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
		if (crash_signals[i] == sig)
			return 1;
	return 0;
}

static int is_term_signal(int sig)
{
	for (size_t i = 0; i < sizeof term_signals / sizeof term_signals[0]; i++)
		if (term_signals[i] == sig)
			return 1;
	return 0;
}

/* A vfork child shares our memory with its parent (see the top comment). */
static int in_vfork_child(void)
{
	return hs_seg.hdr && hs_seg.hdr->pid != (int32_t)hs_sys.getpid();
}

/* Signals whose action heisen keeps for itself while the program sees its own. */
static int is_ours(int sig)
{
	return is_crash_signal(sig) || (sig > 0 && sig == __atomic_load_n(&snap_sig, __ATOMIC_ACQUIRE));
}

static void snapshot_others(void);

/* The first thread's alternate stack (the process's main thread, which
 * attaches in the constructor): in .bss, whose pages stay untouched until
 * a handler runs on them, instead of an mmap (a system call and a mapping
 * made and unmade in every image; bench/README.md "Process start: no
 * symbol scans, no CPUID, fewer system calls").  A fork child's copy is its own. */
static char first_altstack[ALTSTACK_SIZE] __attribute__((aligned(16)));
static int first_altstack_used; /* [atomic] */

int hs_altstack_setup(struct hs_tls *t)
{
	stack_t ss, old;
	void *p;
	int expect = 0;
	if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE))
		return 0; /* the program has its own */
	if (__atomic_compare_exchange_n(&first_altstack_used, &expect, 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		p = first_altstack;
	else
		p = hs_sys.mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	ss.ss_sp = p;
	ss.ss_size = ALTSTACK_SIZE;
	ss.ss_flags = 0;
	if (sigaltstack(&ss, NULL) != 0) {
		if (p == first_altstack)
			__atomic_store_n(&first_altstack_used, 0, __ATOMIC_RELEASE);
		else
			hs_sys.munmap(p, ALTSTACK_SIZE);
		return -1;
	}
	t->altstack = p;
	return 0;
}

void hs_altstack_teardown(struct hs_tls *t)
{
	stack_t ss, cur;
	if (!t->altstack)
		return;
	if (sigaltstack(NULL, &cur) == 0 && cur.ss_sp == t->altstack && !(cur.ss_flags & SS_ONSTACK)) {
		memset(&ss, 0, sizeof ss);
		ss.ss_flags = SS_DISABLE;
		if (sigaltstack(&ss, NULL) == 0) {
			if (t->altstack == first_altstack)
				__atomic_store_n(&first_altstack_used, 0, __ATOMIC_RELEASE);
			else
				hs_sys.munmap(t->altstack, ALTSTACK_SIZE);
		}
	}
	t->altstack = NULL;
}

/*
 * Put sig back to its default action and send it to this thread again: it
 * is pending while the handler runs (blocked) and takes the default action
 * — termination, a core dump — as soon as the handler returns.
 */
static void reraise_default(int sig)
{
	struct sigaction dfl;
	memset(&dfl, 0, sizeof dfl);
	dfl.sa_handler = SIG_DFL;
	HS_REAL(sigaction)(sig, &dfl, NULL);
	hs_sys.tgkill(hs_sys.getpid(), hs_sys.gettid(), sig);
}

/* Record the crash: finding, ring record, state word. Once per process. */
static void commit_crash(struct hs_tls *t, int sig, int code, uint64_t addr, uint32_t stack)
{
	static int committed;
	struct hs_finding f;
	uint32_t idx;
	if (__atomic_exchange_n(&committed, 1, __ATOMIC_ACQ_REL))
		return;
	memset(&f, 0, sizeof f);
	f.kind = HS_FIND_CRASH;
	f.tid = (int32_t)hs_sys.gettid();
	f.ts_ns = hs_now();
	f.stack = stack;
	f.signo = sig;
	f.si_code = code;
	f.addr = addr;
	idx = hs_finding_add(&hs_seg, &f);
	if (t && t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE)) {
		hs_rec(t, f.ts_ns, HS_REC_SIGNAL, stack, (uint64_t)sig, addr, (uint64_t)code);
		if (idx)
			hs_rec(t, f.ts_ns, HS_REC_FINDING, stack, idx - 1, 0, 0);
	}
	snapshot_others();
	hs_proc_end(t && !t->in_hook ? t : NULL, HS_MEMW_SIGNAL);
	hs_segment_end(HS_STATE_CRASHED, sig);
}

/*
 * Run the program's handler for sig the way the kernel would have: with
 * its mask (and sig itself unless SA_NODEFER) blocked, honouring
 * SA_RESETHAND.  The caller checked that it is a real handler.  The guard
 * is dropped to `was` while it runs: its calls are the program's.
 */
static void call_user_handler(struct hs_tls *t, int was, int sig, siginfo_t *si, void *uc)
{
	struct sigaction *ua = user_action_of(sig), copy = *ua;
	sigset_t old, mask = ua->sa_mask;
	if (!(ua->sa_flags & SA_NODEFER))
		sigaddset(&mask, sig);
	if (ua->sa_flags & SA_RESETHAND) {
		memset(ua, 0, sizeof *ua);
		ua->sa_handler = SIG_DFL;
	}
	t->in_hook = was;
	pthread_sigmask(SIG_BLOCK, &mask, &old);
	if (copy.sa_flags & SA_SIGINFO)
		copy.sa_sigaction(sig, si, uc);
	else
		copy.sa_handler(sig);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
}

static int is_handler(const struct sigaction *ua)
{
	return ua->sa_handler != SIG_DFL && ua->sa_handler != SIG_IGN;
}

static void crash_handler(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct hs_tls *t = &hs_tls;
	struct sigaction *ua = user_action_of(sig);
	int was = t->in_hook;
	/* the heap checker's probe of a wild pointer's header: not a crash */
	if ((sig == SIGSEGV || sig == SIGBUS) && hs_safe_read_fixup(uc)) {
		errno = saved_errno;
		return;
	}
	hs_fork_segment_now(); /* a fork child that crashes before its first event */
	t->in_hook = 1;

	/* a fault in the guard-page pool (guarded.c) is a use-after-free or a
	   buffer overflow: the finding first; with HEISEN_ON_HEAP_ERROR=continue
	   the page was opened and the access is retried, else it is a crash */
	if ((sig == SIGSEGV || sig == SIGBUS) && hs_guard_fault(sig, si, uc, was)) {
		t->in_hook = was;
		errno = saved_errno;
		return;
	}
	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		/* a fault from the kernel (si_code > 0) is the one to remember; a
		   re-raise by the program's handler keeps the original */
		if (t->pending_sig != sig || si->si_code > 0) {
			t->pending_sig = sig;
			t->pending_code = si->si_code;
			t->pending_addr = (uint64_t)(uintptr_t)si->si_addr;
			hs_unwind_load_for_crash(sig, si, uc, was); /* an image that has not unwound yet */
			t->pending_stack = hs_stack_from_signal(uc);
		}
	}
	if (is_handler(ua)) {
		call_user_handler(t, was, sig, si, uc);
		errno = saved_errno;
		return; /* the program handled it, or re-raised it (pending) */
	}
	if (ua->sa_handler == SIG_IGN && si->si_code <= 0) {
		/* an ignored signal sent by someone: nothing happens */
		t->in_hook = was;
		errno = saved_errno;
		return;
	}
	/* the default action: terminate, and dump core where enabled */
	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		commit_crash(t, sig, t->pending_code, t->pending_addr, t->pending_stack);
	else
		hs_segment_end(HS_STATE_CRASHED, sig); /* a recorder gone quiet still says how it ended */
	/* pending until we return, then fatal with the original signal */
	reraise_default(sig);
	errno = saved_errno;
}

void hs_signals_install(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = crash_handler;
	sa.sa_flags = SA_SIGINFO | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++) {
		int sig = crash_signals[i];
		struct sigaction old;
		if (HS_REAL(sigaction)(sig, &sa, &old) == 0)
			*user_action_of(sig) = old; /* whatever was there before us */
	}
	__atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
}

/* ---- terminating signals ----------------------------------------------------- */

/*
 * The sentinel: a terminating signal arrived while the program had it at
 * SIG_DFL.  Record it, then die of it as the program would have.
 */
static void term_handler(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct hs_tls *t = &hs_tls;
	struct hs_header *h;
	int was = t->in_hook;
	(void)uc;
	hs_fork_segment_now(); /* a fork child killed before its first event */
	h = hs_seg.hdr;
	t->in_hook = 1;
	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) && h && h->pid == (int32_t)hs_sys.getpid() &&
	    HS_STATE_OF(__atomic_load_n(&h->state, __ATOMIC_ACQUIRE)) == HS_STATE_RUNNING) {
		struct hs_tls *ring = !was && t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE)
					      ? t : NULL;
		h->term_signal = sig;
		h->term_code = si->si_code;
		h->term_pid = si->si_code <= 0 ? si->si_pid : 0;
		h->term_uid = si->si_code <= 0 ? si->si_uid : 0;
		/* the last sample first: it also puts the next time-driven one out of the record's way */
		hs_proc_end(ring, HS_MEMW_SIGNAL);
		if (ring)
			hs_rec(ring, hs_now(), HS_REC_TERM_SIGNAL, 0, (uint64_t)sig, (uint64_t)(int64_t)h->term_pid,
			       (uint64_t)(int64_t)si->si_code);
		/* the term_* fields above are published by hs_segment_end's release CAS */
		hs_segment_end(HS_STATE_SIGNALED, sig);
	} else if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		/* a recorder gone quiet still says how its own process ended (hs_segment_end checks) */
		hs_segment_end(HS_STATE_SIGNALED, sig);
	}
	/* pending until we return, then the default action: the same death */
	reraise_default(sig);
	t->in_hook = was;
	errno = saved_errno;
}

/* sig's slot = *act, stored only when it changes: a shell's fork
 * child puts back the actions its parent had, and each store to this table
 * is then a copy-on-write fault on a page shared with the parent (two per
 * fork of bash before its exec, two more in bash after). */
HS_FORK_TEXT static void user_action_set(int sig, const struct sigaction *act)
{
	struct sigaction *ua = user_action_of(sig);
	if (memcmp(ua, act, sizeof *act) != 0)
		*ua = *act;
}

static void sentinel_action(struct sigaction *sa)
{
	memset(sa, 0, sizeof *sa);
	sa->sa_sigaction = term_handler;
	sa->sa_flags = SA_SIGINFO | SA_ONSTACK | SA_RESTART;
	sigemptyset(&sa->sa_mask);
}

/* sigaction() on a terminating signal (see the top comment). */
HS_FORK_TEXT static int term_sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	struct sigaction sentinel, prev;
	int rc;
	if (__atomic_load_n(&term_armed[sig], __ATOMIC_ACQUIRE)) {
		if (old)
			*old = *user_action_of(sig);
		if (!act)
			return 0;
		if (act->sa_handler == SIG_DFL) {
			user_action_set(sig, act);
			return 0;
		}
		/* the program takes the signal itself: its action, for real */
		rc = HS_REAL(sigaction)(sig, act, &prev);
		if (rc == 0)
			__atomic_store_n(&term_armed[sig], 0, __ATOMIC_RELEASE);
		return rc;
	}
	if (!act || act->sa_handler != SIG_DFL)
		return HS_REAL(sigaction)(sig, act, old);
	/* back to SIG_DFL: the sentinel returns, the program sees its SIG_DFL */
	sentinel_action(&sentinel);
	rc = HS_REAL(sigaction)(sig, &sentinel, old);
	if (rc == 0) {
		user_action_set(sig, act);
		__atomic_store_n(&term_armed[sig], 1, __ATOMIC_RELEASE);
	}
	return rc;
}

void hs_term_signals_install(void)
{
	sigset_t all, prev;
	struct sigaction sentinel;
	sentinel_action(&sentinel);
	/*
	 * One call per signal, not two: the sentinel goes in and the old action
	 * comes out; an action that was not SIG_DFL (ignored, or the program's
	 * own) is put back at once.  With every signal blocked meanwhile, so
	 * that none arrives at the sentinel in between: one pending for an
	 * ignored signal is discarded when SIG_IGN is put back, as it would
	 * have been.  (An image starts with 12 of these: 12 system calls less.)
	 */
	sigfillset(&all);
	if (sigprocmask(SIG_BLOCK, &all, &prev) != 0)
		return;
	for (size_t i = 0; i < sizeof term_signals / sizeof term_signals[0]; i++) {
		int sig = term_signals[i];
		struct sigaction cur;
		if (HS_REAL(sigaction)(sig, &sentinel, &cur) != 0)
			continue;
		if (cur.sa_handler != SIG_DFL || (cur.sa_flags & SA_SIGINFO)) {
			HS_REAL(sigaction)(sig, &cur, NULL); /* ignored, or handled by the program already: leave it */
			continue;
		}
		*user_action_of(sig) = cur;
		__atomic_store_n(&term_armed[sig], 1, __ATOMIC_RELEASE);
	}
	sigprocmask(SIG_SETMASK, &prev, NULL);
}

HS_FORK_TEXT HS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE) || sig <= 0 || sig >= NSIG ||
	    !(is_ours(sig) || is_term_signal(sig)) || in_vfork_child())
		return HS_REAL(sigaction)(sig, act, old);
	if (is_term_signal(sig))
		return term_sigaction(sig, act, old);
	/* keep heisen's handler in place; the program sees its own view */
	if (old)
		*old = *user_action_of(sig);
	if (act)
		user_action_set(sig, act);
	return 0;
}

HS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	struct sigaction sa, old;
	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE) || sig <= 0 || sig >= NSIG ||
	    !(is_ours(sig) || is_term_signal(sig)) || in_vfork_child())
		return HS_REAL(signal)(sig, handler);
	if (handler == SIG_ERR) {
		errno = EINVAL;
		return SIG_ERR;
	}
	/* glibc's signal(): BSD semantics */
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = handler;
	sa.sa_flags = SA_RESTART;
	sigemptyset(&sa.sa_mask);
	sigaddset(&sa.sa_mask, sig);
	sigaction(sig, &sa, &old);
	return old.sa_handler;
}

/* ---- snapshots ------------------------------------------------------------- */

static int same_gen(const struct hs_tls *t)
{
	return t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE);
}

/*
 * The calling thread records its stack at the interrupted point as its
 * snapshot: snap_stack, snap_flags, then snap_ns.  Attaches the thread if it
 * never entered a hook (a thread that only ever blocked in read()), unless
 * the signal interrupted the shim before the thread had a slot.  The ring
 * record is skipped when the shim was interrupted (it may be inside
 * hs_rec); the slot fields have this thread as their only writer.
 */
static void take_snapshot(void *uc, unsigned why)
{
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	struct hs_thread *th;
	uint32_t stack;
	unsigned flags;
	uint64_t now;

	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) || t->dead)
		return;
	if (!same_gen(t)) {
		if (was || (t->slot == NULL && t->no_slot_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE)))
			return;
		t->in_hook = 1;
		if (hs_thread_attach(t) != 0) {
			t->in_hook = was;
			return;
		}
	}
	t->in_hook = 1;
	th = t->slot;
	stack = hs_stack_from_signal(uc);
	flags = why | (hs_py_holds_gil() ? HS_SNAPF_HOLDS_GIL : 0u);
	th->snap_stack = stack;
	th->snap_flags = flags;
	if (!was) {
		/* the held locks' own stacks, not their sites'; a lazily read one reads the
		 * interrupted thread's Python frames: with care */
		int careful = hs_py_careful;
		hs_py_careful = 1;
		hs_locks_snapshot_held(th);
		hs_py_careful = careful;
	}
	now = hs_now();
	/* release: a reader that sees this time sees the stack and flags above */
	__atomic_store_n(&th->snap_ns, now, __ATOMIC_RELEASE);
	if (!was)
		hs_rec(t, now, HS_REC_SNAPSHOT, stack, flags, 0, 0);
	t->in_hook = was;
}

static void snapshot_handler(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	uint64_t v = (uint64_t)(uintptr_t)si->si_value.sival_ptr;
	struct hs_tls *t = &hs_tls;
	struct sigaction *ua = user_action_of(sig);

	if (si->si_code == SI_QUEUE && hs_seg.hdr &&
	    (v & ~SNAP_CRASH_BIT) == hs_snapshot_value(__atomic_load_n(&hs_seg.hdr->start_real_ns, __ATOMIC_RELAXED))) {
		take_snapshot(uc, (v & SNAP_CRASH_BIT) ? HS_SNAPF_CRASH : HS_SNAPF_REQUESTED);
		errno = saved_errno;
		return;
	}
	/* The program's own use of the signal: what it would have seen without us. */
	if (is_handler(ua)) {
		int was = t->in_hook;
		t->in_hook = 1;
		call_user_handler(t, was, sig, si, uc);
	} else if (ua->sa_handler == SIG_DFL) {
		/* the default action of a real-time signal is to terminate */
		reraise_default(sig);
	}
	errno = saved_errno;
}

/* The atfork child handler: the child's new segment says which signal, too. */
HS_FORK_TEXT void hs_snapshot_after_fork_child(void)
{
	int sig = __atomic_load_n(&snap_sig, __ATOMIC_ACQUIRE);
	if (sig && hs_seg.hdr)
		hs_seg.hdr->snapshot_signal = sig;
}

void hs_snapshot_install(void)
{
	int sig = SIGRTMAX - HS_SNAPSHOT_SIGNAL_OFFSET;
	struct sigaction sa, old;
	if (sig <= 0 || sig >= NSIG || !hs_seg.hdr)
		return;
	memset(&sa, 0, sizeof sa);
	sa.sa_sigaction = snapshot_handler;
	sa.sa_flags = SA_SIGINFO | SA_RESTART | SA_ONSTACK;
	sigemptyset(&sa.sa_mask);
	if (HS_REAL(sigaction)(sig, &sa, &old) != 0)
		return;
	*user_action_of(sig) = old; /* whatever was there before us */
	__atomic_store_n(&snap_sig, sig, __ATOMIC_RELEASE);
	hs_seg.hdr->snapshot_signal = sig;
	/* registered after init.c's handler, so it runs after the child's segment exists */
	pthread_atfork(NULL, NULL, hs_snapshot_after_fork_child);
}

/* Parse a decimal tid; 0 when s is not one. */
static pid_t parse_tid(const char *s)
{
	long v = 0;
	if (!*s)
		return 0;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > 0x3fffffff)
			return 0;
		v = v * 10 + (*s - '0');
	}
	return (pid_t)v;
}

/* Live slots other than self that took a crash snapshot at or after since. */
static unsigned crash_snapshots_since(uint64_t since, int32_t self)
{
	uint32_t cap = hs_seg.hdr->tables[HS_T_THREADS].capacity;
	unsigned n = 0;
	for (uint32_t i = 0; i < cap; i++) {
		struct hs_thread *th = &hs_seg.threads[i];
		if (!hs_seg_committed(&hs_seg, (uint64_t)((char *)th - (char *)hs_seg.hdr), sizeof *th))
			break; /* slots are backed in order: this one was never used */
		/* acquire: pairs with take_snapshot's release of snap_ns */
		uint64_t ns = __atomic_load_n(&th->snap_ns, __ATOMIC_ACQUIRE);
		if (ns >= since && th->tid != self && (th->snap_flags & HS_SNAPF_CRASH) &&
		    __atomic_load_n(&th->state, __ATOMIC_ACQUIRE) == HS_THREAD_LIVE)
			n++;
	}
	return n;
}

/*
 * hs_thread_takes_signal for a thread of this process, async-signal-safe
 * (hs_read_small: raw system calls, no stdio): 1 when thread tid blocks sig
 * or waits in rt_sigtimedwait, else 0.
 */
static int takes_signal_itself(pid_t tid, int sig)
{
	char path[64], buf[2048], num[24];
	const char *p;
	uint64_t mask = 0;
	size_t n = 0;
	hs_fmt_u64(num, (uint64_t)tid);
	for (const char *s[] = {"/proc/self/task/", num, "/syscall"}, **q = s; q < s + 3; q++)
		for (const char *c = *q; *c && n + 1 < sizeof path; c++)
			path[n++] = *c;
	path[n] = '\0';
	if (hs_read_small(path, buf, sizeof buf) > 0) {
		long nr = 0;
		for (p = buf; *p >= '0' && *p <= '9'; p++)
			nr = nr * 10 + (*p - '0');
		if (p > buf && nr == SYS_rt_sigtimedwait)
			return 1;
	}
	memcpy(path + n - 7, "status", 7);
	if (hs_read_small(path, buf, sizeof buf) <= 0 || !(p = strstr(buf, "\nSigBlk:")))
		return 0;
	for (p += 8; *p == ' ' || *p == '\t'; p++)
		;
	for (; (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'); p++)
		mask = mask << 4 | (uint64_t)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
	return sig > 0 && sig <= 64 && (mask >> (sig - 1) & 1);
}

/* The other threads asked for a snapshot by snapshot_others. */
struct snap_ask {
	pid_t pid, self;
	int sig;
	unsigned sent;
};

static int snap_ask_entry(void *arg, const char *name, unsigned type)
{
	struct snap_ask *a = arg;
	pid_t tid = parse_tid(name);
	(void)type;
	if (tid > 0 && tid != a->self && !takes_signal_itself(tid, a->sig)) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		si.si_signo = a->sig;
		si.si_code = SI_QUEUE;
		si.si_pid = a->pid;
		si.si_uid = getuid();
		si.si_value.sival_ptr = (void *)(uintptr_t)(hs_snapshot_value(hs_seg.hdr->start_real_ns) | SNAP_CRASH_BIT);
		if (hs_sys.tgsigqueueinfo(a->pid, tid, a->sig, &si) == 0)
			a->sent++;
	}
	return a->sent >= CRASH_SNAP_MAX_TIDS;
}

/*
 * The crash path: ask every other thread of the process for a snapshot and
 * wait up to CRASH_SNAP_WAIT_NS for them.  /proc/self/task is read with the
 * shim's own directory walker (hs_dir_each: no opendir, no malloc: we are
 * in a signal handler).  A thread that blocks the signal, or is stuck in
 * the kernel, just costs the wait.  When /proc/self/task cannot be opened
 * or read, the threads not reached are not asked: the crash report has
 * the crashing thread's stack and the others' last recorded state only.
 */
static void snapshot_others(void)
{
	struct snap_ask a = {.pid = hs_sys.getpid(), .self = hs_sys.gettid()};
	unsigned sent;
	uint64_t since;
	int fd;

	a.sig = __atomic_load_n(&snap_sig, __ATOMIC_ACQUIRE);
	if (!a.sig)
		return;
	fd = hs_sys.open("/proc/self/task", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	since = hs_now();
	hs_dir_each(fd, snap_ask_entry, &a);
	sent = a.sent;
	hs_sys.close(fd);
	while (sent && crash_snapshots_since(since, a.self) < sent && hs_now() - since < CRASH_SNAP_WAIT_NS) {
		struct timespec ts = {0, 1000000};
		hs_sys.nanosleep(&ts);
	}
}
