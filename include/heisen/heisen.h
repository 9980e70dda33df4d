/* SPDX-License-Identifier: MIT */
/*
 * heisen/heisen.h — the small annotation API of libheisen.so.
 *
 * Nothing here is needed: heisen records without any change to the program.
 * A program that links these symbols weakly (or looks them up with dlsym)
 * runs unchanged without heisen.  Design: DESIGN.md.
 */
#ifndef HEISEN_HEISEN_H
#define HEISEN_HEISEN_H

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Give the lock at `lock` (a pthread_mutex_t, pthread_rwlock_t or
 * pthread_spinlock_t) a name that reports use instead of its address, as
 * lockdep's lock class names do.  `name` is copied (up to 63 bytes).
 * Returns 0, or -1 when heisen is not recording or its string table is full.
 * Async-signal-safe; never blocks.
 */
int heisen_name_lock(const void *lock, const char *name);

/* The on-shm ABI version this library writes (HS_ABI_VERSION). */
unsigned heisen_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif
