/* SPDX-License-Identifier: MIT */
/*
 * heap_invalid_free — free() of pointers malloc never returned.
 *   stack      free of a local array's address (free_stack_buffer)
 *   interior   free of a pointer 16 bytes into a 64-byte block (free_interior)
 *   cursor     a request parser frees its cursor, 6000 bytes into the 16 KiB
 *              buffer it reads (free_cursor), instead of the buffer: the
 *              block's header lies pages before the pointer, and the words
 *              in front of the pointer are request text
 * Prints "pid P", "tid_main T", "block 0x..." (interior: the block's start),
 * "pointer 0x..." (what is freed), then "done ok" if it survived
 * (HEISEN_ON_HEAP_ERROR=continue).
 */
#include "tt.h"

/* The frees below are wrong on purpose. */
#pragma GCC diagnostic ignored "-Wfree-nonheap-object"

__attribute__((noinline)) static void free_stack_buffer(void)
{
	char local[64] __attribute__((aligned(16)));
	volatile char *p = local;
	memset(local, 1, sizeof local);
	printf("pointer %p\n", (void *)local);
	fflush(stdout);
	free((void *)p);
}

__attribute__((noinline)) static char *alloc_block(void)
{
	return malloc(64);
}

__attribute__((noinline)) static void free_interior(void)
{
	char *b = alloc_block();
	printf("block %p\npointer %p\n", (void *)b, (void *)(b + 16));
	fflush(stdout);
	free(b + 16);
	free(b);
}

__attribute__((noinline)) static char *read_request(void)
{
	static const char line[] = "GET /index.html HTTP/1.1\r\nHost: example.org\r\n";
	char *buf = malloc(16384);
	if (!buf)
		abort();
	for (size_t i = 0; i < 16384; i++)
		buf[i] = line[i % (sizeof line - 1)];
	return buf;
}

__attribute__((noinline)) static void free_cursor(void)
{
	char *buf = read_request();
	char *cursor = buf + 6000; /* where the parser stopped */
	printf("block %p\npointer %p\n", (void *)buf, (void *)cursor);
	fflush(stdout);
	free(cursor); /* the bug: the cursor, not the buffer */
	free(buf);
}

int main(int argc, char **argv)
{
	const char *what = argc > 1 ? argv[1] : "interior";
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	if (strcmp(what, "stack") == 0)
		free_stack_buffer();
	else if (strcmp(what, "interior") == 0)
		free_interior();
	else if (strcmp(what, "cursor") == 0)
		free_cursor();
	else {
		fprintf(stderr, "usage: heap_invalid_free stack|interior|cursor\n");
		return 2;
	}
	printf("done ok\n");
	return 0;
}
