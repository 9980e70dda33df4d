/* SPDX-License-Identifier: MIT */
/*
 * heap_overrun_next — a path copied into the 40-byte field of a long-lived
 * record with 24 bytes too many (strcpy of unchecked input): the copy runs
 * past the field, past heisen's canary, into the chunk header glibc keeps
 * in front of the next block, a scratch buffer the program frees at once.
 * Then it serves a thousand requests (a malloc and a free each: the scratch
 * buffer leaves the quarantine for glibc meanwhile) and frees the record
 * only at the end.  glibc's free of the scratch buffer would trust the
 * overwritten size.  Prints "pid P", "tid_main T", "block 0x..." (the
 * record), "next 0x..." (the scratch buffer), then "done ok" if it survived.
 */
#include "tt.h"

struct record {
	char path[40];
};

__attribute__((noinline)) static struct record *make_record(void)
{
	return malloc(sizeof(struct record));
}

__attribute__((noinline)) static char *make_scratch(void)
{
	return malloc(40);
}

__attribute__((noinline)) static void set_path(struct record *r, const char *path)
{
	strcpy(r->path, path); /* the bug: no length check */
}

__attribute__((noinline)) static void serve(int n)
{
	for (int i = 0; i < n; i++) {
		char *volatile b = malloc(100 + (size_t)(i % 200));
		b[0] = (char)i;
		free(b);
	}
}

int main(void)
{
	struct record *r = NULL;
	char *s = NULL;
	/* 63 characters: 23 past the field, and the NUL */
	const char *input = "/srv/app/var/cache/sessions/2026-11-27/user-000123/state.json.";
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	/* the record and the scratch buffer next to each other (a fresh heap
	   gives that at once; earlier tries stay allocated) */
	for (int i = 0; i < 64; i++) {
		r = make_record();
		s = make_scratch();
		if ((char *)s > (char *)r && (char *)s - (char *)r <= 128)
			break;
	}
	printf("block %p\nnext %p\n", (void *)r, (void *)s);
	fflush(stdout);
	set_path(r, input);
	free(s);
	serve(1000);
	printf("record %.12s\n", r->path);
	free(r);
	printf("done ok\n");
	return 0;
}
