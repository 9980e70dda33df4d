/* SPDX-License-Identifier: MIT */
/*
 * heap_alloca_sites — allocation sites reached through one call of a
 * function whose frame changes size from call to call (alloca), the way
 * a parser or a formatter sizes a scratch buffer by its input.  The first
 * call (16 bytes of scratch) allocates at one site, the second (4096
 * bytes) at another, through the same call instruction in
 * `with_scratch`; the second block is then freed twice.  Its allocation
 * stack must go through with_scratch to second_request and main, never
 * through first_request (a distance learnt at the first call's frame
 * size does not hold at the second's).
 * Prints "pid P", then dies of heisen's SIGABRT at the second free.
 */
#include <alloca.h>

#include "tt.h"

__attribute__((noinline)) static char *block_small(void)
{
	return malloc(48);
}

__attribute__((noinline)) static char *block_large(void)
{
	return malloc(96);
}

__attribute__((noinline)) static char *make_block(int large)
{
	return large ? block_large() : block_small();
}

__attribute__((noinline)) static char *with_scratch(size_t n)
{
	char *scratch = alloca(n);
	char *volatile keep = scratch;
	memset(scratch, 0, n);
	(void)keep;
	return make_block(n > 1024); /* one call instruction, two frame sizes */
}

__attribute__((noinline)) static char *first_request(void)
{
	return with_scratch(16);
}

__attribute__((noinline)) static char *second_request(void)
{
	return with_scratch(4096);
}

int main(void)
{
	char *a = first_request();
	char *volatile b = second_request();
	free(a);
	free(b);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	free(b); /* the double free */
	puts("survived");
	return 0;
}
