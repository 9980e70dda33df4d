/* SPDX-License-Identifier: MIT */
/*
 * fd_log_rotate.c — a daemon keeps its log on a high number, out of the
 * way of the numbers its work uses (fcntl F_DUPFD_CLOEXEC to 100, as shells
 * and daemons move theirs), closes it at a log rotation without forgetting
 * the number, works through a batch of files (open, read, close each: the
 * low numbers over and over), then closes the log's number again at
 * shutdown: a double close (EBADF).  The daemon has a second, idle thread,
 * so the number could have been reused in between (not a harmless
 * one-thread double close).
 *
 * heisen: one double-close on the log's number whose history still holds
 * the log's creation (open_log) and its first close (rotate_log) behind
 * the batch's thousands of opens and closes of other numbers, so the
 * finding names all three stacks: the second close (shutdown_log), the
 * first close and the creation.
 *
 * Usage: fd_log_rotate LOG_FILE BATCH_FILE N (N files read in the batch).
 * Prints "pid", "fd N" (the log's number), "batch_fds_below N" (1 when
 * every batch file got a number below the log's) and "second_close EBADF".
 */
#include <fcntl.h>
#include <stdint.h>

#include "tt.h"

static struct tt_bystander bystander;
static int log_fd = -1;

static __attribute__((noinline)) int open_log(const char *path)
{
	int fd = open(path, O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
	int high;
	if (fd < 0)
		return -1;
	high = fcntl(fd, F_DUPFD_CLOEXEC, 100);
	close(fd);
	return high;
}

static __attribute__((noinline)) void rotate_log(void)
{
	close(log_fd); /* the bug: log_fd still names the closed number */
}

static __attribute__((noinline)) int read_batch(const char *path, int n)
{
	char buf[64];
	int below = 1;
	for (int i = 0; i < n; i++) {
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || read(fd, buf, sizeof buf) < 0) {
			perror(path);
			exit(1);
		}
		below &= fd < log_fd;
		close(fd);
	}
	return below;
}

static __attribute__((noinline)) int shutdown_log(void)
{
	return close(log_fd) != 0 ? errno : 0;
}

int main(int argc, char **argv)
{
	int below, err;
	if (argc != 4) {
		fprintf(stderr, "usage: fd_log_rotate LOG_FILE BATCH_FILE N\n");
		return 2;
	}
	tt_bystander_start(&bystander);
	printf("pid %d\n", (int)getpid());
	if ((log_fd = open_log(argv[1])) < 0) {
		perror(argv[1]);
		return 1;
	}
	rotate_log();
	below = read_batch(argv[2], atoi(argv[3]));
	err = shutdown_log();
	printf("fd %d\n", log_fd);
	printf("batch_fds_below %d\n", below);
	printf("second_close %s\n", err == EBADF ? "EBADF" : "other");
	fflush(stdout);
	tt_bystander_stop(&bystander);
	return 0;
}
