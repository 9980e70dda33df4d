/* SPDX-License-Identifier: MIT */
/*
 * heap_ctor_table_neighbour — a correct program whose freed 4-byte block
 * lies right in front of a library's table that the library's destructor
 * frees at exit (libctor_tables, in libnuma's shape: perf stat under the
 * shim).  The table was made before heisen's constructor ran, so it is
 * glibc's own block; glibc handed the 4-byte block (a 64-byte chunk) the
 * library's freed 80-byte scratch chunk whole (16 bytes too few to
 * split), so the block's bytes end 16 bytes before the table's chunk.
 * The block is freed (it waits in the quarantine) before the exit.
 * heisen must see no overflow at the table's free.
 * Prints "pid P", "block ADDR", "table ADDR", "chunk BYTES" (glibc's size
 * of the block's chunk), then "done ok" before the exit.
 */
#include "tt.h"

extern void *ctor_scratch;
void *ctor_tables_get(void);

__attribute__((noinline)) static char *make_flag(void)
{
	char *p = malloc(4);
	memcpy(p, "on\n", 4);
	return p;
}

int main(void)
{
	char *volatile big;
	char *flag;
	void *table;
	size_t chunk;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	table = ctor_tables_get(); /* the library drops its scratch buffers */
	/* a request of 1 KiB or more: glibc moves its fastbin chunks (the
	   scratch buffer in front of the table) to their small bins */
	big = malloc(2000);
	flag = make_flag(); /* a 64-byte chunk for heisen's block: glibc hands out that 80-byte one */
	chunk = ((size_t *)(void *)flag)[-3] & ~(size_t)7; /* glibc's size word (heisen's header between) */
	printf("block %p\ntable %p\nscratch %p\nchunk %zu\n", (void *)flag, table, ctor_scratch, chunk);
	fflush(stdout);
	free(flag); /* waits in heisen's quarantine, right in front of the table */
	free(big);
	puts("done ok");
	fflush(stdout);
	return 0; /* the library's destructor frees the table */
}
