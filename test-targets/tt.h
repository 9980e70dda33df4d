/* SPDX-License-Identifier: MIT */
/*
 * tt.h — the few helpers every C test target shares.
 *
 * Test targets are small programs that reproduce one bug (or one correct
 * pattern that must not be reported) on demand; tests/ runs them under
 * libheisen.so and asserts on `heisen-dump --json`.  Each target prints the
 * facts a test needs to check the report against (its pid, the tid of each
 * worker thread) as "key value" lines on stdout, so the tests never guess.
 * Design: docs/design.md; what the tests expect: docs/interfaces.md.
 */
#ifndef HEISEN_TT_H
#define HEISEN_TT_H

#include <errno.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Die loudly when a pthread call that cannot fail in a correct target fails. */
#define TT_CHECK(call)                                                                  \
	do {                                                                            \
		int tt_rc_ = (call);                                                    \
		if (tt_rc_ != 0) {                                                      \
			fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,   \
				strerror(tt_rc_));                                      \
			abort();                                                        \
		}                                                                       \
	} while (0)

static inline int tt_gettid(void)
{
	return (int)syscall(SYS_gettid);
}

/* Print "label tid" for the calling thread, unbuffered enough for a crash. */
static inline void tt_say_tid(const char *label)
{
	printf("%s %d\n", label, tt_gettid());
	fflush(stdout);
}

/* Run fn(arg) in a new thread and wait for it: threads one after the other. */
static inline void tt_run_thread(void *(*fn)(void *), void *arg)
{
	pthread_t t;
	TT_CHECK(pthread_create(&t, NULL, fn, arg));
	TT_CHECK(pthread_join(t, NULL));
}

/*
 * A bystander: a second thread that only waits, so the process has threads
 * (glibc's single-threaded shortcuts off, the fd checker's rules for a
 * threaded process on) until tt_bystander_stop() lets it finish and joins
 * it.  Its semaphore starts at 0: a counter, never a lock node.
 */
struct tt_bystander {
	pthread_t thread;
	sem_t stop;
};

static inline void *tt_bystander_wait(void *arg)
{
	sem_wait(&((struct tt_bystander *)arg)->stop);
	return NULL;
}

static inline void tt_bystander_start(struct tt_bystander *b)
{
	sem_init(&b->stop, 0, 0);
	TT_CHECK(pthread_create(&b->thread, NULL, tt_bystander_wait, b));
}

static inline void tt_bystander_stop(struct tt_bystander *b)
{
	sem_post(&b->stop);
	TT_CHECK(pthread_join(b->thread, NULL));
}

#endif /* HEISEN_TT_H */
