/* SPDX-License-Identifier: MIT */
/*
 * heap_fork — blocks allocated (and one freed) by the parent before a fork,
 * freed wrongly by the child: the child's report must name the parent's
 * stacks, which live in the parent's segment under the same ids.
 *
 *   block A: allocated by parent_alloc_a, freed twice by the child
 *            (child_free_a, then child_free_a_again)
 *   block B: allocated by parent_alloc_b, freed by parent_free_b before the
 *            fork (it waits in the quarantine), freed again by child_free_b
 *
 * Run with HEISEN_ON_HEAP_ERROR=continue so both are reported.  Prints
 * "pid P", "child C", "a 0x…", "b 0x…", and "done ok" from the parent.
 */
#include <sys/wait.h>

#include "tt.h"

__attribute__((noinline)) static char *parent_alloc_a(void) { return malloc(123); }
__attribute__((noinline)) static char *parent_alloc_b(void) { return malloc(77); }
__attribute__((noinline)) static void parent_free_b(char *p) { free(p); }
__attribute__((noinline)) static void child_free_a(char *p) { free(p); }
__attribute__((noinline)) static void child_free_a_again(char *p) { free(p); }
__attribute__((noinline)) static void child_free_b(char *p) { free(p); }

int main(void)
{
	char *a = parent_alloc_a(), *b = parent_alloc_b();
	pid_t child;
	int st;
	memset(a, 1, 123);
	memset(b, 2, 77);
	parent_free_b(b);
	printf("pid %d\na %p\nb %p\n", (int)getpid(), (void *)a, (void *)b);
	fflush(stdout);
	child = fork();
	if (child < 0)
		return 1;
	if (child == 0) {
		child_free_a(a);
		for (int i = 0; i < 50; i++)
			free(malloc(40 + i));
		child_free_a_again(a);
		child_free_b(b);
		_exit(0);
	}
	printf("child %d\n", (int)child);
	if (waitpid(child, &st, 0) != child || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
		return 1;
	printf("done ok\n");
	return 0;
}
