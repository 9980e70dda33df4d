/* SPDX-License-Identifier: MIT */
/*
 * robust_owner_died — a robust mutex whose owner thread ended holding it,
 * taken over by the next thread, then an ABBA lock-order inversion through it.
 *
 * A loader thread takes the cache lock (lock_a, PTHREAD_MUTEX_ROBUST) and
 * ends without releasing it (it died mid-update).  A recovery thread, which
 * has taken and released the stats lock (lock_b) before, as a long-lived
 * thread has, and holds nothing, locks it: pthread_mutex_lock returns
 * EOWNERDEAD with the lock acquired; it marks it consistent and, still holding it, takes lock_b
 * (lock_a -> lock_b), then releases both.  Later another thread takes lock_b
 * then lock_a.  This run cannot deadlock, but one where the two overlap can:
 * heisen must predict it (potential-deadlock naming lock_a and lock_b, with
 * take_a_then_b and take_b_then_a in the stacks): the acquisition that
 * returned EOWNERDEAD holds the lock like any other.
 * Prints "pid P", "tid_ab T1", "tid_ba T2", "owner died", "done".
 */
#include <errno.h>

#include "tt.h"

pthread_mutex_t lock_a;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

/* The loader: takes the cache lock and ends holding it. */
static void *loader(void *arg)
{
	(void)arg;
	TT_CHECK(pthread_mutex_lock(&lock_a));
	return NULL;
}

/* The recovery thread's earlier work: a look at the stats, alone. */
__attribute__((noinline)) void read_stats(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

__attribute__((noinline)) void take_a_then_b(void)
{
	int rc = pthread_mutex_lock(&lock_a);
	if (rc != EOWNERDEAD) {
		fprintf(stderr, "lock of a dead owner's robust mutex returned %d, not EOWNERDEAD\n", rc);
		exit(1);
	}
	printf("owner died\n");
	fflush(stdout);
	TT_CHECK(pthread_mutex_consistent(&lock_a));
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
	(void)arg;
	tt_say_tid("tid_ab");
	read_stats();
	take_a_then_b();
	return NULL;
}

static void *thread_ba(void *arg)
{
	(void)arg;
	tt_say_tid("tid_ba");
	take_b_then_a();
	return NULL;
}

int main(void)
{
	pthread_mutexattr_t attr;
	printf("pid %d\n", (int)getpid());
	TT_CHECK(pthread_mutexattr_init(&attr));
	TT_CHECK(pthread_mutexattr_setrobust(&attr, PTHREAD_MUTEX_ROBUST));
	TT_CHECK(pthread_mutex_init(&lock_a, &attr));
	tt_run_thread(loader, NULL);
	tt_run_thread(thread_ab, NULL);
	tt_run_thread(thread_ba, NULL);
	printf("done\n");
	return 0;
}
