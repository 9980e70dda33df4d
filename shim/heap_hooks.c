/* SPDX-License-Identifier: MIT */
/*
 * shim/heap_hooks.c — the heap checker's interceptors: malloc, calloc,
 * realloc, reallocarray, free, memalign, aligned_alloc, posix_memalign,
 * valloc, pvalloc and malloc_usable_size (hooks.def's heap block; C++'s
 * operator new and delete reach them through libstdc++).  Each is thin:
 * fault injection and chaos (inject.h), a large allocation's memory sample
 * (memhooks.c), the sampled guard pages (guarded.c), then glibc's own
 * function when checking is off or the call comes from inside the shim,
 * else one entry of the core (heap_core.h, heap_core.c) with the call site
 * — as Scudo's C wrappers call its allocator.  glibc is reached through its
 * __libc_* names, so the first allocation needs no dlsym.  The design is
 * docs/design.md "Heap"; the rules are README.md "The heap".
 */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "heap_core.h"
#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"

/* Every function hooks.def lists as HS_HOOK_OWN (the heap's, mmap64, dlsym
 * and dlvsym) has the prototype written there, as libc declares it: a
 * list that says otherwise does not compile. */
#define HS_HOOK(ret, name, params)
#define HS_HOOK_V(ret, name, params, version)
#define HS_HOOK_OWN(ret, name, params)                                                      \
	_Static_assert(__builtin_types_compatible_p(__typeof__(&name), ret(*) params),       \
		       "hooks.def's prototype of " #name " is not libc's");
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V
#undef HS_HOOK_OWN

/* A large allocation is about to be made, heap checked or not: memory
 * samples are due after enough of them (memhooks.c, proc.c). */
static inline void note_size(size_t n)
{
	if (HS_UNLIKELY(n >= HS_MEM_BIG))
		hs_mem_big_alloc(n);
}

/*
 * malloc and free in two parts: the exported hook tests, in one branch,
 * that nothing but the heap checker has work to do (no fault injection or
 * chaos, no memory sample due, no guard-page sample this time, checking on,
 * the call not from inside the shim) and goes straight on to the core; any
 * other case is the out-of-line part, with the hook's call site and CFA,
 * in the order the hook always had.  So the common call saves no register
 * for a call it does not make (bench/README.md "The heap checker's
 * per-operation cost").
 */
static __attribute__((noinline)) void *malloc_slow(size_t n, uint64_t site, uint64_t cfa)
{
	HS_FAULT_ALLOC(n); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos */
	note_size(n);
	if (HS_UNLIKELY(hs_guard_sample(n))) { /* guarded.c: sampled guard pages */
		void *g = hs_guard_malloc(n, 0, 0, site, cfa);
		if (g)
			return g;
	}
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_malloc(n);
	hs_heap_cfa = cfa; /* HS_HEAP_SITE's note, for the hook's frame */
	return hs_heap_alloc(n, 0, 0, site);
}

HS_EXPORT void *malloc(size_t n)
{
	/* the guard-page countdown above 1: this allocation is not sampled (hs_guard_sample) */
	if (HS_UNLIKELY(hs_inject_on) || HS_UNLIKELY(n >= HS_MEM_BIG) || HS_UNLIKELY(hs_guard_countdown <= 1) ||
	    HS_UNLIKELY(__atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE) != HS_HEAP_MODE_ON) || HS_UNLIKELY(hs_tls.in_hook))
		return malloc_slow(n, HS_GUARD_SITE(), HS_GUARD_CFA());
	hs_guard_countdown--;
	return hs_heap_alloc(n, 0, 0, HS_HEAP_SITE());
}

HS_EXPORT void *calloc(size_t n, size_t m)
{
	size_t total;
	HS_FAULT_ALLOC(n * m); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos */
	if (!__builtin_mul_overflow(n, m, &total)) {
		note_size(total);
		HS_GUARD_ALLOC(total, 0, 1); /* guarded.c: sampled guard pages */
	}
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_calloc(n, m);
	if (__builtin_mul_overflow(n, m, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	return hs_heap_alloc(total, 0, 1, HS_HEAP_SITE());
}

/* free's out-of-line part (see malloc_slow). */
static __attribute__((noinline)) void free_slow(void *p, uint64_t site, uint64_t cfa)
{
	HS_CHAOS(HS_CHAOS_FREE); /* chaos.c: --chaos */
	if (hs_guard_owns(p)) { /* guarded.c: sampled guard pages */
		hs_guard_free(p, site, cfa);
		return;
	}
	if (!hs_heap_on()) {
		/* ---- lock graph (locks.c): locks in the freed block are gone (0: glibc's usable size) ---- */
		if (!hs_tls.in_hook)
			hs_locks_on_free(p, 0);
		/* ---- */
		__libc_free(p);
		return;
	}
	hs_heap_cfa = cfa; /* HS_HEAP_SITE's note, for the hook's frame */
	hs_heap_free(p, site);
}

HS_EXPORT void free(void *p)
{
	if (!p)
		return;
	/* the chunk header's line and the one after it, where a small
	   block's canary mostly ends (heap_core.c blk_free reads both): their
	   misses start here, together, and the canary's no longer waits for
	   the header's size (bench/README.md "The free path's three untried
	   levers").  A prefetch never faults: a wild pointer is fine */
	__builtin_prefetch((const char *)p - 16);
	__builtin_prefetch((const char *)p + 48);
	if (HS_UNLIKELY(hs_chaos_on) || HS_UNLIKELY(hs_guard_owns(p)) ||
	    HS_UNLIKELY(__atomic_load_n(&hs_heap_mode, __ATOMIC_ACQUIRE) != HS_HEAP_MODE_ON)) {
		free_slow(p, HS_GUARD_SITE(), HS_GUARD_CFA());
		return;
	}
	hs_heap_free(p, HS_HEAP_SITE());
}

HS_EXPORT void *realloc(void *p, size_t n)
{
	if (n) HS_FAULT_ALLOC(n); /* faults.c, chaos.c: --fail malloc, --heap-limit, --chaos (the old block stays) */
	note_size(n);
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_realloc(p, n, HS_GUARD_SITE(), HS_GUARD_CFA());
	if (!hs_heap_on())
		return __libc_realloc(p, n);
	return hs_heap_realloc(p, n, HS_HEAP_SITE());
}

HS_EXPORT void *reallocarray(void *p, size_t n, size_t m)
{
	size_t total;
	if (__builtin_mul_overflow(n, m, &total)) {
		errno = ENOMEM;
		return NULL;
	}
	note_size(total);
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_realloc(p, total, HS_GUARD_SITE(), HS_GUARD_CFA());
	if (!hs_heap_on())
		return __libc_realloc(p, total);
	return hs_heap_realloc(p, total, HS_HEAP_SITE());
}

HS_EXPORT void *memalign(size_t align, size_t n)
{
	note_size(n);
	HS_GUARD_ALLOC(n, align, 0); /* guarded.c: sampled guard pages */
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_memalign(align, n);
	return hs_heap_memalign(align, n, HS_HEAP_SITE());
}

HS_EXPORT void *aligned_alloc(size_t align, size_t n)
{
	note_size(n);
	HS_GUARD_ALLOC(n, align, 0); /* guarded.c: sampled guard pages */
	/* glibc 2.36: aligned_alloc is memalign (2.38 adds EINVAL for a non-power of two) */
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_memalign(align, n);
	return hs_heap_memalign(align, n, HS_HEAP_SITE());
}

HS_EXPORT int posix_memalign(void **pp, size_t align, size_t n)
{
	int e = errno;
	void *p;
	if (align % sizeof(void *) != 0 || (align & (align - 1)) != 0 || align == 0)
		return EINVAL;
	note_size(n);
	if (HS_UNLIKELY(hs_guard_sample(n)) && (p = hs_guard_malloc(n, align, 0, HS_GUARD_SITE(), HS_GUARD_CFA())) != NULL) { /* guarded.c */
		*pp = p;
		return 0;
	}
	if (!hs_heap_on() || hs_tls.in_hook)
		p = __libc_memalign(align, n);
	else
		p = hs_heap_memalign(align, n, HS_HEAP_SITE());
	if (!p) {
		errno = e;
		return ENOMEM;
	}
	*pp = p;
	return 0;
}

HS_EXPORT void *valloc(size_t n)
{
	note_size(n);
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_valloc(n);
	return hs_heap_memalign(hs_heap_page_size, n, HS_HEAP_SITE());
}

HS_EXPORT void *pvalloc(size_t n)
{
	size_t r;
	note_size(n);
	if (!hs_heap_on() || hs_tls.in_hook)
		return __libc_pvalloc(n);
	if (__builtin_add_overflow(n, hs_heap_page_size - 1, &r)) {
		errno = ENOMEM;
		return NULL;
	}
	return hs_heap_memalign(hs_heap_page_size, r & ~(hs_heap_page_size - 1), HS_HEAP_SITE());
}

/* glibc's malloc_usable_size: resolved once, with the hooks shut. */
static size_t (*real_usable)(void *);

HS_HIDDEN size_t hs_libc_usable_size(void *p)
{
	size_t (*f)(void *) = __atomic_load_n(&real_usable, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(!f)) {
		struct hs_tls *t = &hs_tls;
		int was = t->in_hook;
		t->in_hook = 1;
		f = (size_t(*)(void *))dlvsym(RTLD_NEXT, "malloc_usable_size", "GLIBC_2.2.5");
		if (!f)
			f = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
		t->in_hook = was;
		if (!f) {
			hs_write_err("heisen: cannot resolve the real malloc_usable_size; aborting\n");
			abort();
		}
		__atomic_store_n(&real_usable, f, __ATOMIC_RELEASE);
	}
	return f(p);
}

HS_EXPORT size_t malloc_usable_size(void *p)
{
	size_t n;
	if (!p)
		return 0;
	if (hs_guard_owns(p)) /* guarded.c: sampled guard pages */
		return hs_guard_usable_size(p);
	if (hs_heap_on() && hs_heap_usable(p, &n))
		return n;
	return hs_libc_usable_size(p); /* a foreign pointer */
}
