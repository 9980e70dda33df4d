/* SPDX-License-Identifier: MIT */
/*
 * shim/unwind_mask.h — one signal-mask change per heisen unwind instead of
 * libunwind's several per step (shim/unwind_mask.c; docs/design.md
 * "Call stacks").
 */
#ifndef HS_UNWIND_MASK_H
#define HS_UNWIND_MASK_H

#ifndef HS_CORE_ONLY
/* Point libunwind's .got.plt entries for sigprocmask and dl_iterate_phdr
 * into unwind_mask.c (left alone when libunwind is not found or its
 * entries are read-only).  Once, from hs_init, before any unwind and
 * before other threads exist. */
void hs_unwind_mask_init(void);
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
#endif

#endif
