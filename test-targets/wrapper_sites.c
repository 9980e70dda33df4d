/* SPDX-License-Identifier: MIT */
/*
 * wrapper_sites — lock-order inversions through one shared wrapper, in the
 * shape of ThreadSanitizer's deadlock_detector_stress_test Test16/Test17:
 * every acquisition goes through the non-inlined Acquire(lock), called from
 * a different function per order.  Thread fwd runs Acquire_0_then_1 then
 * Acquire_2_then_3; only after it exited does thread rev run
 * Acquire_1_then_0 then Acquire_3_then_2, so the run never hangs but two
 * ABBA cycles are predicted.  Each edge's stacks must be the stacks of the
 * call that made them: Acquire, then the right caller, then the thread.
 * Prints "pid P", "tid_fwd T1", "tid_rev T2".
 */
#include "tt.h"

pthread_mutex_t lock_0 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_2 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_3 = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) void Acquire(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_lock(m));
}

__attribute__((noinline)) void Release(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_unlock(m));
}

#define ORDER(name, x, y)                                 \
	__attribute__((noinline)) void name(void)         \
	{                                                 \
		Acquire(&x);                              \
		Acquire(&y);                              \
		Release(&y);                              \
		Release(&x);                              \
	}

ORDER(Acquire_0_then_1, lock_0, lock_1)
ORDER(Acquire_1_then_0, lock_1, lock_0)
ORDER(Acquire_2_then_3, lock_2, lock_3)
ORDER(Acquire_3_then_2, lock_3, lock_2)

static void *thread_fwd(void *arg)
{
	(void)arg;
	tt_say_tid("tid_fwd");
	Acquire_0_then_1();
	Acquire_2_then_3();
	return NULL;
}

static void *thread_rev(void *arg)
{
	(void)arg;
	tt_say_tid("tid_rev");
	Acquire_1_then_0();
	Acquire_3_then_2();
	return NULL;
}

int main(void)
{
	printf("pid %d\n", (int)getpid());
	tt_run_thread(thread_fwd, NULL);
	tt_run_thread(thread_rev, NULL);
	printf("done\n");
	return 0;
}
