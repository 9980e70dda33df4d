/* SPDX-License-Identifier: MIT */
/*
 * heap_handle_reopen — seed 004 (TensorFlow's evaluator core): a file handle
 * whose "reopen" path frees the buffer and, when the new open fails, returns
 * without clearing the pointer; the handle's destructor then frees it again.
 * One thread, a double free: allocation in handle_open, first free in
 * handle_reopen, second free in handle_close.
 * Prints "pid P", "tid_main T", then "done ok" if it survived (only with
 * HEISEN_ON_HEAP_ERROR=continue: glibc would abort, or worse, not notice).
 */
#include "tt.h"

struct handle {
	char *buf;
	size_t len;
};

__attribute__((noinline)) static struct handle *handle_open(size_t len)
{
	struct handle *h = calloc(1, sizeof *h);
	if (!h)
		abort();
	h->buf = malloc(len);  /* allocation */
	h->len = len;
	memset(h->buf, 'x', len);
	return h;
}

/* The file was replaced under us: drop the buffer and open again.  The
 * new open fails (the file is gone mid-rename) and the pointer stays. */
__attribute__((noinline)) static int handle_reopen(struct handle *h, int new_open_fails)
{
	free(h->buf);  /* first free; the bug: h->buf is not set to NULL */
	if (new_open_fails)
		return -1;
	h->buf = malloc(h->len);
	return h->buf ? 0 : -1;
}

__attribute__((noinline)) static void handle_close(struct handle *h)
{
	free(h->buf);  /* second free */
	free(h);
}

int main(void)
{
	struct handle *h;
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	h = handle_open(200);
	if (handle_reopen(h, 1) != 0)
		fprintf(stderr, "reopen failed (as it does when the file is being renamed)\n");
	/* other work allocates in between, as the evaluator did */
	for (int i = 0; i < 100; i++)
		free(malloc(64 + i));
	handle_close(h);
	printf("done ok\n");
	return 0;
}
