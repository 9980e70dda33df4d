/* SPDX-License-Identifier: MIT */
/*
 * three_lock_cycle — a lock-order cycle of length three that never hangs.
 *
 * Three threads, one after the other: lock_a→lock_b, lock_b→lock_c,
 * lock_c→lock_a.  No two of them invert each other; only the whole cycle
 * can deadlock (three threads each holding one lock).  heisen must report
 * one potential-deadlock with three edges.
 * Prints "pid P", "tid_ab T", "tid_bc T", "tid_ca T".
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_c = PTHREAD_MUTEX_INITIALIZER;

static void take_in_order(pthread_mutex_t *first, pthread_mutex_t *second)
{
	TT_CHECK(pthread_mutex_lock(first));
	TT_CHECK(pthread_mutex_lock(second));
	TT_CHECK(pthread_mutex_unlock(second));
	TT_CHECK(pthread_mutex_unlock(first));
}

/* Separate functions (not one helper) so each edge's stack names its own. */
__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void take_b_then_c(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_lock(&lock_c));
	TT_CHECK(pthread_mutex_unlock(&lock_c));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

__attribute__((noinline)) void take_c_then_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_c));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_c));
}

static void *thread_ab(void *arg) { (void)arg; tt_say_tid("tid_ab"); take_a_then_b(); return NULL; }
static void *thread_bc(void *arg) { (void)arg; tt_say_tid("tid_bc"); take_b_then_c(); return NULL; }
static void *thread_ca(void *arg) { (void)arg; tt_say_tid("tid_ca"); take_c_then_a(); return NULL; }

int main(int argc, char **argv)
{
	printf("pid %d\n", (int)getpid());
	/* "chain": only a→b and b→c (no cycle), the negative twin of this target. */
	int chain = argc > 1 && strcmp(argv[1], "chain") == 0;
	tt_run_thread(thread_ab, NULL);
	tt_run_thread(thread_bc, NULL);
	if (!chain)
		tt_run_thread(thread_ca, NULL);
	else
		take_in_order(&lock_a, &lock_c); /* a→c: consistent with a→b→c */
	printf("done\n");
	return 0;
}
