/* SPDX-License-Identifier: MIT */
/*
 * heap_libc_first — the program's first heap block is made by libc
 * (strdup calls malloc), before anything else has needed a call stack,
 * and is then freed twice.  The double free's allocation stack must reach
 * main through copy_name: the hook's caller is libc, and heisen's first
 * unwind of the process is this one (libunwind is loaded there).
 * Prints "pid P", then dies of heisen's SIGABRT at the second free.
 */
#include "tt.h"

__attribute__((noinline)) static char *copy_name(const char *s)
{
	return strdup(s);
}

__attribute__((noinline)) static void release(char *p)
{
	free(p);
}

int main(void)
{
	char *volatile p = copy_name("the first block");
	release(p);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	release(p); /* the double free */
	puts("survived");
	return 0;
}
