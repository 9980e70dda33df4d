/* SPDX-License-Identifier: MIT */
/*
 * launcher/session.c — the session directory and the command's environment.
 *
 * A session is one directory that every process of the tree writes its
 * segment into (docs/interfaces.md "Session directory").  heisen-run picks
 * it in this order: --dir DIR; else an inherited HEISEN_DIR (docs/design.md "Session":
 * the way to put sessions on a volume when /dev/shm is small); else a new
 * /dev/shm/heisen-$UID/<basename of CMD>-<pid of heisen-run>-<unix seconds>.
 * The base directory /dev/shm/heisen-$UID is shared by every run of one user
 * in a world-writable tmpfs; it, and an explicit directory (--dir,
 * HEISEN_DIR), are opened one component at a time (paths.c
 * hr_dir_open_safe: nobody else's symbolic link or directory on the way, the
 * directory ours and private), and the session directory is made inside the
 * base with mkdirat on the opened descriptor, so nobody can swap a path
 * component between the check and the use.  When that place cannot be used
 * (no /dev/shm, read-only, planted by someone else) heisen-run falls back
 * to $XDG_RUNTIME_DIR/heisen, then /tmp/heisen-$UID, and at worst runs the
 * command without recording: it never keeps the program from starting.
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

#include <internal/dir_walk.h>
#include <internal/seg_dir.h>

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
 * An explicit session directory: --dir or an inherited HEISEN_DIR, opened
 * component by component (hr_dir_open_safe: no other user's symbolic link
 * or directory on the way, the directory ours and private) and made 0700
 * with 0755 parents if missing.  Returns 0, or -1 with the reason in why.
 */
static int open_explicit(struct hr_run *r, const char *dir, const char *from, char *why, size_t whylen)
{
	struct stat st;
	char reason[PATH_MAX + 200];
	int existed = lstat(dir, &st) == 0;
	int fd = hr_dir_open_safe(dir, HS_WALK_CREATE_ALL, r->session, reason, sizeof reason);
	if (fd < 0) {
		snprintf(why, whylen, "%s %s: %s", from, dir, reason);
		return -1;
	}
	if (faccessat(fd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		snprintf(why, whylen, "%s %s is not writable: %s", from, r->session, strerror(errno));
		close(fd);
		return -1;
	}
	r->session_fd = fd;
	r->session_created = !existed;
	if (existed && hr_seg_count(r->session_fd) > 0)
		hr_warn(r, "session directory %s already holds segments; they will be reported too",
			r->session);
	return 0;
}

/*
 * A new session named after the command inside base (a directory of ours,
 * made 0700 and opened safely if missing): fills r->session, r->session_fd.
 * Returns 0, or -1 with the reason in why.
 */
static int open_in_base(struct hr_run *r, const char *base, char *why, size_t whylen)
{
	char canon[PATH_MAX], reason[PATH_MAX + 200], stem[80], name[160];
	struct stat st;
	/* a base shared by every run of the user is never a symbolic link, even one root made */
	if (lstat(base, &st) == 0 && S_ISLNK(st.st_mode)) {
		snprintf(why, whylen, "%s is a symbolic link; refusing to use it", base);
		return -1;
	}
	int bfd = hr_dir_open_safe(base, HS_WALK_CREATE_LAST, canon, reason, sizeof reason);
	if (bfd < 0) {
		snprintf(why, whylen, "%s", reason);
		return -1;
	}
	if (fstat(bfd, &st) == 0 && (st.st_mode & 077))
		(void)fchmod(bfd, 0700);
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
			snprintf(why, whylen, "cannot create %s/%s: %s", canon, name, strerror(errno));
			close(bfd);
			return -1;
		}
	}
	r->session_fd = openat(bfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (r->session_fd < 0) {
		snprintf(why, whylen, "open %s/%s: %s", canon, name, strerror(errno));
		close(bfd);
		return -1;
	}
	/* a read-only file system makes mkdir fail first; anything else that forbids writing shows here */
	if (faccessat(r->session_fd, ".", W_OK | X_OK, AT_EACCESS) < 0) {
		snprintf(why, whylen, "%s/%s is not writable: %s", canon, name, strerror(errno));
		close(r->session_fd);
		r->session_fd = -1;
		(void)unlinkat(bfd, name, AT_REMOVEDIR);
		close(bfd);
		return -1;
	}
	close(bfd);
	if (snprintf(r->session, sizeof r->session, "%s/%s", canon, name) >= (int)sizeof r->session) {
		snprintf(why, whylen, "%s/%s: path too long", canon, name);
		close(r->session_fd);
		r->session_fd = -1;
		return -1;
	}
	r->session_created = 1;
	r->session_auto = 1;
	return 0;
}

/*
 * Choose and open the session directory: fills r->session (absolute),
 * r->session_fd and r->session_created.  The order is --dir, an inherited
 * HEISEN_DIR, /dev/shm/heisen-$UID (see the top of this file); when the
 * place asked for or the default cannot be used (missing or read-only
 * /dev/shm, a read-only --dir, a base someone else planted), the next of
 * /dev/shm/heisen-$UID, $XDG_RUNTIME_DIR/heisen, /tmp/heisen-$UID is tried,
 * each refusal said on stderr (even with --quiet); when none works, the
 * command runs without recording (r->not_recording) and that is said too.
 * Always returns 0: heisen never keeps the program from running.
 */
int hr_session_open(struct hr_run *r)
{
	char why[PATH_MAX + 400], base[PATH_MAX];
	const char *env = getenv("HEISEN_DIR");
	int tried = 0;

	r->session_fd = -1;
	if (r->dir_opt || (env && *env)) {
		const char *from = r->dir_opt ? "--dir" : "HEISEN_DIR";
		if (open_explicit(r, r->dir_opt ? r->dir_opt : env, from, why, sizeof why) == 0)
			return 0;
		fprintf(stderr, HR_NAME ": cannot record into %s\n", why);
		tried = 1;
	}
	const char *xdg = getenv("XDG_RUNTIME_DIR");
	for (int i = 0; i < 3; i++) {
		if (i == 0)
			snprintf(base, sizeof base, "/dev/shm/heisen-%u", (unsigned)getuid());
		else if (i == 1 && xdg && xdg[0] == '/')
			snprintf(base, sizeof base, "%s/heisen", xdg);
		else if (i == 2)
			snprintf(base, sizeof base, "/tmp/heisen-%u", (unsigned)getuid());
		else
			continue;
		if (open_in_base(r, base, why, sizeof why) == 0) {
			if (tried)
				fprintf(stderr, HR_NAME ": recording into %s instead\n", r->session);
			return 0;
		}
		fprintf(stderr, HR_NAME ": cannot record into %s: %s\n", base, why);
		tried = 1;
	}
	r->not_recording = 1;
	r->session[0] = '\0';
	fprintf(stderr, HR_NAME ": NOT RECORDING: no usable session directory (see above); "
			"running the command without heisen\n");
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
	if (r->not_recording) {
		/* no session: the command runs as it would without heisen-run (no LD_PRELOAD of ours) */
		if (!r->dump_env || !r->child_env) {
			hr_err("out of memory");
			return -1;
		}
		return 0;
	}
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
	if (r->session_fd < 0)
		return;
	if (!only_if_empty) {
		/* A new open file description: its own readdir position. */
		DIR *d = hs_seg_dir_open(r->session_fd);
		if (d) {
			struct hs_seg_dirent de;
			while (hs_seg_dir_next(d, &de))
				if (de.kind == HS_NAME_SEGMENT || de.kind == HS_NAME_MISNAMED)
					(void)unlinkat(r->session_fd, de.name, 0);
			closedir(d);
		}
	}
	if (!only_if_empty || (r->session_created && r->session_auto))
		(void)unlinkat(r->session_fd, HS_SEG_ENV_CACHE, 0); /* the shim's cache, not a record */
	if (!only_if_empty || (r->session_created && r->session_auto))
		(void)unlinkat(r->session_fd, HS_SEG_FRAMES, 0); /* the shim's learnt frame distances, likewise */
	if (r->session_created && (r->session_auto || !only_if_empty))
		(void)rmdir(r->session);
}
