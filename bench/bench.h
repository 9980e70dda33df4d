/* SPDX-License-Identifier: MIT */
/*
 * bench/bench.h — the two helpers the shim-linked microbenchmarks share
 * (bench_record.c, bench_proc.c): a monotonic clock in seconds and the
 * comparison qsort needs to take a median.  bench/README.md.
 */
#ifndef HEISEN_BENCH_H
#define HEISEN_BENCH_H

#include <time.h>

static inline double bench_now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static inline int bench_cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

#endif
