/* SPDX-License-Identifier: MIT */
/*
 * area.c — the thread's own state outside static TLS: hs_tls itself (the
 * few hot scalars, initial-exec), the per-thread area the hooks' big buffers
 * live in (hs_area, mapped on first need), and the thread's stack bounds
 * (hs_stack_room, hs_on_own_stack).  Why: glibc takes a thread's static TLS
 * out of the stack size the program asked for, so a PTHREAD_STACK_MIN
 * thread must not lose it to a preloaded library.  Contracts in shim.h.
 */
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>

#include "shim.h"

__thread struct hs_tls hs_tls __attribute__((tls_model("initial-exec")));

/* The per-thread area (shim.h, hs_area): mapped on the thread's first need. */
char *hs_area_map(void)
{
	struct hs_tls *t = &hs_tls;
	void *p;
	if (t->area || t->area_failed || t->dead)
		return t->area;
	p = hs_sys.mmap(NULL, HS_AREA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED) {
		t->area_failed = 1; /* degrade: no chains, no caches; said once per thread is enough */
		return NULL;
	}
	t->area = p;
	return t->area;
}

/* At thread exit (hs_thread_detach, t->dead set): the area goes back. */
void hs_area_release(struct hs_tls *t)
{
	char *a = t->area;
	if (!a)
		return;
	t->area = NULL;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	hs_sys.munmap(a, HS_AREA_SIZE);
}

/*
 * The thread's stack bounds, read once per thread with pthread_getattr_np
 * (for the main thread glibc reads /proc/self/maps: with in_hook held so the
 * reads and its buffer are not recorded).  lo == hi == 1: unknown.
 */
static void read_stack_bounds(struct hs_tls *t)
{
	pthread_attr_t a;
	void *addr;
	size_t size;
	int was = t->in_hook;
	t->in_hook = 1;
	t->stack_lo = t->stack_hi = 1; /* asked once, even when the answer is no */
	if (pthread_getattr_np(pthread_self(), &a) == 0) {
		if (pthread_attr_getstack(&a, &addr, &size) == 0) {
			t->stack_lo = (uintptr_t)addr;
			t->stack_hi = (uintptr_t)addr + size;
		}
		pthread_attr_destroy(&a);
	}
	t->in_hook = was;
}

int hs_on_own_stack(const void *p)
{
	struct hs_tls *t = &hs_tls;
	if (!t->stack_hi)
		read_stack_bounds(t);
	return (uintptr_t)p >= t->stack_lo && (uintptr_t)p < t->stack_hi;
}

uint64_t hs_stack_room(uintptr_t sp)
{
	struct hs_tls *t = &hs_tls;
	if (HS_UNLIKELY(!t->stack_hi))
		read_stack_bounds(t);
	if (sp < t->stack_lo || sp >= t->stack_hi)
		return UINT64_MAX;
	return sp - t->stack_lo;
}

