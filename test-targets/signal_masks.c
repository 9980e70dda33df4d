/* SPDX-License-Identifier: MIT */
/*
 * A program that keeps a signal blocked, handles another, and allocates from
 * many call sites it never used before (tests/test_unwind_masks.py): every
 * new call site makes heisen unwind once.  Meanwhile a second thread sends
 * SIGUSR1 to the main thread, waiting for each to be handled before the
 * next.  At the end the program checks its own mask (SIGUSR2 still blocked
 * and pending, SIGUSR1 not blocked) and sigprocmask's own errors, and prints
 * what it saw: the output is the same with and without heisen.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define SIGNALS 200

static volatile sig_atomic_t handled;
static pthread_t main_thread;
static volatile int allocating = 1;

static void on_usr1(int sig)
{
	(void)sig;
	handled++;
}

/* SITES distinct call sites of malloc, one function each */
#define SITE(n) \
	static __attribute__((noinline)) void *site_##n(size_t k) { return malloc(k + n); }
#define S10(p) SITE(p##0) SITE(p##1) SITE(p##2) SITE(p##3) SITE(p##4) SITE(p##5) SITE(p##6) SITE(p##7) SITE(p##8) SITE(p##9)
#define P10(p) site_##p##0, site_##p##1, site_##p##2, site_##p##3, site_##p##4, site_##p##5, site_##p##6, site_##p##7, site_##p##8, site_##p##9,
S10(1) S10(2) S10(3) S10(4) S10(5) S10(6) S10(7) S10(8) S10(9) S10(10)
S10(11) S10(12) S10(13) S10(14) S10(15) S10(16) S10(17) S10(18) S10(19) S10(20)
static void *(*const sites[])(size_t) = {P10(1) P10(2) P10(3) P10(4) P10(5) P10(6) P10(7) P10(8) P10(9) P10(10)
					 P10(11) P10(12) P10(13) P10(14) P10(15) P10(16) P10(17) P10(18) P10(19)
					 P10(20)};
#define SITES (sizeof sites / sizeof sites[0])

static void *sender(void *arg)
{
	(void)arg;
	for (int i = 0; i < SIGNALS; i++) {
		struct timespec t0, now;
		pthread_kill(main_thread, SIGUSR1);
		clock_gettime(CLOCK_MONOTONIC, &t0);
		while (handled <= i) {
			sched_yield();
			clock_gettime(CLOCK_MONOTONIC, &now);
			if (now.tv_sec - t0.tv_sec > 20) {
				printf("signal %d not handled in 20 s\n", i);
				return NULL;
			}
		}
	}
	allocating = 0;
	return NULL;
}

int main(void)
{
	struct sigaction sa;
	sigset_t usr2, cur, pend, s;
	pthread_t th;
	unsigned long rounds = 0;

	memset(&sa, 0, sizeof sa);
	sa.sa_handler = on_usr1;
	sigaction(SIGUSR1, &sa, NULL);
	sigemptyset(&usr2);
	sigaddset(&usr2, SIGUSR2);
	if (sigprocmask(SIG_BLOCK, &usr2, NULL) != 0)
		return 2;
	raise(SIGUSR2); /* blocked: stays pending */
	main_thread = pthread_self();
	pthread_create(&th, NULL, sender, NULL);
	/* the first round reaches every call site for the first time */
	do {
		for (size_t i = 0; i < SITES; i++)
			free(sites[i](i));
		rounds++;
	} while (allocating && rounds < 100000000ul);
	pthread_join(th, NULL);

	sigprocmask(SIG_BLOCK, NULL, &cur);
	sigpending(&pend);
	printf("sites %zu\n", SITES);
	printf("handled %d\n", (int)handled);
	printf("usr2_blocked %d\n", sigismember(&cur, SIGUSR2));
	printf("usr1_blocked %d\n", sigismember(&cur, SIGUSR1));
	printf("usr2_pending %d\n", sigismember(&pend, SIGUSR2));
	/* the program's own calls: the old mask reported, errors as errors */
	sigemptyset(&s);
	sigaddset(&s, SIGUSR1);
	sigprocmask(SIG_BLOCK, &s, &cur);
	printf("old_had_usr1 %d\n", sigismember(&cur, SIGUSR1));
	sigprocmask(SIG_UNBLOCK, &s, &cur);
	printf("then_had_usr1 %d\n", sigismember(&cur, SIGUSR1));
	errno = 0;
	{
		int rc = sigprocmask(12345, &s, NULL), e = errno;
		printf("bad_how %d errno_einval %d\n", rc, e == EINVAL);
	}
	return 0;
}
