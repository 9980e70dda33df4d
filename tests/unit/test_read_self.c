/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_read_self.c — the checked read of this process's own
 * memory (hs_sys.read_self, shim/sysops.c: process_vm_readv on the pid it
 * caches), which libunwind's address validation and the Python frame reader
 * use.  The cached pid must never be a parent's: in the child of a fork
 * made by glibc's fork (atfork handlers run) and of a raw clone without
 * CLONE_VM (none run, as with _Fork), a read gives the child's own bytes
 * (a value only the child wrote; the parent, alive and waiting, holds
 * another), finds a page only the child mapped, and fails with EFAULT on a
 * page only the child unmapped.  The parent's reads stay right after its
 * children have read (a child's refill never reaches it).
 */
#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "unit.h"

static volatile long marker = 1111;
static char *both;   /* mapped in the parent before the fork */

/* In the child: exit status 0 when every checked read was the child's own. */
static int child_reads(void)
{
	long v = 0;
	char *mine, c = 0;
	int bad = 0;
	marker = 2222; /* the parent keeps 1111 */
	if (hs_sys.read_self(&v, (const void *)&marker, sizeof v) != (ssize_t)sizeof v || v != 2222)
		bad |= 1;
	mine = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (mine == MAP_FAILED)
		return 8;
	mine[0] = 'k';
	if (hs_sys.read_self(&c, mine, 1) != 1 || c != 'k')
		bad |= 2;
	munmap(both, 4096); /* still mapped in the parent */
	errno = 0;
	if (hs_sys.read_self(&c, both, 1) != -1 || errno != EFAULT)
		bad |= 4;
	return bad;
}

/* Runs child_reads in a child made by how (0: fork(), 1: raw clone) and
 * returns its exit status; the parent waits, alive, meanwhile. */
static int in_child(int how)
{
	int st = -1;
	pid_t pid = how == 0 ? fork() : (pid_t)syscall(SYS_clone, (long)SIGCHLD, 0L, 0L, 0L, 0L);
	if (pid == 0)
		_exit(child_reads());
	if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

static void parent_reads(void)
{
	long v = 0;
	char c = 0;
	CHECK(hs_sys.read_self(&v, (const void *)&marker, sizeof v) == (ssize_t)sizeof v && v == 1111);
	CHECK(hs_sys.read_self(&c, both, 1) == 1 && c == 'p');
}

int main(void)
{
	both = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (both == MAP_FAILED) {
		perror("mmap");
		return 2;
	}
	both[0] = 'p';
	parent_reads(); /* the pid is cached from here on */
	for (int how = 0; how < 2; how++) {
		int st = in_child(how);
		if (st != 0)
			fprintf(stderr, "%s child: status %d (1: read the parent's value, 2: missed its own page, "
					"4: read a page it unmapped)\n", how ? "clone" : "fork", st);
		CHECK(st == 0);
		parent_reads();
	}
	/* a grandchild: the child's refilled cache is wiped again in its own child */
	{
		pid_t pid = fork();
		int st = -1;
		if (pid == 0) {
			long v = 0;
			marker = 3333;
			if (hs_sys.read_self(&v, (const void *)&marker, sizeof v) != (ssize_t)sizeof v || v != 3333)
				_exit(16);
			_exit(in_child(1) == 0 ? 0 : 32);
		}
		CHECK(pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0);
	}
	parent_reads();
	return unit_done("test_read_self");
}
