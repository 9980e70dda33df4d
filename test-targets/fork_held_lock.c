/* SPDX-License-Identifier: MIT */
/*
 * fork_held_lock — which locks a fork child holds: exactly those its forking
 * thread held at the instant of fork(), whatever the parent does next.
 *
 *   fork_held_lock lock-after N    N times: fork, then the parent at once
 *                                  takes log_lock, holds it 30 ms and
 *                                  releases it; the child takes and releases
 *                                  its own (free) copy of log_lock and exits
 *                                  0.  Correct: no finding.
 *   fork_held_lock fork-holding N  N times: the parent takes log_lock, forks
 *                                  and releases it at once; the child then
 *                                  takes its copy, which was locked at the
 *                                  fork and stays locked for ever (the
 *                                  classic logging-lock-across-fork hang).
 *                                  After 1 s the parent SIGKILLs the hung
 *                                  children and exits 0.  Every child's
 *                                  relock is a self-deadlock.
 *
 * Prints "pid P" (parent), "child C" per child, "child_status S" per reaped
 * child (lock-after), then "done".
 */
#include "tt.h"

#include <signal.h>
#include <sys/wait.h>
#include <time.h>

pthread_mutex_t log_lock = PTHREAD_MUTEX_INITIALIZER;

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

__attribute__((noinline)) void parent_logs(long hold_ms)
{
	TT_CHECK(pthread_mutex_lock(&log_lock));
	sleep_ms(hold_ms);
	TT_CHECK(pthread_mutex_unlock(&log_lock));
}

__attribute__((noinline)) void child_logs(void)
{
	TT_CHECK(pthread_mutex_lock(&log_lock));
	TT_CHECK(pthread_mutex_unlock(&log_lock));
}

__attribute__((noinline)) pid_t fork_while_logging(void)
{
	TT_CHECK(pthread_mutex_lock(&log_lock));
	pid_t pid = fork();
	if (pid != 0)
		TT_CHECK(pthread_mutex_unlock(&log_lock));
	return pid;
}

static int lock_after(int n)
{
	int bad = 0;
	for (int i = 0; i < n; i++) {
		fflush(stdout);
		pid_t c = fork();
		if (c < 0) {
			perror("fork");
			return 2;
		}
		if (c == 0) {
			child_logs();
			exit(0);
		}
		parent_logs(30);
		printf("child %d\n", (int)c);
		int status;
		if (waitpid(c, &status, 0) != c) {
			perror("waitpid");
			return 2;
		}
		printf("child_status %d\n", status);
		fflush(stdout);
		bad |= !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
	}
	return bad;
}

static int fork_holding(int n)
{
	pid_t kids[64];
	if (n > 64)
		n = 64;
	for (int i = 0; i < n; i++) {
		pid_t c = fork_while_logging();
		if (c < 0) {
			perror("fork");
			return 2;
		}
		if (c == 0) {
			child_logs(); /* hangs: the copy was locked at the fork */
			exit(0);
		}
		kids[i] = c;
		printf("child %d\n", (int)c);
		fflush(stdout);
	}
	sleep_ms(1000);
	for (int i = 0; i < n; i++) {
		int status;
		kill(kids[i], SIGKILL);
		if (waitpid(kids[i], &status, 0) != kids[i]) {
			perror("waitpid");
			return 2;
		}
	}
	return 0;
}

int main(int argc, char **argv)
{
	int n = argc > 2 ? atoi(argv[2]) : 10, rc;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (argc > 1 && strcmp(argv[1], "fork-holding") == 0)
		rc = fork_holding(n);
	else
		rc = lock_after(n);
	printf("done\n");
	return rc;
}
