/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_mutex.c — uncontended pthread lock cost, one thread, nothing
 * else: a plain program that knows nothing of heisen, so bench/run.py can run
 * the same binary natively, under LD_PRELOAD=libheisen.so and under other
 * tools (helgrind, drd; a -fsanitize=thread build of this same file) and
 * compare.  Prints one line per case, "name ns_per_op".  How to run it and
 * the results: bench/README.md.
 *
 * Cases (each timed over N iterations after an untimed warm-up of N/10, so
 * a tool's first-call work at each call site is not counted):
 *   mutex     lock + unlock of one default mutex           ns per pair
 *   nested    lock A, lock B, unlock B, unlock A           ns per iteration (2 pairs, holds A while taking B)
 *   rwlock_rd rdlock + unlock of one default rwlock        ns per pair
 *   rwlock_wr wrlock + unlock of one default rwlock        ns per pair
 *
 * Usage: bench_mutex [N] [min]   (default 10000000)
 *   min: each case as the smallest ns per op of 100 runs of N/100 iterations,
 *        timed by the thread's CPU clock (CLOCK_THREAD_CPUTIME_ID): a run
 *        another process preempted or disturbed is not the smallest, so on a
 *        loaded machine this is the steady cost of the loop, where the
 *        default (one timed run of N, CLOCK_MONOTONIC) is the loop's wall
 *        time under that load.
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static pthread_mutex_t mu_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t mu_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_rwlock_t rw = PTHREAD_RWLOCK_INITIALIZER;

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

#define MIN_RUNS 100

/* Every call is checked: a tool that made a lock call fail must not look fast. */
#define CALL(x)                                                                  \
	do {                                                                     \
		if ((x) != 0) {                                                  \
			fprintf(stderr, "bench_mutex: %s failed\n", #x);        \
			exit(1);                                                 \
		}                                                                \
	} while (0)

__attribute__((noinline)) static void run_mutex(long n)
{
	for (long i = 0; i < n; i++) {
		CALL(pthread_mutex_lock(&mu_a));
		CALL(pthread_mutex_unlock(&mu_a));
	}
}

__attribute__((noinline)) static void run_nested(long n)
{
	for (long i = 0; i < n; i++) {
		CALL(pthread_mutex_lock(&mu_a));
		CALL(pthread_mutex_lock(&mu_b));
		CALL(pthread_mutex_unlock(&mu_b));
		CALL(pthread_mutex_unlock(&mu_a));
	}
}

__attribute__((noinline)) static void run_rwlock_rd(long n)
{
	for (long i = 0; i < n; i++) {
		CALL(pthread_rwlock_rdlock(&rw));
		CALL(pthread_rwlock_unlock(&rw));
	}
}

__attribute__((noinline)) static void run_rwlock_wr(long n)
{
	for (long i = 0; i < n; i++) {
		CALL(pthread_rwlock_wrlock(&rw));
		CALL(pthread_rwlock_unlock(&rw));
	}
}

static const struct {
	const char *name;
	void (*run)(long);
} cases[] = {
	{"mutex", run_mutex},
	{"nested", run_nested},
	{"rwlock_rd", run_rwlock_rd},
	{"rwlock_wr", run_rwlock_wr},
};

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 0) : 10000000L;
	int min = argc > 2 && strcmp(argv[2], "min") == 0;
	if (n <= 0 || (argc > 2 && !min) || (min && n < MIN_RUNS)) {
		fprintf(stderr, "usage: bench_mutex [N] [min]   (min: N >= %d)\n", MIN_RUNS);
		return 2;
	}
	printf("# bench_mutex: N=%ld, single thread, uncontended; ns per op%s\n", n,
	       min ? " (smallest of 100 runs of N/100, thread CPU time)" : "");
	for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
		double t0, best = 0;
		cases[c].run(n / 10 > 0 ? n / 10 : 1);
		if (!min) {
			t0 = now_s();
			cases[c].run(n);
			best = (now_s() - t0) * 1e9 / (double)n;
		} else {
			for (int r = 0; r < MIN_RUNS; r++) {
				double ns;
				t0 = cpu_s();
				cases[c].run(n / MIN_RUNS);
				ns = (cpu_s() - t0) * 1e9 / (double)(n / MIN_RUNS);
				if (r == 0 || ns < best)
					best = ns;
			}
		}
		printf("%-10s %10.2f\n", cases[c].name, best);
		fflush(stdout);
	}
	return 0;
}
