/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_alternate.c — T threads, each taking and releasing its own
 * two mutexes in turn (lock a; unlock a; lock b; unlock b; ...): no lock is
 * ever contended, but every release is of another object than the
 * thread's last one, the shape of a thread that takes sqlite's connection
 * and memory mutexes in turn.  What it shows is the cost of a hook's stores
 * to memory other threads write too (a cache line passed between the cores
 * at each operation) that a one-thread benchmark cannot show: run it with
 * T = 1 and T = 2 on a machine with two free processors and compare.  A
 * plain program that knows nothing of heisen.
 *
 * Prints "threads T n N ns_per_pair X": wall nanoseconds of the whole run
 * divided by N (each thread makes N lock/unlock pairs, so with T threads
 * running at once X is a pair's time, not its share).  Depends on the
 * threads running at the same time: interleave configurations, take
 * medians, give the load average (bench/README.md).
 *
 * Usage: bench_alternate [N [T]]   (defaults 2000000 2)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define MAX_THREADS 64

static long n;

static void *run(void *arg)
{
	pthread_mutex_t m[2] = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_MUTEX_INITIALIZER};
	(void)arg;
	for (long i = 0; i < n; i++) {
		pthread_mutex_lock(&m[i & 1]);
		pthread_mutex_unlock(&m[i & 1]);
	}
	return NULL;
}

int main(int argc, char **argv)
{
	int t = argc > 2 ? atoi(argv[2]) : 2;
	pthread_t th[MAX_THREADS];
	struct timespec a, b;
	n = argc > 1 ? atol(argv[1]) : 2000000;
	if (n <= 0 || t <= 0 || t > MAX_THREADS) {
		fprintf(stderr, "usage: bench_alternate [N [T]]  (N > 0, 1 <= T <= %d)\n", MAX_THREADS);
		return 2;
	}
	clock_gettime(CLOCK_MONOTONIC, &a);
	for (int i = 0; i < t; i++)
		if (pthread_create(&th[i], NULL, run, NULL) != 0) {
			perror("pthread_create");
			return 1;
		}
	for (int i = 0; i < t; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &b);
	printf("threads %d n %ld ns_per_pair %.2f\n", t, n,
	       ((double)(b.tv_sec - a.tv_sec) * 1e9 + (double)(b.tv_nsec - a.tv_nsec)) / (double)n);
	return 0;
}
