/* SPDX-License-Identifier: MIT */
/*
 * heisen/heisen.h — the small annotation API of libheisen.so.
 *
 * Nothing here is needed: heisen records without any change to the program.
 * A program that links these symbols weakly (or looks them up with dlsym)
 * runs unchanged without heisen.  Design: docs/design.md "Lock order"
 * (named locks), "File descriptors" (fd owners).
 */
#ifndef HEISEN_HEISEN_H
#define HEISEN_HEISEN_H

#include <stdint.h>

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

/*
 * fdsan-style ownership of a file descriptor (Android's fdsan is
 * the model).  heisen_fd_set_owner(fd, owner) says that the open
 * descriptor fd belongs to `owner` (any non-zero 64-bit tag: an object's
 * address, say) until it is closed with heisen_fd_close_owned(fd, owner).
 * Returns 0, or -1 when heisen is not recording, or with errno EBADF when
 * fd is not open.
 *
 * heisen_fd_close_owned(fd, owner) closes fd when owner still owns it and
 * returns what close() returns.  When it does not — the number was closed
 * behind the owner's back and now belongs to someone else, or was never
 * this owner's — it records a `stale-close` finding with the number's
 * history and does NOT close: -1, errno EBADF.  A plain close() of an owned
 * descriptor is recorded as a `stale-close` too (and is made).  Without
 * heisen recording, it is close(fd).  Never blocks beyond close() itself.
 * Owner 0 means "unowned", as fdsan's tag 0: heisen_fd_set_owner(fd, 0)
 * gives fd up (a plain close() of it is then fine), and
 * heisen_fd_close_owned(fd, 0) closes an fd nobody tagged.
 *
 * Link both weakly and fall back to close() when they are absent:
 *   extern int heisen_fd_close_owned(int, uint64_t) __attribute__((weak));
 *   rc = heisen_fd_close_owned ? heisen_fd_close_owned(fd, tag) : close(fd);
 */
int heisen_fd_set_owner(int fd, uint64_t owner);
int heisen_fd_close_owned(int fd, uint64_t owner);

/* The on-shm ABI version this library writes (HS_ABI_VERSION). */
unsigned heisen_abi_version(void);

#ifdef __cplusplus
}
#endif
#endif
