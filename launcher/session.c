/* SPDX-License-Identifier: MIT */
/*
 * launcher/session.c — the session directory and the command's environment.
 *
 * A session is one directory that every process of the tree writes its
 * segment into (docs/interfaces.md "Session directory").  heisen-run picks
 * it in this order: --dir DIR; else an inherited HEISEN_DIR (DESIGN.md: the
 * way to put sessions on a volume when /dev/shm is small); else a new
 * /dev/shm/heisen-$UID/<basename of CMD>-<pid of heisen-run>-<unix seconds>.
 * The base directory /dev/shm/heisen-$UID is shared by every run of one user
 * in a world-writable tmpfs, so it is opened without following symlinks and
 * must be a directory owned by us; the session directory is made inside it
 * with mkdirat on the opened descriptor, so nobody can swap a path component
 * between the check and the use.  An explicit directory (--dir, HEISEN_DIR)
 * is trusted as given, made 0700 with its parents if missing.
 *
 * The command gets HEISEN_DIR=<session> and LD_PRELOAD=<absolute libheisen.so>
 * followed by the user's own preloads; heisen-dump gets neither.  A clean
 * run in the default place is removed at the end (main.c), as --rm does;
 * a directory the user named is kept.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

extern char **environ;

/* A file-name-safe copy of basename(cmd) into out[n], never empty. */
static void session_stem(const char *cmd, char *out, size_t n)
{
	const char *b = strrchr(cmd, '/');
	b = b ? b + 1 : cmd;
	size_t j = 0;
	for (; *b && j + 1 < n && j < 64; b++) {
		char c = *b;
		int ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
			 c == '.' || c == '_' || c == '-' || c == '+';
		out[j++] = ok ? c : '_';
	}
	if (j == 0 || out[0] == '.')
		out[j > 0 ? 0 : j++] = '_';
	out[j] = '\0';
}

/*
 * Open (creating it 0700 if missing) /dev/shm/heisen-$UID into path[n].
 * Refuses a symlink, a non-directory, and a directory owned by someone else;
 * tightens a directory of ours that others may enter to 0700.  Returns the
 * O_DIRECTORY descriptor or -1 after a message.
 */
static int open_base(char *path, size_t n)
{
	struct stat st;
	snprintf(path, n, "/dev/shm/heisen-%u", (unsigned)getuid());
	if (mkdir(path, 0700) < 0 && errno != EEXIST) {
		hr_err("cannot create %s: %s", path, strerror(errno));
		return -1;
	}
	if (lstat(path, &st) < 0) {
		hr_err("lstat %s: %s", path, strerror(errno));
		return -1;
	}
	if (S_ISLNK(st.st_mode)) {
		hr_err("%s is a symbolic link; refusing to use it (remove it, or pass --dir)", path);
		return -1;
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0) {
		hr_err("open %s: %s", path, strerror(errno));
		return -1;
	}
	/* Checked again on the descriptor: the path may have changed since lstat. */
	if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode)) {
		hr_err("%s is not a directory; refusing to use it", path);
		close(fd);
		return -1;
	}
	if (st.st_uid != getuid()) { /* the shim checks the same (shim/segment.c) */
		hr_err("%s is owned by uid %u, not by us (uid %u); refusing to use it (pass --dir)",
		       path, (unsigned)st.st_uid, (unsigned)getuid());
		close(fd);
		return -1;
	}
	if ((st.st_mode & 077) && fchmod(fd, 0700) < 0) {
		hr_err("chmod 0700 %s: %s", path, strerror(errno));
		close(fd);
		return -1;
	}
	return fd;
}

/* mkdir -p for an explicit directory: parents 0755, the last one 0700. */
static int make_dirs(const char *dir)
{
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s", dir) >= (int)sizeof p) {
		errno = ENAMETOOLONG;
		return -1;
	}
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = '\0';
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -1;
		*s = '/';
	}
	if (mkdir(p, 0700) < 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* An explicit session directory: --dir or an inherited HEISEN_DIR. */
static int open_explicit(struct hr_run *r, const char *dir, const char *from)
{
	struct stat st;
	int existed = stat(dir, &st) == 0;
	if (!existed && make_dirs(dir) < 0) {
		hr_err("cannot create %s directory %s: %s", from, dir, strerror(errno));
		return -1;
	}
	if (!realpath(dir, r->session)) {
		hr_err("%s %s: %s", from, dir, strerror(errno));
		return -1;
	}
	r->session_fd = open(r->session, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (r->session_fd < 0) {
		hr_err("%s %s: %s", from, r->session, strerror(errno));
		return -1;
	}
	if (access(r->session, W_OK | X_OK) < 0) {
		hr_err("%s %s is not writable: %s", from, r->session, strerror(errno));
		return -1;
	}
	r->session_created = !existed;
	if (existed && hr_seg_count(r->session_fd) > 0)
		hr_warn(r, "session directory %s already holds segments; they will be reported too",
			r->session);
	return 0;
}

/*
 * Choose and open the session directory (see the top of this file): fills
 * r->session (absolute), r->session_fd and r->session_created.  Returns 0,
 * or -1 after a message; nothing is left behind on failure except a base
 * directory that was missing.
 */
int hr_session_open(struct hr_run *r)
{
	if (r->dir_opt)
		return open_explicit(r, r->dir_opt, "--dir");
	const char *env = getenv("HEISEN_DIR");
	if (env && *env)
		return open_explicit(r, env, "HEISEN_DIR");

	char base[128], stem[80], name[160];
	int bfd = open_base(base, sizeof base);
	if (bfd < 0)
		return -1;
	session_stem(r->cmd[0], stem, sizeof stem);
	long now = (long)time(NULL);
	for (int i = 0; i < 100; i++) {
		/* Two containers' PID 1 may share /dev/shm and start in one second. */
		if (i == 0)
			snprintf(name, sizeof name, "%s-%d-%ld", stem, (int)getpid(), now);
		else
			snprintf(name, sizeof name, "%s-%d-%ld.%d", stem, (int)getpid(), now, i);
		if (mkdirat(bfd, name, 0700) == 0)
			break;
		if (errno != EEXIST || i == 99) {
			hr_err("cannot create %s/%s: %s", base, name, strerror(errno));
			close(bfd);
			return -1;
		}
	}
	r->session_fd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	int e = errno;
	close(bfd);
	if (r->session_fd < 0) {
		hr_err("open %s/%s: %s", base, name, strerror(e));
		return -1;
	}
	snprintf(r->session, sizeof r->session, "%s/%s", base, name);
	r->session_created = 1;
	r->session_auto = 1;
	return 0;
}

static int is_heisen_lib(const char *tok, size_t len)
{
	static const char lib[] = "libheisen.so";
	size_t l = sizeof lib - 1;
	return len >= l && memcmp(tok + len - l, lib, l) == 0 && (len == l || tok[len - l - 1] == '/');
}

/*
 * The LD_PRELOAD value for the command: `ours` first, then the entries of
 * `existing` (separated by spaces or colons, as ld.so splits them) in their
 * order, without any libheisen.so (ours or another build's: two shims in one
 * process would both record).  Returns a malloc'd string, or NULL on ENOMEM.
 */
char *hr_preload_value(const char *ours, const char *existing)
{
	size_t cap = strlen(ours) + (existing ? strlen(existing) : 0) + 2;
	char *v = malloc(cap);
	if (!v)
		return NULL;
	strcpy(v, ours);
	size_t len = strlen(v);
	for (const char *p = existing; p && *p;) {
		size_t n = strcspn(p, " :");
		if (n > 0 && !is_heisen_lib(p, n)) {
			v[len++] = ':';
			memcpy(v + len, p, n);
			len += n;
			v[len] = '\0';
		}
		p += n;
		if (*p)
			p++;
	}
	return v;
}

/* "NAME=value" in a new malloc'd string, or NULL. */
static char *env_entry(const char *name, const char *value)
{
	size_t n = strlen(name) + strlen(value) + 2;
	char *s = malloc(n);
	if (s)
		snprintf(s, n, "%s=%s", name, value);
	return s;
}

/* environ without LD_PRELOAD and HEISEN_DIR (and PYTHONMALLOC when
 * drop_pymalloc), with room for `extra` more entries; NULL on ENOMEM.
 * Entries are shared with environ. */
static char **env_without_ours(size_t extra, size_t *count, int drop_pymalloc)
{
	size_t n = 0;
	while (environ && environ[n])
		n++;
	char **e = calloc(n + extra + 1, sizeof *e);
	if (!e)
		return NULL;
	size_t j = 0;
	for (size_t i = 0; i < n; i++) {
		if (strncmp(environ[i], "LD_PRELOAD=", 11) == 0 || strncmp(environ[i], "HEISEN_DIR=", 11) == 0 ||
		    strncmp(environ[i], "HEISEN_SESSION_AUTO=", 20) == 0 || /* heisen-run removes its own sessions */
		    strncmp(environ[i], "HEISEN_WARNINGS_FILE=", 21) == 0)
			continue;
		if (drop_pymalloc && strncmp(environ[i], "PYTHONMALLOC=", 13) == 0)
			continue;
		e[j++] = environ[i];
	}
	*count = j;
	return e;
}

/*
 * Build r->child_env (HEISEN_DIR and LD_PRELOAD set, see the top of this
 * file; with --python-malloc also PYTHONMALLOC=malloc, replacing the
 * user's) and r->dump_env (neither).  Our own environment is not changed.
 * Returns 0, or -1 after a message (ENOMEM).
 */
int hr_build_envs(struct hr_run *r)
{
	size_t n;
	r->dump_env = env_without_ours(0, &n, 0);
	r->child_env = env_without_ours(4, &n, r->python_malloc);
	char *pre = hr_preload_value(r->lib, getenv("LD_PRELOAD"));
	if (!r->dump_env || !r->child_env || !pre) {
		hr_err("out of memory");
		return -1;
	}
	const char *old = getenv("LD_PRELOAD");
	for (const char *p = old; p && *p;) {
		size_t k = strcspn(p, " :");
		if (k > 0 && is_heisen_lib(p, k) && (strlen(r->lib) != k || memcmp(p, r->lib, k) != 0))
			hr_warn(r, "dropped %.*s from LD_PRELOAD: using %s", (int)k, p, r->lib);
		p += k;
		if (*p)
			p++;
	}
	r->child_env[n++] = env_entry("LD_PRELOAD", pre);
	r->child_env[n++] = env_entry("HEISEN_DIR", r->session);
	free(pre);
	char warnings[PATH_MAX + 32];
	snprintf(warnings, sizeof warnings, "%s/" HR_WARNINGS_NAME, r->session);
	/* heisen's warnings go into the session, printed at the end (hr_session_warnings) */
	r->child_env[n++] = env_entry("HEISEN_WARNINGS_FILE", warnings);
	if (!r->child_env[n - 1] || !r->child_env[n - 2] || !r->child_env[n - 3]) {
		hr_err("out of memory");
		return -1;
	}
	/* CPython's small objects then come from malloc, where the heap checker sees them */
	if (r->python_malloc && !(r->child_env[n++] = env_entry("PYTHONMALLOC", "malloc"))) {
		hr_err("out of memory");
		return -1;
	}
	return 0;
}

/*
 * Print what libheisen.so wrote into the session's warnings file
 * (HR_WARNINGS_NAME, see hr_build_envs) on stderr, each line after
 * "heisen-run: ", unless --quiet; then remove the file.  The program's own
 * stderr never carries heisen's warnings under heisen-run.
 */
void hr_session_warnings(struct hr_run *r)
{
	int fd = openat(r->session_fd, HR_WARNINGS_NAME, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK);
	if (fd < 0)
		return;
	struct stat st;
	FILE *f = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) ? fdopen(fd, "r") : NULL;
	if (!f) {
		close(fd);
	} else {
		char line[1024];
		while (!r->quiet && fgets(line, sizeof line, f)) {
			size_t l = strlen(line);
			fprintf(stderr, HR_NAME ": %s%s", line, l && line[l - 1] == '\n' ? "" : "\n");
		}
		fclose(f);
	}
	(void)unlinkat(r->session_fd, HR_WARNINGS_NAME, 0);
}

/* Remove "*.seg" files from the session (only_if_empty == 0), then the
 * directory itself if this run made it and it is now empty — with
 * only_if_empty, only a default /dev/shm session: a directory the user named
 * stays, even empty.  Errors are ignored: what is left is only a leftover,
 * never a wrong result. */
void hr_session_remove_if_clean(struct hr_run *r, int only_if_empty)
{
	if (!only_if_empty) {
		/* A new open file description: its own readdir position. */
		int fd = openat(r->session_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		DIR *d = fd >= 0 ? fdopendir(fd) : NULL;
		if (d) {
			struct dirent *de;
			while ((de = readdir(d))) {
				size_t l = strlen(de->d_name);
				if (l > 4 && strcmp(de->d_name + l - 4, ".seg") == 0)
					(void)unlinkat(r->session_fd, de->d_name, 0);
			}
			closedir(d);
		} else if (fd >= 0) {
			close(fd);
		}
	}
	if (r->session_created && (r->session_auto || !only_if_empty))
		(void)rmdir(r->session);
}
