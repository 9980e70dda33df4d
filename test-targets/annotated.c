/* SPDX-License-Identifier: MIT */
/*
 * annotated.c — the annotation API (include/heisen/heisen.h) and timed locks.
 *
 * Two mutexes on the heap — no symbol can name them — are named with
 * heisen_name_lock(), linked weakly so the program runs unchanged without
 * heisen.  Thread 1 takes cache then queue; later thread 2 takes queue and
 * then cache with pthread_mutex_timedlock: a timed wait can block, so it is
 * an edge like any other (lockdep's rule) and the ABBA is a potential
 * deadlock named "cache.lock" / "queue.lock".
 *
 * Mode "untimed-try": thread 2 takes cache with trylock instead → no finding.
 * Prints "named 1" when heisen took the names, "named 0" without heisen.
 */
#include <time.h>

#include "../include/heisen/heisen.h"
#include "tt.h"

extern int heisen_name_lock(const void *lock, const char *name) __attribute__((weak));

static pthread_mutex_t *cache, *queue;
static int use_trylock;

__attribute__((noinline)) static void *cache_then_queue(void *arg)
{
	tt_say_tid("tid_cache_first");
	TT_CHECK(pthread_mutex_lock(cache));
	TT_CHECK(pthread_mutex_lock(queue));
	TT_CHECK(pthread_mutex_unlock(queue));
	TT_CHECK(pthread_mutex_unlock(cache));
	return arg;
}

__attribute__((noinline)) static void *queue_then_cache_timed(void *arg)
{
	struct timespec until;
	tt_say_tid("tid_queue_first");
	TT_CHECK(pthread_mutex_lock(queue));
	if (use_trylock) {
		TT_CHECK(pthread_mutex_trylock(cache));
	} else {
		clock_gettime(CLOCK_REALTIME, &until);
		until.tv_sec += 5;
		TT_CHECK(pthread_mutex_timedlock(cache, &until));
	}
	TT_CHECK(pthread_mutex_unlock(cache));
	TT_CHECK(pthread_mutex_unlock(queue));
	return arg;
}

int main(int argc, char **argv)
{
	pthread_t t;
	int named = 0;
	use_trylock = argc > 1 && strcmp(argv[1], "untimed-try") == 0;
	cache = malloc(sizeof *cache);
	queue = malloc(sizeof *queue);
	if (!cache || !queue)
		return 2;
	TT_CHECK(pthread_mutex_init(cache, NULL));
	TT_CHECK(pthread_mutex_init(queue, NULL));
	if (heisen_name_lock)
		named = heisen_name_lock(cache, "cache.lock") == 0 && heisen_name_lock(queue, "queue.lock") == 0;
	printf("pid %d\nnamed %d\n", (int)getpid(), named);
	fflush(stdout);
	TT_CHECK(pthread_create(&t, NULL, cache_then_queue, NULL));
	TT_CHECK(pthread_join(t, NULL));
	TT_CHECK(pthread_create(&t, NULL, queue_then_cache_timed, NULL));
	TT_CHECK(pthread_join(t, NULL));
	return 0;
}
