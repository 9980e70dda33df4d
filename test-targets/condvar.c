/* SPDX-License-Identifier: MIT */
/*
 * condvar — producer/consumer on condition variables: nothing to report.
 *
 * pthread_cond_wait and pthread_cond_timedwait release their mutex while
 * they wait and retake it before returning.  Both threads wait on condvars
 * with lock_q; the producer's bookkeeping takes lock_stats then lock_q; the
 * consumer releases lock_q and only then takes lock_stats.  If a shim forgot
 * that the wait released lock_q (or counted the retake twice), the consumer
 * would seem to hold lock_q while taking lock_stats: a false
 * lock_q→lock_stats edge closing a false cycle.  heisen must report no
 * finding.
 * Prints "pid P", "consumed N", "timeouts T".
 */
#include "tt.h"

#include <time.h>

#define ITEMS 500
#define QCAP 4

pthread_mutex_t lock_q = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_stats = PTHREAD_MUTEX_INITIALIZER;
pthread_cond_t not_empty = PTHREAD_COND_INITIALIZER;
pthread_cond_t not_full = PTHREAD_COND_INITIALIZER;

static int queue[QCAP], qlen;
static long produced, consumed, timeouts, sum, max_qlen;

__attribute__((noinline)) void produce(int item)
{
	TT_CHECK(pthread_mutex_lock(&lock_q));
	while (qlen == QCAP)
		TT_CHECK(pthread_cond_wait(&not_full, &lock_q));
	queue[qlen++] = item;
	TT_CHECK(pthread_cond_signal(&not_empty));
	TT_CHECK(pthread_mutex_unlock(&lock_q));
}

/* The producer's bookkeeping: lock_stats, then lock_q (never while waiting). */
__attribute__((noinline)) void record_produced(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_stats));
	TT_CHECK(pthread_mutex_lock(&lock_q));
	produced++;
	if (qlen > max_qlen)
		max_qlen = qlen;
	TT_CHECK(pthread_mutex_unlock(&lock_q));
	TT_CHECK(pthread_mutex_unlock(&lock_stats));
}

__attribute__((noinline)) int consume(void)
{
	int item;
	TT_CHECK(pthread_mutex_lock(&lock_q));
	while (qlen == 0) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		ts.tv_nsec += 1000 * 1000; /* 1 ms: exercise the timed wait's timeouts */
		if (ts.tv_nsec >= 1000000000L) {
			ts.tv_sec++;
			ts.tv_nsec -= 1000000000L;
		}
		int rc = pthread_cond_timedwait(&not_empty, &lock_q, &ts);
		if (rc == ETIMEDOUT)
			timeouts++;
		else
			TT_CHECK(rc);
	}
	item = queue[--qlen];
	TT_CHECK(pthread_cond_signal(&not_full));
	TT_CHECK(pthread_mutex_unlock(&lock_q));

	TT_CHECK(pthread_mutex_lock(&lock_stats));
	consumed++;
	sum += item;
	TT_CHECK(pthread_mutex_unlock(&lock_stats));
	return item;
}

static void *producer(void *arg)
{
	(void)arg;
	for (int i = 1; i <= ITEMS; i++) {
		produce(i);
		record_produced();
		if (i % 100 == 0)
			usleep(3000); /* let the consumer time out now and then */
	}
	return NULL;
}

static void *consumer(void *arg)
{
	(void)arg;
	for (int i = 0; i < ITEMS; i++)
		consume();
	return NULL;
}

int main(void)
{
	pthread_t p, c;
	printf("pid %d\n", (int)getpid());
	TT_CHECK(pthread_create(&c, NULL, consumer, NULL));
	TT_CHECK(pthread_create(&p, NULL, producer, NULL));
	TT_CHECK(pthread_join(p, NULL));
	TT_CHECK(pthread_join(c, NULL));
	printf("consumed %ld\ntimeouts %ld\n", consumed, timeouts);
	if (consumed != ITEMS || sum != (long)ITEMS * (ITEMS + 1) / 2) {
		fprintf(stderr, "consumed %ld sum %ld\n", consumed, sum);
		return 1;
	}
	printf("done\n");
	return 0;
}
