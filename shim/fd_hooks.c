/* SPDX-License-Identifier: MIT */
/*
 * shim/fd_hooks.c — the fd tracker's interceptors: every exported call that
 * creates a file descriptor and every way one dies (hooks.def's "file
 * descriptors" block), each as thin as its shape allows: take the call
 * site, call the real function, hand the result to one entry of the core
 * (fd_core.h, fd_core.c), as ThreadSanitizer's fd interceptors call its fd
 * tracker.  open64() and close(), the hottest, are defined in the core
 * itself (fd_core.c), each one frame with its record, for their cost.  The families of one shape (the open family with its 64 and
 * _FORTIFY_SOURCE variants, the fixed-text creations, fopen) are generated
 * from the X-macro lists below; a hook whose real prototype differs from
 * libc's declaration, or from hooks.def's, does not compile.
 *
 * Order, as fd_core.h's contract says: a creation is recorded after the
 * call returns; a close before the call (the number can be reused by
 * another thread the instant it is closed) and its result after.  The
 * design is docs/design.md "File descriptors"; the rules are README.md
 * "File descriptors".
 */
/* The hooks define open and open64, fcntl and fcntl64, fopen and fopen64 ...
 * each under its own name: no redirection of one to the other. */
#undef _FORTIFY_SOURCE
#undef _FILE_OFFSET_BITS
#include <dlfcn.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fd_core.h"
#include "hooks.h"
#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"

/* ---- the vfork trampoline's C part ---------------------------------------------- */

/* Called by the vfork trampoline (fd_vfork.S) before it jumps to glibc's
 * vfork: note the parent's pid in the thread's state, which the child will
 * share (hs_vfork_child, fd_core.c, reads it).  Returns the real vfork. */
HS_HIDDEN void *hs_vfork_prepare(void)
{
	hs_tls.vfork_pid = (int32_t)hs_sys.getpid();
	return (void *)HS_REAL(vfork);
}

/* ---- creation ----------------------------------------------------------------------- */

/*
 * The open family: name, parameters, the real call's arguments, the
 * directory the path is relative to, the flags that say what was opened,
 * the call recorded.  The __*_2 names are _FORTIFY_SOURCE's checked
 * variants, which fortified programs call instead.
 */
#define FD_OPEN_HOOKS(X)                                                                                              \
	X(open, (const char *path, int flags, ...), (path, flags, OPEN_MODE(flags)), AT_FDCWD, flags, HS_FDC_OPEN)     \
	X(openat, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, OPEN_MODE(flags)), dirfd, flags, \
	  HS_FDC_OPENAT)                                                                                              \
	X(openat64, (int dirfd, const char *path, int flags, ...), (dirfd, path, flags, OPEN_MODE(flags)), dirfd,      \
	  flags, HS_FDC_OPENAT)                                                                                       \
	X(__open_2, (const char *path, int flags), (path, flags), AT_FDCWD, flags, HS_FDC_OPEN)                        \
	X(__open64_2, (const char *path, int flags), (path, flags), AT_FDCWD, flags, HS_FDC_OPEN)                      \
	X(__openat_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), dirfd, flags, HS_FDC_OPENAT)     \
	X(__openat64_2, (int dirfd, const char *path, int flags), (dirfd, path, flags), dirfd, flags, HS_FDC_OPENAT)   \
	X(creat, (const char *path, mode_t mode), (path, mode), AT_FDCWD, O_WRONLY, HS_FDC_CREAT)                      \
	X(creat64, (const char *path, mode_t mode), (path, mode), AT_FDCWD, O_WRONLY, HS_FDC_CREAT)

#define FD_OPEN_HOOK(name, params, args, dir, fl, call)                                              \
	HS_EXPORT int name params                                                                    \
	{                                                                                            \
		HS_FAULT_OPEN(); /* faults.c: --fail open */                                          \
		uint64_t site = HS_FD_SITE();                                                        \
		return hs_fd_opened(HS_REAL(name) args, dir, path, fl, call, site);                  \
	}
FD_OPEN_HOOKS(FD_OPEN_HOOK)

/* open64 (the open that programs built with large-file support call) and
 * close are defined in the core (fd_core.c), each one frame with its
 * record: see there. */

/* The creations described by a fixed text: name, parameters, the real
 * call's arguments, kind, call, close-on-exec, text. */
#define FD_MADE_HOOKS(X)                                                                                              \
	X(eventfd, (unsigned int initval, int flags), (initval, flags), HS_FDK_EVENTFD, HS_FDC_EVENTFD, flags & O_CLOEXEC, \
	  "eventfd")                                                                                                  \
	X(timerfd_create, (int clock, int flags), (clock, flags), HS_FDK_TIMERFD, HS_FDC_TIMERFD, flags & O_CLOEXEC,     \
	  "timerfd")                                                                                                  \
	X(epoll_create, (int size), (size), HS_FDK_EPOLL, HS_FDC_EPOLL, 0, "epoll")                                     \
	X(epoll_create1, (int flags), (flags), HS_FDK_EPOLL, HS_FDC_EPOLL, flags & O_CLOEXEC, "epoll")                  \
	X(inotify_init, (void), (), HS_FDK_INOTIFY, HS_FDC_INOTIFY, 0, "inotify")                                       \
	X(inotify_init1, (int flags), (flags), HS_FDK_INOTIFY, HS_FDC_INOTIFY, flags & O_CLOEXEC, "inotify")

#define FD_MADE_HOOK(name, params, args, kind, call, cloexec, text)                 \
	HS_EXPORT int name params                                                   \
	{                                                                           \
		uint64_t site = HS_FD_SITE();                                       \
		return hs_fd_made(HS_REAL(name) args, kind, call, cloexec, text, site); \
	}
FD_MADE_HOOKS(FD_MADE_HOOK)

HS_EXPORT int signalfd(int fd, const sigset_t *mask, int flags)
{
	uint64_t site = HS_FD_SITE();
	int rc = HS_REAL(signalfd)(fd, mask, flags);
	/* with fd != -1 it changes an existing signalfd's mask: no creation */
	return fd == -1 ? hs_fd_made(rc, HS_FDK_SIGNALFD, HS_FDC_SIGNALFD, flags & O_CLOEXEC, "signalfd", site) : rc;
}

HS_EXPORT int memfd_create(const char *name, unsigned int flags)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_memfd_made(HS_REAL(memfd_create)(name, flags), name, flags & MFD_CLOEXEC, site);
}

HS_EXPORT int socket(int domain, int type, int proto)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_socket_made(HS_REAL(socket)(domain, type, proto), domain, type, site);
}

HS_EXPORT int socketpair(int domain, int type, int proto, int sv[2])
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_socketpair_made(HS_REAL(socketpair)(domain, type, proto, sv), sv, domain, type, site);
}

HS_EXPORT int accept(int lfd, struct sockaddr *addr, socklen_t *len)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_accepted(HS_REAL(accept)(lfd, addr, len), lfd, addr, len, 0, site);
}

HS_EXPORT int accept4(int lfd, struct sockaddr *addr, socklen_t *len, int flags)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_accepted(HS_REAL(accept4)(lfd, addr, len, flags), lfd, addr, len, flags & SOCK_CLOEXEC, site);
}

/* connect and bind say who a socket talks to: its description, no event. */
HS_EXPORT int connect(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rc = HS_REAL(connect)(fd, addr, len);
	if (rc == 0 || errno == EINPROGRESS)
		hs_fd_describe(fd, "peer ", addr, len);
	return rc;
}

HS_EXPORT int bind(int fd, const struct sockaddr *addr, socklen_t len)
{
	int rc = HS_REAL(bind)(fd, addr, len);
	if (rc == 0)
		hs_fd_describe(fd, "bound ", addr, len);
	return rc;
}

HS_EXPORT int pipe(int fds[2])
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_pipe_made(HS_REAL(pipe)(fds), fds, 0, site);
}

/*
 * libunwind's memory validation (libunwind 1.6, src/x86_64/Ginit.c:
 * tdep_init_mem_validate, write_validate) checks that an address is
 * readable by write(2)-ing one byte from it into a pipe of its own: the
 * kernel fails the write with EFAULT instead of faulting.  mincore, which
 * it tries first, is followed by the same write (mincore says mapped, not
 * readable), and there is no setting to do without it.  The pipe is opened
 * at libunwind's first unwind, inside a hook, and kept: two descriptors in
 * the program that the program did not open (test_subprocess counts them
 * in a child; a high open-files limit numbers them beyond the fd table).
 *
 * So heisen gives libunwind no pipe at all: its pipe2 gets two numbers no
 * descriptor can have (VALIDATE_FD, negative), its read of them fails with
 * EBADF and its close of them is a no-op (it reopens, and gets the same
 * numbers again), and its syscall(SYS_write, VALIDATE_FD, addr, 1) comes
 * here (the syscall hook below), where the same question — can addr be
 * read? — is asked of process_vm_readv on this process, which fails with
 * EFAULT instead of faulting and needs no descriptor.  Where seccomp
 * refuses process_vm_readv (ENOSYS, EPERM), the answer is mincore's or
 * msync's, which libunwind asked just before.  heisen holds no
 * descriptor of the program's between its own calls.
 */
/* VALIDATE_FD: fd_core.h */

/*
 * Is site (a return address) in libunwind?  libunwind reopens its pipe at
 * every validation after a failed read (once an unwind: 1,017 times in a
 * run of bench/py_workload.py 3000), and dladdr costs ~3,100 instructions,
 * so the call sites found to be libunwind's are remembered (UNW_SITES of
 * them, each written once, relaxed: a reader that misses asks dladdr).
 * libunwind is never unloaded once heisen has used it (unwind_load.c
 * holds its own dlopen reference), so a remembered site stays libunwind's.
 * Only hooks' own calls get here (hs_tls.in_hook), never a signal handler.
 */
#define UNW_SITES 4
static uint64_t unw_sites[UNW_SITES];

static int from_libunwind(uint64_t site)
{
	Dl_info info;
	unsigned i;
	for (i = 0; i < UNW_SITES; i++) {
		uint64_t s = __atomic_load_n(&unw_sites[i], __ATOMIC_RELAXED);
		if (s == site)
			return 1;
		if (s == 0)
			break;
	}
	if (!dladdr((void *)(uintptr_t)site, &info) || !info.dli_fname || !strstr(info.dli_fname, "libunwind"))
		return 0;
	for (i = 0; i < UNW_SITES; i++) {
		uint64_t zero = 0;
		if (__atomic_compare_exchange_n(&unw_sites[i], &zero, site, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED) ||
		    zero == site)
			break;
	}
	return 1;
}

/* Can one byte at addr be read?  1 (as write(2) would return) or -1 with errno EFAULT. */
static long validate_byte(uint64_t addr)
{
	char byte;
	long rc = hs_sys.read_self(&byte, (const void *)(uintptr_t)addr, 1);
	if (rc == 1)
		return 1;
	if (rc < 0 && (errno == ENOSYS || errno == EPERM))
		return 1; /* refused: mincore's or msync's word, asked just before, stands */
	errno = EFAULT;
	return -1;
}

/*
 * syscall(2) is passed through untouched (six arguments, as glibc's own
 * wrapper reads them), except libunwind's validation write to VALIDATE_FD
 * from inside a hook: see above.
 */
HS_EXPORT long syscall(long nr, ...)
{
	va_list ap;
	long a1, a2, a3, a4, a5, a6;
	va_start(ap, nr);
	a1 = va_arg(ap, long);
	a2 = va_arg(ap, long);
	a3 = va_arg(ap, long);
	a4 = va_arg(ap, long);
	a5 = va_arg(ap, long);
	a6 = va_arg(ap, long);
	va_end(ap);
	if (HS_UNLIKELY(nr == SYS_write && (int)a1 == VALIDATE_FD))
		return validate_byte((uint64_t)a2);
	return HS_REAL(syscall)(nr, a1, a2, a3, a4, a5, a6);
}

HS_EXPORT int pipe2(int fds[2], int flags)
{
	uint64_t site = HS_FD_SITE();
	if (hs_tls.in_hook && (flags & O_CLOEXEC) && from_libunwind(site)) {
		fds[0] = fds[1] = VALIDATE_FD;
		return 0;
	}
	return hs_fd_pipe_made(HS_REAL(pipe2)(fds, flags), fds, flags & O_CLOEXEC, site);
}

HS_EXPORT int dup(int old)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_duplicated(HS_REAL(dup)(old), old, 0, HS_FDC_DUP, 0, site);
}

HS_EXPORT int dup2(int old, int nw)
{
	uint64_t site = HS_FD_SITE();
	int fd = HS_REAL(dup2)(old, nw);
	/* dup2 of a number onto itself changes nothing */
	return old != nw ? hs_fd_duplicated(fd, old, 0, HS_FDC_DUP2, 1, site) : fd;
}

HS_EXPORT int dup3(int old, int nw, int flags)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_duplicated(HS_REAL(dup3)(old, nw, flags), old, flags & O_CLOEXEC, HS_FDC_DUP3, 1, site);
}

/* fcntl is variadic: the third argument is read as a pointer, as glibc's own
 * wrapper does, and passed through unchanged for every command. */
#define FD_FCNTL_HOOK(name)                                                          \
	HS_EXPORT int name(int fd, int cmd, ...)                                      \
	{                                                                             \
		uint64_t site = HS_FD_SITE();                                         \
		va_list ap;                                                           \
		void *arg;                                                            \
		va_start(ap, cmd);                                                    \
		arg = va_arg(ap, void *);                                             \
		va_end(ap);                                                           \
		return hs_fd_after_fcntl(HS_REAL(name)(fd, cmd, arg), fd, cmd, arg, site); \
	}
FD_FCNTL_HOOK(fcntl)
FD_FCNTL_HOOK(fcntl64)

/* SCM_RIGHTS: every number the message carried is a new generation here. */
HS_EXPORT ssize_t recvmsg(int fd, struct msghdr *msg, int flags)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_received(HS_REAL(recvmsg)(fd, msg, flags), fd, msg, flags, site);
}

/* ---- objects that carry their generation ------------------------------------------- */

#define FD_FOPEN_HOOK(name)                                                                    \
	HS_EXPORT FILE *name(const char *path, const char *mode)                               \
	{                                                                                      \
		uint64_t site = HS_FD_SITE();                                                  \
		return hs_fd_fopened(HS_REAL(name)(path, mode), path, mode, HS_FDC_FOPEN, site); \
	}
FD_FOPEN_HOOK(fopen)
FD_FOPEN_HOOK(fopen64)

HS_EXPORT FILE *fdopen(int fd, const char *mode)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_taken_over(HS_REAL(fdopen)(fd, mode), fd, HS_FDF_OWNER_FILE, HS_FDC_FDOPEN, site);
}

/* freopen closes fp's number (checked and recorded first, as fclose's)
 * and opens another for the same FILE. */
#define FD_FREOPEN_HOOK(name)                                                                     \
	HS_EXPORT FILE *name(const char *path, const char *mode, FILE *fp)                        \
	{                                                                                         \
		uint64_t site = HS_FD_SITE();                                                     \
		struct hs_fd_closing c;                                                           \
		hs_fd_file_close_begin(&c, fp, HS_FDC_FREOPEN, site);                             \
		return hs_fd_fopened(HS_REAL(name)(path, mode, fp), path, mode, HS_FDC_FREOPEN, site); \
	}
FD_FREOPEN_HOOK(freopen)
FD_FREOPEN_HOOK(freopen64)

HS_EXPORT int fclose(FILE *fp)
{
	uint64_t site = HS_FD_SITE();
	struct hs_fd_closing c;
	hs_fd_file_close_begin(&c, fp, HS_FDC_FCLOSE, site);
	return hs_fd_close_end(&c, HS_REAL(fclose)(fp));
}

HS_EXPORT DIR *opendir(const char *path)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_dir_opened(HS_REAL(opendir)(path), path, site);
}

HS_EXPORT DIR *fdopendir(int fd)
{
	uint64_t site = HS_FD_SITE();
	return hs_fd_taken_over(HS_REAL(fdopendir)(fd), fd, HS_FDF_OWNER_DIR, HS_FDC_FDOPENDIR, site);
}

HS_EXPORT int closedir(DIR *d)
{
	uint64_t site = HS_FD_SITE();
	struct hs_fd_closing c;
	hs_fd_dir_close_begin(&c, d, site);
	return hs_fd_close_end(&c, HS_REAL(closedir)(d));
}

/* ---- closing ------------------------------------------------------------------------ */

HS_EXPORT int close_range(unsigned int first, unsigned int last, int flags)
{
	uint64_t site = HS_FD_SITE();
	int rc;
	if (first <= last && !(flags & CLOSE_RANGE_CLOEXEC))
		hs_fd_range_closing(first, last, site);
	rc = HS_REAL(close_range)(first, last, flags);
	return (flags & CLOSE_RANGE_CLOEXEC) ? hs_fd_range_cloexec(rc, first, last) : rc;
}

HS_EXPORT void closefrom(int low)
{
	uint64_t site = HS_FD_SITE();
	if (low >= 0)
		hs_fd_range_closing((unsigned)low, ~0u, site);
	HS_REAL(closefrom)(low);
}
