/* SPDX-License-Identifier: MIT */
/*
 * heap_alloc_loop — an allocation-bound loop, a churning server's
 * small-object traffic as fast as it goes: N blocks of SIZE bytes (default
 * 64) allocated, written and freed one after the other in one thread.
 * Prints "pid P", then "done N" and exits 0.
 *
 * Usage: heap_alloc_loop N [SIZE]
 */
#include "tt.h"

int main(int argc, char **argv)
{
	long n = argc > 1 ? atol(argv[1]) : 0;
	size_t size = argc > 2 ? (size_t)atol(argv[2]) : 64;
	if (n <= 0 || size == 0) {
		fprintf(stderr, "usage: heap_alloc_loop N [SIZE]\n");
		return 2;
	}
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	for (long i = 0; i < n; i++) {
		char *p = malloc(size);
		if (!p)
			return 1;
		p[0] = (char)i;
		__asm__ volatile("" : : "r"(p) : "memory"); /* the block escapes: the pair stays */
		free(p);
	}
	printf("done %ld\n", n);
	return 0;
}
