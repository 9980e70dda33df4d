/* SPDX-License-Identifier: MIT */
/*
 * fd_page_end_path.c — a loader that opens the files a manifest names, in
 * place in the manifest's mapping, as programs do with string tables they
 * map: the manifest is exactly one page, its last name ends with the
 * page's last byte, and the page after the mapping is not readable.  An
 * fd hook that reads the name a word at a time must stop at the page's
 * end (a word read across it is a SIGSEGV in the program); the name
 * heisen records must be the whole name.
 *
 * Sixteen manifests, one per name length (5 to 20 bytes with the NUL:
 * every alignment of the name's start to the page's end, and names longer
 * than a word): "./" + k slashes + "f", all the same file.  The files stay
 * open at exit (a loader's working set).
 *
 * Usage: fd_page_end_path DIR (DIR holds a file "f").  Prints, for each k,
 * "fd_K N" and "path_K NAME", then "pid".
 */
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "tt.h"

#define NAMES 16

int main(int argc, char **argv)
{
	long pg = sysconf(_SC_PAGESIZE);
	char *page;
	if (argc != 2 || chdir(argv[1]) != 0 || !(page = calloc(1, (size_t)pg))) {
		fprintf(stderr, "usage: fd_page_end_path DIR\n");
		return 2;
	}
	for (int k = 1; k <= NAMES; k++) {
		char name[32], manifest[32];
		size_t len;
		int m, fd;
		char *r, *p;
		/* the manifest: zeros, then the name, its NUL the page's last byte */
		snprintf(name, sizeof name, "./%.*sf", k, "////////////////////////");
		len = strlen(name) + 1;
		memset(page, 0, (size_t)pg);
		memcpy(page + pg - (long)len, name, len);
		snprintf(manifest, sizeof manifest, "manifest%d", k);
		if ((m = open(manifest, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600)) < 0 ||
		    write(m, page, (size_t)pg) != pg || close(m) != 0) {
			perror("manifest");
			return 1;
		}
		/* two pages reserved, none readable; the manifest mapped over the first */
		r = mmap(NULL, 2 * (size_t)pg, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
		if (r == MAP_FAILED || (m = open(manifest, O_RDONLY | O_CLOEXEC)) < 0) {
			perror("map");
			return 1;
		}
		p = mmap(r, (size_t)pg, PROT_READ, MAP_PRIVATE | MAP_FIXED, m, 0);
		close(m);
		if (p != r) {
			perror("mmap manifest");
			return 1;
		}
		/* the name, opened in place: its NUL is the mapping's last byte */
		fd = open(p + pg - (long)len, O_RDONLY | O_CLOEXEC);
		if (fd < 0) {
			perror(p + pg - (long)len);
			return 1;
		}
		printf("fd_%d %d\npath_%d %s\n", k, fd, k, p + pg - (long)len);
	}
	printf("pid %d\n", (int)getpid());
	return 0;
}
