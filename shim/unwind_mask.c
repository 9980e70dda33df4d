/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_mask.c — the signal mask around heisen's own unwinds.
 *
 * libunwind 1.6 (Debian's build, whose UNW_CACHE_PER_THREAD falls back to
 * the global cache) blocks every signal with sigprocmask around each
 * critical section: the register-state cache lock once per unw_step, the
 * CIE pool's lock twice per procedure-info lookup, and dl_iterate_phdr once
 * more.  A Python start under heisen made ~4,300 such pairs: two system
 * calls each, more time than the unwinds themselves.
 *
 * What the masks protect is the thread's own signal handlers: one that
 * entered libunwind while this thread holds its cache or pool lock would
 * wait on itself.  So heisen blocks the signals once for its whole unwind
 * (hs_unwind_enter .. hs_unwind_leave: two system calls per unwind instead
 * of two per lock) and libunwind's own mask calls made inside it are
 * answered here without a system call: the mask they would set is already
 * in force, except for the synchronous crash signals heisen handles
 * (SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT), which stay deliverable so a
 * crash inside an unwind is still reported (libunwind's full mask made the
 * kernel kill the process without any handler).  heisen's crash handler
 * then does not enter libunwind (hs_stack_from_signal: the faulting
 * instruction alone, marked truncated).
 *
 * Only calls whose return address lies in libunwind's code, on a thread
 * inside hs_unwind_enter, are answered here; every other caller (the
 * program, its handlers, libunwind used by the program itself) gets the
 * real sigprocmask.  The program's handlers and masks are never changed:
 * hs_unwind_leave puts back exactly the mask hs_unwind_enter found.
 */

#include <dlfcn.h>
#include <errno.h>
#include <libunwind.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>

#include "shim.h"
#include "unwind_mask.h"

/* libunwind's executable segment [lo, hi); 0, 0 until found */
static uintptr_t unw_text_lo, unw_text_hi;
/* every signal but the crash signals heisen handles (and SIGKILL, SIGSTOP,
 * which the kernel never blocks) */
static sigset_t unwind_block;

struct unwind_mask_tls {
	int active;      /* inside hs_unwind_enter */
	sigset_t saved;  /* the thread's mask before it */
	sigset_t cur;    /* the mask in force since: what a sigprocmask would report */
};
static __thread struct unwind_mask_tls um __attribute__((tls_model("initial-exec")));

struct text_find {
	uintptr_t base;
	uintptr_t lo, hi;
};

static int find_text(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct text_find *f = arg;
	(void)size;
	if ((uintptr_t)info->dlpi_addr != f->base)
		return 0;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type == PT_LOAD && (p->p_flags & PF_X)) {
			f->lo = (uintptr_t)info->dlpi_addr + p->p_vaddr;
			f->hi = f->lo + p->p_memsz;
			return 1;
		}
	}
	return 0;
}

void hs_unwind_mask_init(void)
{
	Dl_info di;
	struct text_find f = {0, 0, 0};
	static const int crash[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};

	sigfillset(&unwind_block); /* glibc leaves its internal signals out */
	for (unsigned i = 0; i < sizeof crash / sizeof crash[0]; i++)
		sigdelset(&unwind_block, crash[i]);
	sigdelset(&unwind_block, SIGKILL);
	sigdelset(&unwind_block, SIGSTOP);
	void *lm = NULL;
	if (dladdr1((void *)(uintptr_t)&unw_backtrace, &di, &lm, RTLD_DL_LINKMAP) == 0 || lm == NULL)
		return; /* libunwind not found: it masks for itself, as without heisen */
	f.base = (uintptr_t)((struct link_map *)lm)->l_addr; /* the load bias, dl_iterate_phdr's dlpi_addr */
	dl_iterate_phdr(find_text, &f);
	if (f.hi == 0 || !((uintptr_t)&unw_backtrace >= f.lo && (uintptr_t)&unw_backtrace < f.hi))
		return;
	unw_text_lo = f.lo;
	__atomic_store_n(&unw_text_hi, f.hi, __ATOMIC_RELEASE);
}

int hs_unwind_enter(void)
{
	if (um.active || !__atomic_load_n(&unw_text_hi, __ATOMIC_ACQUIRE))
		return 0;
	if (pthread_sigmask(SIG_BLOCK, &unwind_block, &um.saved) != 0)
		return 0;
	sigorset(&um.cur, &um.saved, &unwind_block);
	/* set last: a crash handler that sees it knows the mask is in force */
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	um.active = 1;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	return 1;
}

void hs_unwind_leave(int entered)
{
	if (!entered)
		return;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	um.active = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	pthread_sigmask(SIG_SETMASK, &um.saved, NULL);
}

int hs_unwind_active(void)
{
	return um.active;
}

/*
 * sigprocmask, interposed: glibc's own is pthread_sigmask with errno.
 * libunwind's calls inside heisen's unwind are SIG_SETMASK pairs (block
 * all, saving the old mask; then put the saved one back): both answered
 * without a system call, the saved mask reported as the one in force.
 */
HS_EXPORT int sigprocmask(int how, const sigset_t *set, sigset_t *oset)
{
	int r;
	if (HS_UNLIKELY(um.active)) {
		uintptr_t ra = (uintptr_t)__builtin_return_address(0);
		if (ra >= unw_text_lo && ra < unw_text_hi && how == SIG_SETMASK) {
			if (oset)
				*oset = um.cur;
			return 0;
		}
	}
	r = pthread_sigmask(how, set, oset);
	if (r != 0) {
		errno = r;
		return -1;
	}
	return 0;
}
