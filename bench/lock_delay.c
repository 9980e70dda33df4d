/* SPDX-License-Identifier: MIT */
/*
 * bench/lock_delay.c — a preload that is not heisen: it adds a fixed busy
 * wait to every pthread_mutex_lock of a program, except the CPython GIL's
 * own mutex (inside _PyRuntime, which heisen passes through too), to see
 * what a per-lock cost alone does to a threaded Python program's GIL
 * hand-offs (bench/README.md "GIL hand-offs").
 *
 *   gcc -O2 -shared -fPIC -o /tmp/lock_delay.so bench/lock_delay.c -ldl
 *   LD_PRELOAD=/tmp/lock_delay.so LOCK_DELAY_NS=300 [LOCK_DELAY_WHEN=held|free]
 *       [LOCK_DELAY_INSIDE=1] /usr/bin/python3 bench/py_workload.py 20000
 *
 * LOCK_DELAY_NS: the wait in ns (TSC cycles, calibrated against
 * CLOCK_MONOTONIC at start); 0 or unset: none (the interposition alone).
 * LOCK_DELAY_WHEN=held: only when the calling thread holds the GIL
 * (PyGILState_Check); free: only when it does not; unset: always.
 * LOCK_DELAY_INSIDE=1: the wait after the real lock (inside the critical
 * section) instead of before it.  x86-64 only (rdtsc).
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <x86intrin.h>

static int (*real_lock)(pthread_mutex_t *);
static uint64_t rt_lo, rt_hi, cycles;
static int when, inside; /* when: 0 always, 1 GIL free, 2 GIL held */
static int (*gil_check)(void);

static uint64_t ns_to_cycles(double ns)
{
	struct timespec a, b;
	uint64_t t0, t1;
	double el;
	clock_gettime(CLOCK_MONOTONIC, &a);
	t0 = __rdtsc();
	do {
		clock_gettime(CLOCK_MONOTONIC, &b);
		el = (double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec);
	} while (el < 2e6);
	t1 = __rdtsc();
	return (uint64_t)(ns * (double)(t1 - t0) / el);
}

__attribute__((constructor)) static void init(void)
{
	const char *s;
	real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
	s = getenv("LOCK_DELAY_NS");
	cycles = s && atof(s) > 0 ? ns_to_cycles(atof(s)) : 0;
	s = getenv("LOCK_DELAY_WHEN");
	when = !s ? 0 : s[0] == 'f' ? 1 : s[0] == 'h' ? 2 : 0;
	inside = getenv("LOCK_DELAY_INSIDE") != NULL;
}

/* _PyRuntime's range, once CPython is there (the GIL's mutex lives in it). */
static void runtime_range(void)
{
	void *rt;
	Dl_info info;
	const ElfW(Sym) *es = NULL;
	if (rt_hi)
		return;
	rt = dlsym(RTLD_DEFAULT, "_PyRuntime");
	if (rt && dladdr1(rt, &info, (void **)&es, RTLD_DL_SYMENT) && es) {
		rt_lo = (uint64_t)(uintptr_t)rt;
		rt_hi = rt_lo + es->st_size;
	}
}

static int wanted(pthread_mutex_t *m)
{
	uint64_t a = (uint64_t)(uintptr_t)m;
	int held;
	runtime_range();
	if (a >= rt_lo && a < rt_hi)
		return 0;
	if (!when)
		return 1;
	if (!gil_check)
		gil_check = (int (*)(void))dlsym(RTLD_DEFAULT, "PyGILState_Check");
	if (!gil_check)
		return 0;
	held = gil_check();
	return when == 2 ? held : !held;
}

static void spin(void)
{
	uint64_t t = __rdtsc();
	while (__rdtsc() - t < cycles)
		__builtin_ia32_pause();
}

int pthread_mutex_lock(pthread_mutex_t *m)
{
	int rc;
	if (!real_lock)
		real_lock = (int (*)(pthread_mutex_t *))dlsym(RTLD_NEXT, "pthread_mutex_lock");
	if (!cycles || !wanted(m))
		return real_lock(m);
	if (!inside)
		spin();
	rc = real_lock(m);
	if (inside)
		spin();
	return rc;
}
