/* SPDX-License-Identifier: MIT */
/*
 * shim/heap_core.h — the heap checker's interface between its interceptors
 * (heap_hooks.c: malloc and friends, exported, thin: fault injection, the
 * sampled guard pages, then one entry here) and its core (heap_core.c: the
 * chunk header, the quarantine, the call-site stacks, the findings), as
 * Scudo's C wrappers call its allocator's core.  The design is
 * docs/design.md "Heap"; the rules are README.md "The heap".
 *
 * Contract of the entries below:
 *   - the hook has checked hs_heap_on() (checking is on); hs_heap_alloc
 *     and hs_heap_memalign also that the thread is not inside the shim
 *     (hs_tls.in_hook clear); hs_heap_free and hs_heap_realloc handle a
 *     call from inside the shim themselves (its blocks are glibc's own);
 *   - site is the hook's HS_HEAP_SITE(), taken in the exported function;
 *   - they take the reentrancy guard (hs_enter) themselves, keep errno on
 *     success and return what glibc's function of the same name would;
 *   - a finding (double free, invalid free, overflow) is recorded inside
 *     and aborts unless HEISEN_ON_HEAP_ERROR=continue;
 *   - nothing takes a lock; a pointer the core did not hand out goes to
 *     glibc's __libc_* functions untouched unless it is provably invalid.
 */
#ifndef HEISEN_HEAP_CORE_H
#define HEISEN_HEAP_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "shim.h"

/* glibc's allocator under its exported internal names: no dlsym (which
 * allocates) is needed to reach it, as ASan's and Scudo's wrappers do. */
extern void *__libc_malloc(size_t);
extern void __libc_free(void *);
extern void *__libc_calloc(size_t, size_t);
extern void *__libc_realloc(void *, size_t);
extern void *__libc_memalign(size_t, size_t);
extern void *__libc_valloc(size_t);
extern void *__libc_pvalloc(size_t);

/*
 * The hook's CFA (its caller's stack pointer at the call: above the saved
 * frame pointer and the return address; the shim keeps frame pointers),
 * per thread, for the core's walk from the hook up through libstdc++'s
 * frames to the caller of operator new (heap_core.c wrapper_stack).
 */
extern HS_HIDDEN __thread uint64_t hs_heap_cfa __attribute__((tls_model("initial-exec")));

/* The hook's caller's return address (its call site), noting the hook's
 * CFA in hs_heap_cfa.  Only in the exported function itself: the frame
 * address is the hook's. */
#define HS_HEAP_SITE()                                                                  \
	(hs_heap_cfa = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16,             \
	 (uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* Checking on (HEISEN_HEAP, default on)?  The first hook call outside the
 * shim starts it (hs_heap_init) when the constructor has not yet. */
enum { HS_HEAP_MODE_UNKNOWN = 0, HS_HEAP_MODE_INIT = 1, HS_HEAP_MODE_OFF = 2, HS_HEAP_MODE_ON = 3 };
extern HS_HIDDEN int hs_heap_mode; /* [atomic] HS_HEAP_MODE_* */
static inline int hs_heap_on(void)
{
	int m = __atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE);
	if (HS_LIKELY(m >= HS_HEAP_MODE_OFF))
		return m == HS_HEAP_MODE_ON;
	if (m == HS_HEAP_MODE_UNKNOWN && !hs_tls.in_hook) {
		hs_heap_init();
		return __atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE) == HS_HEAP_MODE_ON;
	}
	return 0;
}

/* The page size, bytes (valloc, pvalloc); set by hs_heap_init. */
extern HS_HIDDEN size_t hs_heap_page_size;

/* A checked block of n bytes aligned to align (0: malloc's 16), zeroed
 * when zero.  NULL with errno set (ENOMEM or glibc's) on failure, which
 * the header counts as a refused allocation. */
void *hs_heap_alloc(size_t n, size_t align, int zero, uint64_t site);

/* free(p), p not NULL and not a guard-page block: a block of ours is
 * checked (state, canary) and quarantined; a foreign one goes to glibc
 * unless provably invalid (then reported). */
void hs_heap_free(void *p, uint64_t site);

/* realloc(p, n) with glibc's rules (NULL p: malloc; n 0: free, NULL). */
void *hs_heap_realloc(void *p, size_t n, uint64_t site);

/* memalign(align, n) with glibc's rules: align <= 16 is malloc's, an align
 * above SIZE_MAX / 2 + 1 is EINVAL, others round up to a power of two. */
void *hs_heap_memalign(size_t align, size_t n, uint64_t site);

/* 1 and *n = the requested size when p is a live or quarantined block of
 * ours; 0 when not (the hook asks glibc). */
/* 1 when the heap checker is on and keeps a stack for every call site
 * (HEISEN_HEAP_STACKS site or full): then each allocation of the program's
 * that reached the checker has unwound, so an image that has never unwound
 * has no block of the program's in glibc's heap yet.  Reads two words, no
 * call: safe in a signal handler (unwind_load.c's crash-time load). */
int hs_heap_unwinds_each_site(void);
int hs_heap_usable(const void *p, size_t *n);

#endif
