/* SPDX-License-Identifier: MIT */
/*
 * heap_race_free — two threads free the same block at the same moment
 * (released together from a barrier, then a spin on one flag so that they
 * reach free() within nanoseconds).  Exactly one free wins; the other is a
 * double free whose "first free" is the winner, in the other thread.
 * Prints "pid P", "block 0x...", "tid_racer_0 T", "tid_racer_1 T", then
 * "done ok" if it survived (HEISEN_ON_HEAP_ERROR=continue).
 */
#include "tt.h"

static char *shared_block;
static pthread_barrier_t ready;
static int go;  /* [atomic] */

__attribute__((noinline)) static void racer_free(char *p)
{
	free(p);
}

static void *racer(void *arg)
{
	char label[32];
	snprintf(label, sizeof label, "tid_racer_%d", (int)(intptr_t)arg);
	tt_say_tid(label);
	pthread_barrier_wait(&ready);
	while (!__atomic_load_n(&go, __ATOMIC_ACQUIRE))
		;
	racer_free(shared_block);
	return NULL;
}

__attribute__((noinline)) static char *make_shared_block(void)
{
	char *p = malloc(96);
	memset(p, 7, 96);
	return p;
}

int main(void)
{
	pthread_t t[2];
	printf("pid %d\n", (int)getpid());
	shared_block = make_shared_block();
	printf("block %p\n", (void *)shared_block);
	fflush(stdout);
	TT_CHECK(pthread_barrier_init(&ready, NULL, 3));
	for (intptr_t i = 0; i < 2; i++)
		TT_CHECK(pthread_create(&t[i], NULL, racer, (void *)i));
	pthread_barrier_wait(&ready);
	usleep(1000);
	__atomic_store_n(&go, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 2; i++)
		TT_CHECK(pthread_join(t[i], NULL));
	printf("done ok\n");
	return 0;
}
