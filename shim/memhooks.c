/* SPDX-License-Identifier: MIT */
/*
 * shim/memhooks.c — where memory grows: the program's large allocations
 * make a memory sample due (proc.c), so a process eating its way to the
 * OOM killer leaves its last resident set in its segment.  malloc and
 * friends call hs_mem_big_alloc() from heap_hooks.c; mmap is interposed here
 * (CPython's small-object arenas are 1 MiB anonymous mappings that never
 * pass through malloc).  Nothing is recorded for small allocations: the
 * check is one compare of the size.  docs/design.md "Processes"; the sample's
 * contract is in shim.h.
 */
#include <errno.h>
#include <sys/mman.h>
#include <time.h>

#include "hooks.h"
#include "shim.h"

/* The clock for "is a sample due": CLOCK_MONOTONIC_COARSE (a few ns from the
 * vDSO instead of ~25; a tick, 1-4 ms, of resolution is plenty here). */
static inline uint64_t coarse_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

void hs_mem_big_alloc(uint64_t n)
{
	struct hs_tls *t = &hs_tls, *g;
	unsigned why;
	int e;
	if (t->in_hook || t->dead)
		return;
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) &&
	    (!__atomic_load_n(&hs_fork_pending, __ATOMIC_ACQUIRE) || hs_fork_segment(0) != 0))
		return; /* a fork child growing before its first event makes its segment (init.c) */
	e = errno;
	if (hs_mem_due(n, coarse_now(), &why)) {
		/* the guard, and a ring for the record when the thread can have one */
		g = hs_enter();
		if (!g)
			t->in_hook = 1;
		hs_mem_sample(g, hs_now(), why, n);
		if (g)
			hs_leave(g);
		else
			t->in_hook = 0;
	}
	errno = e;
}

static inline void *hook_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (HS_UNLIKELY(len >= HS_MEM_BIG) && (flags & MAP_ANONYMOUS) && (prot & PROT_WRITE))
		hs_mem_big_alloc(len);
	return HS_REAL(mmap)(addr, len, prot, flags, fd, off);
}

/*
 * Both names glibc exports, under their own assembler names: the build
 * has _FILE_OFFSET_BITS=64, which makes <sys/mman.h>'s mmap mean mmap64.
 * One ABI on LP64 (off_t is 64 bits).
 */
HS_EXPORT void *hs_mmap_hook(void *addr, size_t len, int prot, int flags, int fd, off_t off) __asm__("mmap");
HS_EXPORT void *hs_mmap_hook(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return hook_mmap(addr, len, prot, flags, fd, off);
}

HS_EXPORT void *hs_mmap64_hook(void *addr, size_t len, int prot, int flags, int fd, off_t off) __asm__("mmap64");
HS_EXPORT void *hs_mmap64_hook(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return hook_mmap(addr, len, prot, flags, fd, off);
}
