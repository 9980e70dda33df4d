/* SPDX-License-Identifier: MIT */
/*
 * racy_pair.c — two bugs that show only when two threads overlap, for
 * measuring what heisen-run --chaos does to their failure rate
 * (bench/chaos_rates.py, bench/README.md "Chaos schedules").
 *
 *   racy_pair lazy-init [SPIN]   a check-then-act race: two threads start
 *                                one after the other and both call
 *                                get_cache(), which creates the cache when
 *                                it sees none; when both see none, two
 *                                caches are registered and the program
 *                                aborts ("two caches")
 *   racy_pair abba [SPIN]        the first thread takes config then stats,
 *                                the second stats then config: a deadlock
 *                                only when the second starts while the
 *                                first holds config alone
 *
 * SPIN: iterations of work inside the window (default 0).  Natively, the
 * second thread starts tens of microseconds after the first and the window
 * is a few hundred nanoseconds wide: about one run in a hundred fails.
 * Exit 0 when it did not fail; abort (134) for two caches; a hang for the
 * deadlock (run it with a timeout).
 */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cache {
	char name[32];
};

static long spin;
static volatile long sink;
static struct cache *cache;
static pthread_mutex_t registry_mu = PTHREAD_MUTEX_INITIALIZER;
static int registered;
static pthread_mutex_t config = PTHREAD_MUTEX_INITIALIZER, stats = PTHREAD_MUTEX_INITIALIZER;

static void work(long n)
{
	for (long i = 0; i < n; i++)
		sink += i;
}

static struct cache *get_cache(void)
{
	if (!cache) { /* check ... */
		struct cache *c = malloc(sizeof *c);
		strcpy(c->name, "model-cache");
		work(spin);
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
	return get_cache();
}

static void *abba_first(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&config);
	work(spin);
	pthread_mutex_lock(&stats);
	pthread_mutex_unlock(&stats);
	pthread_mutex_unlock(&config);
	return NULL;
}

static void *abba_second(void *arg)
{
	(void)arg;
	pthread_mutex_lock(&stats);
	pthread_mutex_lock(&config);
	pthread_mutex_unlock(&config);
	pthread_mutex_unlock(&stats);
	return NULL;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	int abba = argc > 1 && strcmp(argv[1], "abba") == 0;
	spin = argc > 2 ? atol(argv[2]) : 0;
	pthread_create(&a, NULL, abba ? abba_first : lazy_worker, NULL);
	pthread_create(&b, NULL, abba ? abba_second : lazy_worker, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	if (!abba && registered > 1) {
		fprintf(stderr, "two caches\n");
		abort();
	}
	return 0;
}
