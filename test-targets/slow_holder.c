/* SPDX-License-Identifier: MIT */
/*
 * slow_holder — one thread blocked a long time on a lock, with no cycle.
 *
 *   slow_holder MS   hold_for_a_while() takes lock_a and sleeps MS
 *                    milliseconds (default 3000) holding it; meanwhile
 *                    wait_for_holder() blocks in pthread_mutex_lock(&lock_a).
 *                    Then both finish and the program exits 0.
 *
 * Under a hang timeout shorter than MS the waiter is a `hang` (blocked past
 * the timeout, not part of a wait-for cycle; its lock is held by the
 * holder); with MS well under the timeout there is nothing to report.
 * Prints "pid P", "tid_holder T", "tid_waiter T", "waiting" once the waiter
 * is about to block.
 */
#include "tt.h"

#include <time.h>

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
static pthread_barrier_t holding;
static long hold_ms = 3000;

__attribute__((noinline)) void hold_for_a_while(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	pthread_barrier_wait(&holding);
	struct timespec ts = {hold_ms / 1000, (hold_ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void wait_for_holder(void)
{
	pthread_barrier_wait(&holding);
	printf("waiting\n");
	fflush(stdout);
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

static void *holder(void *arg) { (void)arg; tt_say_tid("tid_holder"); hold_for_a_while(); return NULL; }
static void *waiter(void *arg) { (void)arg; tt_say_tid("tid_waiter"); wait_for_holder(); return NULL; }

int main(int argc, char **argv)
{
	if (argc > 1)
		hold_ms = atol(argv[1]);
	pthread_t h, w;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	TT_CHECK(pthread_barrier_init(&holding, NULL, 2));
	TT_CHECK(pthread_create(&h, NULL, holder, NULL));
	TT_CHECK(pthread_create(&w, NULL, waiter, NULL));
	TT_CHECK(pthread_join(h, NULL));
	TT_CHECK(pthread_join(w, NULL));
	printf("done\n");
	return 0;
}
