/* SPDX-License-Identifier: MIT */
/*
 * fd_race.c — two threads close the same fd at the same instant, again and
 * again: the kernel lets exactly one close succeed, the other fails with
 * EBADF.  heisen's records of the two closes race on one slot of the fd
 * table; each round must be exactly one double close, whichever thread
 * wins the kernel and whichever wins the record.
 *
 * Prints "pid", "tid_racer_0", "tid_racer_1", "rounds N", "ebadf N".
 */
#include <fcntl.h>

#include "tt.h"

#define ROUNDS 200

static pthread_barrier_t go, done;
static int shared_fd;
static int ebadf;

__attribute__((noinline)) static void racer_close(void)
{
	if (close(shared_fd) != 0 && errno == EBADF)
		__atomic_add_fetch(&ebadf, 1, __ATOMIC_RELAXED);
}

static void *racer(void *arg)
{
	printf("tid_racer_%d %d\n", (int)(intptr_t)arg, tt_gettid());
	fflush(stdout);
	for (int i = 0; i < ROUNDS; i++) {
		pthread_barrier_wait(&go);
		racer_close();
		pthread_barrier_wait(&done);
	}
	return NULL;
}

__attribute__((noinline)) static int open_shared(void)
{
	return open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
}

int main(void)
{
	pthread_t t[2];
	printf("pid %d\n", (int)getpid());
	pthread_barrier_init(&go, NULL, 3);
	pthread_barrier_init(&done, NULL, 3);
	for (intptr_t i = 0; i < 2; i++)
		TT_CHECK(pthread_create(&t[i], NULL, racer, (void *)i));
	for (int i = 0; i < ROUNDS; i++) {
		shared_fd = open_shared();
		if (shared_fd < 0)
			return 2;
		pthread_barrier_wait(&go);
		pthread_barrier_wait(&done);
	}
	for (int i = 0; i < 2; i++)
		TT_CHECK(pthread_join(t[i], NULL));
	printf("rounds %d\nebadf %d\n", ROUNDS, ebadf);
	return 0;
}
