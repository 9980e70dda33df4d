/* SPDX-License-Identifier: MIT */
/*
 * recursive_mutex — re-entering a PTHREAD_MUTEX_RECURSIVE mutex is no bug.
 *
 * Two threads (concurrently) each take lock_r, then lock_a, then re-enter
 * lock_r several levels deep while still holding lock_a.  A re-entry cannot
 * block, so it is neither a self-deadlock nor an edge lock_a→lock_r; with it
 * counted as an edge, lock_r→lock_a→lock_r would look like a cycle.  heisen
 * must report no finding.  Prints "pid P", "depth D".
 */
#include "tt.h"

#define DEPTH 5

pthread_mutex_t lock_r;
pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static long counter;

__attribute__((noinline)) void reenter(int depth)
{
	TT_CHECK(pthread_mutex_lock(&lock_r));
	counter++;
	if (depth > 1)
		reenter(depth - 1);
	TT_CHECK(pthread_mutex_unlock(&lock_r));
}

__attribute__((noinline)) void r_then_a_then_r(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_r));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	reenter(DEPTH);
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_r));
}

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < 200; i++)
		r_then_a_then_r();
	return NULL;
}

int main(void)
{
	pthread_mutexattr_t a;
	TT_CHECK(pthread_mutexattr_init(&a));
	TT_CHECK(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_RECURSIVE));
	TT_CHECK(pthread_mutex_init(&lock_r, &a));
	TT_CHECK(pthread_mutexattr_destroy(&a));
	printf("pid %d\ndepth %d\n", (int)getpid(), DEPTH);

	pthread_t t1, t2;
	TT_CHECK(pthread_create(&t1, NULL, worker, NULL));
	TT_CHECK(pthread_create(&t2, NULL, worker, NULL));
	TT_CHECK(pthread_join(t1, NULL));
	TT_CHECK(pthread_join(t2, NULL));
	/* Nothing may be left held: a trylock from this thread must succeed. */
	TT_CHECK(pthread_mutex_trylock(&lock_r));
	TT_CHECK(pthread_mutex_unlock(&lock_r));
	if (counter != 2L * 200 * DEPTH) {
		fprintf(stderr, "counter %ld\n", counter);
		return 1;
	}
	printf("done\n");
	return 0;
}
