/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_start.c — what a process start costs, in pieces: N children,
 * each waited for, then the children's CPU time (user + system) and minor
 * page faults per child from getrusage(RUSAGE_CHILDREN).  The faults are
 * the kernel's count, which includes the pages MADV_POPULATE_WRITE and
 * fallocate give store to (perf's page-faults event does not count those).
 *
 *   bench_start N forkexec   fork + execve("/bin/true") N times: run it under
 *                            the preload (LD_PRELOAD=... bench_start ...):
 *                            the fork child's segment and the image's, both
 *   bench_start N fork       fork + _exit(0): the fork child's part alone
 *                            (run under the preload)
 *   bench_start N image LIB  posix_spawn("/bin/true") with LD_PRELOAD=LIB
 *                            and this process's HEISEN_* variables only (run
 *                            it without the preload): the image's part alone;
 *                            LIB "" for native
 *
 * Prints "MODE: X ms cpu/child  Y minflt/child".  How to run it and the
 * results: bench/README.md, "Process start: lazily committed indexes".
 */
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

int main(int argc, char **argv)
{
	char pre[4096], *env[16], *av[] = {"/bin/true", NULL};
	struct rusage ru;
	int n, ne = 0;
	const char *mode;

	if (argc < 3 || (n = atoi(argv[1])) <= 0 ||
	    (strcmp(argv[2], "forkexec") && strcmp(argv[2], "fork") && strcmp(argv[2], "image"))) {
		fprintf(stderr, "usage: bench_start N forkexec|fork|image [LIB]\n");
		return 2;
	}
	mode = argv[2];
	if (!strcmp(mode, "image")) {
		snprintf(pre, sizeof pre, "LD_PRELOAD=%s", argc > 3 ? argv[3] : "");
		env[ne++] = pre;
		for (char **e = environ; *e && ne < 15; e++)
			if (!strncmp(*e, "HEISEN_", 7))
				env[ne++] = *e;
	}
	env[ne] = NULL;
	for (int i = 0; i < n; i++) {
		pid_t p;
		int st;
		if (!strcmp(mode, "image")) {
			if (posix_spawn(&p, "/bin/true", NULL, NULL, av, env) != 0) {
				perror("posix_spawn");
				return 1;
			}
		} else {
			p = fork();
			if (p < 0) {
				perror("fork");
				return 1;
			}
			if (p == 0) {
				if (!strcmp(mode, "fork"))
					_exit(0);
				execve("/bin/true", av, environ);
				_exit(127);
			}
		}
		if (waitpid(p, &st, 0) != p)
			return 1;
	}
	getrusage(RUSAGE_CHILDREN, &ru);
	printf("%s: %.3f ms cpu/child  %.1f minflt/child\n", mode,
	       (ru.ru_utime.tv_sec * 1e3 + ru.ru_utime.tv_usec / 1e3 + ru.ru_stime.tv_sec * 1e3 +
		ru.ru_stime.tv_usec / 1e3) / n,
	       (double)ru.ru_minflt / n);
	return 0;
}
