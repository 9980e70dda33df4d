/* SPDX-License-Identifier: MIT */
/*
 * fd_owned.c — the fd annotation API (include/heisen/heisen.h), fdsan's
 * idea: heisen_fd_set_owner / heisen_fd_close_owned, linked weakly so the
 * program runs unchanged without heisen (it falls back to close()).
 *
 *   correct  a cache owns its fd and closes it through the checked close:
 *            no finding.
 *   plain    a cleanup path closes the cache's fd with a plain close():
 *            stale-close (rule owner), and the fd is closed.
 *   stale    the cache's fd is closed behind its back (plain close), a
 *            journal opens a file and gets the number (and owns it), then
 *            the cache's checked close comes: refused (-1, EBADF), the
 *            journal's file stays open.  Two stale-close findings.
 *   unowned  owner 0 means "unowned", as in fdsan: the cache gives its fd
 *            up (set_owner(fd, 0)) and a plain close() closes it; an fd
 *            nobody tagged is closed with close_owned(fd, 0).  No finding,
 *            both closed.
 *
 * Prints "pid", "annotated 0|1", "fd N", "close_owned_rc R", "errno E",
 * "journal_open 0|1".
 */
#include <fcntl.h>
#include <stdint.h>

#include "tt.h"

extern int heisen_fd_set_owner(int fd, uint64_t owner) __attribute__((weak));
extern int heisen_fd_close_owned(int fd, uint64_t owner) __attribute__((weak));

struct cache { int fd; } cache;
struct journal { int fd; } journal;

static int owned_close(int fd, void *owner)
{
	return heisen_fd_close_owned ? heisen_fd_close_owned(fd, (uint64_t)(uintptr_t)owner) : close(fd);
}

__attribute__((noinline)) static void cache_open(void)
{
	cache.fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
	if (heisen_fd_set_owner)
		heisen_fd_set_owner(cache.fd, (uint64_t)(uintptr_t)&cache);
}

__attribute__((noinline)) static void cleanup_bug(int fd)
{
	close(fd); /* not its fd to close */
}

__attribute__((noinline)) static void journal_open(void)
{
	journal.fd = open("/proc/self/status", O_RDONLY | O_CLOEXEC);
	if (heisen_fd_set_owner)
		heisen_fd_set_owner(journal.fd, (uint64_t)(uintptr_t)&journal);
}

__attribute__((noinline)) static int cache_close(void)
{
	return owned_close(cache.fd, &cache);
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "correct";
	int rc;
	printf("pid %d\nannotated %d\n", (int)getpid(), heisen_fd_set_owner != NULL);
	tt_say_tid("tid_main");
	cache_open();
	printf("fd %d\n", cache.fd);
	if (strcmp(mode, "plain") == 0) {
		cleanup_bug(cache.fd);
	} else if (strcmp(mode, "stale") == 0) {
		cleanup_bug(cache.fd);
		journal_open();
		if (journal.fd != cache.fd)
			return 2;
		errno = 0;
		rc = cache_close();
		printf("close_owned_rc %d\nerrno %d\n", rc, rc ? errno : 0);
		printf("journal_open %d\n", fcntl(journal.fd, F_GETFD) >= 0);
		owned_close(journal.fd, &journal);
	} else if (strcmp(mode, "unowned") == 0) {
		int other = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
		if (heisen_fd_set_owner)
			heisen_fd_set_owner(cache.fd, 0); /* handed over: unowned */
		printf("plain_close_rc %d\n", close(cache.fd));
		rc = heisen_fd_close_owned ? heisen_fd_close_owned(other, 0) : close(other);
		printf("close_owned_rc %d\nother_open %d\n", rc, fcntl(other, F_GETFD) >= 0);
	} else {
		rc = cache_close();
		printf("close_owned_rc %d\n", rc);
	}
	fflush(stdout);
	return 0;
}
