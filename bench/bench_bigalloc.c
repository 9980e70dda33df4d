/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_bigalloc.c — large allocations, the path where heisen takes
 * allocation-driven memory samples: a plain program, nothing of
 * heisen in it.  `malloc256k`: malloc(256 KiB), write one byte, free (glibc
 * serves it with mmap); `mmap1m`: mmap 1 MiB anonymous, write one byte,
 * munmap.  No resident growth, so heisen's sampling is at its most frequent
 * per byte allocated: one sample per 1 MiB of large allocations (or 1/32 of
 * the resident set), at most one a millisecond.  ns per pair, after an
 * untimed warm-up of N/10.  Run natively and under heisen by bench/run.py.
 *
 * Usage: bench_bigalloc [N]   (pairs per case, default 100000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void big(long n)
{
	for (long i = 0; i < n; i++) {
		volatile char *p = malloc(256 << 10);
		if (!p)
			abort();
		p[i & 4095] = 1;
		free((void *)p);
	}
}

static void maps(long n)
{
	for (long i = 0; i < n; i++) {
		volatile char *p = mmap(NULL, 1 << 20, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (p == MAP_FAILED)
			abort();
		p[i & 4095] = 1;
		munmap((void *)p, 1 << 20);
	}
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 100000;
	double t;
	if (n <= 0)
		return 2;
	big(n / 10);
	t = now_ns();
	big(n);
	printf("malloc256k %.1f\n", (now_ns() - t) / (double)n);
	maps(n / 10);
	t = now_ns();
	maps(n);
	printf("mmap1m %.1f\n", (now_ns() - t) / (double)n);
	return 0;
}
