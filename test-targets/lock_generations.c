/* SPDX-License-Identifier: MIT */
/*
 * lock_generations — the same addresses, different locks.
 *
 *   lock_generations [destroy]  thread 1 takes lock_a then lock_b; then both
 *                               locks are destroyed and initialized again at
 *                               the same addresses; thread 2 takes lock_b then
 *                               lock_a.  The new locks never coexisted with
 *                               the old ones: no cycle, no finding.
 *   lock_generations keep       the same without destroy/init: ABBA, found.
 *   lock_generations spin       ABBA on two spin locks, spin_a and spin_b
 *                               (pthread_spin_lock), one thread after the
 *                               other: found.
 *
 * Prints "pid P", "tid_ab T1", "tid_ba T2".
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;
pthread_spinlock_t spin_a, spin_b;
static int use_spin;

__attribute__((noinline)) void take_a_then_b(void)
{
	if (use_spin) {
		TT_CHECK(pthread_spin_lock(&spin_a));
		TT_CHECK(pthread_spin_lock(&spin_b));
		TT_CHECK(pthread_spin_unlock(&spin_b));
		TT_CHECK(pthread_spin_unlock(&spin_a));
		return;
	}
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void take_b_then_a(void)
{
	if (use_spin) {
		TT_CHECK(pthread_spin_lock(&spin_b));
		TT_CHECK(pthread_spin_lock(&spin_a));
		TT_CHECK(pthread_spin_unlock(&spin_a));
		TT_CHECK(pthread_spin_unlock(&spin_b));
		return;
	}
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static void *thread_ab(void *arg) { (void)arg; tt_say_tid("tid_ab"); take_a_then_b(); return NULL; }
static void *thread_ba(void *arg) { (void)arg; tt_say_tid("tid_ba"); take_b_then_a(); return NULL; }

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "destroy";
	int destroy = strcmp(mode, "destroy") == 0;
	use_spin = strcmp(mode, "spin") == 0;
	if (!destroy && !use_spin && strcmp(mode, "keep") != 0) {
		fprintf(stderr, "usage: %s [destroy|keep|spin]\n", argv[0]);
		return 2;
	}
	TT_CHECK(pthread_spin_init(&spin_a, PTHREAD_PROCESS_PRIVATE));
	TT_CHECK(pthread_spin_init(&spin_b, PTHREAD_PROCESS_PRIVATE));
	printf("pid %d\n", (int)getpid());
	tt_run_thread(thread_ab, NULL);
	if (destroy) {
		TT_CHECK(pthread_mutex_destroy(&lock_a));
		TT_CHECK(pthread_mutex_destroy(&lock_b));
		TT_CHECK(pthread_mutex_init(&lock_a, NULL));
		TT_CHECK(pthread_mutex_init(&lock_b, NULL));
	}
	tt_run_thread(thread_ba, NULL);
	printf("done\n");
	return 0;
}
