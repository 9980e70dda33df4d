/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_mask.h — one signal-mask change per heisen unwind instead of
 * libunwind's several per step (shim/unwind_mask.c; docs/design.md
 * "Call stacks").
 */
#ifndef HS_UNWIND_MASK_H
#define HS_UNWIND_MASK_H

#include <signal.h>
#include <stdint.h>

#ifndef HS_CORE_ONLY
/* Point the .got.plt entries for sigprocmask and dl_iterate_phdr of the
 * libunwind that holds address unw into unwind_mask.c (left alone when
 * that object is not found or its entries are read-only).  Once, from
 * unwind_load.c right after libunwind is loaded, before any heisen unwind
 * enters it (other threads' unwinds fail until it is done). */
void hs_unwind_mask_init(uintptr_t unw);
/* 1 once libunwind is loaded and its entry points bound (unwind_load.c:
 * at heisen's first unwind started outside a signal handler).  Lock-free,
 * async-signal-safe: a signal handler that finds 0 must not unwind. */
int hs_unwind_loaded(void);
/* Loads libunwind where that is safe (unwind_load.c: not for a hook ld.so
 * called, not while another thread loads it); 1 when it is loaded.  Only
 * from heisen's own unwinds outside signal handlers. */
int hs_unwind_getcontext_load(void);
/* From the crash handler, before hs_stack_from_signal: loads libunwind
 * when it is not yet and the crash's shape makes dlopen safe there
 * (unwind_load.c).  si and ucontext are the handler's; was is the hook
 * guard's value when the signal came. */
void hs_unwind_load_for_crash(int sig, const siginfo_t *si, const void *ucontext, int was);
/* Before heisen's own libunwind calls on this thread: blocks every signal
 * but the crash signals heisen handles (signals.c) with one system call and
 * answers libunwind's own mask calls without any until hs_unwind_leave.
 * Returns 1 when it did so (pass it to hs_unwind_leave), 0 when the thread
 * is already inside such an unwind or libunwind's entries were not
 * pointed here (libunwind then masks for itself). */
int hs_unwind_enter(void);
/* The mask of before hs_unwind_enter back; no-op for entered == 0. */
void hs_unwind_leave(int entered);
/* Nonzero while this thread is between hs_unwind_enter and hs_unwind_leave:
 * a crash handler that interrupted it must not enter libunwind (it may hold
 * libunwind's cache or pool lock). */
int hs_unwind_active(void);
#else
/* The unit tests' core library has no interposed symbols: libunwind masks for itself. */
static inline int hs_unwind_enter(void) { return 0; }
static inline void hs_unwind_leave(int entered) { (void)entered; }
static inline int hs_unwind_active(void) { return 0; }
/* ... and links libunwind itself: always loaded */
static inline int hs_unwind_loaded(void) { return 1; }
#endif

#endif
