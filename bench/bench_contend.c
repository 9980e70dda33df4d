/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_contend.c — a contended pthread mutex with a short critical
 * section, the shape of sqlite's memory mutex (taken around every
 * sqlite3Malloc/sqlite3_free by every connection's thread): T threads each
 * loop N times over lock; INSIDE units of work; unlock; OUTSIDE units.  What
 * a tool does while the lock is held, every other thread waiting for it
 * waits for too, so this shows a hook's work inside the critical section
 * (bench/README.md) where the uncontended bench_mutex cannot.  A plain
 * program that knows nothing of heisen.
 *
 * Prints "threads T n N inside I outside O wall_ms W vcsw V": wall time of
 * the whole loop and the threads' voluntary context switches (blocked
 * waits) summed.  Count futex calls with
 * `perf stat -e syscalls:sys_enter_futex`.  Both depend on the threads
 * running at the same time: on a loaded machine they move from run to run
 * (interleave configurations, take medians, give the load average).
 *
 * Usage: bench_contend [N [INSIDE [OUTSIDE [T]]]]   (defaults 1000000 20 100 2)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#define MAX_THREADS 64

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static long n, inside, outside;
static volatile unsigned long sink;
static long vcsw[MAX_THREADS];

static void work(long units)
{
	for (long i = 0; i < units; i++)
		sink += (unsigned long)i;
}

static void *run(void *arg)
{
	long me = (long)arg;
	struct rusage ru;
	for (long i = 0; i < n; i++) {
		if (pthread_mutex_lock(&mu) != 0)
			abort();
		work(inside);
		if (pthread_mutex_unlock(&mu) != 0)
			abort();
		work(outside);
	}
	getrusage(RUSAGE_THREAD, &ru);
	vcsw[me] = ru.ru_nvcsw;
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t[MAX_THREADS];
	struct timespec a, b;
	long nt, total = 0;
	n = argc > 1 ? atol(argv[1]) : 1000000;
	inside = argc > 2 ? atol(argv[2]) : 20;
	outside = argc > 3 ? atol(argv[3]) : 100;
	nt = argc > 4 ? atol(argv[4]) : 2;
	if (n <= 0 || inside < 0 || outside < 0 || nt < 1 || nt > MAX_THREADS) {
		fprintf(stderr, "usage: bench_contend [N [INSIDE [OUTSIDE [T (1..%d)]]]]\n", MAX_THREADS);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (long i = 0; i < nt; i++)
		if (pthread_create(&t[i], NULL, run, (void *)i) != 0)
			return 1;
	for (long i = 0; i < nt; i++)
		pthread_join(t[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	for (long i = 0; i < nt; i++)
		total += vcsw[i];
	printf("threads %ld n %ld inside %ld outside %ld wall_ms %.1f vcsw %ld\n", nt, n, inside, outside,
	       ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / 1e6, total);
	return 0;
}
