/* SPDX-License-Identifier: MIT */
/*
 * launcher/paths.c — where libheisen.so and heisen-dump are.
 *
 * heisen-run finds its companions relative to its own executable
 * (/proc/self/exe), so one tree works wherever it was unpacked: after
 * `meson install` (with or without --destdir) the library is in
 * HR_LIBDIR_REL (bindir -> libdir/heisen, computed at configure time by
 * launcher/meson.build) and heisen-dump sits next to heisen-run; in a meson
 * build tree they are <build>/shim/libheisen.so and <build>/dumper/heisen-dump.
 * HEISEN_LIB and HEISEN_DUMP override either.  The library path handed to
 * LD_PRELOAD is always absolute and canonical (docs/design.md "What it must not
 * do"), because the child may chdir and ld.so resolves relative names
 * against the current directory.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <internal/dir_walk.h>

#include "launcher.h"

#ifndef HR_LIBDIR_REL
#define HR_LIBDIR_REL "../lib/heisen"
#endif

/*
 * Canonicalize `path` into out[PATH_MAX] if it names a file we may use in
 * `mode` (R_OK for a library, X_OK for a program).  Returns 0, or -1 with
 * errno from realpath/access; out is then unspecified.
 */
static int usable(const char *path, int mode, char *out)
{
	if (!realpath(path, out))
		return -1;
	return access(out, mode);
}

/*
 * Find `what` (for messages), trying the environment variable `env` first,
 * then exe_dir/<each candidate>.  On success out holds an absolute path and
 * 0 is returned.  On failure every place tried is named on stderr and -1 is
 * returned.
 */
static int find_one(const char *what, const char *env, int mode, const char *exe_dir,
		    const char *const cand[], size_t ncand, char *out)
{
	const char *e = getenv(env);
	char p[PATH_MAX];

	if (e && *e) {
		if (usable(e, mode, out) == 0)
			return 0;
		hr_err("%s=%s is not usable: %s", env, e, strerror(errno));
		return -1;
	}
	for (size_t i = 0; i < ncand; i++) {
		if (snprintf(p, sizeof p, "%s/%s", exe_dir, cand[i]) >= (int)sizeof p)
			continue;
		if (usable(p, mode, out) == 0)
			return 0;
	}
	hr_err("cannot find %s; looked in:", what);
	for (size_t i = 0; i < ncand; i++)
		fprintf(stderr, "  %s/%s\n", exe_dir, cand[i]);
	fprintf(stderr, "  (set %s to its path to override)\n", env);
	return -1;
}

/*
 * Fill r->lib and r->dump.  Returns 0, or -1 after a message naming what is
 * missing and where it was looked for.
 */
int hr_find_paths(struct hr_run *r)
{
	char exe[PATH_MAX];
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	if (n < 0) {
		hr_err("readlink /proc/self/exe: %s (is /proc mounted?)", strerror(errno));
		return -1;
	}
	exe[n] = '\0';
	char *slash = strrchr(exe, '/');
	if (!slash) {
		hr_err("/proc/self/exe is not a path: %s", exe);
		return -1;
	}
	*slash = '\0';

	static const char *const lib_cand[] = {
		HR_LIBDIR_REL "/libheisen.so", /* installed: bindir -> libdir/heisen */
		"../shim/libheisen.so",        /* meson build tree */
	};
	static const char *const dump_cand[] = {
		"heisen-dump",           /* installed: same bindir */
		"../dumper/heisen-dump", /* meson build tree */
	};
	if (find_one("libheisen.so", "HEISEN_LIB", R_OK, exe, lib_cand, 2, r->lib) < 0)
		return -1;
	if (find_one("heisen-dump", "HEISEN_DUMP", X_OK, exe, dump_cand, 2, r->dump) < 0)
		return -1;
	return 0;
}

/*
 * Open the session directory `dir` (relative to the current directory if
 * not absolute) without trusting anyone else's path components
 * (include/internal/dir_walk.h): every component opened with O_NOFOLLOW |
 * O_DIRECTORY from its parent, a symbolic link followed only when root or
 * we own it, no directory of another user or writable by all (without the
 * sticky bit) on the way, and the directory itself ours and not writable
 * by group or others.  Missing components are made as `create` says
 * (HS_WALK_CREATE_*: parents 0755, the last 0700).  Returns the O_DIRECTORY | O_CLOEXEC descriptor
 * and the path without symbolic links in canon[PATH_MAX]; or -1 with the
 * reason in why[whylen] (it names the component), nothing printed.
 */
int hr_dir_open_safe(const char *dir, int create, char *canon, char *why, size_t whylen)
{
	static struct hs_walk_fail f;
	char abs[PATH_MAX];
	int fd;
	if (dir[0] != '/') {
		if (!getcwd(abs, sizeof abs)) {
			snprintf(why, whylen, "%s: cannot know the current directory: %s", dir, strerror(errno));
			return -1;
		}
		size_t n = strlen(abs);
		if (snprintf(abs + n, sizeof abs - n, "/%s", dir) >= (int)(sizeof abs - n)) {
			snprintf(why, whylen, "%s: path too long", dir);
			return -1;
		}
	} else if (snprintf(abs, sizeof abs, "%s", dir) >= (int)sizeof abs) {
		snprintf(why, whylen, "%s: path too long", dir);
		return -1;
	}
	if ((fd = hs_dir_walk(abs, create, 0755, canon, PATH_MAX, &f)) >= 0)
		return fd;
	int k = snprintf(why, whylen, "%s %s", f.at[0] ? f.at : abs, f.why);
	if (k > 0 && (size_t)k < whylen && strstr(f.why, "owned"))
		k += snprintf(why + k, whylen - (size_t)k, " (uid %u)", f.uid);
	if (k > 0 && (size_t)k < whylen && f.err)
		snprintf(why + k, whylen - (size_t)k, ": %s", strerror(f.err));
	return -1;
}
