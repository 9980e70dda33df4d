/* SPDX-License-Identifier: MIT */
/*
 * consistent_order — many threads, one lock order: nothing to report.
 *
 * Eight threads run concurrently, each many times taking lock_a then lock_b.
 * Every one of them also takes lock_b and then only *tries* lock_a: a trylock
 * cannot block, so by lockdep's rule it adds no edge lock_b→lock_a and there
 * is no cycle.  heisen must report no finding.  `consistent_order blocking`
 * replaces the trylock by a blocking lock: that is a real inversion (and may
 * actually deadlock, so it is run with one thread): the positive twin.
 * Prints "pid P", "threads N", "trylock_ok K" (how many trylocks succeeded).
 */
#include "tt.h"

#define ROUNDS 2000

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

static int blocking;
static long counter, trylock_ok;

__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	counter++;
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void take_b_then_try_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	int rc = blocking ? pthread_mutex_lock(&lock_a) : pthread_mutex_trylock(&lock_a);
	if (rc == 0) {
		trylock_ok++; /* under lock_b */
		TT_CHECK(pthread_mutex_unlock(&lock_a));
	} else if (rc != EBUSY) {
		fprintf(stderr, "trylock: %s\n", strerror(rc));
		abort();
	}
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static void *worker(void *arg)
{
	(void)arg;
	for (int i = 0; i < ROUNDS; i++) {
		take_a_then_b();
		take_b_then_try_a();
	}
	return NULL;
}

int main(int argc, char **argv)
{
	blocking = argc > 1 && strcmp(argv[1], "blocking") == 0;
	int n = blocking ? 1 : 8;
	pthread_t t[8];
	printf("pid %d\nthreads %d\n", (int)getpid(), n);
	for (int i = 0; i < n; i++)
		TT_CHECK(pthread_create(&t[i], NULL, worker, NULL));
	for (int i = 0; i < n; i++)
		TT_CHECK(pthread_join(t[i], NULL));
	printf("trylock_ok %ld\n", trylock_ok);
	if (counter != (long)n * ROUNDS) {
		fprintf(stderr, "counter %ld, expected %ld\n", counter, (long)n * ROUNDS);
		return 1;
	}
	printf("done\n");
	return 0;
}
