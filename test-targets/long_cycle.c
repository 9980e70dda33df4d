/* SPDX-License-Identifier: MIT */
/*
 * long_cycle — a lock-order cycle through N locks (default 17), the shape
 * of a ring of N workers each passing work to the next: worker i takes
 * ring[i], then ring[(i + 1) % N].  The workers run one after the other, so
 * this run never hangs; a run where all N overlap does.  heisen must predict
 * the cycle with all N edges, whatever N.
 *
 *   long_cycle [N]        N mutexes in a ring (2 <= N <= 256)
 *   long_cycle N chain    the same without the closing edge: no cycle, no finding
 *
 * Prints "pid P", "locks N", "done".
 */
#include "tt.h"

static pthread_mutex_t ring[256];
static int nlocks;

__attribute__((noinline)) void take_pair(int i)
{
	TT_CHECK(pthread_mutex_lock(&ring[i]));
	TT_CHECK(pthread_mutex_lock(&ring[(i + 1) % nlocks]));
	TT_CHECK(pthread_mutex_unlock(&ring[(i + 1) % nlocks]));
	TT_CHECK(pthread_mutex_unlock(&ring[i]));
}

static void *worker(void *arg)
{
	take_pair((int)(intptr_t)arg);
	return NULL;
}

int main(int argc, char **argv)
{
	int chain = argc > 2 && strcmp(argv[2], "chain") == 0;
	nlocks = argc > 1 ? atoi(argv[1]) : 17;
	if (nlocks < 2 || nlocks > 256)
		return 2;
	for (int i = 0; i < nlocks; i++)
		TT_CHECK(pthread_mutex_init(&ring[i], NULL));
	printf("pid %d\nlocks %d\n", (int)getpid(), nlocks);
	for (int i = 0; i < nlocks - chain; i++)
		tt_run_thread(worker, (void *)(intptr_t)i);
	printf("done\n");
	return 0;
}
