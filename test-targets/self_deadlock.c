/* SPDX-License-Identifier: MIT */
/*
 * self_deadlock — a thread relocks a non-recursive mutex it already holds.
 *
 *   self_deadlock [errorcheck]  relock_held_mutex() relocks lock_e, an
 *                               ERRORCHECK mutex: glibc answers EDEADLK, the
 *                               program goes on and exits 0.
 *   self_deadlock normal        the same on lock_n, a default mutex: the
 *                               thread hangs forever (run it under heisen-run
 *                               with --on-hang kill).
 *   self_deadlock clean         the negative twin: lock_e taken and released
 *                               twice, and a *trylock* of held lock_n (EBUSY,
 *                               cannot block): no finding.
 *
 * heisen must report self-deadlock for the first two (before the relock, so
 * even the hanging run is explained) and nothing for the third, and must not
 * change what the real call returns.  Prints "pid P", "tid T", "relock R"
 * (the relock's result as an errno name).
 */
#include "tt.h"

pthread_mutex_t lock_e;
pthread_mutex_t lock_n = PTHREAD_MUTEX_INITIALIZER;

static const char *errname(int rc)
{
	switch (rc) {
	case 0: return "0";
	case EDEADLK: return "EDEADLK";
	case EBUSY: return "EBUSY";
	default: return strerror(rc);
	}
}

__attribute__((noinline)) int relock_held_mutex(pthread_mutex_t *m)
{
	TT_CHECK(pthread_mutex_lock(m));
	int rc = pthread_mutex_lock(m);
	printf("relock %s\n", errname(rc));
	fflush(stdout);
	if (rc == 0)
		TT_CHECK(pthread_mutex_unlock(m));
	TT_CHECK(pthread_mutex_unlock(m));
	return rc;
}

__attribute__((noinline)) int lock_correctly(void)
{
	for (int i = 0; i < 2; i++) {
		TT_CHECK(pthread_mutex_lock(&lock_e));
		TT_CHECK(pthread_mutex_unlock(&lock_e));
	}
	TT_CHECK(pthread_mutex_lock(&lock_n));
	int rc = pthread_mutex_trylock(&lock_n);
	printf("relock %s\n", errname(rc));
	if (rc == 0)
		TT_CHECK(pthread_mutex_unlock(&lock_n));
	TT_CHECK(pthread_mutex_unlock(&lock_n));
	return rc;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "errorcheck";
	pthread_mutexattr_t a;
	TT_CHECK(pthread_mutexattr_init(&a));
	TT_CHECK(pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ERRORCHECK));
	TT_CHECK(pthread_mutex_init(&lock_e, &a));
	TT_CHECK(pthread_mutexattr_destroy(&a));
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid");

	int rc;
	if (strcmp(mode, "errorcheck") == 0)
		rc = relock_held_mutex(&lock_e);
	else if (strcmp(mode, "normal") == 0)
		rc = relock_held_mutex(&lock_n); /* never returns */
	else if (strcmp(mode, "clean") == 0)
		rc = lock_correctly();
	else {
		fprintf(stderr, "usage: %s [errorcheck|normal|clean]\n", argv[0]);
		return 2;
	}
	(void)rc;
	printf("done\n");
	return 0;
}
