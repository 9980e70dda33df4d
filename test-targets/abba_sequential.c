/* SPDX-License-Identifier: MIT */
/*
 * abba_sequential — the classic ABBA lock-order inversion that never hangs.
 *
 * Thread 1 takes lock_a then lock_b and exits; only then does thread 2 take
 * lock_b then lock_a.  This run cannot deadlock, but a run where the two
 * overlap can: heisen must predict it (potential-deadlock naming lock_a and
 * lock_b, with take_a_then_b and take_b_then_a in the stacks).
 * Prints "pid P", "tid_ab T1", "tid_ba T2".
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

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
	printf("pid %d\n", (int)getpid());
	tt_run_thread(thread_ab, NULL);
	tt_run_thread(thread_ba, NULL);
	printf("done\n");
	return 0;
}
