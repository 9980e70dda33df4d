/* SPDX-License-Identifier: MIT */
/*
 * errcheck_foreign_unlock — an error-checking mutex unlocked by a thread that
 * does not own it, then an ABBA lock-order inversion through it.
 *
 * A dispatcher thread takes the request lock (lock_a, PTHREAD_MUTEX_ERRORCHECK)
 * and hands the request to a worker thread whose completion callback wrongly
 * unlocks lock_a: the error-checking mutex refuses (EPERM) and the dispatcher
 * still holds it.  Still holding it, the dispatcher takes lock_b (lock_a ->
 * lock_b).  Later another thread takes lock_b then lock_a.  This run cannot
 * deadlock, but one where the two overlap can: heisen must predict it
 * (potential-deadlock naming lock_a and lock_b, with take_a_then_b and
 * take_b_then_a in the stacks) — the refused unlock released nothing.
 * Prints "pid P", "tid_ab T1", "tid_ba T2", "foreign unlock refused", "done".
 */
#include <errno.h>

#include "tt.h"

pthread_mutex_t lock_a;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

/* The worker's completion callback: releases the request lock it never took. */
__attribute__((noinline)) void complete_request(void)
{
	int rc = pthread_mutex_unlock(&lock_a);
	if (rc != EPERM) {
		fprintf(stderr, "foreign unlock returned %d, not EPERM\n", rc);
		exit(1);
	}
	printf("foreign unlock refused\n");
	fflush(stdout);
}

static void *worker(void *arg)
{
	(void)arg;
	complete_request();
	return NULL;
}

__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	tt_run_thread(worker, NULL); /* the request handed to a worker, and done */
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
	TT_CHECK(pthread_mutexattr_settype(&attr, PTHREAD_MUTEX_ERRORCHECK));
	TT_CHECK(pthread_mutex_init(&lock_a, &attr));
	tt_run_thread(thread_ab, NULL);
	tt_run_thread(thread_ba, NULL);
	printf("done\n");
	return 0;
}
