/* SPDX-License-Identifier: MIT */
/*
 * test-targets/start_footprint.c — a command of the kind a shell script
 * starts by the hundred: it never allocates, never unwinds, takes no lock.
 * It says on stdout whether its HEISEN_DIR string is still the one the
 * kernel laid out next to its arguments at exec (nothing set it again:
 * setenv puts a copy on the heap), then waits for a byte on
 * stdin so that the test can read its /proc/PID/smaps while it runs
 * (tests/test_proc.py, the start-up footprint of an image that needs none
 * of heisen's machinery).  Only write(2) and read(2): no stdio buffer.
 */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
	/* the kernel copies argv's and then envp's strings into one block at the
	   top of the stack (at most ARG_MAX, 2 MiB by default, and far from any heap) */
	const char *dir = getenv("HEISEN_DIR"), *base = argc > 0 ? argv[0] : NULL;
	const char *msg = !dir ? "HEISEN_DIR: unset\n"
		: base && dir > base && dir - base < (2 << 20) ? "HEISEN_DIR: as started\n"
							       : "HEISEN_DIR: set again\n";
	char c;
	if (write(1, msg, strlen(msg)) != (ssize_t)strlen(msg))
		return 1;
	(void)!read(0, &c, 1);
	return 0;
}
