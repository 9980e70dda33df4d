/* SPDX-License-Identifier: MIT */
/*
 * heap_wild_free — free() of pointers into no memory at all.
 *   badfree    free((void *)0x87654321), valgrind memcheck's badfree test
 *              (free_wild_constant)
 *   unmapped   free of a 16-aligned address in a page that was mapped and
 *              unmapped again (free_unmapped_page): the address looks like
 *              a heap pointer, but there is nothing in front of it
 *   both       the two, one after the other
 * Prints "pid P", "tid_main T", "pointer 0x..." before each free, then
 * "done ok" if it survived (HEISEN_ON_HEAP_ERROR=continue).
 */
#include <sys/mman.h>

#include "tt.h"

/* The frees below are wrong on purpose. */
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

__attribute__((noinline)) static void free_wild_constant(void)
{
	void *p = (void *)0x87654321;
	printf("pointer %p\n", p);
	fflush(stdout);
	free(p);
}

__attribute__((noinline)) static void free_unmapped_page(void)
{
	char *m = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED)
		abort();
	munmap(m, 1 << 16);
	printf("pointer %p\n", (void *)(m + 4096));
	fflush(stdout);
	free(m + 4096);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "both";
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	if (strcmp(what, "badfree") == 0)
		free_wild_constant();
	else if (strcmp(what, "unmapped") == 0)
		free_unmapped_page();
	else if (strcmp(what, "both") == 0) {
		free_wild_constant();
		free_unmapped_page();
	} else {
		fprintf(stderr, "usage: heap_wild_free badfree|unmapped|both\n");
		return 2;
	}
	printf("done ok\n");
	return 0;
}
