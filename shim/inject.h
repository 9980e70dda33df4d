/* SPDX-License-Identifier: MIT */
/*
 * shim/inject.h — the hook side of fault injection (faults.c) and chaos
 * schedules (chaos.c): what the existing hooks call, one line each.
 *
 * Both are off unless heisen-run asked for them (HEISEN_FAIL,
 * HEISEN_FAIL_AFTER, HEISEN_HEAP_LIMIT, HEISEN_CHAOS; docs/interfaces.md
 * "Fault injection and chaos").  When off, each insertion costs one load of
 * a global that never changes after start-up and one predictable branch;
 * everything else is out of line.  Anchors: libfiu and failmalloc (faults),
 * rr's chaos mode and ClickHouse's ThreadFuzzer (chaos).
 */
#ifndef HEISEN_SHIM_INJECT_H
#define HEISEN_SHIM_INJECT_H

#include <errno.h>
#include <stddef.h>

#include "shim.h"

/* Set once by hs_faults_init / hs_chaos_init (the constructor, before any
 * thread but the main one exists), read without ordering afterwards.
 * hs_inject_on = HS_INJECT_FAULTS | HS_INJECT_CHAOS as they are on: the
 * hooks that are points of both (malloc, close) test this one word. */
extern int hs_faults_on;
extern int hs_chaos_on;
extern int hs_inject_on;
#define HS_INJECT_FAULTS 1
#define HS_INJECT_CHAOS 2

/* Read the environment; faults.c / chaos.c.  Called once from init.c. */
void hs_faults_init(void);
void hs_chaos_init(void);
void hs_cpus_init(void); /* cpus.c: HEISEN_CPUS */

/*
 * Should this allocation of n bytes fail?  1 when heisen injects a failure
 * (--fail malloc, --fail-after, --heap-limit): the event and its stack are
 * in the calling thread's ring, and the caller returns NULL with ENOMEM
 * without allocating.  0 otherwise, always for the shim's own allocations
 * (inside a hook) and before recording starts.  Keeps errno.
 */
int hs_fault_alloc(size_t n);

/* The same for an open (0, or the errno to fail with: nothing is opened). */
int hs_fault_open(void) __attribute__((cold));

/* The same for a close of fd: 0, or the errno to report.  The caller still
 * closes fd (Linux releases the number even when close reports EIO or
 * EINTR), then returns -1 with that errno. */
int hs_fault_close(int fd);

/* An allocation's chaos point, then its fault decision: 1 = fail it. */
int hs_inject_alloc(size_t n) __attribute__((cold));

/* malloc, calloc, realloc: one test of one word when both are off. */
#define HS_FAULT_ALLOC(n)                                                   \
	do {                                                                \
		if (HS_UNLIKELY(hs_inject_on) && hs_inject_alloc(n)) {      \
			errno = ENOMEM;                                     \
			return NULL;                                        \
		}                                                           \
	} while (0)

#define HS_FAULT_OPEN()                                                     \
	do {                                                                \
		int fe_;                                                    \
		if (HS_UNLIKELY(hs_faults_on) && (fe_ = hs_fault_open())) { \
			errno = fe_;                                        \
			return -1;                                          \
		}                                                           \
	} while (0)

/* A close's chaos point, then its fault decision: 0, or the errno. */
int hs_inject_close(int fd) __attribute__((cold));

/* real: the expression that closes fd for real (its result is dropped).
 * One test of one word when both are off. */
#define HS_FAULT_CLOSE(fd, real)                                               \
	do {                                                                   \
		int fe_;                                                       \
		if (HS_UNLIKELY(hs_inject_on) && (fe_ = hs_inject_close(fd))) { \
			(void)(real);                                          \
			errno = fe_;                                           \
			return -1;                                             \
		}                                                              \
	} while (0)

/*
 * A chaos point: the calling thread is at `point` (enum hs_chaos_point,
 * format.h).  Perturbs its schedule as the seed and the thread's own count
 * of chaos points decide: nothing, sched_yield, a short nanosleep, or a
 * move to another CPU.  Never blocks on anything but time; keeps errno.
 */
void hs_chaos_point(unsigned point) __attribute__((cold));

#define HS_CHAOS(point)                              \
	do {                                         \
		if (HS_UNLIKELY(hs_chaos_on))        \
			hs_chaos_point(point);       \
	} while (0)

#endif
