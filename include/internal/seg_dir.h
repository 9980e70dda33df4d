/* SPDX-License-Identifier: MIT */
/*
 * internal/seg_dir.h — which files of a session directory are segments,
 * and how one is opened.  The one rule both readers use: heisen-dump
 * (dumper/session.c, dumper/segment.c) and heisen-run (launcher/segment.c,
 * its watchdog and its end-of-run verdict internal/seg_verdict.h), so that
 * a file one of them reports the other never ignores; not part of the
 * installed API.
 *
 * The rule (docs/design.md "The session reader"):
 *   - "<pid>.<image>.seg" (decimal pid > 0 and image, no sign, no leading
 *     space) is a segment: the shim names every segment so
 *     (shim/segment.c), and pid and image come from the name;
 *   - any other name ending in ".seg" is a misnamed segment: never read,
 *     but named as an error by heisen-dump and as a file heisen-dump
 *     cannot read by the end-of-run verdict (HS_SEG_MISNAMED_MSG) — the
 *     watchdog cannot tie it to a process and leaves it alone;
 *   - "*.stall" is a stall note (launcher/segment.c hr_seg_note_stall);
 *   - HS_SEG_ENV_CACHE (".environment") is the shim's environment cache
 *     (shim/proc.c): not a record, only what the session's next process
 *     may take instead of reading /sys again; whoever removes a session's
 *     segments removes it too;
 *   - HS_SEG_FRAMES (".frames") is the shim's table of learnt frame
 *     distances (shim/unwind_share.c): not a record either, only what the
 *     session's next processes may take instead of unwinding; whoever
 *     removes a session's segments removes it too;
 *   - everything else, the shim's temporary ".<pid>.new" among it, is not
 *     the readers' business and is skipped.
 * A segment is opened with O_NOFOLLOW | O_NONBLOCK | O_NOCTTY (a FIFO or a
 * device named *.seg must not block the open or become a terminal) and
 * refused unless the descriptor is a regular file (hs_seg_openat).
 * Header-only (static inline) like the other internal/ readers: both
 * programs include it, nothing to link, and each keeps its own error
 * reporting.
 */
#ifndef HEISEN_INTERNAL_SEG_DIR_H
#define HEISEN_INTERNAL_SEG_DIR_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

/* The shim's environment cache in a session directory (see above). */
#define HS_SEG_ENV_CACHE ".environment"
/* The shim's learnt frame distances in a session directory (see above). */
#define HS_SEG_FRAMES ".frames"

/* What a misnamed "*.seg" file is called by both readers. */
#define HS_SEG_MISNAMED_MSG "not named <pid>.<image>.seg: not read"

/* The kinds of names in a session directory (see the top of this file). */
enum hs_dir_name {
	HS_NAME_OTHER = 0,    /* not the readers' business (".<pid>.new", reports, ...) */
	HS_NAME_SEGMENT = 1,  /* "<pid>.<image>.seg" */
	HS_NAME_MISNAMED = 2, /* "*.seg" of any other shape: an error, never read */
	HS_NAME_STALL = 3,    /* "*.stall": a stall note */
};

/* Does name end in suffix, with something before it? */
static inline int hs_name_has_suffix(const char *name, const char *suffix)
{
	size_t n = strlen(name), k = strlen(suffix);
	return n > k && strcmp(name + n - k, suffix) == 0;
}

/*
 * Parse "<pid>.<image>.seg": 1 with *pid (1 .. 2^31-1) and *image
 * (0 .. 2^32-1) set, or 0 for any other name.
 */
static inline int hs_seg_name_parse(const char *s, pid_t *pid, unsigned *image)
{
	unsigned long long p = 0, im = 0;
	const char *c = s;
	if (*c < '0' || *c > '9')
		return 0;
	for (; *c >= '0' && *c <= '9'; c++)
		if ((p = p * 10 + (unsigned)(*c - '0')) > 0x7fffffffULL)
			return 0;
	if (*c++ != '.' || *c < '0' || *c > '9')
		return 0;
	for (; *c >= '0' && *c <= '9'; c++)
		if ((im = im * 10 + (unsigned)(*c - '0')) > 0xffffffffULL)
			return 0;
	if (strcmp(c, ".seg") != 0 || p == 0)
		return 0;
	*pid = (pid_t)p;
	*image = (unsigned)im;
	return 1;
}

/* The kind of a directory entry's name; *pid and *image set for HS_NAME_SEGMENT. */
static inline enum hs_dir_name hs_dir_name_kind(const char *name, pid_t *pid, unsigned *image)
{
	if (hs_seg_name_parse(name, pid, image))
		return HS_NAME_SEGMENT;
	if (hs_name_has_suffix(name, ".seg"))
		return HS_NAME_MISNAMED;
	if (hs_name_has_suffix(name, ".stall"))
		return HS_NAME_STALL;
	return HS_NAME_OTHER;
}

/* One entry of the enumeration: the name, its kind, pid and image (for a
 * segment) and the inode the directory lists. */
struct hs_seg_dirent {
	const char *name; /* valid until the next hs_seg_dir_next or closedir */
	enum hs_dir_name kind;
	pid_t pid;
	unsigned image;
	ino_t ino;
};

/* A fresh DIR stream over dirfd (its own position; dirfd stays open), or
 * NULL with errno. */
static inline DIR *hs_seg_dir_open(int dirfd)
{
	int fd = openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
	if (!d && fd >= 0) {
		int e = errno;
		close(fd);
		errno = e;
	}
	return d;
}

/* The next entry of d that is a segment, a misnamed segment or a stall
 * note (HS_NAME_OTHER entries are skipped): 1 with *e filled, 0 at the end. */
static inline int hs_seg_dir_next(DIR *d, struct hs_seg_dirent *e)
{
	struct dirent *de;
	while ((de = readdir(d))) {
		e->pid = 0;
		e->image = 0;
		e->kind = hs_dir_name_kind(de->d_name, &e->pid, &e->image);
		if (e->kind == HS_NAME_OTHER)
			continue;
		e->name = de->d_name;
		e->ino = de->d_ino;
		return 1;
	}
	return 0;
}

/*
 * Open segment file `name` relative to dirfd (AT_FDCWD for a path) with
 * `mode` (O_RDONLY or O_RDWR) by the rules at the top of this file, and
 * fstat it into *st.  Returns the descriptor, or -1 with err[errlen] set to
 * "cannot open: <strerror>" or "not a regular file" (nothing left open).
 */
static inline int hs_seg_openat(int dirfd, const char *name, int mode, struct stat *st, char *err, size_t errlen)
{
	int fd = openat(dirfd, name, mode | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0) {
		if (err && errlen)
			snprintf(err, errlen, "cannot open: %s", strerror(errno));
		return -1;
	}
	if (fstat(fd, st) != 0 || !S_ISREG(st->st_mode)) {
		close(fd);
		if (err && errlen)
			snprintf(err, errlen, "not a regular file");
		return -1;
	}
	return fd;
}

#endif
