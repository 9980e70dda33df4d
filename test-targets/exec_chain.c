/* SPDX-License-Identifier: MIT */
/*
 * exec_chain — one pid, three images: itself, itself again, /bin/true.
 *
 *   exec_chain            image 0: takes lock_a then lock_b, execs itself
 *                         with "second"
 *   exec_chain second     image 1: takes lock_b then lock_a, execs /bin/true
 *   exec_chain stop       takes lock_a then lock_b and exits 0 (no exec)
 *
 * The session must hold <pid>.0.seg and <pid>.1.seg in state execed and
 * <pid>.2.seg (/bin/true) exited 0.  The a→b of image 0 and the b→a of image
 * 1 are not a cycle: an exec replaces every lock, so no finding.
 * Prints "pid P" and "image N" in each of its own images.
 */
#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

static void take(pthread_mutex_t *first, pthread_mutex_t *second)
{
	TT_CHECK(pthread_mutex_lock(first));
	TT_CHECK(pthread_mutex_lock(second));
	TT_CHECK(pthread_mutex_unlock(second));
	TT_CHECK(pthread_mutex_unlock(first));
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "first";
	int second = strcmp(mode, "second") == 0;
	printf("pid %d\nimage %d\n", (int)getpid(), second ? 1 : 0);
	fflush(stdout);
	if (second) {
		take(&lock_b, &lock_a);
		execl("/bin/true", "true", (char *)NULL);
		perror("execl /bin/true");
		return 2;
	}
	take(&lock_a, &lock_b);
	if (strcmp(mode, "stop") == 0)
		return 0;
	execl("/proc/self/exe", argv[0], "second", (char *)NULL);
	perror("execl /proc/self/exe");
	return 2;
}
