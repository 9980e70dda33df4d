/* SPDX-License-Identifier: MIT */
/*
 * fd_two_callers.c — one helper that reads a setting file (open, read,
 * close) called from two places in a daemon: a status poller that calls it
 * in a loop, and a configuration reload that calls it once.  The helper's
 * error path closes the number a second time (`goto fail` after the
 * close): an empty file makes the reload's call a double close.  The daemon
 * has a second, idle thread, so the number could have been reused in
 * between (not a harmless one-thread double close).
 *
 * The poller and the reload are called from main one after the other, with
 * frames of one size: the helper's open and close run at the same stack
 * address, from the same call sites, under both, and only the return
 * address one frame up (into poll_status or into reload_config) tells the
 * reload's calls from the poller's thousand.  heisen: one double-close
 * whose creation, first close and second close each name
 * read_setting <- reload_config, never poll_status.
 *
 * Usage: fd_two_callers STATUS_FILE EMPTY_FILE.  Prints "pid", "fd N" (the
 * number closed twice), "same_frame 1" when the helper ran at the same
 * frame address under both callers (the case this target is for), and
 * "second_close EBADF".
 */
#include <fcntl.h>
#include <stdint.h>

#include "tt.h"

static struct tt_bystander bystander;
static uintptr_t frame_seen[2]; /* the helper's frame address under each caller */
static int twice_fd = -1, twice_errno;

static __attribute__((noinline)) int read_setting(const char *path, char *buf, size_t len, int who)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;
	frame_seen[who] = (uintptr_t)__builtin_frame_address(0);
	if (fd < 0)
		return -1;
	n = read(fd, buf, len - 1);
	close(fd);
	if (n <= 0)
		goto fail;
	buf[n] = '\0';
	return 0;
fail:
	/* the bug: the number was closed above already */
	twice_fd = fd;
	if (close(fd) != 0)
		twice_errno = errno;
	return -1;
}

static __attribute__((noinline)) int poll_status(const char *path, int times)
{
	char buf[64];
	int bad = 0;
	for (int i = 0; i < times; i++)
		bad += read_setting(path, buf, sizeof buf, 0) != 0;
	__asm__ volatile("" ::: "memory");
	return bad;
}

static __attribute__((noinline)) int reload_config(const char *path, int times)
{
	char buf[64];
	int bad = 0;
	for (int i = 0; i < times; i++)
		bad += read_setting(path, buf, sizeof buf, 1) != 0;
	__asm__ volatile("nop" ::: "memory");
	return bad;
}

int main(int argc, char **argv)
{
	int bad;
	if (argc != 3) {
		fprintf(stderr, "usage: fd_two_callers STATUS_FILE EMPTY_FILE\n");
		return 2;
	}
	tt_bystander_start(&bystander);
	printf("pid %d\n", (int)getpid());
	bad = poll_status(argv[1], 1000);
	bad += reload_config(argv[2], 1);
	printf("fd %d\n", twice_fd);
	printf("same_frame %d\n", frame_seen[0] == frame_seen[1]);
	printf("second_close %s\n", twice_errno == EBADF ? "EBADF" : "other");
	printf("failed_reads %d\n", bad);
	fflush(stdout);
	tt_bystander_stop(&bystander);
	return 0;
}
