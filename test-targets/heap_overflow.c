/* SPDX-License-Identifier: MIT */
/*
 * heap_overflow — an off-by-one: a string of n characters copied with its
 * NUL into an n-byte block (the classic strlen without + 1).  The byte past
 * the end lands in heisen's tail canary and is found at the free.
 * Prints "pid P", "tid_main T", "block 0x...", then "done ok" if it survived
 * (HEISEN_ON_HEAP_ERROR=continue).
 */
#include "tt.h"

__attribute__((noinline)) static char *copy_name(const char *name)
{
	char *s = malloc(strlen(name));  /* the bug: no room for the NUL */
	strcpy(s, name);                 /* writes one byte past the end */
	return s;
}

__attribute__((noinline)) static void release_name(char *s)
{
	free(s);
}

int main(void)
{
	char *s;
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	s = copy_name("0123456789abcdef0123456789abcdef0123456789abcde"); /* 47 chars */
	printf("block %p\n", (void *)s);
	fflush(stdout);
	release_name(s);
	printf("done ok\n");
	return 0;
}
