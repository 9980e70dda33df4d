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
 * Programs install crash handlers too (Python's faulthandler does).  heisen
 * stays first: sigaction() and signal() are interposed for these five
 * signals, the program's handler is kept here and called from ours, and the
 * program sees exactly the old/new actions it would have seen.  A fault that
 * the program's handler survives (it returned) is not a crash; the crash is
 * recorded when the default action is about to run, with the stack of the
 * original fault when the program's handler re-raised it (faulthandler does).
 */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hooks.h"
#include "shim.h"

#define ALTSTACK_SIZE (128 * 1024)

static const int crash_signals[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

/* The program's view of each crash signal's action. */
static struct sigaction user_action[NSIG];
static int installed;           /* our handler is in place */

static int is_crash_signal(int sig)
{
	for (size_t i = 0; i < sizeof crash_signals / sizeof crash_signals[0]; i++)
		if (crash_signals[i] == sig)
			return 1;
	return 0;
}

int hs_altstack_setup(struct hs_tls *t)
{
	stack_t ss, old;
	void *p;
	if (sigaltstack(NULL, &old) == 0 && !(old.ss_flags & SS_DISABLE))
		return 0; /* the program has its own */
	p = hs_sys.mmap(NULL, ALTSTACK_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return -1;
	ss.ss_sp = p;
	ss.ss_size = ALTSTACK_SIZE;
	ss.ss_flags = 0;
	if (sigaltstack(&ss, NULL) != 0) {
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
		if (sigaltstack(&ss, NULL) == 0)
			hs_sys.munmap(t->altstack, ALTSTACK_SIZE);
	}
	t->altstack = NULL;
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
	f.tid = (int32_t)syscall(SYS_gettid);
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
	hs_segment_end(HS_STATE_CRASHED, sig);
}

static void crash_handler(int sig, siginfo_t *si, void *uc)
{
	int saved_errno = errno;
	struct hs_tls *t = &hs_tls;
	struct sigaction *ua = &user_action[sig];
	int was = t->in_hook;
	t->in_hook = 1;

	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE)) {
		/* a fault from the kernel (si_code > 0) is the one to remember; a
		   re-raise by the program's handler keeps the original */
		if (t->pending_sig != sig || si->si_code > 0) {
			t->pending_sig = sig;
			t->pending_code = si->si_code;
			t->pending_addr = (uint64_t)(uintptr_t)si->si_addr;
			t->pending_stack = hs_stack_from_signal(uc);
		}
	}
	if (ua->sa_handler != SIG_DFL && ua->sa_handler != SIG_IGN) {
		sigset_t old;
		sigset_t mask = ua->sa_mask;
		if (!(ua->sa_flags & SA_NODEFER))
			sigaddset(&mask, sig);
		if (ua->sa_flags & SA_RESETHAND) {
			struct sigaction copy = *ua;
			memset(ua, 0, sizeof *ua);
			ua->sa_handler = SIG_DFL;
			ua = &copy;
			t->in_hook = was;
			pthread_sigmask(SIG_BLOCK, &mask, &old);
			if (copy.sa_flags & SA_SIGINFO)
				copy.sa_sigaction(sig, si, uc);
			else
				copy.sa_handler(sig);
		} else {
			t->in_hook = was;
			pthread_sigmask(SIG_BLOCK, &mask, &old);
			if (ua->sa_flags & SA_SIGINFO)
				ua->sa_sigaction(sig, si, uc);
			else
				ua->sa_handler(sig);
		}
		pthread_sigmask(SIG_SETMASK, &old, NULL);
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
	{
		struct sigaction dfl;
		memset(&dfl, 0, sizeof dfl);
		dfl.sa_handler = SIG_DFL;
		HS_REAL(sigaction)(sig, &dfl, NULL);
	}
	/* pending until we return, then fatal with the original signal */
	syscall(SYS_tgkill, (pid_t)syscall(SYS_getpid), (pid_t)syscall(SYS_gettid), sig);
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
			user_action[sig] = old; /* whatever was there before us */
	}
	__atomic_store_n(&installed, 1, __ATOMIC_RELEASE);
}

HS_EXPORT int sigaction(int sig, const struct sigaction *act, struct sigaction *old)
{
	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE) || sig <= 0 || sig >= NSIG || !is_crash_signal(sig))
		return HS_REAL(sigaction)(sig, act, old);
	/* keep heisen's handler in place; the program sees its own view */
	if (old)
		*old = user_action[sig];
	if (act)
		user_action[sig] = *act;
	return 0;
}

HS_EXPORT sighandler_t signal(int sig, sighandler_t handler)
{
	struct sigaction sa, old;
	if (!__atomic_load_n(&installed, __ATOMIC_ACQUIRE) || sig <= 0 || sig >= NSIG || !is_crash_signal(sig))
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

/* Snapshots: filled in by the hang-snapshot work (issue 3). */
void hs_snapshot_install(void)
{
}
