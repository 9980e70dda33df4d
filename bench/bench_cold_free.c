/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_cold_free.c — frees of blocks that are no longer in the
 * cache, the churn's shape (a C++ program dropping the nodes and strings
 * of a large map, a Python service dropping old requests): 200,000 blocks
 * of 24 to 120 bytes are allocated, shuffled, 8 MiB of other memory
 * written (to push them out of the caches), then freed in the shuffled
 * order; the free loop alone is timed.  A plain program that knows nothing
 * of heisen: run it natively and under LD_PRELOAD=libheisen.so.  Prints
 * "cold_free NS" (ns per free, the least of ROUNDS rounds: the machine's
 * other load only ever adds).  With a second argument a thread that only
 * waits is started first, so the process is multi-threaded (glibc's and
 * heisen's one-thread shortcuts off).
 *
 * Usage: bench_cold_free [ROUNDS [thread]]   (default 5 rounds)
 * Results: bench/README.md "The free path's three untried levers".
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#define BLOCKS 200000
#define EVICT (8u << 20)

static void *blocks[BLOCKS];
static char evict[EVICT];

static double now_s(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void *idle(void *arg)
{
	(void)arg;
	for (;;)
		pause();
	return NULL;
}

int main(int argc, char **argv)
{
	int rounds = argc > 1 ? atoi(argv[1]) : 5;
	double best = 1e30;
	unsigned x = 1;
	if (rounds <= 0) {
		fprintf(stderr, "usage: bench_cold_free [ROUNDS [thread]]\n");
		return 2;
	}
	if (argc > 2) {
		pthread_t th;
		if (pthread_create(&th, NULL, idle, NULL) != 0) {
			fprintf(stderr, "bench_cold_free: pthread_create failed\n");
			return 1;
		}
	}
	for (int r = 0; r < rounds; r++) {
		double t0, d;
		for (int i = 0; i < BLOCKS; i++) {
			x = x * 1103515245u + 12345u;
			blocks[i] = malloc(24 + (x >> 16) % 97);
			if (!blocks[i]) {
				fprintf(stderr, "bench_cold_free: out of memory\n");
				return 1;
			}
			((volatile char *)blocks[i])[0] = 1;
		}
		for (int i = BLOCKS - 1; i > 0; i--) {
			int j;
			void *t;
			x = x * 1103515245u + 12345u;
			j = (int)((x >> 8) % (unsigned)(i + 1));
			t = blocks[i], blocks[i] = blocks[j], blocks[j] = t;
		}
		for (size_t k = 0; k < EVICT; k += 64)
			((volatile char *)evict)[k]++;
		t0 = now_s();
		for (int i = 0; i < BLOCKS; i++)
			free(blocks[i]);
		d = (now_s() - t0) * 1e9 / BLOCKS;
		if (d < best)
			best = d;
	}
	printf("cold_free %.2f\n", best);
	return 0;
}
