/* SPDX-License-Identifier: MIT */
/*
 * config_reload.c — a daemon's config reload loop: open the file, read it,
 * close it, checking every result as careful C code does.  Under heisen-run
 * --fail open:P / close:P it meets the errors a loaded machine gives
 * (EMFILE, EIO) and says what it saw.
 *
 *   config_reload FILE [TIMES]   (default 20)
 *
 * Prints "open_failed I ERRNO" / "close_failed I ERRNO" for each failure,
 * then, after a failed close, "released" when the number is gone (fcntl
 * says EBADF) or "still_open" when it is not; "reloads N" at the end.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static int reload_config(const char *path, int i)
{
	char buf[256];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		printf("open_failed %d %d\n", i, errno);
		return -1;
	}
	while (read(fd, buf, sizeof buf) > 0)
		;
	if (close(fd) != 0) {
		printf("close_failed %d %d\n", i, errno);
		printf("%s\n", fcntl(fd, F_GETFD) < 0 && errno == EBADF ? "released" : "still_open");
		return -1;
	}
	return 0;
}

int main(int argc, char **argv)
{
	int times = argc > 2 ? atoi(argv[2]) : 20, ok = 0;
	if (argc < 2) {
		fprintf(stderr, "usage: config_reload FILE [TIMES]\n");
		return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	for (int i = 0; i < times; i++)
		ok += reload_config(argv[1], i) == 0;
	printf("reloads %d\n", ok);
	return ok == times ? 0 : 1;
}
