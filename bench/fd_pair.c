/* SPDX-License-Identifier: MIT */
/*
 * bench/fd_pair.c — one open/close pair's cost, the two ways
 * bench/README.md "File descriptors: where an open/close pair's
 * nanoseconds go" measures it: a plain program that knows nothing of
 * heisen, run natively and under LD_PRELOAD=libheisen.so.
 *
 *   fd_pair time [BATCHES]     2,000 pairs of warm-up, then BATCHES
 *                              (default 150) batches of 1,000 pairs, each
 *                              batch timed with CLOCK_MONOTONIC; prints
 *                              the 10th percentile and the median ns per
 *                              pair (the 10th percentile: the batches no
 *                              other process interrupted)
 *   fd_pair wrapped [BATCHES]  the same, each open and close called
 *                              through one function of this program's
 *                              (noinline): what one more return between
 *                              a system call and the loop costs natively
 *                              (bench/README.md "The open/close pair: a
 *                              close folded into its creation's event")
 *   fd_pair count N [PATH]     N pairs and nothing else, for callgrind:
 *                              instructions per pair = (Ir(N2) - Ir(N1)) /
 *                              (N2 - N1)
 *
 * A pair is close(open(PATH, O_RDONLY | O_CLOEXEC)), PATH "/dev/null"
 * unless given (a longer path shows the path copy's share).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

__attribute__((noinline)) static int wrapped_open(const char *path, int flags)
{
	int fd = open(path, flags);
	__asm__ volatile("" ::: "memory"); /* a real frame: no tail call */
	return fd;
}

__attribute__((noinline)) static int wrapped_close(int fd)
{
	int rc = close(fd);
	__asm__ volatile("" ::: "memory");
	return rc;
}

static int cmp(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	struct timespec t0, t1;
	const char *path = "/dev/null";
	double *v;
	long n;
	int wrap;

	if (argc >= 3 && strcmp(argv[1], "count") == 0) {
		n = atol(argv[2]);
		if (argc >= 4)
			path = argv[3];
		for (long i = 0; i < n; i++)
			close(open(path, O_RDONLY | O_CLOEXEC));
		return 0;
	}
	if (argc < 2 || (strcmp(argv[1], "time") != 0 && strcmp(argv[1], "wrapped") != 0)) {
		fprintf(stderr, "usage: fd_pair time|wrapped [BATCHES] | fd_pair count N [PATH]\n");
		return 2;
	}
	wrap = strcmp(argv[1], "wrapped") == 0;
	n = argc >= 3 ? atol(argv[2]) : 150;
	if (n < 1 || !(v = malloc(sizeof *v * (size_t)n)))
		return 2;
	for (int i = 0; i < 2000; i++)
		close(open(path, O_RDONLY | O_CLOEXEC));
	for (long k = 0; k < n; k++) {
		clock_gettime(CLOCK_MONOTONIC, &t0);
		if (wrap)
			for (int i = 0; i < 1000; i++)
				wrapped_close(wrapped_open(path, O_RDONLY | O_CLOEXEC));
		else
			for (int i = 0; i < 1000; i++)
				close(open(path, O_RDONLY | O_CLOEXEC));
		clock_gettime(CLOCK_MONOTONIC, &t1);
		v[k] = ((double)(t1.tv_sec - t0.tv_sec) * 1e9 + (double)(t1.tv_nsec - t0.tv_nsec)) / 1000.0;
	}
	qsort(v, (size_t)n, sizeof *v, cmp);
	printf("%.1f %.1f\n", v[n / 10], v[n / 2]);
	free(v);
	return 0;
}
