/* SPDX-License-Identifier: MIT */
/*
 * heap_realloc_shrink — a line reader's "shrink to fit": each line is read
 * into a generous buffer (512 bytes, or 8 KiB for the long ones), then
 * realloc'd down to the line's length to keep, as getline users and
 * string builders do.  glibc shrinks such a block where it lies; so does
 * heisen now, and the bugs around a shrunk block must still be found:
 *
 *   overflow      the kept copy sized strlen (no room for the NUL), the
 *                 NUL written one past the new end: found at its free
 *   double-free   the kept line dropped by two owners
 *   ok            a correct reader: 2,000 lines of 1 to 3,000 bytes kept,
 *                 shrunk and grown again within and past their chunk,
 *                 every byte checked; no finding
 *
 * Prints "pid P", "tid_main T", "buffer 0x..." (the read buffer),
 * "kept 0x..." (what realloc returned), "moved N" (how many of the ok
 * mode's shrinks returned another pointer), then "done ok" if it
 * survived (HEISEN_ON_HEAP_ERROR=continue).
 */
#include "tt.h"

#define LINE "0123456789abcdef0123456789abcdef0123456789abcde" /* 47 chars */

__attribute__((noinline)) static char *read_line(size_t cap, const char *text)
{
	char *buf = malloc(cap);
	if (!buf)
		abort();
	strcpy(buf, text);
	return buf;
}

/* the bug of the overflow mode: strlen bytes, then the NUL past them */
__attribute__((noinline)) static char *shrink_to_fit_no_nul(char *buf)
{
	size_t len = strlen(buf);
	char *s = realloc(buf, len);
	if (!s)
		abort();
	s[len] = '\0';
	return s;
}

__attribute__((noinline)) static char *shrink_to_fit(char *buf)
{
	char *s = realloc(buf, strlen(buf) + 1);
	if (!s)
		abort();
	return s;
}

__attribute__((noinline)) static void drop_line(char *s)
{
	free(s);
}

__attribute__((noinline)) static void drop_line_again(char *s)
{
	free(s);
}

static void fill(char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (char)('a' + (seed + i * 7) % 26);
}

static int same(const char *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		if (p[i] != (char)('a' + (seed + i * 7) % 26))
			return 0;
	return 1;
}

/* the correct reader: shrink, then grow back a little (within the chunk
   or past it), every byte kept; returns how many shrinks moved */
static int correct_reader(void)
{
	static char *kept[64];
	int moved = 0;
	unsigned x = 12345;
	for (int i = 0; i < 2000; i++) {
		size_t cap, len;
		char *buf, *s;
		x = x * 1103515245u + 12345u;
		cap = (x >> 8) % 4 == 0 ? 8192 : 512;
		len = 1 + (x >> 12) % (cap == 512 ? 511 : 3000);
		buf = malloc(cap);
		if (!buf)
			abort();
		fill(buf, len, i);
		s = realloc(buf, len);
		if (!s || !same(s, len, i)) {
			printf("bad shrink %d\n", i);
			exit(3);
		}
		moved += s != buf;
		buf = realloc(s, len + (x >> 20) % 40);
		if (!buf || !same(buf, len, i)) {
			printf("bad grow %d\n", i);
			exit(3);
		}
		free(kept[i % 64]);
		kept[i % 64] = buf;
	}
	for (int i = 0; i < 64; i++)
		free(kept[i]);
	return moved;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "ok";
	char *buf, *s;
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	if (strcmp(mode, "ok") == 0) {
		printf("moved %d\n", correct_reader());
		printf("done ok\n");
		return 0;
	}
	buf = read_line(512, LINE);
	printf("buffer %p\n", (void *)buf);
	s = strcmp(mode, "overflow") == 0 ? shrink_to_fit_no_nul(buf) : shrink_to_fit(buf);
	printf("kept %p\n", (void *)s);
	fflush(stdout);
	if (strcmp(mode, "overflow") == 0) {
		drop_line(s);
	} else if (strcmp(mode, "double-free") == 0) {
		drop_line(s);
		drop_line_again(s);
	} else {
		fprintf(stderr, "usage: heap_realloc_shrink [ok|overflow|double-free]\n");
		return 2;
	}
	printf("done ok\n");
	return 0;
}
