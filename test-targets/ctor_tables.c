/* SPDX-License-Identifier: MIT */
/*
 * libctor_tables — a library in libnuma's shape (perf links libnuma): its
 * constructor builds a table before the preloaded shim's constructor has
 * run (a dependency of the program is initialised first) and its
 * destructor frees the table at exit, so to heisen the table is glibc's
 * own block (made before checking started).  The constructor's scratch
 * buffers (72 bytes: glibc chunks of 80), one of them right in front of
 * the table, are dropped at the library's first call, ctor_tables_get().
 * heap_ctor_table_neighbour.c uses it.
 */
#include <stdlib.h>

#define FILL 7 /* glibc's tcache holds 7 chunks of a size: the scratch buffer in front of the table goes to a fastbin */

static void *fill[FILL], *pin, *scratch;
static void *table;
void *ctor_scratch; /* where the scratch buffer in front of the table was (an address, never read) */

__attribute__((constructor)) static void tables_build(void)
{
	int i;
	for (i = 0; i < FILL; i++)
		fill[i] = malloc(72);
	pin = malloc(24);     /* kept: the scratch buffer's chunk merges with nothing in front */
	scratch = malloc(72); /* right in front of the table */
	table = malloc(120);
	ctor_scratch = scratch;
}

/* The table; the first call drops the constructor's scratch buffers. */
void *ctor_tables_get(void)
{
	int i;
	if (scratch) {
		for (i = 0; i < FILL; i++)
			free(fill[i]);
		free(scratch);
		scratch = NULL;
	}
	return table;
}

__attribute__((destructor)) static void tables_drop(void)
{
	free(pin);
	free(table);
}
