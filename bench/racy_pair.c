/* SPDX-License-Identifier: MIT */
/*
 * racy_pair.c — two bugs that show only when two threads overlap, for
 * measuring what heisen-run --chaos does to their failure rate
 * (bench/chaos_rates.py, bench/README.md "Chaos schedules").
 *
 *   racy_pair lazy-init [WINDOW_US [SPREAD_US]]
 *       a check-then-act race: two request threads each allocate their
 *       scratch buffer, meet at a barrier (both ready), wait for their
 *       request to arrive (a random time in [0, SPREAD_US) µs, independent
 *       per thread), then call get_cache(),
 *       which creates the cache when it sees none: the create allocates,
 *       loads for WINDOW_US µs of wall time (a clock-bounded busy wait, as
 *       a parse would be) and registers the cache under a mutex.  When both
 *       see none, two caches are registered: abort (134), "two caches".
 *   racy_pair abba [WINDOW_US [SPREAD_US]]
 *       an ABBA deadlock: after the same random arrival, the first thread
 *       takes config, works WINDOW_US µs, then takes stats; the second
 *       takes stats then config.  It deadlocks only when the second takes
 *       stats while the first holds config alone.  main() sees both threads
 *       blocked, each holding the lock the other wants, and exits 3
 *       ("deadlock"), so that a run needs no timeout.
 *
 * Natively a run fails with probability about 2*WINDOW/SPREAD (lazy-init:
 * either request may land inside the other's window) or WINDOW/SPREAD
 * (abba): the arrivals, not the machine's load, set the rate, and
 * chaos_rates.py chooses SPREAD for about one failure in a hundred.
 * Defaults: WINDOW 20 µs, SPREAD 4000 µs (lazy-init) and 2000 µs (abba).
 * The scratch allocation is each thread's first call into a preloaded
 * library, so a tool's per-thread set-up (heisen attaches a thread to its
 * segment there) happens before the window, as in a real worker, which
 * does something before its first request.  Exit 0 when it did not fail.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* pthread_tryjoin_np */
#endif
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

struct cache {
	char name[32];
};

static long window_us = 20, spread_us;
static struct cache *cache;
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static int registered;
static pthread_mutex_t config = PTHREAD_MUTEX_INITIALIZER, stats = PTHREAD_MUTEX_INITIALIZER;
/* abba: set while a thread holds its first lock and asks for its second */
static int first_wants_stats, second_wants_config;
static pthread_barrier_t ready;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* WINDOW_US of wall time: a preemption inside it does not lengthen it much. */
static void work_window(void)
{
	uint64_t end = now_ns() + (uint64_t)window_us * 1000u;
	while (now_ns() < end)
		;
}

/*
 * Both workers are ready (the barrier: a server opens once its workers
 * are up); then the thread's request arrives a random time in
 * [0, SPREAD_US) µs later.
 */
static void arrive(void)
{
	pthread_barrier_wait(&ready);
	uint32_t r = 0;
	if (getrandom(&r, sizeof r, 0) != sizeof r)
		r = (uint32_t)now_ns();
	long us = spread_us > 0 ? (long)(r % (uint32_t)spread_us) : 0;
	struct timespec ts = {us / 1000000, (us % 1000000) * 1000};
	nanosleep(&ts, NULL);
}

static struct cache *get_cache(void)
{
	if (!cache) { /* check ... */
		struct cache *c = malloc(sizeof *c);
		strcpy(c->name, "model-cache");
		work_window();
		pthread_mutex_lock(&registry_mu);
		registered++;
		pthread_mutex_unlock(&registry_mu);
		cache = c; /* ... then act: another thread may have checked in between */
	}
	return cache;
}

static void *lazy_worker(void *arg)
{
	(void)arg;
	void *scratch = malloc(256);
	arrive();
	struct cache *c = get_cache();
	free(scratch);
	return c;
}

static void *abba_first(void *arg)
{
	(void)arg;
	void *scratch = malloc(256);
	arrive();
	pthread_mutex_lock(&config);
	work_window();
	__atomic_store_n(&first_wants_stats, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&stats);
	__atomic_store_n(&first_wants_stats, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&stats);
	pthread_mutex_unlock(&config);
	free(scratch);
	return NULL;
}

static void *abba_second(void *arg)
{
	(void)arg;
	void *scratch = malloc(256);
	arrive();
	pthread_mutex_lock(&stats);
	__atomic_store_n(&second_wants_config, 1, __ATOMIC_SEQ_CST);
	pthread_mutex_lock(&config);
	__atomic_store_n(&second_wants_config, 0, __ATOMIC_SEQ_CST);
	pthread_mutex_unlock(&config);
	pthread_mutex_unlock(&stats);
	free(scratch);
	return NULL;
}

/*
 * Each thread runs its sequence once, so a flag seen set twice 20 ms apart
 * was set all along; both set at once means the first holds config waiting
 * for stats and the second holds stats waiting for config: a deadlock.
 */
static int deadlocked(pthread_t a, pthread_t b)
{
	for (;;) {
		struct timespec ts = {0, 20 * 1000 * 1000};
		int both = __atomic_load_n(&first_wants_stats, __ATOMIC_SEQ_CST) &&
			   __atomic_load_n(&second_wants_config, __ATOMIC_SEQ_CST);
		nanosleep(&ts, NULL);
		if (both && __atomic_load_n(&first_wants_stats, __ATOMIC_SEQ_CST) &&
		    __atomic_load_n(&second_wants_config, __ATOMIC_SEQ_CST))
			return 1;
		if (pthread_tryjoin_np(a, NULL) == 0) {
			pthread_join(b, NULL);
			return 0;
		}
	}
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	int abba = argc > 1 && strcmp(argv[1], "abba") == 0;
	if (argc > 1 && !abba && strcmp(argv[1], "lazy-init") != 0) {
		fprintf(stderr, "usage: racy_pair lazy-init|abba [WINDOW_US [SPREAD_US]]\n");
		return 2;
	}
	spread_us = abba ? 2000 : 4000;
	if (argc > 2)
		window_us = atol(argv[2]);
	if (argc > 3)
		spread_us = atol(argv[3]);
	if (window_us < 0 || spread_us < 0) {
		fprintf(stderr, "racy_pair: WINDOW_US and SPREAD_US are microseconds, >= 0\n");
		return 2;
	}
	pthread_barrier_init(&ready, NULL, 2);
	pthread_create(&a, NULL, abba ? abba_first : lazy_worker, NULL);
	pthread_create(&b, NULL, abba ? abba_second : lazy_worker, NULL);
	if (abba) {
		if (deadlocked(a, b)) {
			fprintf(stderr, "deadlock\n");
			return 3;
		}
		return 0;
	}
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	if (registered > 1) {
		fprintf(stderr, "two caches\n");
		abort();
	}
	return 0;
}
