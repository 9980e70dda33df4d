/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_proc.c — what process and environment tracking adds to a process, in isolation: reading
 * the environment once at start (hs_env_read: /proc/self/cgroup, the cgroup
 * files up to the mount point, sysfs, uname, sysinfo, statfs, rlimits,
 * affinity — every process of the tree pays it once), and one memory sample
 * (hs_mem_sample: /proc/self/statm and getrusage, with and without counting
 * /proc/self/fd), on a real segment of the default geometry in a private
 * session.  Prints "name us_per_op" lines, the median of 5.  Links the shim's
 * core; no hooks.  How to run it and the results: bench/README.md.
 *
 * Usage: bench_proc [N]   (operations per repetition, default 2000)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../shim/shim.h"
#include "bench.h"

#define REPS 5


int main(int argc, char **argv)
{
	static const char *const names[] = {"env_read", "mem_sample", "mem_sample+fds"};
	enum { CASES = 3 };
	double res[CASES][REPS];
	long n = argc > 1 ? atol(argv[1]) : 2000;
	char dir[] = "/tmp/heisen-bench-proc-XXXXXX";
	struct hs_env e;
	uint64_t fixed;

	if (n <= 0 || !mkdtemp(dir)) {
		fprintf(stderr, "usage: bench_proc [N]\n");
		return 2;
	}
	setenv("HEISEN_DIR", dir, 1);
	setenv("HEISEN_QUIET", "1", 1);
	if (hs_session_setup() != 0 || hs_segment_create(0) != 0) {
		fprintf(stderr, "bench_proc: could not make a segment in %s\n", dir);
		return 1;
	}
	hs_proc_init();
	__atomic_store_n(&hs_recording, 1, __ATOMIC_RELEASE);
	fixed = hs_now(); /* one time for every sample: the descriptor count is due only when asked */
	for (int r = 0; r < REPS; r++) {
		double t0 = bench_now_s();
		for (long i = 0; i < n; i++)
			hs_env_read(&e);
		res[0][r] = (bench_now_s() - t0) / (double)n * 1e6;
		t0 = bench_now_s();
		for (long i = 0; i < n; i++)
			hs_mem_sample(NULL, fixed, HS_MEMW_TIME, 0);
		res[1][r] = (bench_now_s() - t0) / (double)n * 1e6;
		t0 = bench_now_s();
		for (long i = 0; i < n; i++)
			hs_mem_sample(NULL, fixed, HS_MEMW_START, 0);
		res[2][r] = (bench_now_s() - t0) / (double)n * 1e6;
	}
	if (!hs_seg.hdr->rss_samples || !hs_seg.hdr->rss_bytes || !e.cpu_online) {
		fprintf(stderr, "bench_proc: nothing was recorded: the numbers would be meaningless\n");
		return 1;
	}
	printf("# bench_proc: %ld ops x %d reps; cgroup v%u, %u CPUs, %u open descriptors\n", n, REPS, e.cgroup,
	       e.cpu_online, hs_seg.hdr->fds_open);
	for (int c = 0; c < CASES; c++) {
		qsort(res[c], REPS, sizeof res[c][0], bench_cmp_double);
		printf("%-16s %8.2f\n", names[c], res[c][REPS / 2]);
	}
	/* the session: one segment file */
	{
		char path[256];
		snprintf(path, sizeof path, "%s/%d.0.seg", dir, (int)getpid());
		unlink(path);
		rmdir(dir);
	}
	return 0;
}
