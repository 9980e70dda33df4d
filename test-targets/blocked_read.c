/* SPDX-License-Identifier: MIT */
/*
 * blocked_read — a process blocked in something that is not a lock.
 *
 *   blocked_read          read_forever() blocks in read() on a pipe nobody
 *                         writes; main joins it.  Never ends by itself.
 *   blocked_read busy MS  busy_for() spins on the CPU for MS milliseconds
 *                         in a second thread (no locks, no events), then
 *                         the program exits 0 without reading.
 *
 * No thread waits for a lock, so only the lack of progress (no events, no
 * CPU time) makes the first a `hang`; the second is merely busy.
 * Prints "pid P", "tid_reader T" and "blocked" (or "done").
 */
#include "tt.h"

#include <time.h>

static int fds[2];

__attribute__((noinline)) void read_forever(void)
{
	char c;
	printf("blocked\n");
	fflush(stdout);
	while (read(fds[0], &c, 1) != 0)
		; /* EINTR from a snapshot is retried, as any program must */
}

static void *reader(void *arg)
{
	(void)arg;
	tt_say_tid("tid_reader");
	read_forever();
	return NULL;
}

static volatile unsigned long sink;

__attribute__((noinline)) void busy_for(long ms)
{
	struct timespec t0, t;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	do {
		for (int i = 0; i < 100000; i++)
			sink += (unsigned long)i;
		clock_gettime(CLOCK_MONOTONIC, &t);
	} while ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 < ms);
}

static void *busy(void *arg)
{
	busy_for((long)(intptr_t)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t t;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (argc > 2 && strcmp(argv[1], "busy") == 0) {
		TT_CHECK(pthread_create(&t, NULL, busy, (void *)(intptr_t)atol(argv[2])));
		TT_CHECK(pthread_join(t, NULL));
		printf("done\n");
		return 0;
	}
	if (pipe(fds) != 0)
		return 1;
	TT_CHECK(pthread_create(&t, NULL, reader, NULL));
	TT_CHECK(pthread_join(t, NULL));
	return 0;
}
