/* SPDX-License-Identifier: MIT */
/*
 * lock_churn — locks that come and go, then a real lock-order inversion.
 *
 * A connection pool's life: each "connection" is a heap object with its own
 * mutex, created (pthread_mutex_init), used (lock, unlock), destroyed and
 * freed, N times (default 20000).  Then the ABBA of abba_sequential on two
 * long-lived mutexes, lock_a and lock_b, one thread after the other.  The
 * churn must not use up the lock table: the ABBA is predicted.
 *
 *   lock_churn [N]          the churn, then the ABBA
 *   lock_churn N live       N mutexes that all stay alive, each locked once
 *                           under lock_a (a real need for N lock slots),
 *                           then the ABBA
 *
 * Prints "pid P", "tid_ab T1", "tid_ba T2", "done".
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

struct conn {
	pthread_mutex_t mu;
	long queries;
};

__attribute__((noinline)) struct conn *conn_open(void)
{
	struct conn *c = calloc(1, sizeof *c);
	if (!c)
		abort();
	TT_CHECK(pthread_mutex_init(&c->mu, NULL));
	return c;
}

__attribute__((noinline)) void conn_query(struct conn *c)
{
	TT_CHECK(pthread_mutex_lock(&c->mu));
	c->queries++;
	TT_CHECK(pthread_mutex_unlock(&c->mu));
}

__attribute__((noinline)) void conn_close(struct conn *c)
{
	TT_CHECK(pthread_mutex_destroy(&c->mu));
	free(c);
}

__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void take_b_then_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static void *thread_ab(void *arg)
{
	tt_say_tid("tid_ab");
	take_a_then_b();
	return arg;
}

static void *thread_ba(void *arg)
{
	tt_say_tid("tid_ba");
	take_b_then_a();
	return arg;
}

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 20000;
	int live = argc > 2 && strcmp(argv[2], "live") == 0;
	struct conn **all = live ? calloc((size_t)n, sizeof *all) : NULL;
	printf("pid %d\n", (int)getpid());
	for (long i = 0; i < n; i++) {
		struct conn *c = conn_open();
		if (live) {
			TT_CHECK(pthread_mutex_lock(&lock_a));
			conn_query(c);
			TT_CHECK(pthread_mutex_unlock(&lock_a));
			all[i] = c;
		} else {
			conn_query(c);
			conn_close(c);
		}
	}
	tt_run_thread(thread_ab, NULL);
	tt_run_thread(thread_ba, NULL);
	for (long i = 0; live && i < n; i++)
		conn_close(all[i]);
	free(all);
	printf("done\n");
	return 0;
}
