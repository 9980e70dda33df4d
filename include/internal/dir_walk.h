/* SPDX-License-Identifier: MIT */
/*
 * internal/dir_walk.h — open a session directory one path component at a
 * time, so that nobody else's symbolic link or directory decides where
 * heisen writes.  Shared by the shim (it runs in the constructor: no
 * malloc, no stdio, raw system calls so none of the shim's own hooks see
 * them) and heisen-run; not part of the installed API.
 *
 * The idea is the kernel's own protected_symlinks rule and what openat2's
 * RESOLVE_NO_SYMLINKS gives, done by hand because a symbolic link that
 * root or the user made must still work (/var/run -> /run): each component
 * is opened with O_NOFOLLOW | O_DIRECTORY from the descriptor of its parent,
 * so no name is looked up twice and nothing can be swapped between a check
 * and its use.  Rules, checked on the opened descriptors:
 *   - a symbolic link is followed only when owned by root or by us (the
 *     effective uid); one owned by anyone else is refused;
 *   - a directory on the way must be owned by root or by us, and not be
 *     writable by others unless it has the sticky bit (/tmp, /dev/shm):
 *     whoever may rename its entries may swap the rest of the path;
 *   - the session directory itself must be owned by us and not writable by
 *     group or others.
 * Missing components are made with mkdirat on their parent's descriptor
 * (parents in parent_mode, the last one 0700) when asked.
 */
#ifndef HEISEN_DIR_WALK_H
#define HEISEN_DIR_WALK_H

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#define HS_WALK_SYMLINKS_MAX 40

/* hs_dir_walk's create: make nothing, only the last component, or every missing one. */
enum { HS_WALK_CREATE_NONE = 0, HS_WALK_CREATE_LAST = 1, HS_WALK_CREATE_ALL = 2 };

/* Why hs_dir_walk refused: a fixed phrase, the component concerned (a path)
 * and, per phrase, the uid or errno involved. */
struct hs_walk_fail {
	const char *why;     /* e.g. "is a symbolic link owned by another user" */
	char at[PATH_MAX];   /* the path up to the offending component */
	unsigned uid;        /* its owner, for the ownership phrases */
	int err;             /* errno, for "cannot open" / "cannot create" */
};

static inline int hs_walk_open(int dfd, const char *name, int flags)
{
	return (int)syscall(SYS_openat, dfd, name, flags | O_CLOEXEC, 0);
}

static inline void hs_walk_close(int fd)
{
	if (fd >= 0)
		syscall(SYS_close, fd);
}

/* at[] = canon + "/" + name (cut to fit). */
static inline void hs_walk_at(struct hs_walk_fail *f, const char *canon, const char *name)
{
	size_t n = strlen(canon), m = strlen(name);
	if (n > sizeof f->at - 2)
		n = sizeof f->at - 2;
	memcpy(f->at, canon, n);
	f->at[n++] = '/';
	if (m > sizeof f->at - 1 - n)
		m = sizeof f->at - 1 - n;
	memcpy(f->at + n, name, m);
	f->at[n + m] = '\0';
}

/*
 * Open the directory `path` (absolute) by the rules at the top of this
 * file, creating missing components as `create` says (HS_WALK_CREATE_*).  On success returns an
 * O_RDONLY | O_DIRECTORY | O_CLOEXEC descriptor of it and writes into
 * canon[canon_cap] its path without symbolic links, "." or ".."; on
 * failure returns -1 and f says why (canon is then unspecified).
 */
static inline int hs_dir_walk(const char *path, int create, unsigned parent_mode, char *canon, size_t canon_cap,
			      struct hs_walk_fail *f)
{
	char rest[2 * PATH_MAX], link[PATH_MAX], name[NAME_MAX + 1];
	uid_t me = geteuid();
	size_t pos = 0, clen = 0;
	int dfd, links = 0;
	struct stat st;

	f->why = NULL;
	f->at[0] = '\0';
	f->uid = 0;
	f->err = 0;
	if (!path || path[0] != '/' || strlen(path) >= sizeof rest || canon_cap < 2) {
		f->why = "is not an absolute path";
		if (path)
			hs_walk_at(f, "", path[0] == '/' ? path + 1 : path);
		return -1;
	}
	memcpy(rest, path, strlen(path) + 1);
	if ((dfd = hs_walk_open(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY)) < 0) {
		f->why = "cannot be opened";
		f->err = errno;
		return -1;
	}
	canon[0] = '\0';
	for (;;) {
		size_t n = 0;
		int fd;
		while (rest[pos] == '/')
			pos++;
		if (!rest[pos])
			break;
		while (rest[pos + n] && rest[pos + n] != '/')
			n++;
		if (n > NAME_MAX) {
			f->why = "has a component longer than NAME_MAX";
			hs_walk_at(f, canon, "");
			goto fail;
		}
		memcpy(name, rest + pos, n);
		name[n] = '\0';
		pos += n;
		if (strcmp(name, ".") == 0)
			continue;
		if (strcmp(name, "..") == 0) {
			if ((fd = hs_walk_open(dfd, "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW)) < 0) {
				f->why = "cannot be opened";
				f->err = errno;
				hs_walk_at(f, canon, name);
				goto fail;
			}
			hs_walk_close(dfd);
			dfd = fd;
			while (clen > 0 && canon[clen - 1] != '/')
				clen--;
			if (clen > 0)
				clen--;
			canon[clen] = '\0';
			continue;
		}
		fd = hs_walk_open(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
		size_t k = pos;
		while (rest[k] == '/')
			k++;
		if (fd < 0 && errno == ENOENT && (create == HS_WALK_CREATE_ALL || (create && !rest[k]))) {
			if (syscall(SYS_mkdirat, dfd, name, rest[k] ? parent_mode : 0700) != 0 && errno != EEXIST) {
				f->why = "cannot be created";
				f->err = errno;
				hs_walk_at(f, canon, name);
				goto fail;
			}
			fd = hs_walk_open(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW);
		}
		if (fd < 0 && (errno == ELOOP || errno == ENOTDIR) &&
		    syscall(SYS_newfstatat, dfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode)) {
			long len;
			size_t tail = strlen(rest + pos);
			if (st.st_uid != 0 && st.st_uid != me) {
				f->why = "is a symbolic link owned by another user";
				f->uid = (unsigned)st.st_uid;
				hs_walk_at(f, canon, name);
				goto fail;
			}
			len = (long)syscall(SYS_readlinkat, dfd, name, link, sizeof link - 1);
			if (len <= 0 || ++links > HS_WALK_SYMLINKS_MAX || (size_t)len + 1 + tail >= sizeof rest) {
				f->why = len <= 0 ? "is a symbolic link that cannot be read" : "has too many symbolic links";
				f->err = len < 0 ? errno : ELOOP;
				hs_walk_at(f, canon, name);
				goto fail;
			}
			/* the link's target, then what was left of the path */
			memmove(rest + (size_t)len + 1, rest + pos, tail + 1);
			memcpy(rest, link, (size_t)len);
			rest[len] = '/';
			pos = 0;
			if (link[0] == '/') {
				hs_walk_close(dfd);
				if ((dfd = hs_walk_open(AT_FDCWD, "/", O_RDONLY | O_DIRECTORY)) < 0) {
					f->why = "cannot be opened";
					f->err = errno;
					return -1;
				}
				clen = 0;
				canon[0] = '\0';
			}
			continue;
		}
		if (fd < 0) {
			f->why = errno == ENOTDIR ? "is not a directory" : "cannot be opened";
			f->err = errno;
			hs_walk_at(f, canon, name);
			goto fail;
		}
		hs_walk_at(f, canon, name);
		if (syscall(SYS_fstat, fd, &st) != 0 || !S_ISDIR(st.st_mode)) {
			hs_walk_close(fd);
			f->why = "is not a directory";
			goto fail;
		}
		/* the last component: the stricter checks after the loop say what is wrong with it */
		if (rest[k] && st.st_uid != 0 && st.st_uid != me) {
			hs_walk_close(fd);
			f->why = "is a directory owned by another user";
			f->uid = (unsigned)st.st_uid;
			goto fail;
		}
		if (rest[k] && (st.st_mode & S_IWOTH) && !(st.st_mode & S_ISVTX)) {
			hs_walk_close(fd);
			f->why = "is a directory anyone may write to (without the sticky bit)";
			f->uid = (unsigned)st.st_uid;
			goto fail;
		}
		if (clen + 1 + n + 1 > canon_cap) {
			hs_walk_close(fd);
			f->why = "is too long a path";
			goto fail;
		}
		canon[clen++] = '/';
		memcpy(canon + clen, name, n + 1);
		clen += n;
		hs_walk_close(dfd);
		dfd = fd;
	}
	if (clen == 0) {
		canon[0] = '/';
		canon[1] = '\0';
	}
	if (syscall(SYS_fstat, dfd, &st) != 0 || st.st_uid != me || (st.st_mode & 022)) {
		memcpy(f->at, canon, strlen(canon) + 1);
		f->uid = (unsigned)st.st_uid;
		f->why = st.st_uid != me ? "is owned by another user, not by us"
					 : "may be written by its group or by others (chmod go-w)";
		goto fail;
	}
	f->at[0] = '\0';
	return dfd;
fail:
	hs_walk_close(dfd);
	return -1;
}

#endif
