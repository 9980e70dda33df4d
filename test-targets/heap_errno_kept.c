/* SPDX-License-Identifier: MIT */
/*
 * test-targets/heap_errno_kept.c — malloc and its family keep errno on
 * success, as glibc's do (tests/test_heap.py): a set errno must read back
 * the same after each call, in the main thread and in a second thread,
 * for blocks small and large (1 KiB and more: cut to their tombstone at the
 * free; 64 KiB and more: a memory sample made due), aligned ones, grown
 * and shrunk by realloc, through enough frees to give blocks back from the
 * quarantine.  Prints "errno kept ok CALLS" and exits 0, or names the first
 * call that changed errno and exits 1.
 *
 * Usage: heap_errno_kept [ROUNDS]   (default 20000)
 */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static long rounds = 20000;
static long calls;

#define CHECK(what, expr)                                                                      \
	do {                                                                                   \
		errno = want;                                                                  \
		expr;                                                                          \
		calls++;                                                                       \
		if (errno != want) {                                                           \
			fprintf(stderr, "errno changed by %s: %d to %d (round %ld)\n", what, want, \
				errno, i);                                                     \
			return 1;                                                              \
		}                                                                              \
	} while (0)

static int churn(int want)
{
	static const size_t sizes[] = {8, 24, 40, 100, 500, 1500, 5000, 70000};
	void *keep[64] = {0};
	for (long i = 0; i < rounds; i++) {
		size_t n = sizes[i % 8] + (size_t)(i % 13);
		void *p, *q, *a = NULL;
		CHECK("malloc", p = malloc(n));
		if (!p)
			return 2;
		memset(p, 1, n);
		CHECK("realloc (grow)", q = realloc(p, n * 2));
		if (!q)
			return 2;
		CHECK("realloc (shrink)", p = realloc(q, n / 2 + 1));
		if (!p)
			return 2;
		CHECK("free", free(keep[i % 64]));
		keep[i % 64] = p;
		CHECK("calloc", q = calloc(3, n));
		CHECK("free", free(q));
		CHECK("posix_memalign", (void)posix_memalign(&a, 64, n));
		CHECK("free", free(a));
		CHECK("aligned_alloc", a = aligned_alloc(32, 96));
		CHECK("free", free(a));
	}
	for (int k = 0; k < 64; k++)
		free(keep[k]);
	return 0;
}

static void *thread_main(void *arg)
{
	return (void *)(long)churn((int)(long)arg);
}

int main(int argc, char **argv)
{
	pthread_t th;
	void *rc;
	if (argc > 1)
		rounds = atol(argv[1]);
	if (churn(EDOM) != 0)
		return 1;
	if (pthread_create(&th, NULL, thread_main, (void *)(long)ERANGE) != 0)
		return 2;
	pthread_join(th, &rc);
	if (rc)
		return 1;
	printf("errno kept ok %ld\n", calls);
	return 0;
}
