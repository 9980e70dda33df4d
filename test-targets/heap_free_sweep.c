/* SPDX-License-Identifier: MIT */
/*
 * heap_free_sweep — a double free after N intervening allocations: how long
 * does a checker (or glibc, Scudo, ASan) still recognise a freed block?
 *
 *   heap_free_sweep SIZE N THREADS [clean]
 *
 * Each of THREADS threads (1: the main thread only) allocates a block of
 * SIZE bytes (alloc_victim), frees it (first_free), then makes N allocations
 * of mixed sizes (churn: 16 B to 4 KiB, log-uniform, from a deterministic
 * xorshift PRNG seeded by the thread's number; every byte written, as a
 * program would): half are freed at once, the other half replace (and free)
 * a random one of 4096 kept blocks.  Then it frees the block again
 * (second_free).  The threads churn concurrently and reach their second frees
 * together (a barrier).  What a checker must catch is the second free.
 * With "clean" there is no second free: a correct program with the same
 * churn, which must have no finding.
 *
 * Prints "pid P", "tid_main T", per thread "tid_sweep<i> T" and
 * "victim<i> 0x...", "second free done" once all second frees returned
 * (nothing caught them), then "done ok".  The kept blocks are leaked on
 * purpose: freeing them after an uncaught double free would let glibc trip
 * over its own lists later and blur what was caught where.
 */
#include <stdint.h>

#include "tt.h"

#define KEPT 4096

static size_t victim_size;
static long churn_n;
static int nthreads;
static int clean;
static pthread_barrier_t sweep_done;

struct sweep {
	int index;
	int tid;
	void *victim;
};

static inline uint64_t xorshift(uint64_t *s)
{
	uint64_t x = *s;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	return *s = x;
}

__attribute__((noinline)) static void *alloc_victim(size_t n)
{
	char *p = malloc(n);
	if (p)
		memset(p, 0x5a, n);
	return p;
}

__attribute__((noinline)) static void first_free(void *p)
{
	free(p);
}

__attribute__((noinline)) static void second_free(void *p)
{
	free(p);
}

/* N allocations of mixed sizes, half freed at once, half kept (replacing a kept one). */
__attribute__((noinline)) static void churn(long n, uint64_t seed)
{
	void **kept = calloc(KEPT, sizeof *kept);
	uint64_t s = seed * 0x9e3779b97f4a7c15ull + 1;
	if (!kept)
		abort();
	for (long i = 0; i < n; i++) {
		uint64_t r = xorshift(&s);
		/* log-uniform 16 B .. 4 KiB: a power of two 16..2048, then up to twice it */
		size_t base = (size_t)16 << (r % 8);
		size_t sz = base + (size_t)((r >> 8) % base);
		char *p = malloc(sz);
		if (!p)
			abort();
		memset(p, (int)(r >> 40), sz);
		if ((r >> 20) & 1) {
			free(p);
		} else {
			size_t k = (size_t)((r >> 24) % KEPT);
			free(kept[k]);
			kept[k] = p;
		}
	}
	/* the kept blocks stay allocated (see the top comment) */
}

static void *sweep(void *arg)
{
	struct sweep *w = arg;
	char label[32];
	w->tid = tt_gettid();
	w->victim = alloc_victim(victim_size);
	first_free(w->victim);
	churn(churn_n, (uint64_t)w->index + 1);
	snprintf(label, sizeof label, "tid_sweep%d", w->index);
	printf("%s %d\nvictim%d %p\n", label, w->tid, w->index, w->victim);
	fflush(stdout);
	if (nthreads > 1)
		pthread_barrier_wait(&sweep_done);
	if (!clean)
		second_free(w->victim);
	return NULL;
}

int main(int argc, char **argv)
{
	struct sweep w[64];
	pthread_t th[64];
	if (argc != 4 && !(argc == 5 && strcmp(argv[4], "clean") == 0)) {
		fprintf(stderr, "usage: heap_free_sweep SIZE N THREADS [clean]\n");
		return 2;
	}
	victim_size = (size_t)strtoull(argv[1], NULL, 10);
	churn_n = strtol(argv[2], NULL, 10);
	nthreads = atoi(argv[3]);
	clean = argc == 5;
	if (nthreads < 1 || nthreads > 64 || victim_size == 0 || churn_n < 0) {
		fprintf(stderr, "heap_free_sweep: bad arguments\n");
		return 2;
	}
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	if (nthreads == 1) {
		w[0].index = 0;
		sweep(&w[0]);
	} else {
		TT_CHECK(pthread_barrier_init(&sweep_done, NULL, (unsigned)nthreads));
		for (int i = 0; i < nthreads; i++) {
			w[i].index = i;
			TT_CHECK(pthread_create(&th[i], NULL, sweep, &w[i]));
		}
		for (int i = 0; i < nthreads; i++)
			TT_CHECK(pthread_join(th[i], NULL));
	}
	printf("second free done\n");
	printf("done ok\n");
	return 0;
}
