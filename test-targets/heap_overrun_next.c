/* SPDX-License-Identifier: MIT */
/*
 * heap_overrun_next — a path copied into the FIELD-byte field of a
 * long-lived record with OVER bytes too many (strcpy of unchecked input):
 * the copy runs past the field, past heisen's canary (none after a field
 * that fills glibc's chunk exactly, such as 40 bytes), into the chunk
 * header glibc keeps in front of the next block, and with OVER large
 * enough on through heisen's header of that block, a scratch buffer of the
 * same size the program frees at once.
 * Then it serves a thousand requests (a malloc and a free each: the scratch
 * buffer leaves the quarantine for glibc meanwhile) and frees the record
 * only at the end.  glibc's free of the scratch buffer would trust the
 * overwritten size.  Prints "pid P", "tid_main T", "block 0x..." (the
 * record), "next 0x..." (the scratch buffer), then "done ok" if it survived.
 *
 * Usage: heap_overrun_next [FIELD [OVER]]   (default 40 and 24)
 */
#include "tt.h"

static size_t field = 40, over = 24;

__attribute__((noinline)) static char *make_record(void)
{
	return malloc(field);
}

__attribute__((noinline)) static char *make_scratch(void)
{
	return malloc(field);
}

__attribute__((noinline)) static void set_path(char *r, const char *path)
{
	strcpy(r, path); /* the bug: no length check */
}

__attribute__((noinline)) static void serve(int n)
{
	for (int i = 0; i < n; i++) {
		char *volatile b = malloc(field + 60 + (size_t)(i % 200)); /* requests a little larger than the record */
		b[0] = (char)i;
		free(b);
	}
}

int main(int argc, char **argv)
{
	char *r = NULL, *s = NULL, *input;
	static const char path[] = "/srv/app/var/cache/sessions/2026-11-27/user-000123/state.json.";
	if (argc > 1)
		field = (size_t)atol(argv[1]);
	if (argc > 2)
		over = (size_t)atol(argv[2]);
	/* FIELD + OVER - 1 characters of a path, and the NUL */
	input = calloc(1, field + over);
	for (size_t i = 0; i + 1 < field + over; i++)
		input[i] = path[i % (sizeof path - 1)];
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	/* the record and the scratch buffer next to each other (a fresh heap
	   gives that at once; earlier tries stay allocated) */
	for (int i = 0; i < 64; i++) {
		r = make_record();
		s = make_scratch();
		if (s > r && (size_t)(s - r) <= field + 128)
			break;
	}
	printf("block %p\nnext %p\n", (void *)r, (void *)s);
	fflush(stdout);
	set_path(r, input);
	free(s);
	serve(1000);
	printf("record %.12s\n", r);
	free(r);
	free(input);
	printf("done ok\n");
	return 0;
}
