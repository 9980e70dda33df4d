/* SPDX-License-Identifier: MIT */
/*
 * fd_range_close.c — double closes through close_range and closefrom
 * (valgrind's none/tests/fdleak and double_close_range shape): a log file
 * is closed, then a cleanup closes a range that holds its number again;
 * a second file is closed, then closefrom() from its number.  The process
 * has another thread (idle), so the number could have been reused.
 *
 * heisen: two double-close findings, the second close being the range
 * close (cleanup_range, cleanup_from), the first log_close.
 *
 * Prints "pid", "tid_main", "fd_range N", "fd_from N".
 */
#include <fcntl.h>
#include <semaphore.h>

#include "tt.h"

static sem_t done;

static void *idle(void *arg)
{
	sem_wait(&done);
	return arg;
}

__attribute__((noinline)) static int log_open(void)
{
	return open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
}

__attribute__((noinline)) static void log_close(int fd)
{
	close(fd);
}

__attribute__((noinline)) static void cleanup_range(int fd)
{
	close_range((unsigned)fd, (unsigned)fd, 0);
}

__attribute__((noinline)) static void cleanup_from(int fd)
{
	closefrom(fd);
}

int main(void)
{
	pthread_t t;
	int a, b;
	sem_init(&done, 0, 0);
	TT_CHECK(pthread_create(&t, NULL, idle, NULL));
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	a = log_open();
	b = log_open();
	printf("fd_range %d\nfd_from %d\n", a, b);
	fflush(stdout);
	log_close(a);
	cleanup_range(a);
	log_close(b);
	cleanup_from(b);
	sem_post(&done);
	TT_CHECK(pthread_join(t, NULL));
	return 0;
}
