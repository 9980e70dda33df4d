/* SPDX-License-Identifier: MIT */
/*
 * guard_faults — one memory-access bug, chosen by argv[1], on blocks from
 * malloc; under heisen with HEISEN_GUARD_RATE=1 (every allocation sampled)
 * the blocks sit in guard pages and the access faults:
 *   uaf-read    a 40-byte record is freed, then a field 8 bytes in is read
 *               (and printed, "read V", when the program goes on)
 *   uaf-write   the same, a field 16 bytes in is written
 *   overflow    one byte written just past a 32-byte buffer
 *   underflow   the 8 bytes just before a 32-byte buffer read (a length
 *               header looked for in front of it)
 *   double-free a 40-byte record freed twice
 *   interior    a 40-byte record freed through a pointer 8 bytes into it
 *   slack       one byte written just past a 40-byte record, then freed:
 *               the byte lands in the block's 16-byte alignment slack
 *               (against the end of its page) or after it (at its start),
 *               no guard page is touched, so only a check at the free sees it
 * Sampled blocks alternate between the end of their page and its start,
 * so overflow and underflow allocate two buffers and use the one whose
 * end (start) touches the guard page; without heisen's guard pages the
 * first one is used.  Prints "pid P", "tid_main T", "block 0x...", then
 * "done ok" when it survived (HEISEN_ON_HEAP_ERROR=continue).
 */
#include <stdint.h>

#include "tt.h"

__attribute__((noinline)) static char *make_record(size_t n)
{
	char *r = malloc(n);
	memset(r, 'r', n);
	return r;
}

__attribute__((noinline)) static void drop_record(char *r)
{
	free(r);
}

__attribute__((noinline)) static void drop_again(char *r)
{
	free(r);
}

__attribute__((noinline)) static int read_field(volatile char *r, long off)
{
	return r[off];
}

__attribute__((noinline)) static void write_field(volatile char *r, long off)
{
	r[off] = 'w';
}

__attribute__((noinline)) static long read_header(volatile char *r)
{
	return *(volatile long *)(r - 8);
}

/* Of two 32-byte buffers, the one whose end (want_end) or start lies on a page boundary. */
static char *pick(char *a, char *b, int want_end)
{
	uintptr_t pg = (uintptr_t)sysconf(_SC_PAGESIZE) - 1;
	if (want_end)
		return (((uintptr_t)b + 32) & pg) == 0 ? b : a;
	return ((uintptr_t)b & pg) == 0 ? b : a;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "uaf-read";
	char *r;
	int v = 0;
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	if (strcmp(mode, "uaf-read") == 0 || strcmp(mode, "uaf-write") == 0) {
		r = make_record(40);
		printf("block %p\n", (void *)r);
		fflush(stdout);
		drop_record(r);
		if (mode[4] == 'r') {
			v = read_field(r, 8);
			printf("read %d\n", v); /* reached with HEISEN_ON_HEAP_ERROR=continue */
		} else
			write_field(r, 16);
	} else if (strcmp(mode, "interior") == 0) {
		r = make_record(40);
		printf("block %p\n", (void *)r);
		fflush(stdout);
		drop_record(r + 8);
	} else if (strcmp(mode, "slack") == 0) {
		r = make_record(40);
		printf("block %p\n", (void *)r);
		fflush(stdout);
		write_field(r, 40);
		drop_record(r);
	} else if (strcmp(mode, "double-free") == 0) {
		r = make_record(40);
		printf("block %p\n", (void *)r);
		fflush(stdout);
		drop_record(r);
		drop_again(r);
	} else {
		char *a = make_record(32), *b = make_record(32);
		int over = strcmp(mode, "overflow") == 0;
		r = pick(a, b, over);
		printf("block %p\n", (void *)r);
		fflush(stdout);
		if (over)
			write_field(r, 32);
		else
			v = (int)read_header(r);
		drop_record(a);
		drop_record(b);
	}
	printf("value %d\n", v & 1);
	printf("done ok\n");
	return 0;
}
