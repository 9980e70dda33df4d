/* SPDX-License-Identifier: MIT */
/*
 * rwlock_mutex_cycle — a lock-order inversion between a rwlock and a mutex.
 *
 * Thread 1 takes rw_lock then lock_m; after it exits, thread 2 takes lock_m
 * then rw_lock.  How rw_lock is taken decides whether a run that overlaps
 * could deadlock (lockdep's recursive-read rule, see enum hs_mode in
 * include/heisen/format.h):
 *
 *   write       both wrlock                                  -> can deadlock
 *   read-write  thread 1 rdlocks, thread 2 wrlocks           -> can deadlock
 *   read        both rdlock a default (reader-preferring)
 *               rwlock: thread 2's rdlock never waits behind
 *               thread 1's read hold                         -> cannot deadlock
 *   read-wpref  both rdlock a writer-preferring rwlock: a
 *               third thread queued to write makes thread 2's
 *               rdlock wait                                   -> can deadlock
 *
 * Prints "pid P", "mode M", "tid_rw_m T1", "tid_m_rw T2".
 */
#include "tt.h"

pthread_rwlock_t rw_lock = PTHREAD_RWLOCK_INITIALIZER;
pthread_mutex_t lock_m = PTHREAD_MUTEX_INITIALIZER;

static int first_reads, second_reads;

static void rw_take(int read)
{
	if (read)
		TT_CHECK(pthread_rwlock_rdlock(&rw_lock));
	else
		TT_CHECK(pthread_rwlock_wrlock(&rw_lock));
}

__attribute__((noinline)) void take_rw_then_m(void)
{
	rw_take(first_reads);
	TT_CHECK(pthread_mutex_lock(&lock_m));
	TT_CHECK(pthread_mutex_unlock(&lock_m));
	TT_CHECK(pthread_rwlock_unlock(&rw_lock));
}

__attribute__((noinline)) void take_m_then_rw(void)
{
	TT_CHECK(pthread_mutex_lock(&lock_m));
	rw_take(second_reads);
	TT_CHECK(pthread_rwlock_unlock(&rw_lock));
	TT_CHECK(pthread_mutex_unlock(&lock_m));
}

static void *thread_rw_m(void *arg) { (void)arg; tt_say_tid("tid_rw_m"); take_rw_then_m(); return NULL; }
static void *thread_m_rw(void *arg) { (void)arg; tt_say_tid("tid_m_rw"); take_m_then_rw(); return NULL; }

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "write";
	if (strcmp(mode, "write") == 0) {
		first_reads = second_reads = 0;
	} else if (strcmp(mode, "read-write") == 0) {
		first_reads = 1;
		second_reads = 0;
	} else if (strcmp(mode, "read") == 0) {
		first_reads = second_reads = 1;
	} else if (strcmp(mode, "read-wpref") == 0) {
		pthread_rwlockattr_t a;
		TT_CHECK(pthread_rwlockattr_init(&a));
		TT_CHECK(pthread_rwlockattr_setkind_np(&a, PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP));
		TT_CHECK(pthread_rwlock_init(&rw_lock, &a));
		TT_CHECK(pthread_rwlockattr_destroy(&a));
		first_reads = second_reads = 1;
	} else {
		fprintf(stderr, "usage: %s [write|read-write|read|read-wpref]\n", argv[0]);
		return 2;
	}
	printf("pid %d\nmode %s\n", (int)getpid(), mode);
	tt_run_thread(thread_rw_m, NULL);
	tt_run_thread(thread_m_rw, NULL);
	printf("done\n");
	return 0;
}
