/* SPDX-License-Identifier: MIT */
/*
 * shim/segment.c — the session directory and this process's segment: where
 * it lives, how it is created and sized so that a full /dev/shm is an error
 * and never a SIGBUS, how it says who the process is and how it ended, and
 * the module and string tables that let heisen-dump symbolize after the
 * process is gone.  docs/design.md "The flight recorder"; format in
 * include/heisen/format.h; the directory contract in docs/interfaces.md.
 *
 * Everything reachable from hs_segment_create(1) (the fork child) is
 * async-signal-safe: raw system calls through hs_sys, no malloc, no stdio.
 */
#include <dirent.h>
#include <elf.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <link.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <internal/dir_walk.h>
#include <linux/openat2.h>
#include <internal/seg_dir.h>

#include "shim.h"

HS_HOT_BSS struct hs_seg hs_seg;
HS_HOT_BSS int hs_recording;
HS_HOT_BSS uint32_t hs_seg_gen;
HS_HOT_BSS int hs_seg_inherited;
HS_HOT_BSS int hs_quiet;
uint64_t hs_self_lo, hs_self_hi;

HS_HOT_BSS_TAIL static char session_dir[PATH_MAX];
HS_HOT_BSS static int session_default;    /* the session is under /dev/shm/heisen-$UID (not HEISEN_DIR) */
static struct hs_geometry geometry = HS_GEOMETRY_DEFAULT;
HS_HOT_BSS static int modules_lock;       /* [atomic] serializes module table appends */

/* ---- small async-signal-safe helpers ------------------------------------ */

/* HEISEN_WARNINGS_FILE as read at start-up ("" = write to stderr). */
static char warnings_file[PATH_MAX];

void hs_warnings_init(void)
{
	const char *w = getenv("HEISEN_WARNINGS_FILE");
	size_t n = w ? strlen(w) : 0;
	if (n > 0 && n < sizeof warnings_file && w[0] == '/')
		memcpy(warnings_file, w, n + 1);
}

void hs_write_err(const char *msg)
{
	size_t n = strlen(msg);
	int fd = 2;
	if (warnings_file[0]) {
		/* opened per message: no descriptor of ours for the program to close or reuse */
		long f = hs_sys.openat(AT_FDCWD, warnings_file,
				 O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC | O_NOFOLLOW | O_NOCTTY | O_NONBLOCK, 0600);
		if (f < 0)
			return; /* under heisen-run, never the program's stderr (shim.h) */
		fd = (int)f;
	}
	while (n > 0) {
		ssize_t w = hs_sys.write(fd, msg, n);
		if (w <= 0)
			break;
		msg += w;
		n -= (size_t)w;
	}
	if (fd != 2)
		hs_sys.close(fd);
}

size_t hs_fmt_u64(char *buf, uint64_t v)
{
	char tmp[24];
	size_t n = 0, i;
	do {
		tmp[n++] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	for (i = 0; i < n; i++)
		buf[i] = tmp[n - 1 - i];
	buf[n] = '\0';
	return n;
}

/* Append src to dst (capacity cap), always NUL-terminating. Returns new length. */
static size_t cat(char *dst, size_t len, size_t cap, const char *src)
{
	while (*src && len + 1 < cap)
		dst[len++] = *src++;
	dst[len] = '\0';
	return len;
}

/* "heisen: <a><b><c> (<errno text>)\n" on stderr unless quiet. */
static void warn3(const char *a, const char *b, const char *c, int err)
{
	char buf[PATH_MAX + 256];
	size_t n = 0;
	if (hs_quiet)
		return;
	n = cat(buf, n, sizeof buf, "heisen: ");
	n = cat(buf, n, sizeof buf, a);
	n = cat(buf, n, sizeof buf, b ? b : "");
	n = cat(buf, n, sizeof buf, c ? c : "");
	if (err) {
		n = cat(buf, n, sizeof buf, " (");
		n = cat(buf, n, sizeof buf, strerrorname_np(err) ? strerrorname_np(err) : "error");
		n = cat(buf, n, sizeof buf, ")");
	}
	cat(buf, n, sizeof buf, "\n");
	hs_write_err(buf);
}

ssize_t hs_read_small(const char *path, char *buf, size_t cap)
{
	int fd = hs_sys.open(path, O_RDONLY | O_CLOEXEC, 0);
	ssize_t n = 0, r;
	if (fd < 0)
		return -1;
	while ((size_t)n < cap - 1 && (r = hs_sys.read(fd, buf + n, cap - 1 - (size_t)n)) > 0) {
		n += r;
		/* a short read of a file smaller than a page is its end (procfs, sysfs and
		   cgroupfs hand out a page at a time): spare the read that returns 0 */
		if ((size_t)r < cap - 1 - (size_t)(n - r) && n < 4096)
			break;
	}
	hs_sys.close(fd);
	buf[n] = '\0';
	return n;
}

/* The decimal number at *p (digits only, no sign or space), *end past it.
 * libc's strtoull is not used here: nothing else of an image's start calls
 * it, and its code is two pages of libc each image would fault in
 * (bench/README.md "Process start: page-table pages"). */
static uint64_t decimal(const char *p, const char **end)
{
	uint64_t v = 0;
	for (; *p >= '0' && *p <= '9'; p++)
		v = v * 10 + (uint64_t)(*p - '0');
	if (end)
		*end = p;
	return v;
}

/* Field 22 (starttime) of /proc/self/stat: tells a reused pid apart.  Field
 * 24 (rss, pages: the resident set statm's second field gives) of the same
 * read into *rss_pages (left alone when absent): the new header's rss_bytes
 * before any sample, which the start sample takes (proc.c hs_mem_sample). */
static __attribute__((noinline)) uint64_t read_start_ticks(uint64_t *rss_pages)
{
	char buf[1024];
	const char *p, *end;
	int field = 2;
	uint64_t ticks;
	if (hs_read_small("/proc/self/stat", buf, sizeof buf) <= 0)
		return 0;
	p = strrchr(buf, ')');
	if (!p)
		return 0;
	for (; *p && field < 22; p++)
		if (*p == ' ')
			field++;
	ticks = decimal(p, &end);
	/* " vsize rss": two fields on */
	for (p = end; *p && field < 24; p++)
		if (*p == ' ')
			field++;
	if (field == 24 && *p >= '0' && *p <= '9')
		*rss_pages = decimal(p, NULL);
	return ticks;
}

/* ---- session directory ---------------------------------------------------- */

/* mkdir -p with mode 0700 for the components we create. */
static int mkdir_p(char *path)
{
	/* the common case first: the parent exists (one system call) */
	if (hs_sys.mkdir(path, 0700) == 0 || errno == EEXIST)
		return 0;
	for (char *p = path + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (hs_sys.mkdir(path, 0700) != 0 && errno != EEXIST) {
			*p = '/';
			return -1;
		}
		*p = '/';
	}
	if (hs_sys.mkdir(path, 0700) != 0 && errno != EEXIST)
		return -1;
	return 0;
}

/* The base directory /dev/shm/heisen-$UID must be a real directory of ours. */
static int check_base(const char *base)
{
	struct stat st;
	if (hs_sys.mkdir(base, 0700) != 0 && errno != EEXIST)
		return -1;
	if (hs_sys.lstat(base, &st) != 0)
		return -1;
	if (!S_ISDIR(st.st_mode) || st.st_uid != getuid() || (st.st_mode & 0077)) {
		errno = EPERM;
		return -1;
	}
	return 0;
}

/*
 * Open the session directory `path` (absolute) one component at a time
 * (include/internal/dir_walk.h: no symbolic link or directory of another
 * user on the way, the directory ours and not writable by others), making
 * missing components 0700, and put its path without symbolic links in
 * out[PATH_MAX].  Returns 0, or -1 after a warning saying what was refused
 * and why (the process is then not recorded).
 */
/* "<st_dev>:<st_ino>" of a directory, for HEISEN_SESSION_DIR_ID. */
static void dir_id(char *out, size_t cap, const struct stat *st)
{
	char num[24];
	size_t n;
	hs_fmt_u64(num, (uint64_t)st->st_dev);
	n = cat(out, 0, cap, num);
	n = cat(out, n, cap, ":");
	hs_fmt_u64(num, (uint64_t)st->st_ino);
	cat(out, n, cap, num);
}

/* path is absolute and canonical: no empty, "." or ".." component, no
 * trailing slash (what hs_dir_walk writes into its canon). */
static int path_canonical(const char *path)
{
	size_t n = strlen(path);
	if (path[0] != '/' || n < 2 || n >= PATH_MAX || path[n - 1] == '/')
		return 0;
	for (const char *c = path; *c; c++)
		if (c[0] == '/' && (c[1] == '/' || (c[1] == '.' && (c[2] == '/' || !c[2] ||
								      (c[2] == '.' && (c[3] == '/' || !c[3]))))))
			return 0;
	return 1;
}

/*
 * The session directory of an image whose session an earlier process (its
 * parent, or the parent's parent) opened by the walk below: HEISEN_DIR is
 * then the walk's canonical path and HEISEN_SESSION_DIR_ID the walked
 * directory's "<st_dev>:<st_ino>" (session_dir_open exports both).  One
 * openat2 with RESOLVE_NO_SYMLINKS (no symbolic link anywhere on the way,
 * so no link of anyone's decides where it leads) and one fstat: the
 * directory must be that same one, still ours and not writable by group or
 * others.  What the walk checks on the directories on the way it checked
 * for this directory already: whoever may rename entries there can put
 * another directory at this path, never this one, and any other one fails
 * the identity check.  Replaces the walk's 12 system calls and its 16 KiB of
 * stack (4 fresh stack pages) in every image but a session's first
 * (bench/README.md "Process start: no symbol scans, no CPUID, fewer system calls").  0 and
 * the path in out[PATH_MAX], or -1: then the walk decides (an older kernel
 * without openat2, a symbolic link on the way, another directory, no id).
 */
static __attribute__((noinline)) int session_dir_reopen(const char *path, char *out)
{
	struct open_how how = {.flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
			       .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
	const char *want = getenv("HEISEN_SESSION_DIR_ID");
	char id[48];
	struct stat st;
	int fd, ok;
	if (!want || !path_canonical(path))
		return -1;
	fd = (int)syscall(SYS_openat2, AT_FDCWD, path, &how, sizeof how);
	if (fd < 0)
		return -1;
	ok = hs_sys.fstatat(fd, "", &st, AT_EMPTY_PATH) == 0 && S_ISDIR(st.st_mode) && st.st_uid == geteuid() && !(st.st_mode & 022);
	hs_sys.close(fd);
	if (!ok)
		return -1;
	dir_id(id, sizeof id, &st);
	if (strcmp(id, want) != 0)
		return -1;
	cat(out, 0, PATH_MAX, path);
	return 0;
}

/*
 * Put HEISEN_SESSION_DIR_ID=id into the environment the process's children
 * inherit, without malloc: a session's first image is often a command that
 * never allocates (a test's, a script's first), and setenv's malloc would
 * set up glibc's heap in it (getrandom, two brk, the heap checker's first
 * block).  An entry of that name is pointed at our static string; a new
 * one goes into a static copy of the environ array, and environ points at
 * it (POSIX lets a program assign environ; glibc's setenv and putenv copy
 * an array they did not allocate before they change it, unsetenv moves its
 * entries in place).  An environment of more than ENV_SLOTS - 2 entries
 * gets setenv.  A program that passes main's envp to execve instead of
 * environ drops the variable: its children walk the path themselves.
 */
#define ENV_SLOTS 512
static char *env_slots[ENV_SLOTS];
static char dir_id_var[sizeof "HEISEN_SESSION_DIR_ID=" + 48];

static void export_dir_id(const char *id)
{
	static const char name[] = "HEISEN_SESSION_DIR_ID=";
	size_t n = 0;
	const char *now = getenv("HEISEN_SESSION_DIR_ID");
	if (now && strcmp(now, id) == 0)
		return;
	cat(dir_id_var, cat(dir_id_var, 0, sizeof dir_id_var, name), sizeof dir_id_var, id);
	for (char **e = environ; e && *e; e++, n++)
		if (strncmp(*e, name, sizeof name - 1) == 0) {
			*e = dir_id_var;
			return;
		}
	if (n + 2 > ENV_SLOTS) {
		setenv("HEISEN_SESSION_DIR_ID", id, 1);
		return;
	}
	if (n)
		memcpy(env_slots, environ, n * sizeof *environ);
	env_slots[n] = dir_id_var;
	env_slots[n + 1] = NULL;
	environ = env_slots;
}

/* The walk and its refusal (session_dir_open): a frame of its own, ~20 KiB
 * of buffers (the walk's, the failure's path), which an image that reopens
 * its directory never touches (5 fresh stack pages less). */
static __attribute__((noinline)) int session_dir_walk(const char *path, char *out)
{
	/* on the stack: init runs on the main thread, whose stack ld.so's start-up
	   has already made resident this deep; a static one was two pages of .bss
	   (its head and its tail) written by every image */
	struct hs_walk_fail f;
	char num[24], msg[160];
	size_t n = 0;
	int fd = hs_dir_walk(path, HS_WALK_CREATE_ALL, 0700, out, PATH_MAX, &f);
	if (fd >= 0) {
		struct stat st;
		char id[48];
		/* for the images after this one (session_dir_reopen) */
		if (hs_sys.fstatat(fd, "", &st, AT_EMPTY_PATH) == 0) {
			dir_id(id, sizeof id, &st);
			export_dir_id(id);
		}
		hs_sys.close(fd);
		return 0;
	}
	n = cat(msg, n, sizeof msg, " ");
	n = cat(msg, n, sizeof msg, f.why);
	if (strstr(f.why, "owned")) {
		hs_fmt_u64(num, f.uid);
		n = cat(msg, n, sizeof msg, " (uid ");
		n = cat(msg, n, sizeof msg, num);
		n = cat(msg, n, sizeof msg, ")");
	}
	cat(msg, n, sizeof msg, "; not recording this process");
	warn3("refusing session directory ", f.at[0] ? f.at : path, msg, f.err);
	return -1;
}

static int session_dir_open(const char *path, char *out)
{
	if (session_dir_reopen(path, out) == 0)
		return 0;
	return session_dir_walk(path, out);
}

/* ---- clean sessions do not pile up -------------------------------------- */

HS_HOT_BSS static struct hs_session_refs *refs;  /* <session>/session.refs, NULL = the session is kept */
static __thread int fork_counted;     /* the forking thread counted the child before fork() */
HS_HOT_BSS static int refs_left;                 /* [atomic] this image gave its reference back (or kept it) */

static void path2(char *out, size_t cap, const char *dir, const char *name)
{
	size_t n = cat(out, 0, cap, dir);
	n = cat(out, n, cap, "/");
	cat(out, n, cap, name);
}

/* One pass of remove_files: what it freed, whether it removed anything. */
struct remove_pass {
	int dfd;
	int progress;
	uint64_t freed;
};

static int remove_entry(void *arg, const char *name, unsigned type)
{
	struct remove_pass *r = arg;
	struct stat st;
	(void)type;
	if (name[0] == '.' && (!name[1] || (name[1] == '.' && !name[2])))
		return 0;
	if (hs_sys.fstatat(r->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return 0;
	if (hs_sys.unlinkat(r->dfd, name, S_ISDIR(st.st_mode) ? AT_REMOVEDIR : 0) == 0) {
		r->freed += (uint64_t)st.st_blocks * 512;
		r->progress = 1;
	}
	return 0;
}

/*
 * Remove the files (and empty subdirectories) of the directory dfd is open
 * on, a pass at a time from its start (entries are removed under the
 * cursor), until a pass removes nothing or the directory cannot be read
 * (hs_dir_each fails: what was removed stays removed, the rest is left).
 * Raw system calls only: it runs at exit, possibly in a fork child.
 * Returns the bytes freed.
 */
static uint64_t remove_files(int dfd)
{
	struct remove_pass r = {.dfd = dfd, .progress = 1};
	while (r.progress) {
		r.progress = 0;
		hs_sys.lseek(dfd, 0, SEEK_SET);
		if (hs_dir_each(dfd, remove_entry, &r) < 0)
			break;
	}
	return r.freed;
}

static uint64_t remove_dir(const char *path)
{
	uint64_t freed = 0;
	int dfd = hs_sys.open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (dfd >= 0) {
		freed = remove_files(dfd);
		hs_sys.close(dfd);
	}
	hs_sys.unlinkat(AT_FDCWD, path, AT_REMOVEDIR);
	return freed;
}

/*
 * Take a reference on the session at dir (made if missing): map its
 * session.refs (creating it) and increment live, unless the session is
 * being removed (HS_REFS_CLOSING): then wait (at most ~0.2 s) for it to be
 * renamed aside and start the session afresh.  Constructor only.
 */
static int refs_join(char *dir)
{
	char path[PATH_MAX];
	path2(path, sizeof path, dir, HS_REFS_FILE);
	for (int attempt = 0; attempt < 3; attempt++) {
		struct hs_session_refs *r;
		struct stat st;
		uint32_t v;
		int fd;
		if (mkdir_p(dir) != 0)
			return -1;
		fd = hs_sys.open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd < 0)
			return -1;
		if (hs_sys.fallocate(fd, 0, 4096) != 0) {
			hs_sys.close(fd);
			return -1;
		}
		r = hs_sys.mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
		hs_sys.close(fd);
		if (r == MAP_FAILED)
			return -1;
		memcpy(r->magic, HS_REFS_MAGIC, sizeof r->magic); /* every writer writes the same bytes */
		v = __atomic_load_n(&r->live, __ATOMIC_ACQUIRE);
		while (!(v & HS_REFS_CLOSING))
			if (__atomic_compare_exchange_n(&r->live, &v, v + 1, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
				refs = r;
				return 0;
			}
		hs_sys.munmap(r, 4096);
		for (int i = 0; i < 200 && hs_sys.lstat(path, &st) == 0; i++) {
			struct timespec ms = {0, 1000000};
			nanosleep(&ms, NULL);
		}
	}
	return -1;
}

void hs_session_fork_prepare(void)
{
	if (refs) {
		__atomic_add_fetch(&refs->live, 1, __ATOMIC_ACQ_REL);
		fork_counted = 1;
	}
}

void hs_session_fork_parent(int failed)
{
	if (refs && fork_counted && failed)
		__atomic_sub_fetch(&refs->live, 1, __ATOMIC_ACQ_REL);
	fork_counted = 0;
}

/* The fork child: a fork that did not come through our fork() (daemon(), a
 * library's internal fork) was not counted by the parent; count it here. */
HS_FORK_TEXT static void refs_fork_child(void)
{
	/* stores only where the value changes: each page of ours a fork child writes
	   is a copy-on-write fault before its exec (bench/README.md, "Process start:
	   the environment cache, no read-around") */
	if (__atomic_load_n(&refs_left, __ATOMIC_RELAXED))
		__atomic_store_n(&refs_left, 0, __ATOMIC_RELAXED);
	if (refs && !fork_counted)
		__atomic_add_fetch(&refs->live, 1, __ATOMIC_ACQ_REL);
	fork_counted = 0;
}

HS_FORK_TEXT int hs_session_fork_child(pid_t pid)
{
	/* a thread that held it does not exist in the child (read first: see refs_fork_child) */
	if (__atomic_load_n(&modules_lock, __ATOMIC_RELAXED))
		__atomic_store_n(&modules_lock, 0, __ATOMIC_RELAXED);
	refs_fork_child();
	if (!refs)
		return 0;
	for (uint32_t i = 0, k = (uint32_t)pid % HS_REFS_PENDING; i < HS_REFS_PENDING; i++, k = (k + 1) % HS_REFS_PENDING) {
		int32_t zero = 0;
		if (__atomic_compare_exchange_n(&refs->pending[k], &zero, (int32_t)pid, 0, __ATOMIC_ACQ_REL,
						__ATOMIC_RELAXED))
			return 0;
	}
	return -1;
}

/* Clear pid's slot of the pending table; 1 when it was there. */
static int pending_clear(pid_t pid)
{
	if (!refs)
		return 0;
	for (uint32_t i = 0, k = (uint32_t)pid % HS_REFS_PENDING; i < HS_REFS_PENDING; i++, k = (k + 1) % HS_REFS_PENDING) {
		int32_t v = __atomic_load_n(&refs->pending[k], __ATOMIC_ACQUIRE);
		if (v == (int32_t)pid &&
		    __atomic_compare_exchange_n(&refs->pending[k], &v, 0, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
			return 1;
	}
	return 0;
}

void hs_session_pending_drop(pid_t pid)
{
	pending_clear(pid);
}

/* Open fds created by this image (not inherited, not 0-2) left at one creation
 * stack, as many as heisen-dump's fd-leak rule (3) wants: 1 when some site did. */
static int fds_left_open(const struct hs_seg *s)
{
	const struct hs_table *t = &s->hdr->tables[HS_T_FDS];
	const struct hs_fd *fds = (const void *)((const char *)s->hdr + t->offset);
	uint32_t stacks[64], counts[64], n = 0;
	/* numbers this image created are at most fd_max: the slots above hold only inherited ones */
	uint64_t end = (uint64_t)__atomic_load_n(&s->hdr->fd_max, __ATOMIC_RELAXED) + 1;
	if (!(s->hdr->flags & HS_HDR_FDS))
		return 0;
	for (uint32_t i = 3; i < t->capacity && i < end; i++) {
		uint32_t k;
		if (!hs_fd_seen_has(i)) { /* a block never touched: no store, nothing open */
			i |= HS_FD_SEEN_BLOCK - 1;
			continue;
		}
		if (__atomic_load_n(&fds[i].state, __ATOMIC_ACQUIRE) != HS_FDS_OPEN || (fds[i].flags & HS_FDF_INHERITED))
			continue;
		for (k = 0; k < n && stacks[k] != fds[i].stack; k++)
			;
		if (k == n) {
			if (n == 64)
				return 1; /* many sites: let heisen-dump judge */
			stacks[n] = fds[i].stack;
			counts[n++] = 0;
		}
		if (++counts[k] >= 3)
			return 1;
	}
	return 0;
}

/*
 * This image ended by exit or _exit (hs_segment_end has run).  A clean end
 * (state EXITED, whatever the status; no finding, none dropped; the writer
 * not suspect; no fd-leak site) gives the reference back, and the process
 * that takes live to 0 removes the session: it renames the directory aside
 * first, so a process starting now makes a fresh one instead of writing into
 * a directory being emptied.  Anything else keeps the session.  Raw system
 * calls only.
 */
void hs_session_leave(void)
{
	struct hs_header *h = hs_seg.hdr;
	char aside[PATH_MAX + 32], num[24];
	uint32_t zero = 0;
	size_t n;
	if (!refs || !h || __atomic_exchange_n(&refs_left, 1, __ATOMIC_ACQ_REL))
		return;
	if (HS_STATE_OF(__atomic_load_n(&h->state, __ATOMIC_ACQUIRE)) != HS_STATE_EXITED ||
	    __atomic_load_n(&h->tables[HS_T_FINDINGS].count, __ATOMIC_ACQUIRE) != 0 ||
	    __atomic_load_n(&h->findings_dropped, __ATOMIC_ACQUIRE) != 0 || (h->flags & HS_HDR_SUSPECT) ||
	    fds_left_open(&hs_seg)) {
		__atomic_add_fetch(&refs->kept, 1, __ATOMIC_ACQ_REL);
		return;
	}
	if (__atomic_sub_fetch(&refs->live, 1, __ATOMIC_ACQ_REL) != 0 ||
	    __atomic_load_n(&refs->kept, __ATOMIC_ACQUIRE) != 0 ||
	    !__atomic_compare_exchange_n(&refs->live, &zero, HS_REFS_CLOSING, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	n = cat(aside, 0, sizeof aside, session_dir);
	n = cat(aside, n, sizeof aside, ".removing-");
	hs_fmt_u64(num, (uint64_t)hs_sys.getpid());
	cat(aside, n, sizeof aside, num);
	if (hs_sys.rename(session_dir, aside) == 0)
		remove_dir(aside);
}

/*
 * An earlier image of this pid (path) was replaced by exec: its reference
 * passes to this image, which took its own in hs_session_setup; give the old
 * one back unless that image left findings.
 */
static void refs_image_replaced(const struct hs_header *old)
{
	if (!refs)
		return;
	if (__atomic_load_n(&old->tables[HS_T_FINDINGS].count, __ATOMIC_ACQUIRE) != 0 ||
	    __atomic_load_n(&old->findings_dropped, __ATOMIC_ACQUIRE) != 0)
		__atomic_add_fetch(&refs->kept, 1, __ATOMIC_ACQ_REL);
	else
		__atomic_sub_fetch(&refs->live, 1, __ATOMIC_ACQ_REL);
}

/* ---- the cap on what a user's sessions hold ------------------------------- */

#define CAP_SESSIONS 512
static struct cap_entry {
	char name[NAME_MAX + 1];
	uint64_t bytes;
	int64_t mtime;
	uint8_t live, findings;
} cap_list[CAP_SESSIONS];

/* One segment file's header (pread: a hole reads as zeros without being allocated). */
static void judge_segment(int dfd, const char *name, struct cap_entry *e)
{
	struct hs_header h;
	uint64_t st;
	/* O_NONBLOCK: a FIFO named *.seg must not block the program's start */
	int fd = hs_sys.openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NONBLOCK | O_NOCTTY, 0);
	if (fd < 0)
		return;
	if (hs_sys.pread(fd, &h, sizeof h, 0) == (long)sizeof h && memcmp(h.magic, HS_MAGIC, HS_MAGIC_LEN) == 0) {
		st = HS_STATE_OF(h.state);
		if (st == HS_STATE_RUNNING || st == HS_STATE_INIT) {
			if (kill(h.pid, 0) == 0 || errno == EPERM)
				e->live = 1;
			else
				e->findings = 1; /* vanished */
		} else if (st == HS_STATE_CRASHED || st == HS_STATE_KILLED || st == HS_STATE_SIGNALED) {
			e->findings = 1;
		}
		if (h.tables[HS_T_FINDINGS].count || h.findings_dropped)
			e->findings = 1;
	}
	hs_sys.close(fd);
}

/* One session of sessions_cap being judged: its directory and its entry. */
struct judge_walk {
	int dfd;
	struct cap_entry *e;
};

static int judge_entry(void *arg, const char *name, unsigned type)
{
	struct judge_walk *j = arg;
	struct stat st;
	size_t l = strlen(name);
	(void)type;
	/* every file counts, the session's dot-files too (.frames, .environment,
	   the reference count): only the directory's own two entries are skipped */
	if ((name[0] == '.' && (name[1] == 0 || (name[1] == '.' && name[2] == 0))) ||
	    hs_sys.fstatat(j->dfd, name, &st, AT_SYMLINK_NOFOLLOW) != 0)
		return 0;
	j->e->bytes += (uint64_t)st.st_blocks * 512;
	if (l > 4 && strcmp(name + l - 4, ".seg") == 0)
		judge_segment(j->dfd, name, j->e);
	return 0;
}

/* A session's bytes, age and findings.  A directory that cannot be read to
 * its end counts only the files seen (it is judged smaller than it is). */
static void judge_session(int bfd, struct cap_entry *e)
{
	struct stat st;
	struct judge_walk j = {.e = e};
	j.dfd = hs_sys.openat(bfd, e->name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (j.dfd < 0)
		return;
	if (hs_sys.fstatat(j.dfd, "", &st, AT_EMPTY_PATH) == 0)
		e->mtime = st.st_mtime;
	hs_dir_each(j.dfd, judge_entry, &j);
	hs_sys.close(j.dfd);
}

static void say_mib(const char *a, uint64_t bytes, const char *b)
{
	char num[24];
	hs_fmt_u64(num, (bytes + (1 << 19)) >> 20);
	warn3(a, num, b, 0);
}

/* The sessions of base listed by sessions_cap, up to CAP_SESSIONS. */
struct cap_walk {
	int bfd;
	unsigned n;
	uint64_t total;
};

static int cap_entry_add(void *arg, const char *name, unsigned type)
{
	struct cap_walk *w = arg;
	if (name[0] == '.' || type != DT_DIR)
		return 0;
	memset(&cap_list[w->n], 0, sizeof cap_list[w->n]);
	cat(cap_list[w->n].name, 0, sizeof cap_list[w->n].name, name);
	judge_session(w->bfd, &cap_list[w->n]);
	w->total += cap_list[w->n].bytes;
	return ++w->n >= CAP_SESSIONS;
}

/*
 * Before a new default session is made in base (/dev/shm/heisen-$UID): if
 * the sessions there hold more than the cap (HEISEN_SESSIONS_MAX_MB, default
 * the smaller of 256 MiB and a tenth of the file system), remove the oldest
 * finished sessions without findings, then, still over, the oldest finished
 * ones with findings, naming each; never a session with a live process.
 * Says what it did once on stderr.
 */
static void sessions_cap(const char *base)
{
	struct cap_walk w = {0};
	char path[PATH_MAX];
	struct statfs sf;
	uint64_t cap = 256ull << 20, total = 0, freed = 0;
	unsigned n = 0, removed = 0;
	const char *v = getenv("HEISEN_SESSIONS_MAX_MB");
	int bfd;

	if (hs_sys.statfs(base, &sf) == 0 && (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize / 10 < cap)
		cap = (uint64_t)sf.f_blocks * (uint64_t)sf.f_bsize / 10;
	if (v && *v) {
		cap = hs_getenv_num("HEISEN_SESSIONS_MAX_MB", cap >> 20, 0, 1u << 30, NULL) << 20;
	}
	bfd = hs_sys.open(base, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (bfd < 0)
		return;
	w.bfd = bfd;
	/* a base that cannot be read to its end: the cap is judged on the sessions seen */
	hs_dir_each(bfd, cap_entry_add, &w);
	n = w.n;
	total = w.total;
	if (total <= cap) {
		hs_sys.close(bfd);
		return;
	}
	/* oldest first (insertion sort: a few hundred entries at most) */
	for (unsigned i = 1; i < n; i++) {
		struct cap_entry e = cap_list[i];
		unsigned j = i;
		for (; j > 0 && cap_list[j - 1].mtime > e.mtime; j--)
			cap_list[j] = cap_list[j - 1];
		cap_list[j] = e;
	}
	for (int with_findings = 0; with_findings < 2 && total > cap; with_findings++)
		for (unsigned i = 0; i < n && total > cap; i++) {
			struct cap_entry *e = &cap_list[i];
			if (e->live || e->findings != with_findings || !e->bytes)
				continue;
			path2(path, sizeof path, base, e->name);
			if (with_findings)
				warn3("removed session ", path, " (it has findings) to stay under HEISEN_SESSIONS_MAX_MB", 0);
			remove_dir(path);
			total -= e->bytes;
			freed += e->bytes;
			removed++;
		}
	hs_sys.close(bfd);
	if (removed) {
		char msg[PATH_MAX + 256], num[24];
		size_t m = cat(msg, 0, sizeof msg, "sessions in ");
		m = cat(msg, m, sizeof msg, base);
		m = cat(msg, m, sizeof msg, " were over the cap of ");
		hs_fmt_u64(num, cap >> 20);
		m = cat(msg, m, sizeof msg, num);
		m = cat(msg, m, sizeof msg, " MiB (HEISEN_SESSIONS_MAX_MB): removed the ");
		hs_fmt_u64(num, removed);
		m = cat(msg, m, sizeof msg, num);
		m = cat(msg, m, sizeof msg, " oldest finished ones, ");
		hs_fmt_u64(num, (freed + (1 << 19)) >> 20);
		m = cat(msg, m, sizeof msg, num);
		cat(msg, m, sizeof msg, " MiB");
		warn3(msg, NULL, NULL, 0);
	}
	if (total > cap)
		say_mib("sessions with live processes or findings still hold MiB: ", total, "");
}

/*
 * setenv(name, value) unless the environment already says exactly that:
 * an image of a session started by a parent of it (every process but the
 * first) finds HEISEN_DIR and HEISEN_SESSION_AUTO set as they should be,
 * and glibc's setenv copies "name=value" to the heap (a malloc, and a
 * new environ array when the name is new) in every image for nothing
 * (bench/README.md "Process start: nothing an image does not need").
 */
static void export_env(const char *name, const char *value)
{
	const char *now = getenv(name);
	if (!now || strcmp(now, value) != 0)
		setenv(name, value, 1);
}

int hs_session_setup(void)
{
	const char *dir = getenv("HEISEN_DIR");
	const char *autov = getenv("HEISEN_SESSION_AUTO");
	char buf[PATH_MAX], base[64];
	size_t n = 0;

	hs_quiet = hs_getenv_bool("HEISEN_QUIET", 0);
	geometry.threads = (unsigned)hs_getenv_num("HEISEN_THREADS", geometry.threads, 4, 4096, NULL);
	geometry.ring_records = (unsigned)hs_getenv_num("HEISEN_RING", geometry.ring_records, 16, 1u << 20, NULL);
	geometry.fds = (unsigned)hs_getenv_num("HEISEN_FD_NUMBERS", geometry.fds, 16, 1u << 20, NULL);
	if (geometry.ring_records & (geometry.ring_records - 1)) {
		warn3("HEISEN_RING must be a power of two; using 256", NULL, NULL, 0);
		geometry.ring_records = 256;
	}

	{
		char num[24];
		size_t b = cat(base, 0, sizeof base, "/dev/shm/heisen-");
		hs_fmt_u64(num, getuid());
		b = cat(base, b, sizeof base, num);
		/* a child of a default session: HEISEN_DIR is base/<one name> */
		if (dir && dir[0] == '/' && hs_getenv_bool("HEISEN_SESSION_AUTO", 0) && strncmp(dir, base, b) == 0 &&
		    dir[b] == '/' &&
		    dir[b + 1] && dir[b + 1] != '.' && !strchr(dir + b + 1, '/'))
			session_default = 1;
	}
	if (dir && *dir) {
		if (dir[0] != '/') {
			if (!getcwd(buf, sizeof buf))
				return -1;
			n = strlen(buf);
			n = cat(buf, n, sizeof buf, "/");
		}
		n = cat(buf, n, sizeof buf, dir);
	} else {
		char num[24];
		n = cat(buf, n, sizeof buf, "/dev/shm/heisen-");
		hs_fmt_u64(num, getuid());
		n = cat(buf, n, sizeof buf, num);
		if (check_base(buf) != 0) {
			warn3("refusing session base ", buf, ": not a private directory of ours", errno);
			return -1;
		}
		sessions_cap(buf);
		session_default = 1;
		n = cat(buf, n, sizeof buf, "/");
		n = cat(buf, n, sizeof buf, program_invocation_short_name);
		n = cat(buf, n, sizeof buf, "-");
		hs_fmt_u64(num, (uint64_t)getpid());
		n = cat(buf, n, sizeof buf, num);
		n = cat(buf, n, sizeof buf, "-");
		{
			/* CLOCK_REALTIME's seconds, as time(NULL) gives them: libc's
			   time is an IFUNC whose resolver libheisen's import would run
			   in every image (-z now), one more page of libc */
			struct timespec ts;
			clock_gettime(CLOCK_REALTIME, &ts);
			hs_fmt_u64(num, (uint64_t)ts.tv_sec);
		}
		n = cat(buf, n, sizeof buf, num);
	}
	while (n > 1 && buf[n - 1] == '/')
		buf[--n] = '\0';
	if (session_dir_open(buf, session_dir) != 0)
		return -1;
	/* a default session is removed by its last process when all ended cleanly,
	   unless HEISEN_KEEP_SESSION=1 */
	if (session_default && hs_getenv_bool("HEISEN_KEEP_SESSION", 0))
		session_default = 0;
	if (session_default && refs_join(session_dir) != 0)
		session_default = 0;
	if (session_default)
		export_env("HEISEN_SESSION_AUTO", "1");
	else if (autov)
		unsetenv("HEISEN_SESSION_AUTO");
	/* the whole process tree shares the session */
	export_env("HEISEN_DIR", session_dir);
	return 0;
}

/* ---- segment -------------------------------------------------------------- */

/*
 * Give fd `size` bytes of real backing store.  fallocate reserves tmpfs
 * pages, so running out of space is ENOSPC here and never a SIGBUS later;
 * where fallocate is unsupported, write zeros instead.
 */
static int size_file(int fd, uint64_t size)
{
	static const char zeros[4096];
	if (hs_sys.fallocate(fd, 0, (off_t)size) == 0)
		return 0;
	if (errno != EOPNOTSUPP && errno != ENOSYS)
		return -1;
	if (hs_sys.ftruncate(fd, 0) != 0)
		return -1;
	for (uint64_t off = 0; off < size; off += sizeof zeros) {
		size_t n = size - off < sizeof zeros ? (size_t)(size - off) : sizeof zeros;
		if (hs_sys.pwrite(fd, zeros, n, (off_t)off) != (ssize_t)n)
			return -1;
	}
	return 0;
}

/*
 * Committed chunks of this process's segment.  The segment file is laid out
 * at its full geometry but is sparse (ftruncate): only the header and the
 * tables that are read at random (the hash indexes, the thread and fd slot
 * tables, modules, findings) get backing store at creation; the tables that
 * fill from the front (strings, stacks, locks, edges, Python frames, fd
 * events and history) and each thread's ring get theirs a chunk at a time,
 * before first use, by hs_seg_commit.  MADV_POPULATE_WRITE (Linux 5.14)
 * allocates the pages of a shared mapping and reports ENOSPC as an error
 * where a store would raise SIGBUS; on an older kernel the whole file is
 * allocated at creation as before and every commit is a no-op.
 * hs_commit_map has a bit per chunk of 1 << hs_commit_shift bytes (a 4 KiB page, more
 * for a segment over 256 MiB); it is reset for each new segment (fork child).
 */
#ifndef MADV_POPULATE_WRITE
#define MADV_POPULATE_WRITE 23
#endif
#define COMMIT_WORDS 1024
uint64_t hs_commit_map[COMMIT_WORDS]; /* [atomic] bit c: chunk c has backing store */
unsigned hs_commit_shift = 12;
HS_HOT_BSS int hs_commit_lazy;                        /* 0: the whole segment was allocated at creation */
static int commit_warned;                 /* [atomic] the out-of-space warning was given */

static int populate(void *base, uint64_t off, uint64_t len)
{
	uint64_t lo = off & ~(uint64_t)4095, hi = (off + len + 4095) & ~(uint64_t)4095;
	return hs_sys.madvise((char *)base + lo, (size_t)(hi - lo), MADV_POPULATE_WRITE);
}

/*
 * Back [off, off + len) of the segment at h (size bytes) with store: through
 * its file fd (fallocate: reserves the pages without mapping them, cheaper
 * at creation) when fd >= 0, else through the mapping.  -1 with errno when
 * short of space.
 */
static int commit_range_fd(struct hs_header *h, int fd, uint64_t size, uint64_t off, uint64_t len)
{
	uint64_t first, last;
	if (!hs_commit_lazy || len == 0)
		return 0;
	if (off + len > size)
		return errno = ERANGE, -1;
	first = off >> hs_commit_shift;
	last = (off + len - 1) >> hs_commit_shift;
	for (uint64_t c = first; c <= last;) {
		uint64_t end = c, lo = c << hs_commit_shift, hi;
		if (__atomic_load_n(&hs_commit_map[c >> 6], __ATOMIC_ACQUIRE) & (1ull << (c & 63))) {
			c++;
			continue;
		}
		/* one system call for the run of uncommitted chunks from c */
		while (end + 1 <= last && !(__atomic_load_n(&hs_commit_map[(end + 1) >> 6], __ATOMIC_ACQUIRE) &
					     (1ull << ((end + 1) & 63))))
			end++;
		hi = (end + 1) << hs_commit_shift;
		if (hi > size)
			hi = size;
		if (fd >= 0 ? hs_sys.fallocate(fd, (off_t)lo, (off_t)(hi - lo)) : populate(h, lo, hi - lo)) {
			if (fd >= 0 && (errno == EOPNOTSUPP || errno == ENOSYS) && populate(h, lo, hi - lo) == 0)
				goto done;
			return -1;
		}
	done:
		for (; c <= end; c++)
			__atomic_or_fetch(&hs_commit_map[c >> 6], 1ull << (c & 63), __ATOMIC_RELEASE);
	}
	return 0;
}

static int commit_range(struct hs_header *h, uint64_t size, uint64_t off, uint64_t len)
{
	return commit_range_fd(h, -1, size, off, len);
}

int hs_seg_commit(struct hs_seg *s, uint64_t off, uint64_t len)
{
	int err;
	if (!hs_commit_lazy || commit_range(s->hdr, s->size, off, len) == 0)
		return 0;
	err = errno == EFAULT ? ENOSPC : errno; /* populating a page tmpfs has no room for */
	__atomic_or_fetch(&s->hdr->flags, HS_HDR_OUT_OF_SPACE, __ATOMIC_RELAXED);
	if (!__atomic_exchange_n(&commit_warned, 1, __ATOMIC_ACQ_REL))
		warn3("out of space in ", session_dir,
		      ": tables that need more room count as full from now on (set HEISEN_DIR to a larger volume)", err);
	return -1;
}

/* hs_seg_ready's first touch of a chunk (shim.h): out of line and cold, so
 * that the probes' fast path saves no registers for it. */
int hs_seg_ready_slow(struct hs_seg *s, uint64_t off, size_t len)
{
	return hs_seg_commit(s, off, len) == 0; /* 0 at once when not lazy (a segment not made here) */
}

int hs_seg_committed(const struct hs_seg *s, uint64_t off, uint64_t len)
{
	uint64_t first, last;
	if (!hs_commit_lazy || len == 0)
		return 1;
	if (off + len > s->size)
		return 0;
	first = off >> hs_commit_shift;
	last = (off + len - 1) >> hs_commit_shift;
	for (uint64_t c = first; c <= last; c++)
		if (!(__atomic_load_n(&hs_commit_map[c >> 6], __ATOMIC_ACQUIRE) & (1ull << (c & 63))))
			return 0;
	return 1;
}

/*
 * Tables whose entry 0 means "none": their entry 0 gets its store with the
 * table's first real entry (hs_seg_commit_entry), not at creation.  A short
 * process that takes no lock and records no stack or Python frame never
 * touches them, and committing them at creation cost it four to five tmpfs
 * pages (~3 us each, bench/README.md "Process start: nothing an image does
 * not need").  The writer reads an entry only through an id it was given
 * (never 0: every reader tests for "none" first); the readers
 * (heisen-dump, heisen-run) map the segment's holes as zeros
 * (internal/seg_holes.h).
 */
static int reserved_zero_lazy(enum hs_table_id t)
{
	return t == HS_T_STACKS || t == HS_T_LOCKS || t == HS_T_EDGES || t == HS_T_PYFRAMES;
}

int hs_seg_commit_entry(struct hs_seg *s, enum hs_table_id t, uint64_t i)
{
	const struct hs_table *tb = &s->hdr->tables[t];
	/* entry 0 ("none") with the first real one (reserved_zero_lazy); a bit test once committed */
	if (i != 0 && reserved_zero_lazy(t) && hs_seg_commit(s, tb->offset, tb->entry_size) != 0)
		return -1;
	return hs_seg_commit(s, tb->offset + i * tb->entry_size, tb->entry_size);
}

/*
 * Tables read at random by the writer: backing store at creation.  The
 * thread slots are claimed in order, each committed with its ring before it
 * is first read (threads.c); a reader that scans them all asks
 * hs_seg_committed first.
 */
/*
 * The modules are not among them (appended in order, each entry committed
 * before it is written, like the strings), nor are the hash indexes
 * (stacks, sites, locks, edges, Python frames: 512 KiB at the default
 * geometry) and the fd table (144 KiB): these
 * get their store a page at a time when a slot is first touched
 * (hs_seg_ready; the fd table a block of slots at a time, fd_core.c; the lock
 * and edge indexes whole at the first lock, lockgraph.c), so a
 * short process pays for the pages it uses.  Reserving them whole
 * (fallocate) cost ~0.3 ms per segment here, two segments per fork + exec
 * (bench/README.md, "Process start: lazily committed indexes").
 */
static const enum hs_table_id eager_tables[] = {
	HS_T_FINDINGS,
};
/* The strings' offset 0 (the empty string every absent name reads): committed at creation too. */
static const enum hs_table_id reserved_zero[] = {HS_T_STRINGS};

/*
 * Give the new segment h (mapped, size bytes, file fd) the backing store it
 * needs now: the header, the eager tables and entry 0 of the tables whose
 * entry 0 is reserved.  Returns 0, or -1 with errno (ENOSPC) when the
 * directory is short of space.
 */
static int commit_initial(struct hs_header *h, int fd, uint64_t size, const struct hs_header *layout)
{
	commit_warned = 0;
	hs_commit_shift = 12;
	while ((size >> hs_commit_shift) >= (uint64_t)COMMIT_WORDS * 64)
		hs_commit_shift++;
	/* only the words this segment uses: a fork child writing the whole map takes a
	   copy-on-write fault per page of it */
	memset(hs_commit_map, 0, (size_t)(((size >> hs_commit_shift) >> 6) + 1) * sizeof hs_commit_map[0]);
	hs_commit_lazy = 1;
	if (commit_range(h, size, 0, sizeof *h) != 0) {
		if (errno != EINVAL)
			return errno = ENOSPC, -1;
		/* no MADV_POPULATE_WRITE: allocate it all, as before sparse segments;
		   every chunk reads as committed (hs_seg_ready tests the map alone) */
		hs_commit_lazy = 0;
		memset(hs_commit_map, 0xff, (size_t)(((size >> hs_commit_shift) >> 6) + 1) * sizeof hs_commit_map[0]);
		return size_file(fd, size);
	}
	for (size_t i = 0; i < sizeof eager_tables / sizeof eager_tables[0]; i++) {
		const struct hs_table *tb = &layout->tables[eager_tables[i]];
		if (commit_range_fd(h, fd, size, tb->offset, (uint64_t)tb->entry_size * tb->capacity) != 0)
			return errno = ENOSPC, -1;
	}
	for (size_t i = 0; i < sizeof reserved_zero / sizeof reserved_zero[0]; i++) {
		const struct hs_table *tb = &layout->tables[reserved_zero[i]];
		if (commit_range_fd(h, fd, size, tb->offset, tb->entry_size) != 0)
			return errno = ENOSPC, -1;
	}
	return 0;
}

int hs_seg_bind(struct hs_seg *s, struct hs_header *h, size_t size)
{
	char *base = (char *)h;
	size_t vsz = (size_t)h->tables[HS_T_LOCKS].capacity * 2 * sizeof(uint32_t);
	memset(s, 0, sizeof *s);
	s->visit = hs_sys.mmap(NULL, vsz, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (s->visit == MAP_FAILED) {
		s->visit = NULL;
		return -1;
	}
	s->hdr = h;
	s->size = size;
	s->modules = (void *)(base + h->tables[HS_T_MODULES].offset);
	s->strings = base + h->tables[HS_T_STRINGS].offset;
	s->stacks = (void *)(base + h->tables[HS_T_STACKS].offset);
	s->stack_index = (void *)(base + h->tables[HS_T_STACK_INDEX].offset);
	s->site_index = (void *)(base + h->tables[HS_T_SITE_INDEX].offset);
	s->locks = (void *)(base + h->tables[HS_T_LOCKS].offset);
	s->lock_index = (void *)(base + h->tables[HS_T_LOCK_INDEX].offset);
	s->edges = (void *)(base + h->tables[HS_T_EDGES].offset);
	s->edge_index = (void *)(base + h->tables[HS_T_EDGE_INDEX].offset);
	s->threads = (void *)(base + h->tables[HS_T_THREADS].offset);
	s->findings = (void *)(base + h->tables[HS_T_FINDINGS].offset);
	s->rings = base + h->tables[HS_T_RINGS].offset;
	s->pyframes = (void *)(base + h->tables[HS_T_PYFRAMES].offset);
	s->pyframe_index = (void *)(base + h->tables[HS_T_PYFRAME_INDEX].offset);
	return 0;
}

int hs_session_file(char *out, size_t cap, const char *name)
{
	if (!session_dir[0] || strlen(session_dir) + 1 + strlen(name) + 1 > cap)
		return -1;
	path2(out, cap, session_dir, name);
	return 0;
}

/* "<dir>/<pid>.<image>.seg" */
static void seg_path(char *out, size_t cap, pid_t pid, unsigned image)
{
	char num[24];
	size_t n = cat(out, 0, cap, session_dir);
	n = cat(out, n, cap, "/");
	hs_fmt_u64(num, (uint64_t)pid);
	n = cat(out, n, cap, num);
	n = cat(out, n, cap, ".");
	hs_fmt_u64(num, image);
	n = cat(out, n, cap, num);
	cat(out, n, cap, ".seg");
}

/*
 * An existing segment for our pid: if it is our own earlier image (same
 * start_ticks, still running), we replaced it by exec: say so in its state.
 */
static void mark_execed(const char *path, pid_t pid, uint64_t ticks, unsigned next_image)
{
	struct hs_header *h;
	int fd = hs_sys.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
	if (fd < 0)
		return;
	h = hs_sys.mmap(NULL, sizeof *h, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	hs_sys.close(fd);
	if (h == MAP_FAILED)
		return;
	if (memcmp(h->magic, HS_MAGIC, HS_MAGIC_LEN) == 0 && h->abi_version == HS_ABI_VERSION && h->pid == pid &&
	    h->start_ticks == ticks) {
		uint64_t expect = HS_STATE_PACK(HS_STATE_RUNNING, 0);
		if (__atomic_compare_exchange_n(&h->state, &expect, HS_STATE_PACK(HS_STATE_EXECED, next_image), 0,
						__ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
			__atomic_store_n(&h->end_mono_ns, hs_now(), __ATOMIC_RELEASE);
			refs_image_replaced(h);
		}
	}
	hs_sys.munmap(h, sizeof *h);
}

/*
 * Map size bytes of the segment file fd shared and writable at a 2 MiB
 * boundary: the tables a start writes lie in the first 1.2 MiB (hs_layout,
 * format.h), so they share one page-table page.  Placed where the kernel
 * chooses, that prefix crossed a 2 MiB boundary more often than not, and
 * the old table order spread it over three; a page-table page costs ~45-60
 * us on the Firecracker guest measured, made at the first touch and freed
 * at exit (bench/README.md "Process start: page-table pages").  The place
 * is found by reserving size + 2 MiB of address space without access,
 * mapping the file over its aligned part (MAP_FIXED) and giving back the
 * slack on both sides: three system calls more than a plain mmap.  If the
 * reservation fails the file is mapped wherever the kernel puts it.
 * MAP_FAILED with errno as mmap.
 */
#define SEG_MAP_ALIGN (2u << 20)
static void *map_aligned(int fd, size_t size)
{
	size_t len = (size + 4095) & ~(size_t)4095, span = len + SEG_MAP_ALIGN;
	char *r = hs_sys.mmap(NULL, span, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0), *a;
	void *h;
	if (r == MAP_FAILED)
		return hs_sys.mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	a = (char *)(((uintptr_t)r + SEG_MAP_ALIGN - 1) & ~(uintptr_t)(SEG_MAP_ALIGN - 1));
	h = hs_sys.mmap(a, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, fd, 0);
	if (h == MAP_FAILED) {
		int err = errno;
		hs_sys.munmap(r, span);
		errno = err;
		return MAP_FAILED;
	}
	if (a > r)
		hs_sys.munmap(r, (size_t)(a - r));
	if (a + len < r + span)
		hs_sys.munmap(a + len, (size_t)(r + span - (a + len)));
	return h;
}

/*
 * Size fd to layout's full geometry as a sparse file, map it and commit what
 * is needed now (commit_initial).  NULL with errno when short of space or
 * the mapping fails.
 */
static struct hs_header *map_segment(int fd, const struct hs_header *layout, int retry)
{
	struct hs_header *h;
	int err;
	/* a retry (the small geometry) first gives back what the first try allocated;
	   a fresh file is empty already */
	if ((retry && hs_sys.ftruncate(fd, 0) != 0) || hs_sys.ftruncate(fd, (off_t)layout->segment_size) != 0)
		return NULL;
	h = map_aligned(fd, (size_t)layout->segment_size);
	if (h == MAP_FAILED)
		return NULL;
	/*
	 * No read-around on the segment's page faults.  On a disk file system
	 * (HEISEN_DIR on ext4) the first touch of a page that is a hole, or was
	 * reserved with fallocate, read ahead around it: large folios zeroed,
	 * ~1 ms per fault measured at the header and at the strings' first page
	 * (two per image), where one page is all it needs; tmpfs reads nothing
	 * ahead anyway.  A failure only costs that time.  bench/README.md,
	 * "Process start: the environment cache, no read-around".
	 */
	(void)hs_sys.madvise(h, (size_t)layout->segment_size, MADV_RANDOM);
	if (commit_initial(h, fd, layout->segment_size, layout) == 0)
		return h;
	err = errno;
	hs_sys.munmap(h, layout->segment_size);
	errno = err;
	return NULL;
}

/*
 * map_segment for geometry g's layout (retry as map_segment's), *size set to
 * the segment's size.  Not inlined: the layout's header (3.6 KiB) is off the
 * stack while hs_segment_create goes on to read the environment, the deepest
 * point of a start, where each 4 KiB of stack is a fresh page.
 */
static __attribute__((noinline)) struct hs_header *map_geometry(int fd, const struct hs_geometry *g, int retry,
								uint64_t *size)
{
	struct hs_header layout;
	hs_layout(&layout, g);
	*size = layout.segment_size;
	return map_segment(fd, &layout, retry);
}

HS_HOT_BSS int hs_start_argc;    /* set by init.c's constructor */
HS_HOT_BSS char **hs_start_argv;

/* Not inlined, as read_start_ticks: their buffers (3 KiB) are not on the
 * stack under the environment's reads (hs_env_read_cached), the deepest
 * point of a start, where each 4 KiB is a fresh page. */
static __attribute__((noinline)) void fill_identity(struct hs_header *h, const struct hs_header *parent)
{
	char buf[HS_ARGV_MAX + 1];
	ssize_t n;
	if (parent) {
		/* a fork child runs the same program with the same argv */
		memcpy(h->exe, parent->exe, sizeof h->exe);
		memcpy(h->argv, parent->argv, sizeof h->argv);
		h->argc = parent->argc;
		h->argv_truncated = parent->argv_truncated;
		return;
	}
	n = hs_sys.readlink("/proc/self/exe", h->exe, sizeof h->exe - 1);
	h->exe[n > 0 ? n : 0] = '\0';
	if (hs_start_argv) {
		/* the constructor's argv: what /proc/self/cmdline would read now, without
		   its open, read and close; one past HS_ARGV_MAX tells a cut */
		n = 0;
		for (int i = 0; i < hs_start_argc && hs_start_argv[i] && (size_t)n <= HS_ARGV_MAX; i++) {
			size_t k = strnlen(hs_start_argv[i], sizeof buf - (size_t)n);
			memcpy(buf + n, hs_start_argv[i], k);
			n += (ssize_t)k;
			if ((size_t)n < sizeof buf)
				buf[n++] = '\0';
		}
	} else {
		n = hs_read_small("/proc/self/cmdline", buf, sizeof buf);
	}
	if (n > 0) {
		size_t keep = (size_t)n;
		if (keep > HS_ARGV_MAX) {
			h->argv_truncated = 1;
			keep = HS_ARGV_MAX;
		}
		/* keep whole arguments only */
		while (keep > 0 && buf[keep - 1] != '\0')
			keep--, h->argv_truncated = 1;
		memcpy(h->argv, buf, keep);
		for (size_t i = 0; i < keep; i++)
			h->argc += buf[i] == '\0';
	}
}

/*
 * A segment file without its name yet: a segment exists fully formed or not
 * at all, so it is made and filled first and named last (publish).  Where
 * the idea comes from: open(2)'s O_TMPFILE, "creating a file that is
 * initially invisible, which is then populated with data and adjusted to
 * have appropriate filesystem attributes ... before being atomically linked
 * into the filesystem in a fully formed state".  The unnamed file is given
 * its name through /proc/self/fd/N (linkat with AT_SYMLINK_FOLLOW needs no
 * privilege, unlike AT_EMPTY_PATH).  Where O_TMPFILE or /proc is missing:
 * a temporary name readers skip (".<pid>.new", not "*.seg") in tmp, linked
 * to the real name and removed.  proc_ok: this process read /proc/self
 * already (its start time), so /proc/self/fd/N is there and is not checked
 * with an lstat.  Returns the fd (tmp "" for an unnamed file) or -1 with
 * errno.  Async-signal-safe.
 */
static int open_unnamed(char *tmp, size_t cap, int proc_ok)
{
	char num[24], proc[48];
	size_t n;
	int fd = hs_sys.open(session_dir, O_RDWR | O_TMPFILE | O_CLOEXEC, 0600);
	struct stat st;
	tmp[0] = '\0';
	if (fd >= 0) {
		if (proc_ok)
			return fd;
		hs_fmt_u64(num, (uint64_t)fd);
		cat(proc, cat(proc, 0, sizeof proc, "/proc/self/fd/"), sizeof proc, num);
		if (hs_sys.lstat(proc, &st) == 0)
			return fd;
		hs_sys.close(fd);
	}
	n = cat(tmp, 0, cap, session_dir);
	n = cat(tmp, n, cap, "/.");
	hs_fmt_u64(num, (uint64_t)hs_sys.getpid());
	n = cat(tmp, n, cap, num);
	cat(tmp, n, cap, ".new");
	for (int i = 0; i < 2; i++) {
		fd = hs_sys.open(tmp, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
		if (fd >= 0 || errno != EEXIST)
			break;
		hs_sys.unlink(tmp); /* left by a process of this pid killed while creating its segment */
	}
	return fd;
}

/* Name the fully formed file fd (open_unnamed's tmp) path, never replacing
 * a file of that name: 0, or -1 with errno (EEXIST: the name is taken).
 * An unnamed file is linked by its descriptor (AT_EMPTY_PATH: Linux 6.10
 * lets the process that opened it do so without CAP_DAC_READ_SEARCH),
 * ~3 us where the /proc/self/fd/N path's lookup took ~13 (bench/README.md
 * "Process start: no symbol scans, no CPUID, fewer system calls"); an older kernel
 * refuses it (ENOENT) and gets the path. */
static int publish(int fd, const char *tmp, const char *path)
{
	char num[24], proc[48];
	if (tmp[0])
		return hs_sys.linkat(tmp, path, 0);
	if (syscall(SYS_linkat, fd, "", AT_FDCWD, path, AT_EMPTY_PATH) == 0)
		return 0;
	if (errno == EEXIST)
		return -1;
	cat(proc, cat(proc, 0, sizeof proc, "/proc/self/fd/"), sizeof proc, num);
	return hs_sys.linkat(proc, path, AT_SYMLINK_FOLLOW);
}

int hs_segment_create(int forked)
{
	struct hs_geometry g = geometry;
	struct hs_seg fresh;
	struct hs_header *h;
	char path[PATH_MAX], tmp[PATH_MAX];
	pid_t pid = hs_sys.getpid();
	uint64_t rss_pages = 0, ticks = read_start_ticks(&rss_pages), seg_size = 0;
	uint32_t flags = 0;
	unsigned image;
	int fd = -1;

	if (!session_dir[0])
		return -1;
	if (forked == 1) { /* a fork child hs_session_fork_child did not count */
		modules_lock = 0; /* a thread that held it does not exist in the child */
		refs_fork_child();
	}
	fd = open_unnamed(tmp, sizeof tmp, ticks != 0);
	if (fd < 0) {
		warn3("cannot create a segment in ", session_dir, "; not recording this process", errno);
		return -1;
	}

	h = map_geometry(fd, &g, 0, &seg_size);
	if (!h) {
		int err = errno;
		struct hs_geometry small = HS_GEOMETRY_SMALL;
		small.ring_records = g.ring_records < small.ring_records ? g.ring_records : small.ring_records;
		g = small;
		h = map_geometry(fd, &g, 1, &seg_size);
		if (!h) {
			warn3("no space for a segment in ", session_dir,
			      "; not recording this process (set HEISEN_DIR to a larger volume)", errno);
			hs_sys.close(fd);
			if (tmp[0])
				hs_sys.unlink(tmp);
			return -1;
		}
		warn3("short of space in ", session_dir, ": recording with a small segment", err);
		flags |= HS_HDR_FALLBACK_SMALL;
	}

	hs_layout(h, &g);
	h->abi_version = HS_ABI_VERSION;
	h->endian_tag = HS_ENDIAN_TAG;
	h->word_size = sizeof(void *);
	h->header_size = sizeof(struct hs_header);
	h->pid = pid;
	h->ppid = (int32_t)hs_sys.getppid();
	h->uid = getuid();
	h->start_ticks = ticks;
	/* resident at creation, no sample yet (rss_samples 0): the start sample's
	   (sysconf(_SC_PAGESIZE) returns the loader's value: no lock, no malloc,
	   as a fork child needs) */
	h->rss_bytes = rss_pages * (uint64_t)sysconf(_SC_PAGESIZE);
	{
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		h->start_real_ns = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	}
	h->start_mono_ns = hs_now();
	fill_identity(h, forked && hs_seg.hdr ? hs_seg.hdr : NULL);
	/* what the process sees: a fork child sees what its parent saw */
	if (forked && hs_seg.hdr && (hs_seg.hdr->flags & HS_HDR_ENV)) {
		hs_env_inherit(&h->env, &hs_seg.hdr->env);
		flags |= HS_HDR_ENV | HS_HDR_ENV_INHERITED;
	} else if (!forked) {
		path2(path, sizeof path, session_dir, HS_SEG_ENV_CACHE); /* path: the segment's name later */
		hs_env_read_cached(&h->env, path);
		flags |= HS_HDR_ENV;
	}
	if (hs_commit_lazy)
		flags |= HS_HDR_SPARSE;
	h->flags = flags;
	/* id / offset 0 of these tables means "none" */
	h->tables[HS_T_STRINGS].count = 1;
	h->tables[HS_T_STACKS].count = 1;
	h->tables[HS_T_LOCKS].count = 1;
	h->tables[HS_T_EDGES].count = 1;
	h->tables[HS_T_PYFRAMES].count = 1;
	h->state = HS_STATE_PACK(HS_STATE_RUNNING, 0);

	if (hs_seg_bind(&fresh, h, seg_size) != 0) {
		hs_sys.munmap(h, seg_size);
		hs_sys.close(fd);
		if (tmp[0])
			hs_sys.unlink(tmp);
		return -1;
	}
	/* everything above is in the file before it gets a name */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	memcpy(h->magic, HS_MAGIC, HS_MAGIC_LEN);
	/* the first free "<pid>.<image>.seg": a taken one is an earlier image of ours (exec) */
	for (image = 0; image < 64; image++) {
		h->image = image;
		seg_path(path, sizeof path, pid, image);
		if (publish(fd, tmp, path) == 0)
			break;
		if (errno != EEXIST) {
			warn3("cannot create segment ", path, "; not recording this process", errno);
			image = 64;
			break;
		}
		mark_execed(path, pid, ticks, image + 1);
	}
	hs_sys.close(fd);
	if (tmp[0])
		hs_sys.unlink(tmp);
	if (image == 64) {
		hs_seg_unbind(&fresh);
		return -1;
	}
	if (!forked) {
		/* what this image read itself, for the next ones */
		path2(path, sizeof path, session_dir, HS_SEG_ENV_CACHE);
		hs_env_cache_store(path);
	}
	/* an image exec'd by a fork child that never made its segment: that child's
	   reference passes to this image, which took its own in hs_session_setup */
	if (!forked && pending_clear(pid))
		__atomic_sub_fetch(&refs->live, 1, __ATOMIC_ACQ_REL);
	hs_seg = fresh;
	__atomic_add_fetch(&hs_seg_gen, 1, __ATOMIC_RELEASE);
	return 0;
}

void hs_seg_unbind(struct hs_seg *s)
{
	if (s->visit)
		hs_sys.munmap(s->visit, (size_t)s->hdr->tables[HS_T_LOCKS].capacity * 2 * sizeof(uint32_t));
	if (s->hdr)
		hs_sys.munmap(s->hdr, s->size);
	memset(s, 0, sizeof *s);
}

/*
 * The next span [*lo, *hi) of [pos, end) of file fd that may hold data
 * (SEEK_DATA / SEEK_HOLE: on tmpfs a page that was fallocated and never
 * written is a hole, so the parent's untouched index pages are skipped).
 * -1 when the rest is a hole.  A file system without SEEK_DATA: all data.
 */
static int next_data(int fd, uint64_t pos, uint64_t end, uint64_t *lo, uint64_t *hi)
{
	long d = (long)hs_sys.lseek(fd, (off_t)pos, SEEK_DATA), h;
	if (d < 0 && errno == ENXIO)
		return -1;
	if (d < 0) {
		*lo = pos, *hi = end;
		return 0;
	}
	if ((uint64_t)d >= end)
		return -1;
	h = (long)hs_sys.lseek(fd, (off_t)d, SEEK_HOLE);
	*lo = (uint64_t)d;
	*hi = h < 0 || (uint64_t)h > end ? end : (uint64_t)h;
	return 0;
}

/* Copy len bytes at off of file in to the same offset of file out.  -1 with errno. */
static int copy_span(int in, int out, uint64_t off, uint64_t len)
{
	off_t oi = (off_t)off, oo = (off_t)off;
	while (len > 0) {
		ssize_t got = hs_sys.copy_file_range(in, &oi, out, &oo, (size_t)len);
		if (got <= 0)
			return errno = got < 0 ? errno : EIO, -1;
		len -= (uint64_t)got;
	}
	return 0;
}

int hs_seg_copy_ranges(struct hs_seg *to, const struct hs_seg *from, const struct hs_seg_range *r, unsigned n)
{
	char path[PATH_MAX];
	struct hs_header h;
	int in, out = -1, rc = -1, err = EIO;

	if (!hs_commit_lazy || !session_dir[0])
		return errno = ENOTSUP, -1;
	seg_path(path, sizeof path, from->hdr->pid, from->hdr->image);
	in = hs_sys.open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	if (in < 0)
		return -1;
	/* the file at that name is the segment still mapped: same process, same image */
	if (hs_sys.pread(in, &h, sizeof h, 0) != (long)sizeof h || memcmp(h.magic, HS_MAGIC, HS_MAGIC_LEN) ||
	    h.pid != from->hdr->pid || h.image != from->hdr->image || h.start_ticks != from->hdr->start_ticks ||
	    h.segment_size != from->hdr->segment_size)
		goto out;
	seg_path(path, sizeof path, to->hdr->pid, to->hdr->image);
	out = hs_sys.open(path, O_RDWR | O_NOFOLLOW | O_CLOEXEC, 0);
	if (out < 0) {
		err = errno;
		goto out;
	}
	for (unsigned i = 0; i < n; i++) {
		uint64_t end = r[i].off + r[i].len;
		if (end > from->size ||
		    (!r[i].sparse && commit_range_fd(to->hdr, out, to->size, r[i].off, r[i].len) != 0)) {
			err = errno;
			goto out;
		}
		for (uint64_t pos = r[i].off; pos < end;) {
			uint64_t lo, hi;
			if (next_data(in, pos, end, &lo, &hi) != 0)
				break; /* the rest reads as zeros: the child's fresh pages are zeros already */
			/* a sparse range: store for the parent's pages with data only */
			if (r[i].sparse && commit_range_fd(to->hdr, out, to->size, lo, hi - lo) != 0) {
				err = errno;
				goto out;
			}
			if (copy_span(in, out, lo, hi - lo) != 0) {
				err = errno;
				goto out;
			}
			pos = hi;
		}
	}
	rc = 0;
out:
	if (out >= 0)
		hs_sys.close(out);
	hs_sys.close(in);
	if (rc)
		errno = err;
	return rc;
}

void hs_segment_end(unsigned state, int64_t value)
{
	struct hs_header *h = hs_seg.hdr;
	uint64_t expect = HS_STATE_PACK(HS_STATE_RUNNING, 0);
	if (!h)
		return;
	/* a recorder that went quiet (quiet.c) still says how its own process ended */
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) &&
	    (!(__atomic_load_n(&h->flags, __ATOMIC_ACQUIRE) & HS_HDR_SUSPECT) || h->pid != hs_sys.getpid()))
		return;
	if (!HS_ASSERT(hs_header_intact(h)))
		return;
	if (__atomic_compare_exchange_n(&h->state, &expect, HS_STATE_PACK(state, value), 0, __ATOMIC_ACQ_REL,
					__ATOMIC_RELAXED))
		__atomic_store_n(&h->end_mono_ns, hs_now(), __ATOMIC_RELEASE);
}

uint32_t hs_str_add(struct hs_seg *s, const char *str, size_t len)
{
	struct hs_table *t = &s->hdr->tables[HS_T_STRINGS];
	uint32_t off = __atomic_fetch_add(&t->count, (uint32_t)len + 1, __ATOMIC_RELAXED);
	if ((uint64_t)off + len + 1 > t->capacity || hs_seg_commit(s, t->offset + off, len + 1) != 0) {
		__atomic_add_fetch(&t->dropped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	memcpy(s->strings + off, str, len);
	s->strings[off + len] = '\0';
	/* the bytes are written before anyone is handed the offset */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return off;
}

/* ---- modules -------------------------------------------------------------- */

static void read_build_id(const struct dl_phdr_info *info, struct hs_module *m)
{
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		const char *p, *end;
		if (ph->p_type != PT_NOTE)
			continue;
		p = (const char *)(info->dlpi_addr + ph->p_vaddr);
		end = p + ph->p_memsz;
		while (p + sizeof(ElfW(Nhdr)) <= end) {
			const ElfW(Nhdr) *nh = (const void *)p;
			const char *name = p + sizeof *nh;
			const char *desc = name + ((nh->n_namesz + 3) & ~3u);
			const char *next = desc + ((nh->n_descsz + 3) & ~3u);
			if (next > end)
				break;
			if (nh->n_type == NT_GNU_BUILD_ID && nh->n_namesz == 4 && memcmp(name, "GNU", 4) == 0) {
				unsigned n = nh->n_descsz < HS_BUILD_ID_MAX ? nh->n_descsz : HS_BUILD_ID_MAX;
				memcpy(m->build_id, desc, n);
				m->build_id_len = (uint8_t)n;
				return;
			}
			p = next;
		}
	}
}

/*
 * The absolute path of an object the loader found by a relative name (an
 * LD_PRELOAD or dlopen name with a slash but not starting with one): the
 * working directory now, joined with name less its "./" prefixes.  Returns
 * a static buffer (caller holds modules_lock), or NULL when getcwd fails
 * or the path does not fit PATH_MAX.  No malloc: getcwd with a buffer is a
 * system call.  A program that changed directory between the load and the
 * first record of the object gets a wrong path; the dumper then finds no
 * file and prints its frames as [?] with the build id (README "Using it on
 * your own program").
 */
static const char *absolute_name(const char *name)
{
	static char path[PATH_MAX];
	size_t d, n;
	while (name[0] == '.' && name[1] == '/')
		name += 2;
	if (!getcwd(path, sizeof path))
		return NULL;
	d = strlen(path);
	n = strlen(name);
	if (d + 1 + n + 1 > sizeof path)
		return NULL;
	if (d > 1)
		path[d++] = '/';
	memcpy(path + d, name, n + 1);
	return path;
}

/*
 * Append the object described by info (named name, HS_MOD_* mflags) to the
 * module table unless it is there already.  A relative name is made
 * absolute (absolute_name); the vDSO is left out.  Caller holds
 * modules_lock.
 */
static void append_module(const struct dl_phdr_info *info, const char *name, unsigned mflags)
{
	struct hs_seg *s = &hs_seg;
	struct hs_table *t = &s->hdr->tables[HS_T_MODULES];
	uint64_t lo = UINT64_MAX, hi = 0;
	uint32_t i, n = __atomic_load_n(&t->count, __ATOMIC_ACQUIRE);
	struct hs_module *m;

	if (!name || !name[0])
		return; /* an object with no file */
	for (int j = 0; j < info->dlpi_phnum; j++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[j];
		if (ph->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + ph->p_vaddr < lo)
			lo = info->dlpi_addr + ph->p_vaddr;
		if (info->dlpi_addr + ph->p_vaddr + ph->p_memsz > hi)
			hi = info->dlpi_addr + ph->p_vaddr + ph->p_memsz;
	}
	if (hi == 0)
		return;
	if ((uint64_t)(uintptr_t)&append_module >= lo && (uint64_t)(uintptr_t)&append_module < hi) {
		hs_self_lo = lo;
		hs_self_hi = hi;
	}
	if (name[0] != '/') {
		/* the vDSO has no file; any other relative name is the loader's,
		   resolved against the working directory (LD_PRELOAD=build/x.so,
		   dlopen("./plugin.so")) */
		uint64_t vdso = (uint64_t)getauxval(AT_SYSINFO_EHDR);
		if (vdso && vdso >= lo && vdso < hi)
			return;
		name = absolute_name(name);
		if (!name)
			return;
	}
	for (i = 0; i < n; i++)
		if (s->modules[i].base == info->dlpi_addr && s->modules[i].lo == lo)
			return;
	if (n >= t->capacity || hs_seg_commit_entry(s, HS_T_MODULES, n) != 0) {
		__atomic_add_fetch(&t->dropped, 1, __ATOMIC_RELAXED);
		return;
	}
	m = &s->modules[n];
	memset(m, 0, sizeof *m);
	m->base = info->dlpi_addr;
	m->lo = lo;
	m->hi = hi;
	m->path_len = (uint16_t)strnlen(name, PATH_MAX);
	m->path = hs_str_add(s, name, m->path_len);
	m->flags = (uint8_t)mflags;
	read_build_id(info, m);
	/* the entry is complete before the count covers it */
	__atomic_store_n(&t->count, n + 1, __ATOMIC_RELEASE);
}

struct scan_state {
	int first;       /* the next object is the first (the main program when it has no name) */
	unsigned mflags; /* HS_MOD_* of every other object appended */
};

static int scan_one(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct scan_state *st = arg;
	(void)size;
	if (st->first) {
		st->first = 0;
		if (!info->dlpi_name || !info->dlpi_name[0]) {
			append_module(info, hs_seg.hdr->exe, HS_MOD_MAIN);
			return 0;
		}
	}
	append_module(info, info->dlpi_name, st->mflags);
	return 0;
}

static void modules_scan(unsigned mflags)
{
	struct scan_state st = {1, mflags};
	if (!hs_seg.hdr)
		return;
	hs_spin_lock(&modules_lock);
	dl_iterate_phdr(scan_one, &st);
	hs_spin_unlock(&modules_lock);
}

void hs_modules_scan(void)
{
	modules_scan(0);
}

void hs_modules_scan_loaded(void)
{
	modules_scan(HS_MOD_DLOPEN);
}

int hs_module_note_pc(uint64_t pc, int may_wait)
{
	struct dl_find_object fo;
	struct dl_phdr_info info;
	const ElfW(Ehdr) *eh;
	const char *name;
	unsigned mflags = HS_MOD_DLOPEN;
	uint64_t span;

	if (!hs_seg.hdr || _dl_find_object((void *)(uintptr_t)pc, &fo) != 0 || !fo.dlfo_link_map)
		return -1;
	/* the mapping that starts an object begins with its ELF header and program headers */
	eh = fo.dlfo_map_start;
	span = (uint64_t)((const char *)fo.dlfo_map_end - (const char *)fo.dlfo_map_start);
	if (span < sizeof *eh || memcmp(eh->e_ident, ELFMAG, SELFMAG) != 0 ||
	    eh->e_phentsize != sizeof(ElfW(Phdr)) || eh->e_phoff + (uint64_t)eh->e_phnum * sizeof(ElfW(Phdr)) > span)
		return -1;
	memset(&info, 0, sizeof info);
	info.dlpi_addr = fo.dlfo_link_map->l_addr;
	info.dlpi_phdr = (const ElfW(Phdr) *)((const char *)eh + eh->e_phoff);
	info.dlpi_phnum = eh->e_phnum;
	name = fo.dlfo_link_map->l_name;
	if (!name || !name[0]) {
		name = hs_seg.hdr->exe;
		mflags = HS_MOD_MAIN;
	}
	if (may_wait)
		hs_spin_lock(&modules_lock);
	else if (!hs_spin_trylock(&modules_lock))
		return -1; /* a signal handler never waits for the thread it interrupted */
	append_module(&info, name, mflags);
	hs_spin_unlock(&modules_lock);
	return 0;
}

const struct hs_module *hs_module_at(uint64_t pc, uint32_t *index)
{
	struct hs_table *t = &hs_seg.hdr->tables[HS_T_MODULES];
	uint32_t n = __atomic_load_n(&t->count, __ATOMIC_ACQUIRE);
	for (uint32_t i = 0; i < n && i < t->capacity; i++)
		if (pc >= hs_seg.modules[i].lo && pc < hs_seg.modules[i].hi) {
			if (index)
				*index = i;
			return &hs_seg.modules[i];
		}
	return NULL;
}
