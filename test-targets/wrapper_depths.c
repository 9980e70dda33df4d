/* SPDX-License-Identifier: MIT */
/*
 * wrapper_depths — one shared frame reached along different paths, for the
 * reuse of a thread's last chain of return addresses: every lock is taken
 * through Through(fn, lock), which calls fn(lock) from one call site; fn is
 * either Acquire itself or Inner, one frame deeper, which calls Acquire.
 * The functions that take each order (Take_*) are one macro, so Through's
 * frame sits at the same stack address with the same return address into
 * Through whichever order ran before it on that thread; only the frame
 * above it (which Take_* called Through) differs.  Thread fwd runs
 * Take_0_then_1 (direct) then Take_2_then_3 (through Inner: the same
 * shared frame, one frame deeper below it); only after it exited does
 * thread rev run Take_1_then_0 then Take_3_then_2, both direct (the same
 * call site at the same stack address, another caller above).  Each runs a
 * first round taking the outer locks alone, then nested: two ABBA cycles
 * predicted, each edge's stacks the stacks of the call that made them.
 * Prints "pid P", "tid_fwd T1", "tid_rev T2".
 */
#include "tt.h"

pthread_mutex_t lock_0 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_1 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_2 = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_3 = PTHREAD_MUTEX_INITIALIZER;

typedef void (*acquire_fn)(pthread_mutex_t *m);

__attribute__((noinline)) void Acquire(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_lock(m));
}

__attribute__((noinline)) void Inner(pthread_mutex_t *m)
{
	Acquire(m);
}

__attribute__((noinline)) void Through(acquire_fn fn, pthread_mutex_t *m)
{
	fn(m);
}

__attribute__((noinline)) void Release(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_unlock(m));
}

/* nest 0 takes x alone: a first round from the same call sites, so that
 * every return address of the path is known and the next read is a walk */
#define ORDER(name, fn, x, y)                             \
	__attribute__((noinline)) void name(int nest)     \
	{                                                 \
		Through(fn, &x);                          \
		if (nest) {                               \
			Through(fn, &y);                  \
			Release(&y);                      \
		}                                         \
		Release(&x);                              \
	}

ORDER(Take_0_then_1, Acquire, lock_0, lock_1)
ORDER(Take_2_then_3, Inner, lock_2, lock_3)
ORDER(Take_1_then_0, Acquire, lock_1, lock_0)
ORDER(Take_3_then_2, Acquire, lock_3, lock_2)

static void *thread_fwd(void *arg)
{
	(void)arg;
	tt_say_tid("tid_fwd");
	for (int nest = 0; nest < 2; nest++) {
		Take_0_then_1(nest);
		Take_2_then_3(nest);
	}
	return NULL;
}

static void *thread_rev(void *arg)
{
	(void)arg;
	tt_say_tid("tid_rev");
	for (int nest = 0; nest < 2; nest++) {
		Take_1_then_0(nest);
		Take_3_then_2(nest);
	}
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
