/* SPDX-License-Identifier: MIT */
/*
 * abba_deadlock — a real ABBA deadlock: this program hangs forever.
 *
 * Two threads each take their first lock, meet at a barrier (so both are
 * sure to hold it), then each asks for the other's lock.  Run it under
 * `heisen-run --hang-timeout 2 --on-hang kill`: the watchdog must report a
 * deadlock naming both threads and both locks, then SIGKILL it (exit 137).
 * Prints "pid P", "tid_ab T1", "tid_ba T2", then "waiting" once both hold
 * their first lock.
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t both_hold;

__attribute__((noinline)) void hold_a_want_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	pthread_barrier_wait(&both_hold);
	TT_CHECK(pthread_mutex_lock(&lock_b)); /* never returns */
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void hold_b_want_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	pthread_barrier_wait(&both_hold);
	TT_CHECK(pthread_mutex_lock(&lock_a)); /* never returns */
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static void *thread_ab(void *arg) { (void)arg; tt_say_tid("tid_ab"); hold_a_want_b(); return NULL; }
static void *thread_ba(void *arg) { (void)arg; tt_say_tid("tid_ba"); hold_b_want_a(); return NULL; }

int main(void)
{
	pthread_t t1, t2;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	TT_CHECK(pthread_barrier_init(&both_hold, NULL, 3));
	TT_CHECK(pthread_create(&t1, NULL, thread_ab, NULL));
	TT_CHECK(pthread_create(&t2, NULL, thread_ba, NULL));
	pthread_barrier_wait(&both_hold);
	printf("waiting\n");
	fflush(stdout);
	TT_CHECK(pthread_join(t1, NULL));
	TT_CHECK(pthread_join(t2, NULL));
	printf("not reached\n");
	return 0;
}
