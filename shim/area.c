/* SPDX-License-Identifier: MIT */
/*
 * area.c — the thread's own state outside static TLS: hs_tls itself (the
 * few hot scalars, initial-exec), the per-thread area the hooks' big buffers
 * live in (hs_area, mapped on first need), and the thread's stack bounds
 * (hs_stack_room, hs_on_own_stack).  Why: glibc takes a thread's static TLS
 * out of the stack size the program asked for, so a PTHREAD_STACK_MIN
 * thread must not lose it to a preloaded library.  Contracts in shim.h.
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

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
 * The mapping of /proc/self/maps that holds sp: [*lo, *hi); *below is the
 * end of the mapping under it.  Raw reads
 * through hs_sys, a 256-byte buffer, no malloc, no lock: the bounds are
 * first needed inside a hook, which may run inside pthread_getattr_np
 * itself (its realloc of the cpuset while it holds the thread's descriptor
 * lock), so asking glibc would deadlock.  Returns 0, -1 when not found.
 */
static int mapping_of(uintptr_t sp, uintptr_t *lo, uintptr_t *hi, uintptr_t *below)
{
	char buf[256];
	uintptr_t v[2] = {0, 0}, prev_end = 0;
	int fd = hs_sys.open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	int field = 0, found = -1; /* field: 0 start, 1 end, 2 rest of the line */
	ssize_t n;
	if (fd < 0)
		return -1;
	while (found < 0 && (n = hs_sys.read(fd, buf, sizeof buf)) > 0) {
		for (ssize_t i = 0; i < n; i++) {
			char c = buf[i];
			if (field < 2 && ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
				v[field] = v[field] << 4 | (uintptr_t)(c <= '9' ? c - '0' : c - 'a' + 10);
			} else if (field == 0 && c == '-') {
				field = 1;
			} else if (c == '\n') {
				if (sp >= v[0] && sp < v[1]) {
					*lo = v[0];
					*hi = v[1];
					*below = prev_end;
					found = 0;
					break;
				}
				prev_end = v[1];
				v[0] = v[1] = 0;
				field = 0;
			} else if (field < 2) {
				field = 2;
			}
		}
	}
	hs_sys.close(fd);
	return found;
}

/*
 * The thread's stack bounds, read once per thread: the mapping holding the
 * stack pointer (a thread's stack mapping starts just above its guard page,
 * glibc's or the program's own).  The main thread's stack grows on demand:
 * its low bound is the top less RLIMIT_STACK, never below the end of the
 * mapping under it (as pthread_getattr_np says).  lo == hi == 1: unknown.
 */
static void read_stack_bounds(struct hs_tls *t)
{
	uintptr_t lo, hi, below, sp = (uintptr_t)__builtin_frame_address(0);
	t->stack_lo = t->stack_hi = 1; /* asked once, even when the answer is no */
	if (mapping_of(sp, &lo, &hi, &below) != 0)
		return;
	if (t->tid == 0)
		t->tid = (int32_t)hs_sys.gettid();
	if (t->tid == getpid()) {
		struct rlimit rl;
		uintptr_t floor = below; /* it cannot grow into the mapping under it */
		if (hs_sys.getrlimit(RLIMIT_STACK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < hi &&
		    hi - rl.rlim_cur > floor)
			floor = hi - rl.rlim_cur;
		if (floor < lo)
			lo = floor;
	}
	t->stack_lo = lo;
	t->stack_hi = hi;
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

