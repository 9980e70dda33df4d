/* SPDX-License-Identifier: MIT */
/*
 * stray_write — a program whose stray memset lands on heisen's own shared
 * memory: the recorder's lock-order edge index, which no correct shim can
 * fill (it is twice the edge table).  The recorder must notice the state it
 * cannot be in, go quiet (stop recording, mark the segment suspect, say so
 * once on stderr) and leave the program to finish as it would have.
 *
 *   stray_write          take lock_a then lock_b, write over the edge
 *                        index, take lock_c then lock_d (a new edge: its
 *                        probe runs out), then exit 0.
 *   stray_write clean    the same without the stray write: nothing to say.
 *   stray_write term     as the first, then ends by SIGTERM (docker stop's
 *                        signal) instead of exit: the end is still written.
 *
 * The segment is found the way a stray pointer would find it: it is mapped
 * in this process (/proc/self/maps: a shared writable mapping that starts
 * with the segment magic).  Prints
 * "pid P", "wrote N" (bytes written over) and "done".
 */
#include "tt.h"

#include <signal.h>

#include <heisen/format.h>

static pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER, lock_b = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t lock_c = PTHREAD_MUTEX_INITIALIZER, lock_d = PTHREAD_MUTEX_INITIALIZER;

static void take_in_order(pthread_mutex_t *first, pthread_mutex_t *second)
{
	TT_CHECK(pthread_mutex_lock(first));
	TT_CHECK(pthread_mutex_lock(second));
	TT_CHECK(pthread_mutex_unlock(second));
	TT_CHECK(pthread_mutex_unlock(first));
}

/* The start of the mapping of this process's segment at file offset 0, or NULL. */
static unsigned char *segment_mapping(void)
{
	char line[4096];
	FILE *f = fopen("/proc/self/maps", "re");
	unsigned char *base = NULL;
	if (!f)
		return NULL;
	while (!base && fgets(line, sizeof line, f)) {
		unsigned long lo, hi, off;
		char perms[8];
		if (sscanf(line, "%lx-%lx %7s %lx", &lo, &hi, perms, &off) == 4 && strcmp(perms, "rw-s") == 0 &&
		    off == 0 && hi - lo >= sizeof(struct hs_header) && memcmp((void *)lo, HS_MAGIC, HS_MAGIC_LEN) == 0)
			base = (unsigned char *)lo;
	}
	fclose(f);
	return base;
}

__attribute__((noinline)) static size_t stray_memset(void)
{
	unsigned char *base = segment_mapping();
	if (!base)
		return 0;
	const struct hs_header *h = (const struct hs_header *)base;
	const struct hs_table *idx = &h->tables[HS_T_EDGE_INDEX];
	size_t len = (size_t)idx->capacity * idx->entry_size;
	memset(base + idx->offset, 0xa5, len);
	return len;
}

int main(int argc, char **argv)
{
	int clean = argc > 1 && strcmp(argv[1], "clean") == 0, term = argc > 1 && strcmp(argv[1], "term") == 0;
	printf("pid %d\n", (int)getpid());
	take_in_order(&lock_a, &lock_b);
	if (!clean) {
		size_t n = stray_memset();
		printf("wrote %zu\n", n);
		if (!n)
			return 1;
	}
	fflush(stdout);
	take_in_order(&lock_c, &lock_d);
	take_in_order(&lock_a, &lock_b);
	printf("done\n");
	fflush(stdout);
	if (term)
		raise(SIGTERM);
	return 0;
}
