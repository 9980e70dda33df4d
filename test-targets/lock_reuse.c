/* SPDX-License-Identifier: MIT */
/*
 * lock_reuse — correct programs whose locks end while heisen saw them held,
 * and one real relock, in the shapes of Helgrind's tc04_free_lock:
 *
 *   lock_reuse reinit    a mutex locked, then initialised again with
 *                        pthread_mutex_init (its old state thrown away, as a
 *                        pool does when it recycles an object), then locked
 *                        and unlocked normally: no finding
 *   lock_reuse free      a heap mutex locked, its memory freed while locked,
 *                        the memory handed out again (malloc of the same
 *                        size, zeroed: a default mutex, no init call) as a
 *                        new mutex, locked and unlocked: no finding
 *                        (run with HEISEN_HEAP=0 for glibc's immediate reuse)
 *   lock_reuse handoff   thread 1 locks a mutex, thread 2 unlocks it (a
 *                        handoff: glibc's default mutex allows it), then
 *                        thread 1 locks and unlocks it again: no finding
 *   lock_reuse relock    an error-checking mutex initialised again, then
 *                        locked twice by one thread: a real self-deadlock
 *                        (the second lock fails with EDEADLK, no hang)
 *
 * Prints "pid P", "reused 0|1" (free), "done".
 */
#include <semaphore.h>
#include <stdint.h>

#include "tt.h"

static pthread_mutex_t mu;
static sem_t locked, unlocked;

__attribute__((noinline)) static void recycle(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_init(m, NULL));
}

static void *holder(void *arg)
{
	(void)arg;
	TT_CHECK(pthread_mutex_lock(&mu));
	sem_post(&locked);
	while (sem_wait(&unlocked) != 0)
		;
	/* the handoff released it: take it again */
	TT_CHECK(pthread_mutex_lock(&mu));
	TT_CHECK(pthread_mutex_unlock(&mu));
	return NULL;
}

static void *releaser(void *arg)
{
	(void)arg;
	while (sem_wait(&locked) != 0)
		;
	TT_CHECK(pthread_mutex_unlock(&mu));
	sem_post(&unlocked);
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "reinit";
	printf("pid %d\n", (int)getpid());
	if (strcmp(mode, "reinit") == 0) {
		TT_CHECK(pthread_mutex_init(&mu, NULL));
		TT_CHECK(pthread_mutex_lock(&mu));
		recycle(&mu);
		TT_CHECK(pthread_mutex_lock(&mu));
		TT_CHECK(pthread_mutex_unlock(&mu));
	} else if (strcmp(mode, "free") == 0) {
		pthread_mutex_t *m = malloc(sizeof *m), *n;
		uintptr_t old = (uintptr_t)m;
		TT_CHECK(pthread_mutex_init(m, NULL));
		TT_CHECK(pthread_mutex_lock(m));
		free(m);
		/* zeroed memory is a default mutex (PTHREAD_MUTEX_INITIALIZER): no init call */
		n = malloc(sizeof *n);
		memset(n, 0, sizeof *n);
		printf("reused %d\n", (uintptr_t)n == old);
		TT_CHECK(pthread_mutex_lock(n));
		TT_CHECK(pthread_mutex_unlock(n));
		free(n);
	} else if (strcmp(mode, "handoff") == 0) {
		pthread_t a, b;
		TT_CHECK(pthread_mutex_init(&mu, NULL));
		sem_init(&locked, 0, 0);
		sem_init(&unlocked, 0, 0);
		TT_CHECK(pthread_create(&a, NULL, holder, NULL));
		TT_CHECK(pthread_create(&b, NULL, releaser, NULL));
		TT_CHECK(pthread_join(a, NULL));
		TT_CHECK(pthread_join(b, NULL));
	} else if (strcmp(mode, "relock") == 0) {
		pthread_mutexattr_t at;
		TT_CHECK(pthread_mutexattr_init(&at));
		TT_CHECK(pthread_mutexattr_settype(&at, PTHREAD_MUTEX_ERRORCHECK));
		TT_CHECK(pthread_mutex_init(&mu, &at));
		TT_CHECK(pthread_mutex_lock(&mu));
		TT_CHECK(pthread_mutex_unlock(&mu));
		TT_CHECK(pthread_mutex_init(&mu, &at));
		TT_CHECK(pthread_mutex_lock(&mu));
		if (pthread_mutex_lock(&mu) != EDEADLK)
			abort();
		TT_CHECK(pthread_mutex_unlock(&mu));
	} else {
		return 2;
	}
	printf("done\n");
	return 0;
}
