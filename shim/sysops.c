/* SPDX-License-Identifier: MIT */
/*
 * shim/sysops.c — the shim's own system calls, as raw syscalls behind one
 * swappable table (see struct hs_sysops in shim.h).  Raw, so that while the shim
 * interposes open/close/mmap its own calls are never recorded
 * and never recurse; behind a table, so tests can fail any of them.
 * All are async-signal-safe.
 */
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "shim.h"

/*
 * The system call made right here, not through syscall(3): libheisen
 * exports a syscall hook of its own (fd_hooks.c), so each of these went
 * through the PLT, the hook and libc's syscall, three more pages of code
 * to fault in where a fork child between fork and exec runs one
 * (bench/README.md "Process start: no symbol scans, no CPUID, fewer system
 * calls").  x86_64's convention (arguments in rdi, rsi, rdx, r10, r8, r9;
 * rcx and r11 clobbered; -4095..-1 is -errno), as glibc's own
 * INTERNAL_SYSCALL makes it; elsewhere syscall(3).
 */
#if defined(__x86_64__)
static inline long raw_syscall6(long n, long a, long b, long c, long d, long e, long f)
{
	long ret;
	register long r10 __asm__("r10") = d;
	register long r8 __asm__("r8") = e;
	register long r9 __asm__("r9") = f;
	__asm__ volatile("syscall"
			 : "=a"(ret)
			 : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10), "r"(r8), "r"(r9)
			 : "rcx", "r11", "memory");
	if ((unsigned long)ret > -4096ul) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}
#define RAW7(n, a, b, c, d, e, f, ...)                                                              \
	raw_syscall6((long)(n), (long)(a), (long)(b), (long)(c), (long)(d), (long)(e), (long)(f))
#define syscall(...) RAW7(__VA_ARGS__, 0, 0, 0, 0, 0, 0, 0)
#endif

static int sys_open(const char *path, int flags, int mode)
{
	return (int)syscall(SYS_openat, AT_FDCWD, path, flags, mode);
}

static int sys_close(int fd)
{
	/* never retried on EINTR: the number may already be someone else's */
	return (int)syscall(SYS_close, fd);
}

static int sys_fallocate(int fd, off_t off, off_t len)
{
	return (int)syscall(SYS_fallocate, fd, 0, off, len);
}

static int sys_ftruncate(int fd, off_t len)
{
	return (int)syscall(SYS_ftruncate, fd, len);
}

static ssize_t sys_pwrite(int fd, const void *buf, size_t n, off_t off)
{
	return syscall(SYS_pwrite64, fd, buf, n, off);
}

static ssize_t sys_read(int fd, void *buf, size_t n)
{
	return syscall(SYS_read, fd, buf, n);
}

static void *sys_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	return (void *)syscall(SYS_mmap, addr, len, prot, flags, fd, off);
}

static int sys_munmap(void *addr, size_t len)
{
	return (int)syscall(SYS_munmap, addr, len);
}

static int sys_mkdir(const char *path, int mode)
{
	return (int)syscall(SYS_mkdirat, AT_FDCWD, path, mode);
}

static int sys_lstat(const char *path, struct stat *st)
{
	return (int)syscall(SYS_newfstatat, AT_FDCWD, path, st, AT_SYMLINK_NOFOLLOW);
}

static int sys_unlink(const char *path)
{
	return (int)syscall(SYS_unlinkat, AT_FDCWD, path, 0);
}

static int sys_linkat(const char *from, const char *to, int flags)
{
	return (int)syscall(SYS_linkat, AT_FDCWD, from, AT_FDCWD, to, flags);
}
static ssize_t sys_readlink(const char *path, char *buf, size_t n)
{
	return syscall(SYS_readlinkat, AT_FDCWD, path, buf, n);
}

static ssize_t sys_getdents64(int fd, void *buf, size_t n)
{
	return syscall(SYS_getdents64, fd, buf, n);
}

static int sys_getrusage(int who, struct rusage *ru)
{
	return (int)syscall(SYS_getrusage, who, ru);
}

static int sys_sched_getaffinity(size_t size, void *mask)
{
	return (int)syscall(SYS_sched_getaffinity, 0, size, mask);
}

static int sys_uname(struct utsname *u)
{
	return (int)syscall(SYS_uname, u);
}

static int sys_sysinfo(struct sysinfo *si)
{
	return (int)syscall(SYS_sysinfo, si);
}

static int sys_statfs(const char *path, struct statfs *st)
{
	return (int)syscall(SYS_statfs, path, st);
}

static int sys_madvise(void *addr, size_t len, int advice)
{
	return (int)syscall(SYS_madvise, addr, len, advice);
}

static ssize_t sys_copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t n)
{
	return syscall(SYS_copy_file_range, in, in_off, out, out_off, n, 0);
}

static int sys_getrlimit(int resource, struct rlimit *rl)
{
	return (int)syscall(SYS_prlimit64, 0, resource, NULL, rl);
}

HS_FORK_TEXT static pid_t sys_getpid(void)
{
	return (pid_t)syscall(SYS_getpid);
}

static pid_t sys_gettid(void)
{
	return (pid_t)syscall(SYS_gettid);
}

static pid_t sys_getppid(void)
{
	return (pid_t)syscall(SYS_getppid);
}

static uid_t sys_getuid(void)
{
	return (uid_t)syscall(SYS_getuid);
}

static uid_t sys_geteuid(void)
{
	return (uid_t)syscall(SYS_geteuid);
}

static int sys_tgkill(pid_t pid, pid_t tid, int sig)
{
	return (int)syscall(SYS_tgkill, pid, tid, sig);
}

static int sys_tgsigqueueinfo(pid_t pid, pid_t tid, int sig, siginfo_t *si)
{
	return (int)syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, si);
}

static int sys_nanosleep(const struct timespec *ts)
{
	return (int)syscall(SYS_nanosleep, ts, NULL);
}

static int sys_mprotect(void *addr, size_t len, int prot)
{
	return (int)syscall(SYS_mprotect, addr, len, prot);
}

/*
 * The pid process_vm_readv is given, cached: a getpid before each checked
 * read was ~100 of a Python start's system calls (libunwind validates
 * each address it reads, fd_hooks.c validate_byte).  A stale pid would
 * read another process's memory, so the cache lives in a page of its own
 * marked MADV_WIPEONFORK (Linux 4.14): the kernel gives the child of any
 * fork -- glibc's fork, _Fork, a raw clone without CLONE_VM, none of which
 * need to run a handler of ours -- that page zeroed, and the child asks
 * getpid again.  A child sharing the memory (vfork, posix_spawn's clone)
 * keeps the page: the parent's pid reads the same memory, and a vfork
 * child (t->vfork_pid set by the trampoline, fd_vfork.S) never fills an
 * empty cache with its own pid.  Where the page cannot be had (an older
 * kernel), each read asks getpid as before.  ESRCH or EPERM (the pid is
 * gone: a CLONE_VM child outliving its parent; or a vfork child may not
 * read its parent under Yama's ptrace scope) asks getpid again.  Left: a
 * raw clone(CLONE_VM) child without CLONE_THREAD whose parent has exited
 * and whose pid was taken by an unrelated process of the same user.
 * bench/README.md "A Python start's system calls and page faults".
 */
#define PID_PAGE_NONE ((pid_t *)(uintptr_t)1) /* no WIPEONFORK page: getpid each time */
static pid_t *self_pid_page; /* [atomic] NULL until the first checked read */

static pid_t *pid_page(void)
{
	pid_t *p = __atomic_load_n(&self_pid_page, __ATOMIC_ACQUIRE), *none = NULL;
	void *m;
	if (HS_LIKELY(p != NULL))
		return p;
	m = (void *)syscall(SYS_mmap, NULL, 4096L, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1L, 0L);
	if (m == MAP_FAILED)
		p = PID_PAGE_NONE;
	else if (syscall(SYS_madvise, m, 4096L, MADV_WIPEONFORK) != 0) {
		syscall(SYS_munmap, m, 4096L);
		p = PID_PAGE_NONE;
	} else
		p = m;
	if (!__atomic_compare_exchange_n(&self_pid_page, &none, p, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		if (p != PID_PAGE_NONE)
			syscall(SYS_munmap, p, 4096L); /* another thread's page was first */
		p = none;
	}
	return p;
}

/* This process's pid for process_vm_readv; fresh asks getpid (the cache is refilled). */
static pid_t self_pid(int fresh)
{
	pid_t *p = pid_page(), pid;
	if (p != PID_PAGE_NONE && !fresh && (pid = __atomic_load_n(p, __ATOMIC_RELAXED)) != 0)
		return pid;
	pid = (pid_t)syscall(SYS_getpid);
	if (p != PID_PAGE_NONE && hs_tls.vfork_pid == 0)
		__atomic_store_n(p, pid, __ATOMIC_RELAXED);
	return pid;
}

/* n bytes of this process's memory at src into dst, or -1 with errno
 * (EFAULT: not mapped or not readable) and never a fault. */
static ssize_t sys_read_self(void *dst, const void *src, size_t n)
{
	struct iovec l = {dst, n}, r = {(void *)(uintptr_t)src, n};
	ssize_t rc = syscall(SYS_process_vm_readv, (long)self_pid(0), &l, 1L, &r, 1L, 0L);
	if (rc < 0 && (errno == ESRCH || errno == EPERM))
		rc = syscall(SYS_process_vm_readv, (long)self_pid(1), &l, 1L, &r, 1L, 0L);
	return rc;
}

static int sys_access_dir(const char *path, int mode)
{
	long r = syscall(SYS_faccessat2, AT_FDCWD, path, mode, AT_EACCESS);
	if (r != 0 && errno == ENOSYS)
		r = syscall(SYS_faccessat, AT_FDCWD, path, mode); /* before Linux 5.8: the real uid */
	return (int)r;
}

static int sys_fcntl(int fd, int cmd, long arg)
{
	return (int)syscall(SYS_fcntl, fd, cmd, arg);
}

static ssize_t sys_readlinkat(int dfd, const char *path, char *buf, size_t n)
{
	return syscall(SYS_readlinkat, dfd, path, buf, n);
}

static int sys_openat(int dfd, const char *path, int flags, int mode)
{
	return (int)syscall(SYS_openat, dfd, path, flags, mode);
}

static ssize_t sys_write(int fd, const void *buf, size_t n)
{
	return syscall(SYS_write, fd, buf, n);
}

static ssize_t sys_pread(int fd, void *buf, size_t n, off_t off)
{
	return syscall(SYS_pread64, fd, buf, n, off);
}

static off_t sys_lseek(int fd, off_t off, int whence)
{
	return (off_t)syscall(SYS_lseek, fd, off, whence);
}

static int sys_fstatat(int dfd, const char *path, struct stat *st, int flags)
{
	return (int)syscall(SYS_newfstatat, dfd, path, st, flags);
}

static int sys_unlinkat(int dfd, const char *path, int flags)
{
	return (int)syscall(SYS_unlinkat, dfd, path, flags);
}

static int sys_rename(const char *from, const char *to)
{
	return (int)syscall(SYS_renameat, AT_FDCWD, from, AT_FDCWD, to);
}

struct hs_sysops hs_sys = {
	.open = sys_open,
	.close = sys_close,
	.fallocate = sys_fallocate,
	.ftruncate = sys_ftruncate,
	.pwrite = sys_pwrite,
	.read = sys_read,
	.mmap = sys_mmap,
	.munmap = sys_munmap,
	.mkdir = sys_mkdir,
	.lstat = sys_lstat,
	.unlink = sys_unlink,
	.readlink = sys_readlink,
	.linkat = sys_linkat,
	.getdents64 = sys_getdents64,
	.getrusage = sys_getrusage,
	.sched_getaffinity = sys_sched_getaffinity,
	.uname = sys_uname,
	.sysinfo = sys_sysinfo,
	.statfs = sys_statfs,
	.getrlimit = sys_getrlimit,
	.madvise = sys_madvise,
	.copy_file_range = sys_copy_file_range,
	.getpid = sys_getpid,
	.gettid = sys_gettid,
	.getppid = sys_getppid,
	.getuid = sys_getuid,
	.geteuid = sys_geteuid,
	.tgkill = sys_tgkill,
	.tgsigqueueinfo = sys_tgsigqueueinfo,
	.nanosleep = sys_nanosleep,
	.mprotect = sys_mprotect,
	.read_self = sys_read_self,
	.access_dir = sys_access_dir,
	.fcntl = sys_fcntl,
	.readlinkat = sys_readlinkat,
	.openat = sys_openat,
	.write = sys_write,
	.pread = sys_pread,
	.lseek = sys_lseek,
	.fstatat = sys_fstatat,
	.unlinkat = sys_unlinkat,
	.rename = sys_rename,
};

/* struct linux_dirent64 (getdents64(2)): the record the kernel writes. */
struct hs_dirent64 {
	uint64_t ino;
	int64_t off;
	unsigned short reclen;
	unsigned char type;
	char name[];
};

int hs_dir_each(int dfd, hs_dir_fn fn, void *arg)
{
	char buf[HS_DIR_BUF] __attribute__((aligned(8)));
	ssize_t n;
	while ((n = hs_sys.getdents64(dfd, buf, sizeof buf)) > 0) {
		for (ssize_t off = 0; off < n;) {
			const struct hs_dirent64 *d = (const void *)(buf + off);
			if (d->reclen < offsetof(struct hs_dirent64, name) + 1 || d->reclen > n - off) {
				errno = EIO; /* the kernel never writes this: stop rather than read past */
				return -1;
			}
			off += d->reclen;
			if (fn(arg, d->name, d->type))
				return 1;
		}
	}
	return n < 0 ? -1 : 0;
}
