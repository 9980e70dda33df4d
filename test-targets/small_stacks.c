/* SPDX-License-Identifier: MIT */
/*
 * small_stacks — threads created with the smallest stacks programs use
 * (PTHREAD_STACK_MIN, 20 KiB, 32 KiB: thread pools, embedded interpreters,
 * runtimes) doing what every thread does: nested mutexes, malloc/free,
 * open/close (one close of a number closed already).  glibc carves a thread's static TLS and its guard out of the
 * requested size, so a preloaded library's TLS and a hook's own frames come
 * out of the same few KiB; the run must behave exactly as it does natively.
 *
 * For each size, one thread takes lock_a then lock_b (take_a_then_b) and,
 * after it exited, another takes lock_b then lock_a (take_b_then_a): an
 * ABBA that never hangs and that heisen must still predict.
 * With a second argument ROOM (bytes), each thread first recurses until less
 * than ROOM bytes of its stack are left (a deep call chain in a small
 * thread) and takes the locks from there.
 * Usage: small_stacks [SIZE [ROOM]].
 * Prints "pid P", then per size "size N", "tid_ab T1", "tid_ba T2", then "done".
 */
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>

#include "tt.h"

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

/* What a thread does besides the locks: a few allocations and a file. */
__attribute__((noinline)) static void everyday_work(void)
{
	for (int i = 0; i < 16; i++) {
		char *p = malloc(32 + (size_t)i * 100);
		if (!p)
			abort();
		p[0] = (char)i;
		free(p);
	}
	int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (fd < 0 || close(fd) != 0)
		abort();
	/* closed twice (harmless here: nothing can reuse the number in between,
	 * the other threads wait); heisen looks into the number's history */
	if (close(fd) != -1 || errno != EBADF)
		abort();
}

__attribute__((noinline)) void take_a_then_b(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_a));
	TT_CHECK(pthread_mutex_lock(&lock_b));
	everyday_work();
	TT_CHECK(pthread_mutex_unlock(&lock_b));
	TT_CHECK(pthread_mutex_unlock(&lock_a));
}

__attribute__((noinline)) void take_b_then_a(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_b));
	TT_CHECK(pthread_mutex_lock(&lock_a));
	everyday_work();
	TT_CHECK(pthread_mutex_unlock(&lock_a));
	TT_CHECK(pthread_mutex_unlock(&lock_b));
}

static int tids[2];
static size_t room; /* 0: take the locks at the thread's top */
static uintptr_t stack_lo;

/* Call fn with less than `room` bytes of the thread's stack left. */
__attribute__((noinline)) static void descend(void (*fn)(void))
{
	volatile char pad[256];
	pad[0] = 1;
	if ((uintptr_t)__builtin_frame_address(0) - stack_lo > room)
		descend(fn);
	else
		fn();
	pad[1] = pad[0]; /* no tail call: each level keeps its frame */
}

static void run_at_depth(void (*fn)(void))
{
	pthread_attr_t a;
	void *addr;
	size_t size;
	if (!room) {
		fn();
		return;
	}
	TT_CHECK(pthread_getattr_np(pthread_self(), &a));
	TT_CHECK(pthread_attr_getstack(&a, &addr, &size));
	TT_CHECK(pthread_attr_destroy(&a));
	stack_lo = (uintptr_t)addr;
	descend(fn);
}

static void *thread_ab(void *arg)
{
	(void)arg;
	tids[0] = tt_gettid();
	run_at_depth(take_a_then_b);
	return NULL;
}

static void *thread_ba(void *arg)
{
	(void)arg;
	tids[1] = tt_gettid();
	run_at_depth(take_b_then_a);
	return NULL;
}

/* Run fn in a thread whose whole stack (TLS and guard included) is size bytes. */
static void run_small(void *(*fn)(void *), size_t size)
{
	pthread_attr_t attr;
	pthread_t t;
	TT_CHECK(pthread_attr_init(&attr));
	TT_CHECK(pthread_attr_setstacksize(&attr, size));
	TT_CHECK(pthread_create(&t, &attr, fn, NULL));
	TT_CHECK(pthread_join(t, NULL));
	TT_CHECK(pthread_attr_destroy(&attr));
}

int main(int argc, char **argv)
{
	size_t sizes[] = {PTHREAD_STACK_MIN, 20 * 1024, 32 * 1024};
	size_t n = sizeof sizes / sizeof sizes[0];
	if (argc > 1) { /* one size only: small_stacks BYTES */
		sizes[0] = (size_t)strtoul(argv[1], NULL, 0);
		n = 1;
	}
	if (argc > 2)
		room = (size_t)strtoul(argv[2], NULL, 0);
	printf("pid %d\n", (int)getpid());
	for (size_t i = 0; i < n; i++) {
		run_small(thread_ab, sizes[i]);
		run_small(thread_ba, sizes[i]);
		printf("size %zu\ntid_ab %d\ntid_ba %d\n", sizes[i], tids[0], tids[1]);
		fflush(stdout);
	}
	printf("done\n");
	return 0;
}
