/* SPDX-License-Identifier: MIT */
/*
 * crash_threads — one thread crashes while others sleep in named functions.
 *
 *   crash_threads   two threads park in sleeper_one() / sleeper_two()
 *                   (nanosleep), then main dereferences NULL in
 *                   crash_now(): SIGSEGV.
 *   crash_threads own-signal
 *                   install a handler for SIGRTMAX-3 (heisen's snapshot
 *                   signal), print "ready", and count the signals that
 *                   arrive (sent with kill by the test) for 3 seconds;
 *                   prints "own N" and exits 0.
 *
 * The crash finding must carry the other threads' stacks (their snapshots
 * taken at the crash); the program's own use of the snapshot signal must
 * still reach its own handler.  Prints "pid P", "tid_crash T",
 * "tid_one T", "tid_two T".
 */
#include "tt.h"

#include <signal.h>
#include <time.h>

static pthread_barrier_t parked;
static volatile sig_atomic_t own;

__attribute__((noinline)) void sleeper_one(void)
{
	pthread_barrier_wait(&parked);
	for (;;)
		sleep(10);
}

__attribute__((noinline)) void sleeper_two(void)
{
	pthread_barrier_wait(&parked);
	for (;;)
		sleep(10);
}

static void *one(void *arg) { (void)arg; tt_say_tid("tid_one"); sleeper_one(); return NULL; }
static void *two(void *arg) { (void)arg; tt_say_tid("tid_two"); sleeper_two(); return NULL; }

__attribute__((noinline)) void crash_now(int *volatile p)
{
	*p = 42;
}

static void on_own(int sig)
{
	(void)sig;
	own++;
}

int main(int argc, char **argv)
{
	pthread_t a, b;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (argc > 1 && strcmp(argv[1], "own-signal") == 0) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = on_own;
		sigemptyset(&sa.sa_mask);
		if (sigaction(SIGRTMAX - 3, &sa, NULL) != 0)
			return 1;
		printf("ready\n");
		fflush(stdout);
		struct timespec ts = {3, 0};
		while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
			;
		printf("own %d\n", (int)own);
		return 0;
	}
	TT_CHECK(pthread_barrier_init(&parked, NULL, 3));
	TT_CHECK(pthread_create(&a, NULL, one, NULL));
	TT_CHECK(pthread_create(&b, NULL, two, NULL));
	pthread_barrier_wait(&parked);
	tt_say_tid("tid_crash");
	usleep(100000); /* let both reach sleep() */
	crash_now(NULL);
	return 0;
}
