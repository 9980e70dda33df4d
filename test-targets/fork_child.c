/* SPDX-License-Identifier: MIT */
/*
 * fork_child — a lock-order inversion that happens only in a forked child.
 *
 * The parent takes lock_a then lock_b (one consistent order), forks, and
 * waits.  The child inherits copies of the locks, takes lock_a then lock_b in
 * one thread and, after it exits, lock_b then lock_a in another, then exits
 * 0.  The child must have a segment of its own (ppid = the parent) holding
 * the potential-deadlock; the parent must have none: its a→b edge and the
 * child's b→a edge concern different copies of the locks, in different
 * processes, and can never deadlock each other.
 * Prints "pid P" (parent), "child C", "child_status S".
 */
#include "tt.h"

#include <sys/wait.h>

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void child_take_b_then_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static void *thread_ab(void *arg) { (void)arg; take_a_then_b(); return NULL; }
static void *thread_ba(void *arg) { (void)arg; child_take_b_then_a(); return NULL; }

int main(void)
{
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	take_a_then_b();

	pid_t child = fork();
	if (child < 0) {
		perror("fork");
		return 2;
	}
	if (child == 0) {
		tt_run_thread(thread_ab, NULL);
		tt_run_thread(thread_ba, NULL);
		exit(0);
	}
	printf("child %d\n", (int)child);
	int status;
	if (waitpid(child, &status, 0) != child) {
		perror("waitpid");
		return 2;
	}
	printf("child_status %d\n", status);
	take_a_then_b(); /* the parent goes on in its one order */
	printf("done\n");
	return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : 1;
}
