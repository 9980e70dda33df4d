/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_fd.c — the cost of creating and closing a file descriptor,
 * nothing else: a plain program that knows nothing of heisen, so
 * bench/run.py part 7 can run the same binary natively and under
 * LD_PRELOAD=libheisen.so (fd tracking on, on with full stacks, off) and
 * compare.  Prints one line per case, "name ns_per_pair".  Results:
 * bench/README.md.
 *
 * A single-threaded case's figure is the thread's CPU time per pair
 * (CLOCK_THREAD_CPUTIME_ID: user and system time, the system calls
 * included): what the loop costs the thread, not the time it waited for a
 * CPU, which on a loaded machine moved the wall-clock mean of one run by
 * up to 15% — native's open_close by 300 ns between runs, twice heisen's
 * cost (bench/README.md "The open/close pair: a close folded into its
 * creation's event; what bench_fd measures").  NAME_wall is that mean by
 * the wall clock, the earlier figure, kept for comparison.
 *
 * Cases (each timed after an untimed warm-up of N/10, so the first call's
 * stack capture at each call site is not counted):
 *   open_close    open("/dev/null", O_RDONLY | O_CLOEXEC) + close
 *   socket_close  socket(AF_UNIX, SOCK_STREAM) + close
 *   pipe_close    pipe2(O_CLOEXEC) + two closes (one pair = the whole pipe)
 *   threads4      open_close in 4 threads at once: wall ns / N (throughput;
 *                 on 2 CPUs the ideal is half of open_close)
 *
 * Usage: bench_fd [N]   (default 300000)
 */
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define THREADS 4

static double clock_s(clockid_t id)
{
	struct timespec ts;
	clock_gettime(id, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double now_s(void)
{
	return clock_s(CLOCK_MONOTONIC);
}

static void fail(const char *what)
{
	perror(what);
	exit(1);
}

__attribute__((noinline)) static void open_close(long n)
{
	for (long i = 0; i < n; i++) {
		int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
		if (fd < 0 || close(fd) != 0)
			fail("open/close");
	}
}

__attribute__((noinline)) static void socket_close(long n)
{
	for (long i = 0; i < n; i++) {
		int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || close(fd) != 0)
			fail("socket/close");
	}
}

__attribute__((noinline)) static void pipe_close(long n)
{
	for (long i = 0; i < n; i++) {
		int p[2];
		if (pipe2(p, O_CLOEXEC) != 0 || close(p[0]) != 0 || close(p[1]) != 0)
			fail("pipe2/close");
	}
}

/* Run fn(n) after an untimed warm-up; print "name CPU-ns-per-pair" and
 * "name_wall wall-ns-per-pair". */
static void timed(const char *name, void (*fn)(long), long n)
{
	double t0, c0, t1, c1;
	fn(n / 10 > 0 ? n / 10 : 1);
	t0 = now_s();
	c0 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	fn(n);
	c1 = clock_s(CLOCK_THREAD_CPUTIME_ID);
	t1 = now_s();
	printf("%s %.1f\n", name, (c1 - c0) * 1e9 / (double)n);
	printf("%s_wall %.1f\n", name, (t1 - t0) * 1e9 / (double)n);
}

static pthread_barrier_t start;
static long per_thread;

static void *worker(void *arg)
{
	open_close(per_thread / 10 > 0 ? per_thread / 10 : 1);
	pthread_barrier_wait(&start);
	open_close(per_thread);
	return arg;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 300000;
	pthread_t t[THREADS];
	double t0;

	timed("open_close", open_close, n);
	timed("socket_close", socket_close, n);
	timed("pipe_close", pipe_close, n / 2);
	per_thread = n / THREADS;
	pthread_barrier_init(&start, NULL, THREADS + 1);
	for (int i = 0; i < THREADS; i++)
		if (pthread_create(&t[i], NULL, worker, NULL) != 0)
			fail("pthread_create");
	pthread_barrier_wait(&start);
	t0 = now_s();
	for (int i = 0; i < THREADS; i++)
		pthread_join(t[i], NULL);
	printf("threads4 %.1f\n", (now_s() - t0) * 1e9 / (double)(per_thread * THREADS));
	return 0;
}
