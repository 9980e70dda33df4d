/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_malloc.c — the cost of a malloc/free pair, nothing else: a
 * plain program that knows nothing of heisen, so bench/run.py can run the
 * same binary natively, under LD_PRELOAD=libheisen.so (heap checker off and
 * on, each HEISEN_HEAP_STACKS mode), under gcc's ASan runtime preloaded and
 * under valgrind's memcheck, and compare.  Prints one line per case,
 * "name ns_per_pair".  How to run it and the results: bench/README.md.
 *
 * A pair is malloc(size) of a size cycling 16, 32, ..., 512 bytes, one byte
 * written, then free; the pointer escapes through an empty asm so the
 * compiler cannot drop the pair.  Each case is timed after an untimed
 * warm-up of N/10 pairs, so a tool's first-call work at the call site is not
 * counted and a checker's quarantine (heisen's: a 32nd of the live heap,
 * at least 256 KiB, at most 512 blocks per thread; ASan's 256 MB) has filled or nearly: the timed pairs are
 * its steady state, each free pushing an older block back to the allocator.
 *
 * Cases:
 *   single    one thread, N pairs                      ns per pair
 *   threads4  4 threads at once, N/4 pairs each        wall ns / N: the
 *             process's throughput, so on 2 CPUs the ideal is half of single
 *
 * Usage: bench_malloc [N]   (default 3000000)
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define THREADS 4

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* n pairs; exits on a failed malloc, so a tool that made it fail cannot look fast. */
__attribute__((noinline)) static void pairs(long n)
{
	for (long i = 0; i < n; i++) {
		char *p = malloc(16 + (size_t)(i & 31) * 16);
		if (p == NULL) {
			fprintf(stderr, "bench_malloc: malloc failed\n");
			exit(1);
		}
		p[0] = (char)i;
		__asm__ volatile("" : : "r"(p) : "memory");
		free(p);
	}
}

static pthread_barrier_t start;
static long per_thread;

static void *worker(void *arg)
{
	(void)arg;
	pairs(per_thread / 10 > 0 ? per_thread / 10 : 1);
	pthread_barrier_wait(&start);
	pairs(per_thread);
	return NULL;
}

/* THREADS threads of n/THREADS pairs each, started together; wall ns per pair. */
static double run_threads(long n)
{
	pthread_t th[THREADS];
	double t0;
	per_thread = n / THREADS > 0 ? n / THREADS : 1;
	if (pthread_barrier_init(&start, NULL, THREADS + 1) != 0) {
		fprintf(stderr, "bench_malloc: pthread_barrier_init failed\n");
		exit(1);
	}
	for (int i = 0; i < THREADS; i++) {
		if (pthread_create(&th[i], NULL, worker, NULL) != 0) {
			fprintf(stderr, "bench_malloc: pthread_create failed\n");
			exit(1);
		}
	}
	pthread_barrier_wait(&start);
	t0 = now_s();
	for (int i = 0; i < THREADS; i++)
		pthread_join(th[i], NULL);
	return (now_s() - t0) * 1e9 / (double)(per_thread * THREADS);
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? strtol(argv[1], NULL, 0) : 3000000L;
	double t0;
	if (n <= 0) {
		fprintf(stderr, "usage: bench_malloc [N]\n");
		return 2;
	}
	printf("# bench_malloc: N=%ld, sizes 16..512 bytes; ns per malloc/free pair\n", n);
	pairs(n / 10 > 0 ? n / 10 : 1);
	t0 = now_s();
	pairs(n);
	printf("%-10s %10.2f\n", "single", (now_s() - t0) * 1e9 / (double)n);
	fflush(stdout);
	printf("%-10s %10.2f\n", "threads4", run_threads(n));
	return 0;
}
