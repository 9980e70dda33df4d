/* SPDX-License-Identifier: MIT */
/*
 * shim/platform_glibc.c — what only glibc's lock structures can tell: the
 * type of a mutex (recursive, error-checking) and the preference of a
 * rwlock.  Isolated here so that the rest of the shim has no #ifdefs; a port
 * to another libc replaces this file.  Reads are racy by nature (the program
 * owns the lock), but these fields are written only by *_init.
 */
#include <pthread.h>

#include "shim.h"

unsigned hs_mutex_flags(const void *mutex)
{
	const pthread_mutex_t *m = mutex;
	int kind = __atomic_load_n(&m->__data.__kind, __ATOMIC_RELAXED);
	switch (kind & 3) { /* PTHREAD_MUTEX_KIND_MASK_NP */
	case PTHREAD_MUTEX_RECURSIVE_NP:
		return HS_LOCKF_RECURSIVE;
	case PTHREAD_MUTEX_ERRORCHECK_NP:
		return HS_LOCKF_ERRORCHECK;
	default:
		return 0;
	}
}

unsigned hs_rwlock_flags(const void *rwlock)
{
	const pthread_rwlock_t *rw = rwlock;
	/* glibc treats PREFER_WRITER_NP like PREFER_READER_NP; only the
	   non-recursive writer preference makes readers queue behind writers */
	unsigned char f = __atomic_load_n(&rw->__data.__flags, __ATOMIC_RELAXED);
	return f == PTHREAD_RWLOCK_PREFER_WRITER_NONRECURSIVE_NP ? HS_LOCKF_WRITER_PREF : 0;
}
