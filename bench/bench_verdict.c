/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_verdict.c — the cost of heisen-run's end-of-run verdict on a
 * session (internal/seg_verdict.h hs_session_quick), the only reading of
 * the session a clean run's end makes (bench/README.md "The tools' own
 * cost").
 *
 *   bench_verdict SESSION_DIR [ROUNDS]
 *
 * Prints the verdict, the segments judged and the reason, then the CPU
 * time (getrusage: user + system) and wall time per round, the median of
 * ROUNDS (default 11).  The first round also counts (the files' pages are
 * in memory: /dev/shm is memory).
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <time.h>

#include <internal/seg_verdict.h>

static double cpu_s(void)
{
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) + (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static double wall_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int by_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return (x > y) - (x < y);
}

int main(int argc, char **argv)
{
	static const char *const names[] = {"clean", "look", "bad"};
	int rounds = argc > 2 ? atoi(argv[2]) : 11;
	char why[512] = "";
	size_t nsegs = 0;
	enum hs_quick v = HS_QUICK_CLEAN;
	if (argc < 2 || rounds < 1) {
		fprintf(stderr, "usage: bench_verdict SESSION_DIR [ROUNDS]\n");
		return 2;
	}
	int dfd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		perror(argv[1]);
		return 2;
	}
	double *cpu = calloc((size_t)rounds, sizeof *cpu), *wall = calloc((size_t)rounds, sizeof *wall);
	for (int i = 0; i < rounds; i++) {
		double c0 = cpu_s(), w0 = wall_s();
		v = hs_session_quick(dfd, &nsegs, why, sizeof why);
		cpu[i] = cpu_s() - c0;
		wall[i] = wall_s() - w0;
	}
	qsort(cpu, (size_t)rounds, sizeof *cpu, by_double);
	qsort(wall, (size_t)rounds, sizeof *wall, by_double);
	printf("%s, %zu segments%s%s\n", names[v], nsegs, why[0] ? ": " : "", why);
	printf("per round (median of %d): %.2f ms CPU, %.2f ms wall\n", rounds, cpu[rounds / 2] * 1e3,
	       wall[rounds / 2] * 1e3);
	return 0;
}
