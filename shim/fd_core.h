/* SPDX-License-Identifier: MIT */
/*
 * shim/fd_core.h — the fd tracker's interface between its interceptors
 * (fd_hooks.c: thin, each calls the real function and one entry here;
 * open64 and close, the hottest, are defined in fd_core.c itself) and
 * its core (fd_core.c: the fd table and its generations, the event ring,
 * findings and their history, the inherited-fd scan, the exit check), as
 * ThreadSanitizer's fd tracker is split from its interceptors and Scudo's
 * C wrappers from their allocator.  The design is docs/design.md "File
 * descriptors".
 *
 * Contract of every entry below, unless it says otherwise:
 *   - it is called after the real call returned (a creation) or, for an
 *     object's close, once before (..._begin) and once after (..._end) it;
 *     close() itself is one entry that makes the real call (hs_fd_close):
 *     a close is recorded before the number can be reused by another thread;
 *   - it checks hs_fd_on() itself, takes the reentrancy guard (hs_enter)
 *     and records nothing inside the shim, in a vfork child or with fd
 *     tracking off;
 *   - it keeps errno, and returns the call's own result unchanged, so a
 *     hook can `return hs_fd_x(HS_REAL(x)(...), ...)`;
 *   - site is the hook's HS_FD_SITE(), taken first thing in the hook;
 *   - call is an enum hs_fd_call (format.h), kind an enum hs_fd_kind;
 *   - nothing mallocs, uses stdio or blocks beyond a slot's bounded spin.
 */
#ifndef HEISEN_FD_CORE_H
#define HEISEN_FD_CORE_H

#include <dirent.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>

#include "shim.h"

/*
 * The hook's CFA, set by HS_FD_SITE() in the hook itself into
 * hs_tls.fd_call_cfa (shim.h: the line every hook reads anyway, where a
 * __thread of its own was one more GOT entry and TLS line per hook): its
 * caller's stack pointer at the return address, so that the core reads
 * this call's own chain of return addresses (hs_stack_call) instead of a
 * stack cached for the site, whose callers were another call's.  A nested
 * hook overwrites it; hs_stack_call checks that the return address sits at
 * CFA - 8 and unwinds when not.  The shim keeps frame pointers.
 */

/* The hook's caller's return address (its call site), noting the hook's
 * CFA in hs_tls.fd_call_cfa.  Only in the exported function itself: the
 * frame address is the hook's. */
#define HS_FD_SITE()                                                                    \
	(hs_tls.fd_call_cfa = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16,      \
	 (uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))

/* The mode argument of open/openat: there only with O_CREAT or O_TMPFILE.
 * In the variadic hook itself (it reads the hook's va_list). */
#define OPEN_MODE(flags)                                                                   \
	({                                                                                 \
		mode_t m_ = 0;                                                             \
		if (((flags) & O_CREAT) || ((flags) & O_TMPFILE) == O_TMPFILE) {           \
			va_list ap_;                                                       \
			va_start(ap_, flags);                                              \
			m_ = (mode_t)va_arg(ap_, unsigned int);                            \
			va_end(ap_);                                                       \
		}                                                                          \
		m_;                                                                        \
	})

/* The number libunwind's validation pipe gets from heisen (fd_hooks.c, the
 * pipe2 hook, says why): no descriptor can have it, and its close is a no-op. */
#define VALIDATE_FD (-0x4853)

/* fd tracking on (HEISEN_FDS, default on)?  The first hook call starts it
 * (hs_fds_init) when the constructor has not yet. */
enum { HS_FD_MODE_UNKNOWN = 0, HS_FD_MODE_INIT = 1, HS_FD_MODE_OFF = 2, HS_FD_MODE_ON = 3 };

/*
 * What every fd hook reads, in one cache line: the mode, the settings, and
 * where this segment's fd table and event ring are (taken from the header
 * once per segment generation: the layout of a segment never changes).
 * Right after a system call a hook finds little of its state in the
 * first-level cache, so each separate line it reads costs a few ns
 * (bench/README.md "File descriptors: where an open/close pair's
 * nanoseconds go, measured"); here the header's table descriptors, the
 * segment's base and four scattered globals were one line each.
 */
struct hs_fd_hot {
	uint8_t mode;              /* [atomic] HS_FD_MODE_* */
	uint8_t raw_calls;         /* open64's and close's system calls made in the hook with one thread
				      (fd_core.c fd_sys): the real ones are libc's own */
	uint8_t full_stacks;       /* HEISEN_FD_STACKS=full */
	uint8_t tsc_ok;            /* an invariant TSC (fd_core.c fd_clock) */
	uint16_t committed_lo;     /* [atomic] the numbers below it have their slots' store (a prefix of
				      hs_fd_seen's blocks, this generation's); 0 = none known */
	uint32_t gen;              /* [atomic] hs_seg_gen + 1 the fields below were taken for; 0 = none */
	uint32_t slots_cap;        /* the fd table's capacity (HS_T_FDS), 0 = no table */
	uint32_t ring_mask;        /* the event ring's capacity - 1 (a power of two) */
	uint32_t ring_backed;      /* [atomic] gen, once the ring is known committed end to end; else 0 */
	struct hs_fd *slots;       /* the fd table */
	struct hs_fd_event *ring;  /* the event ring (HS_T_FD_EVENTS), NULL = none */
	struct hs_header *hdr;     /* the segment's header (its fd counters and the ring's head) */
	/* the real open64 and close (HS_REAL's, set before mode turns ON): the
	 * two hottest hooks call through this line instead of hooks.c's */
	int (*real_open64)(const char *, int, ...);
	int (*real_close)(int);
} __attribute__((aligned(64)));
_Static_assert(sizeof(struct hs_fd_hot) == 64, "what every fd hook reads is one cache line");
extern HS_HIDDEN struct hs_fd_hot hs_fd_hot;

static inline int hs_fd_on(void)
{
	unsigned m = __atomic_load_n(&hs_fd_hot.mode, __ATOMIC_ACQUIRE);
	if (HS_LIKELY(m >= HS_FD_MODE_OFF))
		return m == HS_FD_MODE_ON;
	if (m == HS_FD_MODE_UNKNOWN && !hs_tls.in_hook) {
		hs_fds_init();
		return __atomic_load_n(&hs_fd_hot.mode, __ATOMIC_ACQUIRE) == HS_FD_MODE_ON;
	}
	return 0;
}

/* ---- creations: each returns its first argument ------------------------------ */

/* open64 itself, the hottest creation, is defined in fd_core.c: the hook,
 * the real call (from hs_fd_hot's line) and its record in one frame. */
/* open, openat, creat and their 64 and _FORTIFY variants returned fd: a
 * file (a directory with O_DIRECTORY), path relative to dirfd (AT_FDCWD),
 * close-on-exec from flags. */
int hs_fd_opened(int fd, int dirfd, const char *path, int flags, unsigned call, uint64_t site);
/* A creation described by a fixed text (eventfd, epoll, pipe ends ...):
 * cloexec nonzero when the call set close-on-exec. */
int hs_fd_made(int fd, unsigned kind, unsigned call, int cloexec, const char *text, uint64_t site);
/* socket(domain, type) returned fd: "socket(AF_INET, SOCK_STREAM)". */
int hs_fd_socket_made(int fd, int domain, int type, uint64_t site);
/* socketpair returned rc with sv[0..1]: each end names the other. */
int hs_fd_socketpair_made(int rc, const int *sv, int domain, int type, uint64_t site);
/* pipe/pipe2 returned rc with fds[0] (read end), fds[1] (write end). */
int hs_fd_pipe_made(int rc, const int *fds, int cloexec, uint64_t site);
/* accept/accept4 on lfd returned fd: the peer's address when given. */
int hs_fd_accepted(int fd, int lfd, const struct sockaddr *addr, const socklen_t *len, int cloexec, uint64_t site);
/* memfd_create(name) returned fd: "memfd:name". */
int hs_fd_memfd_made(int fd, const char *name, int cloexec, uint64_t site);
/* recvmsg on fd returned rc: every SCM_RIGHTS number in msg is a new generation. */
ssize_t hs_fd_received(ssize_t rc, int fd, const struct msghdr *msg, int flags, uint64_t site);
/* fd is a copy of old (dup, dup2, dup3): kind and description are old's;
 * replaces: what fd held was closed by the call (recorded now: the number
 * was never free in between).  Nothing when fd < 0. */
int hs_fd_duplicated(int fd, int old, int cloexec, unsigned call, int replaces, uint64_t site);
/* fcntl(fd, cmd, arg) returned rc: F_DUPFD[_CLOEXEC] is a copy, F_SETFD
 * the close-on-exec flag; other commands record nothing. */
int hs_fd_after_fcntl(int rc, int fd, int cmd, void *arg, uint64_t site);
/* connect (also when EINPROGRESS) or bind on fd succeeded: the socket's
 * description becomes what + the address ("peer ", "bound "); no event.
 * Called only on success. */
void hs_fd_describe(int fd, const char *what, const struct sockaddr *addr, socklen_t len);

/* ---- objects that carry their generation (a FILE, a DIR) ----------------------- */

/* fopen/fopen64/freopen returned fp, which owns its number (rule file). */
FILE *hs_fd_fopened(FILE *fp, const char *path, const char *mode, unsigned call, uint64_t site);
/* opendir(path) returned d, which owns its number (rule dir). */
DIR *hs_fd_dir_opened(DIR *d, const char *path, uint64_t site);
/* fdopen/fdopendir made obj the owner of fd's open generation
 * (owner_flag HS_FDF_OWNER_FILE or _DIR); a number heisen never saw open
 * becomes an unseen generation first. */
void *hs_fd_taken_over(void *obj, int fd, uint32_t owner_flag, unsigned call, uint64_t site);

/* ---- closes: before and after the real call ------------------------------------- */

/* What a close found in the slot before the call. */
struct hs_fd_pre {
	int tracked;           /* the number has a slot */
	uint8_t state;         /* enum hs_fd_state before */
	uint32_t gen;
	uint32_t flags;
	uint64_t owner;
	int32_t tid;           /* the generation's creator */
	uint32_t stack;        /* its creation stack */
};

/* One close in flight, on the hook's stack between _begin and _end. */
struct hs_fd_closing {
	struct hs_fd_pre p;
	uint64_t site, now;    /* now 0: nothing was recorded */
	uint32_t stack;
	int fd;                /* -1: nothing was recorded */
	unsigned call;
	int object;            /* an object's close (fclose, closedir): after_close always runs */
};

/* close(fd) (and heisen_fd_close_owned's matching case): record the close
 * before the call, make the real call once (never retried on EINTR: the
 * number may already be someone else's), look at its result (EBADF: a
 * double or stale close), in one frame — split across this interface it
 * cost ~70 instructions per close.  Returns close's result, errno close's. */
int hs_fd_close(int fd, unsigned call, uint64_t site);
/* The end of an object's close (fclose, closedir) begun below: looks at
 * the real call's result rc like hs_fd_close.  Returns rc. */
int hs_fd_close_end(struct hs_fd_closing *c, int rc);
/* fclose/freopen of fp, closedir of d: the ownership check (a stale close
 * proven before the call) and the record; then hs_fd_close_end (fclose,
 * closedir; freopen's new FILE is hs_fd_fopened's). */
void hs_fd_file_close_begin(struct hs_fd_closing *c, FILE *fp, unsigned call, uint64_t site);
void hs_fd_dir_close_begin(struct hs_fd_closing *c, DIR *d, uint64_t site);
/* close_range/closefrom of [first, last], before the call: every open
 * generation closed, a closed one closed again is a double close. */
void hs_fd_range_closing(unsigned first, unsigned last, uint64_t site);
/* close_range(first, last, CLOSE_RANGE_CLOEXEC) returned rc: on success
 * the open generations of the range get close-on-exec.  Returns rc. */
int hs_fd_range_cloexec(int rc, unsigned first, unsigned last);

#endif
