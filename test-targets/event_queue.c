/* SPDX-License-Identifier: MIT */
/*
 * event_queue — an event loop fed by a producer thread, the shape of a
 * service whose main thread waits in epoll for work another thread queues.
 *
 *   event_queue feed MS   the producer queues one item every 400 ms for MS
 *                         milliseconds, then a last item that ends the
 *                         loop; the program exits 0.  A correct program:
 *                         no hang.
 *   event_queue stop N    the producer queues N items and returns without
 *                         the last one: the main thread waits in epoll on
 *                         an eventfd only this process could write, for
 *                         ever.  A hang.
 *
 * Every item is pushed and popped under a mutex (ring records, the
 * recorder's view of progress) and announced on an eventfd.  Between items
 * both threads sit in the same system call with the same arguments
 * (epoll_wait with no timeout; nanosleep) and use next to no CPU: what the
 * kernel shows of them does not move, only their ring records do — a
 * judge that looked at /proc alone would call the working loop hung.
 * Prints "pid P", "tid_producer T", "fed 2" once two items were taken,
 * "fed N" (all of them) at the end and "done".
 */
#include "tt.h"

#include <stdint.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <time.h>

static pthread_mutex_t queue_lock = PTHREAD_MUTEX_INITIALIZER;
static int queue[64], nqueue;
static int efd;

#define ITEM_QUIT (-1)

static void push(int item)
{
	uint64_t one = 1;
	TT_CHECK(pthread_mutex_lock(&queue_lock));
	if (nqueue < 64)
		queue[nqueue++] = item;
	TT_CHECK(pthread_mutex_unlock(&queue_lock));
	if (write(efd, &one, sizeof one) != sizeof one)
		abort();
}

struct plan {
	long items;  /* items to queue */
	int quit;    /* then queue ITEM_QUIT */
};

static void *producer(void *arg)
{
	const struct plan *p = arg;
	struct timespec gap = {0, 400 * 1000000L};
	tt_say_tid("tid_producer");
	for (long i = 0; i < p->items; i++) {
		nanosleep(&gap, NULL);
		push((int)i);
	}
	if (p->quit)
		push(ITEM_QUIT);
	return NULL;
}

/* The loop: wait for the eventfd (no timeout), pop what is queued. */
__attribute__((noinline)) void event_loop(void)
{
	static struct epoll_event ev[4];
	long popped = 0;
	int ep = epoll_create1(EPOLL_CLOEXEC);
	struct epoll_event want = {.events = EPOLLIN, .data.fd = efd};
	if (ep < 0 || epoll_ctl(ep, EPOLL_CTL_ADD, efd, &want) != 0)
		abort();
	for (;;) {
		uint64_t n;
		int got = epoll_wait(ep, ev, 4, -1);
		if (got < 0 && errno == EINTR)
			continue; /* a snapshot request */
		if (got <= 0 || read(efd, &n, sizeof n) != sizeof n)
			abort();
		TT_CHECK(pthread_mutex_lock(&queue_lock));
		int items[64], k = nqueue;
		memcpy(items, queue, sizeof items);
		nqueue = 0;
		TT_CHECK(pthread_mutex_unlock(&queue_lock));
		for (int i = 0; i < k; i++) {
			if (items[i] == ITEM_QUIT) {
				close(ep);
				printf("fed %ld\n", popped);
				return;
			}
			if (++popped == 2) {
				printf("fed 2\n"); /* once: the loop itself stays quiet on the CPU */
				fflush(stdout);
			}
		}
	}
}

int main(int argc, char **argv)
{
	pthread_t t;
	struct plan p;
	if (argc < 3 || (strcmp(argv[1], "feed") != 0 && strcmp(argv[1], "stop") != 0)) {
		fprintf(stderr, "usage: event_queue feed MS | stop N\n");
		return 2;
	}
	if (strcmp(argv[1], "feed") == 0)
		p = (struct plan){.items = atol(argv[2]) / 400, .quit = 1};
	else
		p = (struct plan){.items = atol(argv[2]), .quit = 0};
	if ((efd = eventfd(0, EFD_CLOEXEC)) < 0)
		return 1;
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	TT_CHECK(pthread_create(&t, NULL, producer, &p));
	event_loop();
	TT_CHECK(pthread_join(t, NULL));
	printf("done\n");
	return 0;
}
