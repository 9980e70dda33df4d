/* SPDX-License-Identifier: MIT */
/*
 * fork_quiet_child — a fork child that waits in pause() (nothing heisen
 * hooks) until the test ends it with a signal; the parent reaps it.  Under
 * heisen such a child has no segment of its own until its first recorded
 * event (shim/init.c, "the fork child's segment, made when first needed"):
 * a SIGTERM left at SIG_DFL is one (the child records how it died), a
 * SIGKILL leaves only the parent's fork record.  Prints "pid P", "child C",
 * then "status S" (the raw wait status) once the child is reaped.
 */
#include <signal.h>
#include <sys/wait.h>

#include "tt.h"

int main(void)
{
	pid_t child;
	int st;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	child = fork();
	if (child < 0) {
		perror("fork");
		return 1;
	}
	if (child == 0)
		for (;;)
			pause();
	printf("child %d\n", (int)child);
	fflush(stdout);
	while (waitpid(child, &st, 0) < 0)
		if (errno != EINTR) {
			perror("waitpid");
			return 1;
		}
	printf("status %d\n", st);
	return 0;
}
