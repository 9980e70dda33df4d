/* SPDX-License-Identifier: MIT */
/*
 * shim/fd_core.c — the fd tracker's core.  Its interceptors (fd_hooks.c)
 * hand it every call that creates a file descriptor and every way one
 * dies, through the entries of fd_core.h, so that each fd number carries a
 * generation and each generation its creation (call, kind, path or peer,
 * stack with Python frames, thread) and its close (stack, thread), in the
 * segment's fd table (format.h struct hs_fd), which survives SIGKILL.  An
 * event ring (struct hs_fd_event) keeps the recent history of every number,
 * so a finding can show the whole story: open (gen 1), close (gen 1), open
 * (gen 2, by whom), close (gen 2, by the stale owner), and the rightful
 * owner's EBADF.  The design is docs/design.md "File descriptors"; the
 * rules and their limits are README.md "File descriptors"; the contract is
 * docs/interfaces.md "File descriptors".
 *
 * What is found here (heisen-dump computes fd-leak from the table):
 *   - double-close: a close that fails with EBADF after heisen saw that
 *     generation closed, with the earlier close's and this close's stacks;
 *   - stale-close, exactly, where an object carries its generation: a FILE
 *     (fopen/fdopen/freopen -> fclose/freopen), a DIR (opendir/fdopendir ->
 *     closedir) or a number tagged with heisen_fd_set_owner (fdsan's idea),
 *     whose close finds the number holding a later generation, someone
 *     else's — recorded at that close, before the damage;
 *   - stale-close for raw numbers (close(), CPython's file objects), which
 *     carry nothing: confirmed when the rightful owner's own close then
 *     fails with EBADF — the thread that created generation g closes it and
 *     finds it already closed by another thread, which had created and
 *     closed generation g - 1 of that number itself (it got the number
 *     before g existed).  A hand-over (an acceptor creates, a worker closes)
 *     never fails a close, so it is never reported; the rule and why are in
 *     README.md.
 *
 * A creation is recorded after the call returns; a close is recorded before
 * the call is made (the number can be reused by another thread the instant
 * it is closed), and close is never retried on EINTR.  dup2/dup3 onto an
 * open number are recorded after the call: the number never becomes free in
 * between.  Several threads can race on one number (the kernel serializes
 * the system calls, not our records), so each slot is a seqlock claimed by
 * compare-and-swap; nothing here mallocs, uses stdio or blocks beyond that
 * bounded spin.  A vfork child shares its parent's memory: the trampoline
 * in fd_vfork.S notes the parent's pid, and hs_enter() records nothing in
 * the child.  Between fork and exec only async-signal-safe work is done.
 *
 * The annotation API's fd calls (heisen_fd_set_owner, heisen_fd_close_owned)
 * are the core's own front end and live here; the interposed functions are
 * in fd_hooks.c, but for open64 and close, the hottest, defined here in
 * one frame with their records (see open64).
 */
/* As in fd_hooks.c: the libc declarations the interface names (FILE, DIR,
 * struct msghdr) seen the same way on both sides. */
#undef _FORTIFY_SOURCE
#undef _FILE_OFFSET_BITS
#include <arpa/inet.h>
#include <dirent.h>
#include <dlfcn.h>
#include <elf.h>
#include <link.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <sys/mman.h>
#include <sys/platform/x86.h>
#include <sys/resource.h>
#include <sys/single_threaded.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <sys/un.h>
#include <unistd.h>

#include "heisen/heisen.h"
#include "hooks.h"
#include "fd_core.h"
#include "inject.h" /* open64 and close: fault injection and chaos */
#include "shim.h"

#define CLAIM_SPINS 100000u     /* pauses before a slot update is given up (fd_torn) */
#define CHAIN_MAX 30            /* events of one number looked at, newest first (2 x 30 of 152 bytes: fd_scratch) */

#define full_stacks hs_fd_hot.full_stacks

/* ---- the vfork child ---------------------------------------------------- */

/* 1 in the child of a vfork (shim.h): fd_hooks.c's hs_vfork_prepare noted the parent's pid. */
int hs_vfork_child(struct hs_tls *t)
{
	if ((int32_t)hs_sys.getpid() != t->vfork_pid)
		return 1;
	t->vfork_pid = 0; /* the parent, resumed: its child has exec'd or exited */
	return 0;
}

/* ---- on or off ----------------------------------------------------------- */

struct hs_fd_hot hs_fd_hot; /* fd_core.h */
#define hs_fd_mode hs_fd_hot.mode

/* Take this segment's table and ring into hs_fd_hot (generation g). */
static __attribute__((noinline, cold)) void hot_load(uint32_t g)
{
	struct hs_header *h = hs_seg.hdr;
	const struct hs_table *tf, *te;
	__atomic_store_n(&hs_fd_hot.committed_lo, 0, __ATOMIC_RELAXED);
	if (!h) {
		hs_fd_hot.slots_cap = 0;
		hs_fd_hot.ring = NULL;
		return; /* not recording: nothing kept, asked again next time */
	}
	tf = &h->tables[HS_T_FDS];
	te = &h->tables[HS_T_FD_EVENTS];
	hs_fd_hot.slots = (struct hs_fd *)((char *)h + tf->offset);
	hs_fd_hot.slots_cap = tf->capacity;
	hs_fd_hot.ring = te->capacity ? (struct hs_fd_event *)((char *)h + te->offset) : NULL;
	hs_fd_hot.ring_mask = te->capacity ? te->capacity - 1 : 0;
	hs_fd_hot.hdr = h;
	/* release: the fields above are visible to whoever sees gen */
	__atomic_store_n(&hs_fd_hot.gen, g, __ATOMIC_RELEASE);
}

/* hs_fd_hot, its table fields this segment's.  The generation's line is
 * hs_enter's (already read). */
static inline struct hs_fd_hot *hot(void)
{
	uint32_t g = __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE) + 1;
	if (HS_UNLIKELY(__atomic_load_n(&hs_fd_hot.gen, __ATOMIC_ACQUIRE) != g))
		hot_load(g);
	return &hs_fd_hot;
}

/* ---- the table ------------------------------------------------------------ */

/* Give fd's block of slots store (its first touch) and note it (shim.h,
 * hs_fd_seen).  0, or -1 when the directory is full. */
static __attribute__((noinline)) int block_commit(const struct hs_table *t, int fd)
{
	uint64_t first = (uint64_t)fd & ~(uint64_t)(HS_FD_SEEN_BLOCK - 1);
	uint64_t n = t->capacity - first < HS_FD_SEEN_BLOCK ? t->capacity - first : HS_FD_SEEN_BLOCK;
	uint64_t w;
	uint16_t lo, was;
	if (hs_seg_commit(&hs_seg, t->offset + first * sizeof(struct hs_fd), n * sizeof(struct hs_fd)) != 0)
		return -1;
	hs_fd_seen_note((uint32_t)fd);
	/* the prefix of committed blocks within hs_fd_seen's first word (fds 0
	 * to 1023, the default table) into the hot line: slot_of's first test */
	w = __atomic_load_n(&hs_fd_seen[0], __ATOMIC_ACQUIRE);
	lo = (uint16_t)((w == ~0ull ? 64u : (unsigned)__builtin_ctzll(~w)) << HS_FD_SEEN_SHIFT);
	if (lo > hs_fd_hot.slots_cap)
		lo = (uint16_t)hs_fd_hot.slots_cap;
	was = __atomic_load_n(&hs_fd_hot.committed_lo, __ATOMIC_RELAXED);
	while (lo > was && !__atomic_compare_exchange_n(&hs_fd_hot.committed_lo, &was, lo, 1, __ATOMIC_RELAXED,
							 __ATOMIC_RELAXED))
		;
	return 0;
}

/* fd's slot, with store; NULL when fd is beyond the table (or, rarely, the
 * directory has no room for its block: the same to the callers).  h: hot()'s. */
static inline struct hs_fd *slot_in(struct hs_fd_hot *h, int fd)
{
	/* unsigned: a negative fd is beyond the table.  Below committed_lo: in
	 * the table, with store (block_commit), without hs_fd_seen's line */
	if (HS_LIKELY((uint32_t)fd < __atomic_load_n(&h->committed_lo, __ATOMIC_RELAXED)))
		return h->slots + fd;
	if ((uint32_t)fd >= h->slots_cap)
		return NULL;
	/* fd < capacity <= 2^20: its bit is inside hs_fd_seen */
	if (HS_UNLIKELY(!((__atomic_load_n(&hs_fd_seen[(uint32_t)fd >> (HS_FD_SEEN_SHIFT + 6)], __ATOMIC_ACQUIRE) >>
			   (((uint32_t)fd >> HS_FD_SEEN_SHIFT) & 63)) & 1)) &&
	    block_commit(&hs_seg.hdr->tables[HS_T_FDS], fd) != 0)
		return NULL;
	return h->slots + fd;
}

static inline struct hs_fd *slot_of(int fd)
{
	return slot_in(hot(), fd);
}

/*
 * One thread in the process (glibc's __libc_single_threaded, set until the
 * first pthread_create and never again after it): the fd table's and the
 * ring's read-modify-writes need no lock prefix, as glibc's own malloc and
 * libstdc++'s reference counts skip theirs.  Nothing else can write them
 * at the same time: the segment is this process's (a fork child gets its
 * own, a vfork child records nothing), a signal handler's hooks find the
 * guard taken, and the thread that would start a second thread is this
 * one, outside the hook.  A thread made with a raw clone() that calls libc
 * breaks glibc's malloc the same way.  Same stores, same order for a
 * reader: a locked instruction was ~5 ns of an open/close pair each
 * (bench/README.md "File descriptors: where an open/close pair's
 * nanoseconds go, measured").
 */
/* &__libc_single_threaded, taken at the first look (any thread stores the
 * same address): read from the fd hooks' line (hot_bss.ld places it after
 * hs_fd_hot's) where the variable's own GOT entry was one more line a hook. */
__attribute__((section(".bss.hs_fd_single"))) static const char *fd_single_threaded;

static inline int one_thread(void)
{
	const char *p = __atomic_load_n(&fd_single_threaded, __ATOMIC_RELAXED);
	if (HS_UNLIKELY(p == NULL))
		__atomic_store_n(&fd_single_threaded, p = &__libc_single_threaded, __ATOMIC_RELAXED);
	return *p != 0;
}

/* claim()'s wait, out of line: another thread holds the slot. */
static __attribute__((noinline, cold)) int claim_spin(struct hs_fd *s, uint32_t *q)
{
	for (unsigned i = 0; i < CLAIM_SPINS; i++) {
		__builtin_ia32_pause();
		if (hs_seq_write_try(&s->seq, q))
			return 1;
	}
	__atomic_add_fetch(&hs_seg.hdr->fd_torn, 1, __ATOMIC_RELAXED);
	return 0;
}

/* Claim slot s for writing (its seqlock odd).  The slots' writers are short
 * and never call out, so the spin is bounded; on give-up, count it.  The
 * first try is inline: a slot is almost never contended. */
static inline int claim_one(struct hs_fd *s, uint32_t *q, int one)
{
	if (HS_LIKELY(one)) {
		uint32_t v = __atomic_load_n(&s->seq, __ATOMIC_RELAXED);
		if (HS_LIKELY(!(v & 1))) {
			/* as hs_seq_write_try, without the compare-and-swap: no other writer */
			__atomic_store_n(&s->seq, v + 1, __ATOMIC_RELAXED);
			__atomic_thread_fence(__ATOMIC_RELEASE);
			*q = v + 1;
			return 1;
		}
	}
	return HS_LIKELY(hs_seq_write_try(&s->seq, q)) || claim_spin(s, q);
}

/* claim_one with one_thread() read here. */
static inline int claim(struct hs_fd *s, uint32_t *q)
{
	return claim_one(s, q, one_thread());
}

static inline void release(struct hs_fd *s, uint32_t q)
{
	hs_seq_write_end(&s->seq, q);
}

/* The ring's entry for position pos (the ring exists). */
static inline struct hs_fd_event *ring_entry(uint64_t pos)
{
	struct hs_fd_hot *h = hot();
	return &h->ring[pos & h->ring_mask];
}

/* Copy an event's payload (not its seq). */
static void event_copy(struct hs_fd_event *d, const struct hs_fd_event *e)
{
	d->ts_ns = e->ts_ns;
	d->prev = e->prev;
	d->owner = e->owner;
	d->fd = e->fd;
	d->gen = e->gen;
	d->tid = e->tid;
	d->stack = e->stack;
	d->op = e->op;
	d->call = e->call;
	d->kind = e->kind;
	d->err = e->err;
	d->flags = e->flags;
	/* a folded close (format.h hs_fd_event.close_dt): event_get loads
	 * close_dt first; relaxed here, where a fold may land in the ring */
	d->close_dt = __atomic_load_n(&e->close_dt, __ATOMIC_RELAXED);
	d->close_tid = e->close_tid;
	d->close_stack = e->close_stack;
	d->close_call = e->close_call;
	/* only a creation has a path: the others' is empty (event_init) */
	if (e->op == HS_FDE_CREATE)
		memcpy(d->path, e->path, sizeof d->path);
	else
		d->path[0] = '\0';
}

/*
 * hs_fd_hot.ring_backed: the segment generation (hs_seg_gen + 1) whose
 * event ring is known to be backed by store from end to end (every entry
 * committed once, checked when the ring first wraps): from then on an
 * event skips hs_seg_commit_entry, which was a tenth of an open/close
 * pair's instructions.  0 = not known; a fork child's new segment has
 * another generation.
 */

/*
 * Take the next entry of the event ring, invalidated (seq 0): the caller
 * fills every field but seq and prev, in place, then event_publish().
 * NULL when there is no ring or its store could not be committed (the
 * session directory is full: the event is not kept).
 */
/* Commit the store of ring entry idx (of table t); note when the whole
 * ring is backed.  -1 when out of space. */
static __attribute__((noinline, cold)) int ring_commit(const struct hs_table *t, uint64_t idx, uint64_t gen)
{
	if (hs_seg_commit_entry(&hs_seg, HS_T_FD_EVENTS, idx) != 0)
		return -1;
	if (idx == t->capacity - 1 && hs_seg_committed(&hs_seg, t->offset, (uint64_t)t->capacity * t->entry_size))
		__atomic_store_n(&hs_fd_hot.ring_backed, (uint32_t)gen, __ATOMIC_RELAXED);
	return 0;
}

static inline struct hs_fd_event *event_begin_in(struct hs_fd_hot *h, int one, uint64_t *pos)
{
	uint64_t *head;
	struct hs_fd_event *d;
	if (!h->ring)
		return NULL;
	head = &h->hdr->fd_event_head;
	/* relaxed: the position only has to be unique; the entry's seq publishes it */
	if (HS_LIKELY(one)) {
		*pos = __atomic_load_n(head, __ATOMIC_RELAXED);
		__atomic_store_n(head, *pos + 1, __ATOMIC_RELAXED);
	} else {
		*pos = __atomic_fetch_add(head, 1, __ATOMIC_RELAXED);
	}
	/* relaxed: store is the kernel's fact once the commit returned, ordered with nothing here */
	if (__atomic_load_n(&h->ring_backed, __ATOMIC_RELAXED) != h->gen &&
	    ring_commit(&h->hdr->tables[HS_T_FD_EVENTS], *pos & h->ring_mask, h->gen) != 0)
		return NULL;
	d = &h->ring[*pos & h->ring_mask];
	__atomic_store_n(&d->seq, 0, __ATOMIC_RELAXED);
	/* orders the invalidation above before the caller's payload stores */
	__atomic_thread_fence(__ATOMIC_RELEASE);
	return d;
}

static inline struct hs_fd_event *event_begin(uint64_t *pos)
{
	return event_begin_in(hot(), one_thread(), pos);
}

/*
 * Chain the filled entry d at pos to slot s (whose seqlock the caller
 * holds, so the chain of one number has one writer at a time; s may be
 * NULL) and publish it.  Returns its position + 1.
 */
static uint64_t event_publish(struct hs_fd *s, struct hs_fd_event *d, uint64_t pos)
{
	d->prev = s ? s->last_event : 0;
	/* publishes the payload: a reader that sees seq == pos + 1 sees it all */
	__atomic_store_n(&d->seq, pos + 1, __ATOMIC_RELEASE);
	if (s)
		s->last_event = pos + 1;
	return pos + 1;
}

/* Append a copy of e to the event ring, chained to slot s (see event_publish).
 * Returns its position + 1, 0 when not kept. */
static uint64_t event_add(struct hs_fd *s, const struct hs_fd_event *e)
{
	uint64_t pos;
	struct hs_fd_event *d = event_begin(&pos);
	if (!d)
		return 0;
	event_copy(d, e);
	return event_publish(s, d, pos);
}

/* Read the event at position + 1 `at` into out; 0 when it is still there. */
static int event_get(uint64_t at, struct hs_fd_event *out)
{
	struct hs_fd_event *d;
	if (at == 0 || hs_seg.hdr->tables[HS_T_FD_EVENTS].capacity == 0)
		return -1;
	uint32_t dt;
	d = ring_entry(at - 1);
	if (__atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) != at)
		return -1;
	/* acquire: a folded close's fields (stored before close_dt) come with it */
	dt = __atomic_load_n(&d->close_dt, __ATOMIC_ACQUIRE);
	event_copy(out, d);
	out->close_dt = dt; /* 0: read as the plain creation, whatever came after */
	/* the copy happens before the second look at seq */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&d->seq, __ATOMIC_RELAXED) == at ? 0 : -1;
}

/* A folded creation read from the ring (event_get) as its plain creation. */
static void unfold(struct hs_fd_event *e)
{
	e->close_dt = 0;
	e->close_tid = 0;
	e->close_stack = 0;
	e->close_call = 0;
}

/* A folded creation read from the ring as the close folded into it: the
 * HS_FDE_CLOSE event the close would have written (format.h hs_fd_event). */
static void folded_close(struct hs_fd_event *e)
{
	e->ts_ns += (uint64_t)e->close_dt - 1;
	e->tid = e->close_tid;
	e->stack = e->close_stack;
	e->op = HS_FDE_CLOSE;
	e->call = e->close_call;
	e->err = 0;
	e->path[0] = '\0';
	unfold(e);
}

/*
 * The events of number fd still in the ring, newest first, from position
 * + 1 `at`: at most max of them into out, a creation with a close folded
 * into it (fold_close) as the two events.  Returns how many.
 */
static unsigned chain(int fd, uint64_t at, struct hs_fd_event *out, unsigned max)
{
	unsigned n = 0;
	while (at && n < max && event_get(at, &out[n]) == 0 && out[n].fd == fd) {
		uint64_t prev = out[n].prev;
		if (out[n].close_dt && out[n].op == HS_FDE_CREATE) {
			/* a folded close (format.h): the close, then its creation when it fits */
			if (n + 1 < max) {
				out[n + 1] = out[n];
				unfold(&out[n + 1]);
				folded_close(&out[n]);
				n += 2;
			} else {
				folded_close(&out[n]);
				n++;
			}
		} else {
			n++;
		}
		if (prev >= at)
			break; /* a chain only goes back in time */
		at = prev;
	}
	return n;
}

/* ---- descriptions ---------------------------------------------------------- */

/* Keep the tail of src (the informative end of a long path) in dst.
 * Returns the length kept (below HS_FD_PATH_MAX). */
static size_t put_text(char *dst, const char *src)
{
	size_t n = src ? strnlen(src, 4096) : 0;
	if (n >= HS_FD_PATH_MAX) {
		memcpy(dst, "...", 3);
		memcpy(dst + 3, src + n - (HS_FD_PATH_MAX - 4), HS_FD_PATH_MAX - 4);
		dst[HS_FD_PATH_MAX - 1] = '\0';
		return HS_FD_PATH_MAX - 1;
	}
	if (n)
		memcpy(dst, src, n);
	dst[n] = '\0';
	return n;
}

static size_t cat(char *dst, size_t len, const char *src)
{
	while (*src && len + 1 < HS_FD_PATH_MAX)
		dst[len++] = *src++;
	dst[len] = '\0';
	return len;
}

static size_t cat_num(char *dst, size_t len, uint64_t v)
{
	char num[24];
	hs_fmt_u64(num, v);
	return cat(dst, len, num);
}

/* "127.0.0.1:8080", "[::1]:80", "unix:/run/x.sock", "unix:@abstract"; "" when unknown. */
static void sockaddr_text(char *dst, size_t len, const struct sockaddr *sa, socklen_t salen)
{
	char buf[INET6_ADDRSTRLEN];
	dst[len] = '\0';
	if (!sa || salen < sizeof(sa_family_t))
		return;
	if (sa->sa_family == AF_INET && salen >= sizeof(struct sockaddr_in)) {
		const struct sockaddr_in *in = (const void *)sa;
		if (inet_ntop(AF_INET, &in->sin_addr, buf, sizeof buf)) {
			len = cat(dst, len, buf);
			len = cat(dst, len, ":");
			cat_num(dst, len, ntohs(in->sin_port));
		}
	} else if (sa->sa_family == AF_INET6 && salen >= sizeof(struct sockaddr_in6)) {
		const struct sockaddr_in6 *in6 = (const void *)sa;
		if (inet_ntop(AF_INET6, &in6->sin6_addr, buf, sizeof buf)) {
			len = cat(dst, len, "[");
			len = cat(dst, len, buf);
			len = cat(dst, len, "]:");
			cat_num(dst, len, ntohs(in6->sin6_port));
		}
	} else if (sa->sa_family == AF_UNIX) {
		const struct sockaddr_un *un = (const void *)sa;
		size_t n = salen > offsetof(struct sockaddr_un, sun_path) ? salen - offsetof(struct sockaddr_un, sun_path) : 0;
		char path[sizeof un->sun_path + 1];
		if (n > sizeof un->sun_path)
			n = sizeof un->sun_path;
		len = cat(dst, len, "unix:");
		if (n && un->sun_path[0] == '\0') {
			/* abstract: a leading NUL, the name is not terminated */
			memcpy(path + 1, un->sun_path + 1, n - 1);
			path[0] = '@';
			path[n] = '\0';
		} else {
			memcpy(path, un->sun_path, n);
			path[n] = '\0';
		}
		cat(dst, len, path[0] ? path : "(unnamed)");
	}
}

static const char *family_name(int domain)
{
	switch (domain) {
	case AF_UNIX: return "AF_UNIX";
	case AF_INET: return "AF_INET";
	case AF_INET6: return "AF_INET6";
	case AF_NETLINK: return "AF_NETLINK";
	default: return "AF_?";
	}
}

static const char *type_name(int type)
{
	switch (type & ~(SOCK_CLOEXEC | SOCK_NONBLOCK)) {
	case SOCK_STREAM: return "SOCK_STREAM";
	case SOCK_DGRAM: return "SOCK_DGRAM";
	case SOCK_SEQPACKET: return "SOCK_SEQPACKET";
	case SOCK_RAW: return "SOCK_RAW";
	default: return "SOCK_?";
	}
}

/* "socket(AF_INET, SOCK_STREAM)" */
static void socket_text(char *dst, const char *what, int domain, int type)
{
	size_t n = cat(dst, 0, what);
	n = cat(dst, n, "(");
	n = cat(dst, n, family_name(domain));
	n = cat(dst, n, ", ");
	n = cat(dst, n, type_name(type));
	cat(dst, n, ")");
}

/* dir + "/" + path into dst (put_text), out of line: its buffer is large.
 * Returns the length kept. */
static __attribute__((noinline)) size_t joined_path(char *dst, const char *dir, const char *path)
{
	char buf[2 * HS_FD_PATH_MAX + 4096];
	size_t n = strnlen(dir, HS_FD_PATH_MAX), m = strnlen(path, 4095);
	memcpy(buf, dir, n);
	buf[n++] = '/';
	memcpy(buf + n, path, m);
	buf[n + m] = '\0';
	return put_text(dst, buf);
}

/* A path relative to dirfd, prefixed with the directory's own path when
 * known, into dst (put_text).  Returns its length. */
static size_t at_path(char *dst, int dirfd, const char *path)
{
	struct hs_fd *d;
	char dir[HS_FD_PATH_MAX];
	if (!path || path[0] == '/' || dirfd == AT_FDCWD || !(d = slot_of(dirfd)) || d->state != HS_FDS_OPEN)
		return put_text(dst, path);
	/* relaxed copy of another slot's path: a torn one only spoils a description */
	memcpy(dir, d->path, sizeof dir);
	dir[sizeof dir - 1] = '\0';
	return dir[0] ? joined_path(dst, dir, path) : put_text(dst, path);
}

/* ---- recording ----------------------------------------------------------------- */

/*
 * The clock of fd records on the hooks' path: CLOCK_MONOTONIC_COARSE, the
 * same clock as hs_now() read at the last tick (1-4 ms resolution) for a
 * few ns, where CLOCK_MONOTONIC costs 20-80 (more on a virtual machine
 * without a stable TSC): two reads were a third of a pair's cost
 * (bench/README.md "File descriptors").  An fd's history needs the order
 * of its events, which the ring's positions give, not their nanoseconds.
 * The vDSO's clock_gettime is called directly (found at start by
 * hs_init, init.c vdso_symbol): libc's wrapper around it, its code and the
 * loader's data it reads, cold right after a system call, were ~20 ns of an open/close
 * pair (bench/README.md "File descriptors: where an open/close pair's
 * nanoseconds go, measured").  Without a vDSO (valgrind hides it), libc's.
 */
/* The coarse clock read (the vDSO's, else libc's), out of line: most fd
 * records reuse the thread's last reading (fd_clock). */
static __attribute__((noinline)) uint64_t fd_clock_read(void)
{
	struct timespec ts;
	int (*f)(clockid_t, struct timespec *) = hs_vdso_clock_gettime;
	if (HS_LIKELY(f != NULL) && f(CLOCK_MONOTONIC_COARSE, &ts) == 0)
		return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * One coarse reading serves a thread's fd records for 2^19 TSC cycles
 * (0.1 to 0.3 ms at 2 to 4 GHz, a tenth of a tick at HZ=250 and less than
 * one at HZ=1000): a record asks the TSC (rdtsc: no memory touched) how long
 * ago the thread last read the clock, and within that reuses the reading,
 * which the coarse clock's own resolution hides — a loop's open and close,
 * or a burst of them, read it once.  The two vDSO reads of a pair, code
 * and data cold after each system call, were ~20 ns of it (bench/README.md
 * "fd stacks shared by a loop's open and close").  Only with an invariant
 * TSC (CPUID 0x80000007, EDX bit 8: a constant rate, never stopped;
 * hs_fd_hot.tsc_ok, set at start): without it every record reads the clock.  A
 * TSC behind the last reading (another CPU's, out of step) reads the
 * clock too.  Times stay monotonic per thread; across threads the ring's
 * positions give the order (see fd_clock_read's clock above).  Per thread:
 * two words of hs_tls.
 */
#define CLOCK_REUSE_CYCLES (1ull << 19)

/* fd_clock before the coarse clock's data is found (hs_vclock.state 0)
 * or when it cannot be (-1), out of line: the TSC's reuse of the
 * thread's last reading (above).  An fd-heavy process looks for the data
 * itself once its event ring has taken FD_VCLOCK_AFTER events, checked at
 * each coarse reading (once per CLOCK_REUSE_CYCLES): a short process
 * never pays the search (clock.c: 20-90 us), a loop of fd calls pays it
 * after ~10 ms of them and reads the clock by fd_clock's tick check from
 * then on. */
#define FD_VCLOCK_AFTER 16384u
static __attribute__((noinline)) uint64_t fd_clock_early(struct hs_tls *t)
{
	uint64_t c;
	struct hs_header *h;
	if (HS_UNLIKELY(!hs_fd_hot.tsc_ok))
		return fd_clock_read();
	c = __builtin_ia32_rdtsc();
	if (c - t->fd_clock_tsc < CLOCK_REUSE_CYCLES)
		return t->fd_clock_ns;
	if ((h = hs_fd_hot.hdr) != NULL && __atomic_load_n(&hs_vclock.state, __ATOMIC_RELAXED) == 0 &&
	    __atomic_load_n(&h->fd_event_head, __ATOMIC_RELAXED) >= FD_VCLOCK_AFTER)
		hs_vclock_find(); /* async-signal-safe, no allocation (clock.c) */
	t->fd_clock_ns = fd_clock_read();
	t->fd_clock_tsc = c;
	return t->fd_clock_ns;
}

/* A fresh reading of the coarse clock from the kernel's data (hs_vclock
 * found), with the sequence count it was read under into t->fd_clock_tsc;
 * a tick being written or a time namespace's page: the call, and a count
 * no page holds (bit 32 set). */
static __attribute__((noinline)) uint64_t fd_clock_tick(struct hs_tls *t)
{
	uint64_t ns;
	uint32_t s;
	if (HS_LIKELY(hs_vclock_read(&ns, &s))) {
		t->fd_clock_tsc = s;
		return t->fd_clock_ns = ns;
	}
	t->fd_clock_tsc = 1ull << 32;
	return t->fd_clock_ns = hs_now_coarse_slow();
}

/*
 * The time of an fd record: CLOCK_MONOTONIC_COARSE (above).  Once clock.c
 * found where the kernel keeps it (hs_vclock.state 1), the thread's last
 * reading is reused while the kernel's sequence count of that data is the
 * one it was read under — no tick since, so the coarse clock still says
 * exactly that: one load of a line of the [vvar] page, no rdtsc (~8 ns on
 * a virtual machine, two a pair: bench/README.md "The open/close pair:
 * the clock without rdtsc, the hooks' globals in one line").  hs_tls.fd_clock_tsc holds that
 * count then (a TSC value before: never a 32-bit count).  A count that
 * wrapped around to the same value (2^31 ticks, months) between two reads
 * of one thread would reuse an old reading: not guarded.  t: hs_enter()'s.
 */
static inline uint64_t fd_clock(struct hs_tls *t)
{
	if (HS_LIKELY(__atomic_load_n(&hs_vclock.state, __ATOMIC_ACQUIRE) > 0)) {
		if (HS_LIKELY(__atomic_load_n(hs_vclock.seq, __ATOMIC_ACQUIRE) == t->fd_clock_tsc))
			return t->fd_clock_ns;
		return fd_clock_tick(t);
	}
	return fd_clock_early(t);
}

/*
 * The calling thread's errno, by the address kept in hs_tls.fd_errno:
 * __errno_location() once per thread (a fork child's thread-local storage
 * stays where its parent's was), not a call into libc's code, cold after
 * the system call, at each record.  t: &hs_tls (the guard need not be held).
 */
static inline int *fd_errno(struct hs_tls *t)
{
	int *p = t->fd_errno;
	if (HS_UNLIKELY(p == NULL))
		t->fd_errno = p = __errno_location();
	return p;
}

/* Invariant TSC (CPUID leaf 0x80000007, EDX bit 8), from the copy of the
 * CPUID leaves glibc made at start (<sys/platform/x86.h>): a CPUID
 * instruction traps to the hypervisor in a virtual machine (two of them
 * were ~20 us of every image's start, bench/README.md "Process start: no
 * symbol scans, no CPUID, fewer system calls"). */
static int tsc_invariant(void)
{
	return CPU_FEATURE_PRESENT(INVARIANT_TSC) != 0;
}

/*
 * A thread's last stacks, a few call sites' worth: the chain of return
 * addresses that gave a stack id, and the id.  A call reads its own chain
 * (hs_chain_read, into the thread's fd chain: its shadow for the next
 * call) every time; when it equals a cached chain frame for frame, in the
 * same segment, the id is the one hs_chain_stack would return for it,
 * without the hash and the stack-table probe (two fifths of a hook's
 * instructions).  Only chains through no evaluation loop are cached: a
 * Python chain gets this call's Python frames, which change under the same
 * native chain.
 */
#define STACK_CACHE 4u
struct stack_cache {
	uint32_t seg_gen;       /* hs_tls.seg_gen of the id */
	uint32_t id;            /* 0 = empty */
	unsigned depth;
	uint64_t pc[HS_CHAIN_MAX];
};
/* The thread's fd chain and, after it, stack_cache[STACK_CACHE], in the
 * thread's area (shim.h, hs_area): not in static TLS. */
_Static_assert(sizeof(struct hs_chain) + STACK_CACHE * sizeof(struct stack_cache) <= HS_AREA_FDS_SIZE,
	       "fd chain and stack cache fit the area");
/* The second chain and, after it, which chain was used last, the stack id
 * each chain's pc[] was last given (valid in segment generation gen[k]) and
 * the site each was last read for (a copy of its site: the choice between
 * the two reads this line only). */
struct fd_chains {
	uint32_t last;
	uint32_t id[2];
	uint32_t gen[2];
	uint32_t pad;
	uint64_t site[2];
};
_Static_assert(sizeof(struct hs_chain) + sizeof(struct fd_chains) <= HS_AREA_FDS2_SIZE,
	       "second fd chain fits the area");
_Static_assert(HS_AREA_FORK + HS_AREA_FORK_SIZE <= HS_AREA_FDS2 && HS_AREA_FDS2 + HS_AREA_FDS2_SIZE <= HS_AREA_FD_SCRATCH,
	       "the second fd chain's range is its own");

/*
 * The chain (shadow) for a call at site: each thread keeps two, so that a
 * loop's open and close (two sites, the same frames above) each find the
 * chain read at their own site last time and take hs_chain_read's fast
 * path (compare the return-address slots) instead of a walk that meets the
 * other site's shadow one frame up (~250 instructions per pair).  The one
 * not used last is replaced.  Which chain is read changes only the cost:
 * hs_chain_read checks the shadow against this call's frames either way.
 */
static inline unsigned fd_chain_for(char *area, uint64_t site, struct hs_chain **ch, struct fd_chains **m)
{
	struct fd_chains *c = (struct fd_chains *)(void *)(area + HS_AREA_FDS2 + sizeof(struct hs_chain));
	unsigned k = c->site[0] == site ? 0 : c->site[1] == site ? 1 : !c->last;
	c->last = k;
	c->site[k] = site;
	*m = c;
	*ch = (struct hs_chain *)(void *)(area + (k ? HS_AREA_FDS2 : HS_AREA_FDS));
	return k;
}

/*
 * A finding's event buffers (a number's last CHAIN_MAX events and the story
 * told from them: 2 x 30 x 152 bytes), in the thread's area rather than on
 * the hook's stack, where a failed close() in a PTHREAD_STACK_MIN thread
 * would overflow it.  Hooks do not nest (in_hook), so one per thread.
 * NULL when the thread has no area: the finding is not made.
 */
struct fd_scratch {
	struct hs_fd_event ev[CHAIN_MAX], hist[CHAIN_MAX];
};
_Static_assert(sizeof(struct fd_scratch) <= HS_AREA_FD_SCRATCH_SIZE, "the fd finding buffers fit the area");
static inline struct fd_scratch *fd_scratch(void)
{
	char *a = hs_area();
	return a ? (struct fd_scratch *)(void *)(a + HS_AREA_FD_SCRATCH) : NULL;
}

/*
 * fd_stack's other cases, out of line: full stacks, no area, a chain through
 * the evaluation loop (this call's Python frames, never cached), a chain
 * read changed since its last read (the cache of chains by site, then the
 * stack table), or none read.  ch, m, k and depth are fd_stack's.
 */
static __attribute__((noinline)) uint32_t fd_stack_slow(struct hs_tls *t, uint64_t site, struct hs_chain *ch,
							struct fd_chains *m, unsigned k, unsigned depth)
{
	char *area;
	struct stack_cache *c;
	unsigned i;
	uint32_t id;

	if (full_stacks)
		return hs_stack_here();
	if (!ch) {
		if (!(area = hs_area()))
			return hs_stack_site(site); /* no area: the site's stack */
		k = fd_chain_for(area, site, &ch, &m);
		depth = hs_chain_read(ch, site, hs_tls.fd_call_cfa);
	}
	if (depth == 0)
		return 0;
	if (ch->python) {
		m->id[k] = 0;
		return hs_chain_stack(ch); /* through the evaluation loop: this call's Python frames, never cached */
	}
	/* the chain's frames as they were at its last read: the id given them then */
	if (ch->unchanged && m->id[k] && m->gen[k] == t->seg_gen)
		return m->id[k];
	area = (char *)ch - (k ? HS_AREA_FDS2 : HS_AREA_FDS);
	c = &((struct stack_cache *)(void *)(area + HS_AREA_FDS + sizeof(struct hs_chain)))
		[(site ^ site >> 5) & (STACK_CACHE - 1)];
	if (c->id && c->depth == depth && c->seg_gen == t->seg_gen) {
		for (i = 0; i < depth && ch->pc[i] == c->pc[i]; i++)
			;
		if (i == depth) {
			id = c->id;
			goto keep;
		}
	}
	id = hs_chain_stack(ch);
	if (id) {
		c->id = id;
		c->seg_gen = t->seg_gen;
		c->depth = depth;
		memcpy(c->pc, ch->pc, depth * sizeof ch->pc[0]);
	}
keep:
	m->id[k] = id;
	m->gen[k] = t->seg_gen;
	return id;
}

/*
 * The frames above a thread's last fd call sites, kept once for the sites
 * that share them (a loop's open and close, called from one frame: the
 * same CFA and the same return addresses above it), with each site's stack
 * id: what fd_stack checks first, inline, in one or two cache lines that
 * both calls of a pair read (the close finds them warm after the open).
 * f[i] is frame i + 1 of the chain hs_chain_read read for site: its CFA
 * and the return address found at CFA - 8.  Filled only from a chain
 * walked through learnt distances (hs_chain_read's shadow, walked, under
 * hs_pcoff_gen == gen), without Python frames to read (no evaluation loop
 * known in the process: hs_py_frames_maybe() false), in the same segment.
 */
#define FAST_MAX (HS_CHAIN_MAX - 1)
struct fd_fast {
	uint64_t cfa;          /* the hook's CFA of every site below (frame 0's) */
	uint64_t site[2];      /* the call sites sharing f[]; 0 = none */
	uint32_t id[2];        /* each site's stack id (0: none) */
	uint32_t gen;          /* hs_pcoff_gen f[] was walked under */
	uint32_t seg_gen;      /* hs_tls.seg_gen of the ids */
	uint32_t n;            /* frames in f[] (the chain's depth - 1) */
	uint32_t pad;
	struct {
		uint64_t sp, pc;
	} f[FAST_MAX];
};
_Static_assert(sizeof(struct fd_fast) <= HS_AREA_FDS3_SIZE && HS_AREA_ORDER + HS_AREA_ORDER_SIZE <= HS_AREA_FDS3 &&
		       HS_AREA_FDS3 + HS_AREA_FDS3_SIZE <= HS_AREA_FD_SCRATCH,
	       "the fd call sites' frames fit their range of the area");

/*
 * fd_stack's first look: site's stack id when this call's chain is the one
 * read for site before, frame for frame — hs_chain_read's own test of an
 * unchanged chain (the same site at the same CFA, its return address at
 * CFA - 8, each return-address slot above as it was, the learnt distances
 * of then, hs_chain_top set), so the id is exactly this call's stack.  0
 * when not (fd_stack_read then reads the chain).  hs_chain_top is not read
 * here: fd_fast_keep keeps a chain only while it is set, and a thread's
 * hs_chain_top never goes back to 0 (stacks.c only raises it), so a kept
 * f[] implies it — one TLS line and a GOT entry fewer per record.
 */
static inline uint32_t fd_stack_fast(const struct hs_tls *t, const char *area, uint64_t site, uint64_t cfa)
{
	const struct fd_fast *f = (const struct fd_fast *)(const void *)(area + HS_AREA_FDS3);
	unsigned k = f->site[0] == site ? 0 : 1;
	uint32_t id = f->id[k]; /* read first: the path after the frames' loop falls through to its return */
	if (HS_UNLIKELY(!id || f->site[k] != site || f->cfa != cfa || f->seg_gen != t->seg_gen ||
			f->gen != __atomic_load_n(&hs_pcoff_gen, __ATOMIC_ACQUIRE) || hs_py_frames_maybe() ||
			*(const uint64_t *)(uintptr_t)(cfa - 8) != site))
		return 0;
	/* every return-address slot above as it was, the differences or-ed
	 * together: one test, no branch per frame */
	uint64_t diff = 0;
	for (unsigned i = 0; i < f->n; i++)
		diff |= *(const uint64_t *)(uintptr_t)(f->f[i].sp - 8) ^ f->f[i].pc;
	return HS_LIKELY(diff == 0) ? id : 0;
}

/* Keep chain ch (read for site, given stack id) in the thread's fd_fast:
 * beside the last site kept when the frames above are the same ones (the
 * two sites kept last), else in place of both. */
static void fd_fast_keep(const struct hs_tls *t, char *area, const struct hs_chain *ch, uint64_t site, uint32_t id)
{
	struct fd_fast *f = (struct fd_fast *)(void *)(area + HS_AREA_FDS3);
	uint32_t gen = __atomic_load_n(&hs_pcoff_gen, __ATOMIC_ACQUIRE);
	unsigned n, i, j;
	if (!id || !ch->walked || ch->python || ch->lazy || !ch->depth || ch->depth - 1 > FAST_MAX || ch->site != site ||
	    ch->gen != gen || !hs_chain_top || hs_py_frames_maybe())
		return;
	n = ch->depth - 1;
	if (f->cfa == ch->cfa && f->n == n && f->gen == gen && f->seg_gen == t->seg_gen) {
		for (i = 0; i < n && f->f[i].sp == ch->sp[i + 1] && f->f[i].pc == ch->pc[i + 1]; i++)
			;
		if (i == n) {
			/* a site already kept gets its new id; a third takes the older one's place */
			j = f->site[0] == site ? 0 : 1;
			if (f->site[j] != site) {
				f->site[0] = f->site[1];
				f->id[0] = f->id[1];
			}
			f->site[j] = site;
			f->id[j] = id;
			return;
		}
	}
	f->site[0] = f->site[1] = 0; /* no reader between: the thread's own */
	f->cfa = ch->cfa;
	f->gen = gen;
	f->seg_gen = t->seg_gen;
	f->n = n;
	for (i = 0; i < n; i++) {
		f->f[i].sp = ch->sp[i + 1];
		f->f[i].pc = ch->pc[i + 1];
	}
	f->site[0] = site;
	f->id[0] = id;
}

/*
 * fd_stack past its first look, out of line: the chain read for site
 * (hs_chain_read checks every return-address slot of the thread's chain
 * for this site), the id given it last time when it is unchanged, through
 * no evaluation loop, in the same segment; else fd_stack_slow's.  The
 * chain is then kept for the first look (fd_fast_keep).
 */
static __attribute__((noinline)) uint32_t fd_stack_read(struct hs_tls *t, uint64_t site)
{
	char *area = t->area;
	struct hs_chain *ch;
	struct fd_chains *m;
	unsigned depth, k;
	uint32_t id;

	if (HS_UNLIKELY(full_stacks || !area))
		return fd_stack_slow(t, site, NULL, NULL, 0, 0);
	k = fd_chain_for(area, site, &ch, &m);
	depth = hs_chain_read(ch, site, hs_tls.fd_call_cfa);
	if (depth && ch->unchanged && !ch->python && m->id[k] && m->gen[k] == t->seg_gen)
		id = m->id[k];
	else
		id = fd_stack_slow(t, site, ch, m, k, depth);
	fd_fast_keep(t, area, ch, site, id);
	return id;
}

/*
 * This call's stack id (hs_stack_call's, or hs_stack_here's with
 * HEISEN_FD_STACKS=full), 0 when none could be read or kept.  site and
 * hs_tls.fd_call_cfa are the hook's (HS_FD_SITE); t is hs_enter()'s.  Inline
 * for its common case, a loop's call: the frames above the call are the
 * ones read for this site last time (fd_stack_fast), the id given them
 * then, exactly this call's.  full_stacks is not tested first: fd_fast is
 * filled only by fd_stack_read, which never keeps a chain with full stacks
 * (set once, before fd tracking turns on), so with them the first look
 * finds no id and fd_stack_read takes hs_stack_here's.
 */
static inline __attribute__((always_inline)) uint32_t fd_stack(struct hs_tls *t, uint64_t site)
{
	uint32_t id;
	if (HS_LIKELY(t->area && (id = fd_stack_fast(t, t->area, site, t->fd_call_cfa)) != 0))
		return id;
	return fd_stack_read(t, site);
}

static inline void count_one(uint64_t *c, int one)
{
	/* relaxed: counters, ordered with nothing else */
	if (HS_LIKELY(one))
		__atomic_store_n(c, __atomic_load_n(c, __ATOMIC_RELAXED) + 1, __ATOMIC_RELAXED);
	else
		__atomic_add_fetch(c, 1, __ATOMIC_RELAXED);
}

static inline void count(uint64_t *c)
{
	count_one(c, one_thread());
}

/* An event of this thread about fd's generation gen. */
static void event_init(struct hs_fd_event *e, struct hs_tls *t, int fd, uint32_t gen, unsigned op, unsigned call,
		       uint32_t stack, uint64_t now)
{
	/* every field but seq and the path's tail: a memset of the whole event
	 * was a sixth of a close's cost; seq is the ring's (event_begin) */
	e->prev = 0;
	e->owner = 0;
	e->kind = 0;
	e->err = 0;
	e->flags = 0;
	e->path[0] = '\0';
	e->close_dt = 0;
	e->close_tid = 0;
	e->close_stack = 0;
	e->close_call = 0;
	e->ts_ns = now;
	e->fd = fd;
	e->gen = gen;
	e->tid = t ? t->tid : 0;
	e->stack = stack;
	e->op = (uint8_t)op;
	e->call = (uint8_t)call;
}

_Static_assert(offsetof(struct hs_fd_event, call) == offsetof(struct hs_fd_event, op) + 1 &&
		       offsetof(struct hs_fd_event, kind) == offsetof(struct hs_fd_event, op) + 2 &&
		       offsetof(struct hs_fd_event, err) == offsetof(struct hs_fd_event, op) + 3 &&
		       __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
	       "an event's op, call, kind and err are one little-endian 32-bit word (created_one)");

/* A new generation of fd: what created it.  path may be NULL. */
struct birth {
	uint8_t kind, call;
	uint8_t at;            /* path is relative to dirfd: at_path */
	uint32_t flags;
	int dirfd;
	uint64_t owner;
	const char *path;      /* a path or a description, its tail kept (put_text) */
};

/*
 * Record the creation of a generation of fd (the call returned it), with
 * the guard held.  A slot that still said "open" lost a close heisen did
 * not see (a library's internal close): the new generation replaces it.
 */
static void fd_max_raise(struct hs_header *h, uint32_t fd)
{
	uint32_t max = __atomic_load_n(&h->fd_max, __ATOMIC_RELAXED);
	while (fd > max && !__atomic_compare_exchange_n(&h->fd_max, &max, fd, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/*
 * Copy the NUL-terminated string p into dst[0..HS_FD_PATH_MAX): 1 when it
 * fit, NUL included; 0 when it is longer (dst then holds its first bytes,
 * unterminated).  Eight bytes a step where a byte at a time took five to
 * seven instructions a byte (a path is copied on every open): a word of p
 * is read whole when it lies in one page — every page is mapped or none
 * is, so the bytes after the NUL such a word may hold can be read, as
 * glibc's own strlen reads them — a word with a zero byte is stored up
 * to it (zeros after it), and a word that would cross a page is finished
 * byte by byte.
 */
static inline int copy_fits(char *restrict dst, const char *restrict p)
{
	/* the words read whole: those that end within the slot's size and
	 * within p's page (room: the bytes from p to its page's end), one
	 * bound computed once instead of two tests a word */
	unsigned i = 0, room = 4096u - (unsigned)((uintptr_t)p & 4095u);
	unsigned lim = room < HS_FD_PATH_MAX ? room : HS_FD_PATH_MAX;
	for (; i + 8 <= lim; i += 8) {
		uint64_t w, z;
		memcpy(&w, p + i, 8);
		z = (w - 0x0101010101010101ull) & ~w & 0x8080808080808080ull;
		if (z) {
			/* a zero byte in this word: the lowest flagged byte is the first
			 * NUL (a flag above it may be a borrow's, never one below); the
			 * word up to it stored whole, the bytes after it as zeros */
			w &= ~0ull >> (56 - (__builtin_ctzll(z) & ~7u));
			memcpy(dst + i, &w, 8);
			return 1;
		}
		memcpy(dst + i, &w, 8);
	}
	for (; i < HS_FD_PATH_MAX; i++)
		if ((dst[i] = p[i]) == '\0')
			return 1;
	return 0;
}

/*
 * The description of a birth into a slot's path: b->path's tail (put_text),
 * relative to b->dirfd when b->at (at_path).  Inline for the common case,
 * an absolute path or one relative to the working directory that fits:
 * copied as its NUL is looked for, in the slot's size only (copy_fits).
 * (The bytes after the NUL's word are what the slot held before, this
 * process's own.)
 */
static inline void describe(char *restrict dst, const struct birth *b)
{
	const char *restrict p = b->path ? b->path : "";
	if (b->at && p[0] != '/' && b->dirfd != AT_FDCWD) {
		at_path(dst, b->dirfd, p);
		return;
	}
	if (!copy_fits(dst, p))
		put_text(dst, p); /* longer: its tail */
}

/* one: one_thread() as the caller read it (the hook's, before its system
 * call: only this thread could have started another since). */
static inline __attribute__((always_inline)) void created_one(struct hs_tls *t, int fd, const struct birth *b,
							      uint32_t stack, uint64_t now, int one)
{
	/* the hot line: read once for the record */
	struct hs_fd_hot *x = hot();
	struct hs_fd *s = slot_in(x, fd);
	struct hs_header *h = x->hdr;
	struct hs_fd_event *e;
	uint32_t q, gen = 0;
	uint64_t pos;

	count_one(&h->fd_created, one);
	if (HS_UNLIKELY((uint32_t)fd > __atomic_load_n(&h->fd_max, __ATOMIC_RELAXED)))
		fd_max_raise(h, (uint32_t)fd);
	if (HS_UNLIKELY(!s)) {
		__atomic_add_fetch(&h->fd_beyond, 1, __ATOMIC_RELAXED);
	} else if (claim_one(s, &q, one)) {
		gen = s->gen + 1;
		s->gen = gen;
		s->state = HS_FDS_OPEN;
		s->kind = b->kind;
		s->call = b->call;
		s->close_call = HS_FDC_NONE;
		s->flags = b->flags;
		s->tid = t->tid;
		s->stack = stack;
		s->ts_ns = now;
		s->owner = b->owner;
		s->close_tid = 0;
		s->close_stack = 0;
		s->close_ns = 0;
		describe(s->path, b);
		if ((e = event_begin_in(x, one, &pos)) != NULL) {
			/* in place in the ring; the slot's path whole (a fixed-size copy) */
			e->ts_ns = now;
			e->owner = b->owner;
			e->fd = fd;
			e->gen = gen;
			e->tid = t->tid;
			e->stack = stack;
			/* op, call, kind and err (0) in one 32-bit store: merged by the
			 * compiler into a 16-bit one, their constant was a load from
			 * .rodata, one more data line a pair (x86-64: little-endian) */
			{
				uint32_t w = (uint32_t)HS_FDE_CREATE | (uint32_t)b->call << 8 | (uint32_t)b->kind << 16;
				memcpy((char *)e + offsetof(struct hs_fd_event, op), &w, sizeof w);
			}
			e->flags = b->flags;
			e->close_dt = 0; /* no close folded yet (fold_close) */
			e->close_tid = 0;
			e->close_stack = 0;
			e->close_call = 0;
			memcpy(e->path, s->path, sizeof e->path);
			event_publish(s, e, pos);
		}
		release(s, q);
	}
	hs_rec(t, now, HS_REC_FD_CREATED, stack, (uint64_t)fd, gen, (uint64_t)b->kind | (uint64_t)b->call << 8);
}

static inline __attribute__((always_inline)) void created(struct hs_tls *t, int fd, const struct birth *b,
							  uint32_t stack, uint64_t now)
{
	created_one(t, fd, b, stack, now, one_thread());
}



/*
 * The close of generation gen of fd in the thread's ring: folded into its
 * creation's record when that is the thread's newest (a loop's open and
 * close, nothing recorded between: format.h HS_REC_FD_FOLD_CALL_SHIFT),
 * as hs_rec_released folds a lock's release — the close then writes no
 * record line of its own; else an HS_REC_FD_CLOSED record.  The record at
 * head - 1 is the last this thread wrote, whole (its only writer; a signal
 * handler that interrupts a hook skips its record), or one never written
 * (type 0).  c before b: a reader that sees the folded b sees this c
 * (dumper/snapshot.c read_record).  Does hs_rec's memory sample.
 */
static inline __attribute__((always_inline)) void rec_closed(struct hs_tls *t, uint64_t now, uint32_t stack, int fd,
							     uint32_t gen, unsigned call)
{
	uint64_t pos = __atomic_load_n(&t->ring->head, __ATOMIC_RELAXED), dt;
	struct hs_record *r = &t->recs[(pos - 1) & t->ring_mask];
	/* b == gen: a creation not folded yet (its high half 0; so c's high bits are 0:
	 * only this thread folds, whole, before it records anything else) */
	if (HS_LIKELY(r->type == HS_REC_FD_CREATED && r->b == gen && r->a == (uint64_t)(uint32_t)fd) &&
	    HS_LIKELY((dt = now - r->ts_ns) <= HS_REC_FOLD_MAX_NS)) {
		__atomic_store_n(&r->c,
				 r->c | (uint64_t)(call & 0xffu) << HS_REC_FD_FOLD_CALL_SHIFT |
					 (uint64_t)stack << HS_REC_FD_FOLD_STACK_SHIFT,
				 __ATOMIC_RELAXED);
		__atomic_store_n(&r->b, (uint64_t)gen | (dt + 1) << HS_REC_FOLD_SHIFT, __ATOMIC_RELEASE);
		if (HS_UNLIKELY(now >= __atomic_load_n(&hs_mem_next_ns, __ATOMIC_RELAXED)))
			hs_mem_sample(t, now, HS_MEMW_TIME, 0);
		return;
	}
	hs_rec(t, now, HS_REC_FD_CLOSED, stack, (uint64_t)fd, gen, call);
}

/*
 * The close of slot s's open generation folded into that generation's
 * creation event (format.h hs_fd_event.close_dt), when the creation is
 * still the number's newest event in the ring, with the generation's flags
 * and owner as the slot has them now, at most HS_FD_FOLD_MAX_NS
 * before now (a loop's open and close; a clock reading of another thread
 * behind the creation's is not folded): then 1, and the close writes no
 * ring entry of its own — no header line, no cold entry — only the first
 * line or two of its creation's, which the open wrote.  The caller holds
 * s's seqlock, so no other writer of this number's chain is at work; an
 * entry the ring's writers reach again meanwhile (a wrap of all its
 * entries while this thread is between the check and the stores) may get
 * the fold's fields, as a slow writer's entry may get a faster one's
 * payload already (a reader checks seq, not the payload).  0: the caller
 * writes an HS_FDE_CLOSE event.
 */
static inline int fold_close(struct hs_fd_hot *x, const struct hs_fd *s, int32_t tid, uint32_t stack, uint64_t now,
			     unsigned call)
{
	uint64_t at = s->last_event, dt;
	struct hs_fd_event *d;
	if (HS_UNLIKELY(!at)) /* else the ring exists: only event_publish sets it */
		return 0;
	d = &x->ring[(at - 1) & x->ring_mask];
	/* the entry still holds position at, the number's newest event (so its
	 * number's, and a creation: this generation's, not folded yet; gen is
	 * checked all the same) */
	if (HS_UNLIKELY(__atomic_load_n(&d->seq, __ATOMIC_ACQUIRE) != at || d->op != HS_FDE_CREATE ||
			d->gen != s->gen || d->flags != s->flags || d->owner != s->owner ||
			(dt = now - d->ts_ns) > HS_FD_FOLD_MAX_NS))
		return 0;
	d->close_tid = tid;
	d->close_stack = stack;
	d->close_call = (uint8_t)call;
	/* release: a reader that sees close_dt (acquire) sees the fields above */
	__atomic_store_n(&d->close_dt, (uint32_t)(dt + 1), __ATOMIC_RELEASE);
	return 1;
}

/*
 * Before fd is closed (or after dup2 replaced it): mark its open generation
 * closed by this call.  *p says what the slot held.  With the guard held.
 * one: one_thread(), read by the caller.
 */
static inline __attribute__((always_inline)) void closing_one(struct hs_tls *t, int fd, unsigned call, uint32_t stack,
								    uint64_t now, struct hs_fd_pre *p, int one)
{
	struct hs_fd_hot *x = hot();
	struct hs_fd *s = slot_in(x, fd);
	struct hs_fd_event *e;
	uint64_t pos;
	uint32_t q;
	memset(p, 0, sizeof *p);
	if (!s || !claim_one(s, &q, one))
		return;
	p->tracked = 1;
	p->state = s->state;
	p->gen = s->gen;
	p->flags = s->flags;
	p->owner = s->owner;
	p->tid = s->tid;
	p->stack = s->stack;
	if (HS_LIKELY(s->state == HS_FDS_OPEN)) {
		s->state = HS_FDS_CLOSED;
		s->close_call = (uint8_t)call;
		s->close_tid = t->tid;
		s->close_stack = stack;
		s->close_ns = now;
		if (HS_LIKELY(fold_close(x, s, t->tid, stack, now, call))) {
			/* folded into its creation's event: no entry of its own */
		} else if ((e = event_begin_in(x, one, &pos)) != NULL) {
			/* in place in the ring; a close carries no path */
			e->ts_ns = now;
			e->owner = p->owner;
			e->fd = fd;
			e->gen = p->gen;
			e->tid = t->tid;
			e->stack = stack;
			/* op, call, kind, err (0): one 32-bit store, as created_one's */
			{
				uint32_t w = (uint32_t)HS_FDE_CLOSE | (uint32_t)(call & 0xffu) << 8 | (uint32_t)s->kind << 16;
				memcpy((char *)e + offsetof(struct hs_fd_event, op), &w, sizeof w);
			}
			e->flags = p->flags;
			e->close_dt = 0;
			e->close_tid = 0;
			e->close_stack = 0;
			e->close_call = 0;
			e->path[0] = '\0';
			event_publish(s, e, pos);
		}
	}
	release(s, q);
	if (HS_LIKELY(p->state == HS_FDS_OPEN)) {
		count_one(&x->hdr->fd_closed, one);
		rec_closed(t, now, stack, fd, p->gen, call);
	}
}

static inline __attribute__((always_inline)) void closing(struct hs_tls *t, int fd, unsigned call, uint32_t stack,
								uint64_t now, struct hs_fd_pre *p)
{
	closing_one(t, fd, call, stack, now, p, one_thread());
}

/*
 * A generation heisen did not see created, proven by a call that found the
 * number open — a close that succeeded (after_close), fdopen, fdopendir or
 * heisen_fd_set_owner (take_over) — when the slot says it is not: a
 * library's internal open, or one made with a raw system call.  The
 * claimed slot s gets it, open, of unknown kind and creator, flagged
 * HS_FDF_UNSEEN (never a party to a stale-close finding), and its creation
 * event (no thread, no stack) at time now; born: the slot's creation time
 * (0: unknown).
 */
static void unseen_generation(struct hs_fd *s, int fd, uint64_t born, uint64_t now)
{
	struct hs_fd_event e;
	s->gen++;
	s->state = HS_FDS_OPEN;
	s->kind = HS_FDK_UNKNOWN;
	s->call = HS_FDC_UNSEEN;
	s->close_call = HS_FDC_NONE;
	s->flags = HS_FDF_UNSEEN;
	s->owner = 0;
	s->tid = 0;
	s->stack = 0;
	s->ts_ns = born;
	s->close_tid = 0;
	s->close_stack = 0;
	s->close_ns = 0;
	s->path[0] = '\0';
	event_init(&e, NULL, fd, s->gen, HS_FDE_CREATE, HS_FDC_UNSEEN, 0, now);
	e.flags = HS_FDF_UNSEEN;
	event_add(s, &e);
}

/* ---- findings ---------------------------------------------------------------- */

static struct hs_fd_event *history_entry(uint32_t i)
{
	struct hs_table *t = &hs_seg.hdr->tables[HS_T_FD_HISTORY];
	return i < t->capacity ? (struct hs_fd_event *)((char *)hs_seg.hdr + t->offset) + i : NULL;
}

/* Keep a copy of e in the history table at index i (reserved by the caller). */
static void history_put(uint32_t i, const struct hs_fd_event *e)
{
	struct hs_fd_event *d = history_entry(i);
	if (!d || hs_seg_commit_entry(&hs_seg, HS_T_FD_HISTORY, i) != 0)
		return;
	event_copy(d, e);
	d->prev = 0;
	/* the copy is complete before a reader sees seq 1 */
	__atomic_store_n(&d->seq, 1, __ATOMIC_RELEASE);
}

/* The published stale-close finding about (fd, gen), or NULL. */
static struct hs_finding *stale_finding(int fd, uint32_t gen)
{
	struct hs_table *tab = &hs_seg.hdr->tables[HS_T_FINDINGS];
	uint32_t n = __atomic_load_n(&tab->count, __ATOMIC_ACQUIRE);
	if (n > tab->capacity)
		n = tab->capacity;
	for (uint32_t i = 0; i < n; i++) {
		struct hs_finding *f = &hs_seg.findings[i];
		if (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) == 1 && f->kind == HS_FIND_STALE_CLOSE &&
		    f->addr == (uint64_t)(uint32_t)fd && f->size == gen)
			return f;
	}
	return NULL;
}

/* Append e (the rightful owner's later EBADF) to finding f's history, if room. */
static void history_append(struct hs_finding *f, const struct hs_fd_event *e)
{
	uint16_t n = __atomic_load_n(&f->n, __ATOMIC_ACQUIRE);
	if ((uint64_t)f->lock + HS_FD_FINDING_EVENTS > hs_seg.hdr->tables[HS_T_FD_HISTORY].capacity)
		return; /* its history could not be reserved */
	while (n < HS_FD_FINDING_EVENTS) {
		if (__atomic_compare_exchange_n(&f->n, &n, (uint16_t)(n + 1), 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
			/* the slot is ours; a reader may see n before the copy's seq: it checks seq */
			history_put(f->lock + n, e);
			return;
		}
	}
}

/*
 * Record an fd finding f (kind, rule, the stacks and tids already in it)
 * with history hist[0..nhist), oldest first.  A finding with the same kind
 * and stacks as an earlier one folds into its count (report once).
 */
static void fd_finding(struct hs_tls *t, struct hs_finding *f, const struct hs_fd_event *hist, unsigned nhist)
{
	struct hs_seg *s = &hs_seg;
	struct hs_table *tab = &s->hdr->tables[HS_T_FINDINGS];
	struct hs_table *ht = &s->hdr->tables[HS_T_FD_HISTORY];
	uint32_t n = __atomic_load_n(&tab->count, __ATOMIC_ACQUIRE), first, idx;

	if (n > tab->capacity)
		n = tab->capacity;
	for (uint32_t i = 0; i < n; i++) {
		struct hs_finding *o = &s->findings[i];
		if (__atomic_load_n(&o->ready, __ATOMIC_ACQUIRE) == 1 && o->kind == f->kind && o->stack == f->stack &&
		    o->stack2 == f->stack2 && o->stack3 == f->stack3 &&
		    (f->stack || f->stack2 || f->stack3 || (o->addr == f->addr && o->size == f->size))) {
			__atomic_add_fetch(&o->count, 1, __ATOMIC_RELAXED);
			return;
		}
	}
	if (nhist > HS_FD_FINDING_EVENTS) {
		/* the newest events: the close that proves it is last */
		hist += nhist - HS_FD_FINDING_EVENTS;
		nhist = HS_FD_FINDING_EVENTS;
	}
	/* relaxed: the reservation only has to be unique; each copy's seq publishes it */
	first = __atomic_fetch_add(&ht->count, HS_FD_FINDING_EVENTS, __ATOMIC_RELAXED);
	if ((uint64_t)first + HS_FD_FINDING_EVENTS > ht->capacity) {
		__atomic_add_fetch(&ht->dropped, 1, __ATOMIC_RELAXED);
		nhist = 0;
		first = ht->capacity; /* out of range: nothing is ever written there */
	}
	for (unsigned i = 0; i < nhist; i++)
		history_put(first + i, &hist[i]);
	f->lock = first;
	f->n = (uint16_t)nhist;
	f->count = 1;
	f->ts_ns = hs_now();
	idx = hs_finding_add(s, f);
	if (idx)
		hs_rec(t, f->ts_ns, HS_REC_FINDING, f->stack, idx - 1, f->addr, f->kind);
	else
		__atomic_add_fetch(&s->hdr->findings_dropped, 1, __ATOMIC_RELAXED);
}

static void finding_init(struct hs_finding *f, unsigned kind, unsigned rule, int fd, uint32_t gen, int err)
{
	memset(f, 0, sizeof *f);
	f->kind = (uint16_t)kind;
	f->offset = rule;
	f->addr = (uint64_t)(uint32_t)fd;
	f->size = gen;
	f->signo = err;
}

/* A finding's three roles: (tid, stack) of the close that makes it, and
 * the events for the second and third roles (NULL: not recorded). */
static void roles(struct hs_finding *f, int32_t tid, uint32_t stack, const struct hs_fd_event *second,
		  const struct hs_fd_event *third)
{
	f->tid = tid;
	f->stack = stack;
	if (second) {
		f->tid2 = second->tid;
		f->stack2 = second->stack;
	}
	if (third) {
		f->tid3 = third->tid;
		f->stack3 = third->stack;
	}
}

/* In chain ev[0..n), the newest creation or owner event of `owner` (owner_flag) older than gen, or NULL. */
static const struct hs_fd_event *owned_by(const struct hs_fd_event *ev, unsigned n, uint64_t owner,
					  uint32_t owner_flag, uint32_t gen)
{
	for (unsigned i = 0; i < n; i++)
		if ((ev[i].op == HS_FDE_CREATE || ev[i].op == HS_FDE_OWNER) && ev[i].owner == owner &&
		    (ev[i].flags & owner_flag) && ev[i].gen <= gen)
			return &ev[i];
	return NULL;
}

/* In chain ev[0..n) (newest first), the newest event of generation gen with op. */
static const struct hs_fd_event *find_ev(const struct hs_fd_event *ev, unsigned n, uint32_t gen, unsigned op)
{
	for (unsigned i = 0; i < n; i++)
		if (ev[i].gen == gen && ev[i].op == op)
			return &ev[i];
	return NULL;
}

/* Reverse the events of ev[0..n) with generation >= from_gen into out (oldest first). */
static unsigned story(const struct hs_fd_event *ev, unsigned n, uint32_t from_gen, struct hs_fd_event *out)
{
	unsigned m = 0;
	for (unsigned i = n; i-- > 0;)
		if (ev[i].gen >= from_gen)
			out[m++] = ev[i];
	return m;
}

/* The innermost frame of stack id (its call site), 0 when unknown. */
static uint64_t stack_top(uint32_t id)
{
	const struct hs_stack *st;
	if (id == 0 || id >= hs_seg.hdr->tables[HS_T_STACKS].capacity)
		return 0;
	st = &hs_seg.stacks[id];
	if (!__atomic_load_n(&st->ready, __ATOMIC_ACQUIRE) || st->depth == 0)
		return 0;
	return st->pc[0];
}

/*
 * The stale close in one thread, where the thread cannot tell owners
 * apart (README "File descriptors": the rule): objects of one kind are
 * created at one call site and closed at one call site (CPython's FileIO:
 * _io_FileIO___init__'s open, internal_close's close).  Generation g - 1
 * was created at the site that created g (cp, cg) and closed elsewhere —
 * behind its object's back (xp: os.close(f.fileno())) —, g was closed at
 * the very site whose close by g's owner now fails (xg, this close): the
 * object of g - 1 closed again, and closed g.
 */
static int same_sites(const struct hs_fd_event *cp, const struct hs_fd_event *xp, const struct hs_fd_event *cg,
		      const struct hs_fd_event *xg, uint32_t stack)
{
	uint64_t born = stack_top(cg->stack), closes = stack_top(stack);
	return born && closes && stack_top(cp->stack) == born && stack_top(xg->stack) == closes &&
	       stack_top(xp->stack) != closes && stack_top(xp->stack) != 0;
}

/*
 * Is this process one thread now?  The kernel's count (/proc/self/stat,
 * field 20), read with raw system calls: only on a failed close.  0 when
 * it cannot be read.
 */
static int single_threaded(void)
{
	char buf[1024];
	long n;
	int fd = hs_sys.open("/proc/self/stat", O_RDONLY | O_CLOEXEC, 0), field = 2;
	const char *c;
	if (fd < 0)
		return 0;
	n = hs_sys.read(fd, buf, sizeof buf - 1);
	hs_sys.close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	if (!(c = strrchr(buf, ')')))
		return 0;
	for (; *c && field < 20; c++)
		field += *c == ' ';
	return field == 20 && c[0] == '1' && c[1] == ' ';
}

/*
 * A close of fd failed with EBADF after heisen saw generation gen closed:
 * a double close, or — when the failing thread created gen and the close
 * that ended it was made by another thread that had created and closed gen
 * - 1 itself — the confirmation of a stale close (README "File
 * descriptors": the rule).  A stale close already proven at the close
 * itself (FILE, DIR, owner tag) gets this EBADF appended to its history.
 * sweep: the thread is closing consecutive numbers at one site (closing
 * every number from 3 up), where EBADF is expected: no finding.  own: this
 * close had found the generation open and recorded closing it (a racing
 * close, or one heisen does not see, got there first): that record is left
 * out of the story.
 */
static void close_failed(struct hs_tls *t, int fd, uint32_t gen, unsigned call, uint32_t stack, uint64_t now, int err,
			 int sweep, int own)
{
	struct hs_fd *s = slot_of(fd);
	struct fd_scratch *scratch = fd_scratch();
	struct hs_fd_event *ev = scratch ? scratch->ev : NULL, *hist = scratch ? scratch->hist : NULL, fail;
	const struct hs_fd_event *cg, *xg, *cp, *xp;
	struct hs_finding f, *stale;
	unsigned n, m;
	uint32_t q;

	if (!s || !claim(s, &q))
		return;
	if (s->gen != gen || s->state != HS_FDS_CLOSED) {
		release(s, q); /* a new generation since: our close failed for a reason we cannot see */
		return;
	}
	event_init(&fail, t, fd, gen, HS_FDE_CLOSE_FAILED, call, stack, now);
	fail.err = (uint8_t)err;
	fail.kind = s->kind;
	fail.flags = s->flags;
	event_add(s, &fail);
	n = scratch ? chain(fd, s->last_event, ev, CHAIN_MAX) : 0;
	release(s, q);
	hs_rec(t, now, HS_REC_FD_CLOSE_FAILED, stack, (uint64_t)fd, gen, (uint64_t)err | (uint64_t)call << 16);
	if (sweep || !scratch)
		return;
	if (own) {
		/* this close's own record (made before the call, which then failed) closed nothing */
		for (unsigned i = 0; i < n; i++)
			if (ev[i].op == HS_FDE_CLOSE && ev[i].gen == gen && ev[i].tid == t->tid && ev[i].ts_ns == now) {
				memmove(&ev[i], &ev[i + 1], (n - i - 1) * sizeof ev[0]);
				n--;
				break;
			}
	}
	if ((stale = stale_finding(fd, gen)) != NULL) {
		history_append(stale, &fail);
		return;
	}
	cg = find_ev(ev, n, gen, HS_FDE_CREATE);
	xg = find_ev(ev, n, gen, HS_FDE_CLOSE);
	cp = gen > 1 ? find_ev(ev, n, gen - 1, HS_FDE_CREATE) : NULL;
	xp = gen > 1 ? find_ev(ev, n, gen - 1, HS_FDE_CLOSE) : NULL;
	if (cg && xg && cp && xp && cg->tid == t->tid && xg->tid != t->tid && cp->tid == xg->tid && xp->tid == xg->tid &&
	    !(cg->flags & (HS_FDF_INHERITED | HS_FDF_UNSEEN))) {
		finding_init(&f, HS_FIND_STALE_CLOSE, HS_FD_RULE_CONFIRMED, fd, gen, err);
		roles(&f, xg->tid, xg->stack, cp, cg);
		m = story(ev, n, gen - 1, hist);
	} else if (cg && xg && cp && xp && cg->tid == t->tid && xg->tid == t->tid && same_sites(cp, xp, cg, xg, stack) &&
		   !(cg->flags & (HS_FDF_INHERITED | HS_FDF_UNSEEN))) {
		finding_init(&f, HS_FIND_STALE_CLOSE, HS_FD_RULE_SAME_SITES, fd, gen, err);
		roles(&f, xg->tid, xg->stack, cp, cg);
		m = story(ev, n, gen - 1, hist);
	} else if (xg && xg->tid == t->tid && single_threaded()) {
		/* harmless: nothing could have reused the number in between (README) */
		__atomic_add_fetch(&hs_seg.hdr->fd_double_closes_harmless, 1, __ATOMIC_RELAXED);
		return;
	} else {
		finding_init(&f, HS_FIND_DOUBLE_CLOSE, HS_FD_RULE_EBADF, fd, gen, err);
		roles(&f, t->tid, stack, xg, cg);
		m = story(ev, n, gen, hist);
	}
	fd_finding(t, &f, hist, m);
}

/*
 * After a close call that found *p.  Two threads closing one number at once
 * (a racing double close) can reach the kernel in the other order than they
 * recorded: the one that recorded first fails, the other succeeds.  So a
 * success on a generation another thread's record had just closed is that
 * generation's real close (noted as a second close event), and an EBADF on
 * a generation this thread recorded closing, which another thread then
 * really closed, is the double close.  Otherwise a success on a number
 * heisen thought closed is a generation created where heisen does not look
 * (a library's internal open): noted, created and closed.  EBADF on a
 * closed generation is close_failed's.  Other errors (EINTR, EIO) closed
 * the number all the same on Linux: recorded before.
 */
static void after_close(struct hs_tls *t, int fd, unsigned call, uint32_t stack, uint64_t now, uint64_t site,
			const struct hs_fd_pre *p, int rc, int err)
{
	int sweep = t->fd_last == fd - 1 && t->fd_last_site == site;
	struct hs_fd *s = slot_of(fd);
	struct hs_fd_event e;
	uint32_t q;
	t->fd_last = fd;
	t->fd_last_site = site;
	if (!p->tracked || !s)
		return;
	if (rc == 0 && p->state != HS_FDS_OPEN) {
		if (!claim(s, &q))
			return;
		if (s->gen == p->gen && s->state == HS_FDS_CLOSED && p->state == HS_FDS_CLOSED && s->close_tid != t->tid) {
			/* the racing close that really closed it */
			s->close_call = (uint8_t)call;
			s->close_tid = t->tid;
			s->close_stack = stack;
			s->close_ns = now;
			event_init(&e, t, fd, s->gen, HS_FDE_CLOSE, call, stack, now);
			e.kind = s->kind;
			e.flags = s->flags;
			event_add(s, &e);
		} else if (s->gen == p->gen && s->state != HS_FDS_OPEN) {
			unseen_generation(s, fd, 0, now);
			s->state = HS_FDS_CLOSED;
			s->close_call = (uint8_t)call;
			s->close_tid = t->tid;
			s->close_stack = stack;
			s->close_ns = now;
			event_init(&e, t, fd, s->gen, HS_FDE_CLOSE, call, stack, now);
			e.flags = HS_FDF_UNSEEN;
			event_add(s, &e);
		}
		release(s, q);
		return;
	}
	/* EBADF on a generation this thread had just recorded closing: another
	 * thread's racing close got there first (or one heisen does not see) */
	if (rc != 0 && err == EBADF && p->state != HS_FDS_NONE)
		close_failed(t, fd, p->gen, call, stack, now, err, sweep, p->state == HS_FDS_OPEN);
}

/*
 * A close that the program declared an owner for (fdsan's idea): a raw
 * close() of a number tagged with heisen_fd_set_owner (rule owner), or of
 * a number a FILE or a DIR owns — close(fileno(f)), close(dirfd(d)) —
 * seen here, at the close behind the object's back, not only at its later
 * fclose/closedir (rule fileno, dirfd; bionic fdsan's fopen and closedir
 * tests).  libc's own fclose and closedir close without the PLT: never
 * seen here.  With the guard held, after closing() recorded the close.
 */
static void owned_by_tag_closed(struct hs_tls *t, int fd, const struct hs_fd_pre *p, uint32_t stack, unsigned rule)
{
	struct fd_scratch *scratch = fd_scratch();
	struct hs_fd_event *ev = scratch ? scratch->ev : NULL, *hist = scratch ? scratch->hist : NULL;
	struct hs_fd *s = slot_of(fd);
	const struct hs_fd_event *own;
	struct hs_finding f;
	unsigned n;
	uint32_t q;
	if (!scratch || !s || !claim(s, &q))
		return;
	n = chain(fd, s->last_event, ev, CHAIN_MAX);
	release(s, q);
	own = find_ev(ev, n, p->gen, HS_FDE_OWNER);
	finding_init(&f, HS_FIND_STALE_CLOSE, rule, fd, p->gen, 0);
	roles(&f, t->tid, stack, own, NULL);
	f.tid3 = p->tid;
	f.stack3 = p->stack;
	fd_finding(t, &f, hist, story(ev, n, p->gen, hist));
}

/*
 * The close of an object that carries its generation: a FILE (fclose,
 * freopen), a DIR (closedir), an owner tag (heisen_fd_close_owned).  When
 * the object's generation k is older than the number's current one, the
 * number was closed behind the object's back and reused: this close is
 * stale, proven here, before the call does the damage (when the current
 * generation is open: else the call fails with EBADF, a double close).
 * Records the close like closing().  With the guard held.
 */
static void object_closing(struct hs_tls *t, int fd, uint64_t owner, uint32_t owner_flag, unsigned rule,
			   unsigned call, uint32_t stack, uint64_t now, struct hs_fd_pre *p)
{
	struct fd_scratch *scratch = fd_scratch();
	struct hs_fd_event *ev = scratch ? scratch->ev : NULL, *hist = scratch ? scratch->hist : NULL;
	struct hs_fd *s = slot_of(fd);
	const struct hs_fd_event *mine = NULL, *cur;
	struct hs_finding f;
	unsigned n;
	uint32_t q;

	closing(t, fd, call, stack, now, p);
	if (!p->tracked || p->state != HS_FDS_OPEN || ((p->flags & owner_flag) && p->owner == owner))
		return;
	if (!scratch || !s || !claim(s, &q))
		return;
	n = chain(fd, s->last_event, ev, CHAIN_MAX);
	release(s, q);
	if (p->gen < 2 || !(mine = owned_by(ev, n, owner, owner_flag, p->gen - 1)))
		return; /* an object heisen never saw own this number: nothing to prove */
	cur = find_ev(ev, n, p->gen, HS_FDE_CREATE);
	finding_init(&f, HS_FIND_STALE_CLOSE, rule, fd, p->gen, 0);
	roles(&f, t->tid, stack, mine, cur);
	if (!cur) {
		f.tid3 = p->tid;
		f.stack3 = p->stack;
	}
	fd_finding(t, &f, hist, story(ev, n, mine->gen, hist));
}

/* ---- the interceptors' entries (fd_core.h): creation ------------------------------- */

/*
 * Record a creation from a hook (the call returned fd).  Takes the guard;
 * keeps errno.  The description is cut into the slot by created(): b->path
 * relative to b->dirfd when b->at (at_path), else its tail (put_text).
 */
static inline __attribute__((always_inline)) void note_created_one(int fd, const struct birth *b, uint64_t site,
								    int one)
{
	int *ep = fd_errno(&hs_tls), e = *ep;
	struct hs_tls *t = hs_enter();
	if (t) {
		created_one(t, fd, b, fd_stack(t, site), fd_clock(t), one);
		hs_leave(t);
	}
	*ep = e;
}

static inline __attribute__((always_inline)) void note_created(int fd, const struct birth *b, uint64_t site)
{
	note_created_one(fd, b, site, one_thread());
}

/* opened() once hs_fd_on() said yes; one: one_thread() as the hook read it. */
static inline __attribute__((always_inline)) int opened_on(int fd, int dirfd, const char *path, int flags,
							   unsigned call, uint64_t site, int one)
{
	if (fd >= 0) {
		struct birth b = {.kind = (flags & O_DIRECTORY) && (flags & O_TMPFILE) != O_TMPFILE ? HS_FDK_DIR : HS_FDK_FILE,
				  .call = (uint8_t)call,
				  .flags = (flags & O_CLOEXEC) ? HS_FDF_CLOEXEC : 0,
				  .at = 1,
				  .dirfd = dirfd,
				  .path = path ? path : ""};
		note_created_one(fd, &b, site, one);
	}
	return fd;
}

static inline __attribute__((always_inline)) int opened(int fd, int dirfd, const char *path, int flags, unsigned call,
							uint64_t site)
{
	return fd >= 0 && hs_fd_on() ? opened_on(fd, dirfd, path, flags, call, site, one_thread()) : fd;
}

int hs_fd_opened(int fd, int dirfd, const char *path, int flags, unsigned call, uint64_t site)
{
	return opened(fd, dirfd, path, flags, call, site);
}

/*
 * The system calls of glibc's own open64 and close, made in the hook's
 * frame (hs_fd_hot.raw_calls).  With one thread in the process glibc's
 * open64 and close are each one system call and nothing else — openat(AT_FDCWD,
 * path, flags, mode) and close(fd), no cancellation point, errno set from
 * the kernel's negative result (glibc 2.36's __libc_open64 and __close:
 * SYSCALL_CANCEL skips the cancellation when SINGLE_THREAD_P) — so making
 * that call here is the same call; what it saves is a frame between the
 * system call and the program: right after a system call returns here, each
 * return above it costs ~20 ns (bench/README.md "The open/close pair: a
 * close folded into its creation's event"; a plain program with one wrapper
 * function around its open pays the same), and libc's wrapper was one more.
 * Only when the real functions heisen resolved are libc's own (no other
 * interposer after heisen, hs_fds_init); with threads, libc's (its
 * cancellation).  x86-64 only.
 */
static inline long fd_sys(long nr, long a, long b, long c, long d)
{
#if defined(__x86_64__)
	long r;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(r) : "0"(nr), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return r;
#else
	return syscall(nr, a, b, c, d);
#endif
}

/* A raw system call's result as libc returns it: -1 with *ep the error. */
static inline int sys_result(long r, int *ep)
{
	if (HS_UNLIKELY((unsigned long)r > -4096ul)) {
		*ep = (int)-r;
		return -1;
	}
	return (int)r;
}

/* sys_result with errno's address taken only for an error (t: &hs_tls). */
static inline int sys_result_t(long r, struct hs_tls *t)
{
	if (HS_UNLIKELY((unsigned long)r > -4096ul)) {
		*fd_errno(t) = (int)-r;
		return -1;
	}
	return (int)r;
}

/*
 * open64, the open that programs built with large-file support (CPython,
 * most distributions' binaries) call: the interceptor, the real call and
 * its record in one frame, the real function from the line the record reads
 * anyway (hs_fd_hot) — the only interceptor outside fd_hooks.c besides
 * close: a hook of its own calling into the core was one more frame, ~20
 * instructions and two lines of code, cold after each system call
 * (bench/README.md "The open/close pair: a close folded into its
 * creation's event").
 */
HS_EXPORT int open64(const char *path, int flags, ...)
{
	int fd, fe;
	/* faults.c: --fail open, as HS_FAULT_OPEN, from the flag close reads
	 * (hs_inject_on has HS_INJECT_FAULTS exactly when hs_faults_on is set,
	 * faults.c): a pair reads one of faults.c's lines, not two */
	if (HS_UNLIKELY(__atomic_load_n(&hs_inject_on, __ATOMIC_RELAXED) & HS_INJECT_FAULTS) && (fe = hs_fault_open())) {
		errno = fe;
		return -1;
	}
	uint64_t site = HS_FD_SITE();
	mode_t mode = OPEN_MODE(flags);
	/* acquire: real_open64 was set before mode turned ON (hs_fds_init) */
	if (HS_LIKELY(__atomic_load_n(&hs_fd_hot.mode, __ATOMIC_ACQUIRE) == HS_FD_MODE_ON)) {
		/* one thread: read once, for the call and the record (only this
		 * thread, in this hook, could start another) */
		int one = one_thread();
		/* glibc's open64 with one thread: openat(AT_FDCWD, ...), no cancellation point (raw_calls) */
		fd = HS_LIKELY(hs_fd_hot.raw_calls && one)
			     ? sys_result_t(fd_sys(SYS_openat, AT_FDCWD, (long)(uintptr_t)path, flags, mode), &hs_tls)
			     : hs_fd_hot.real_open64(path, flags, mode);
		return opened_on(fd, AT_FDCWD, path, flags, HS_FDC_OPEN, site, one);
	}
	fd = HS_REAL(open64)(path, flags, mode);
	return opened(fd, AT_FDCWD, path, flags, HS_FDC_OPEN, site);
}

int hs_fd_made(int fd, unsigned kind, unsigned call, int cloexec, const char *text, uint64_t site)
{
	if (fd >= 0 && hs_fd_on()) {
		struct birth b = {
			.kind = (uint8_t)kind, .call = (uint8_t)call, .flags = cloexec ? HS_FDF_CLOEXEC : 0, .path = text};
		note_created(fd, &b, site);
	}
	return fd;
}

int hs_fd_socket_made(int fd, int domain, int type, uint64_t site)
{
	char text[HS_FD_PATH_MAX];
	if (fd >= 0)
		socket_text(text, "socket", domain, type);
	return hs_fd_made(fd, HS_FDK_SOCKET, HS_FDC_SOCKET, type & SOCK_CLOEXEC, text, site);
}

/* Two numbers from one call: sv[0], sv[1]. */
static void made_pair(int rc, const int *sv, unsigned kind, unsigned call, int cloexec, const char *what,
		      uint64_t site)
{
	char text[HS_FD_PATH_MAX];
	size_t n;
	if (rc != 0 || !hs_fd_on())
		return;
	for (int i = 0; i < 2; i++) {
		n = cat(text, 0, what);
		n = cat(text, n, i == 0 ? " (first end, other is fd " : " (second end, other is fd ");
		n = cat_num(text, n, (uint64_t)sv[1 - i]);
		cat(text, n, ")");
		hs_fd_made(sv[i], kind, call, cloexec, text, site);
	}
}

int hs_fd_socketpair_made(int rc, const int *sv, int domain, int type, uint64_t site)
{
	char what[HS_FD_PATH_MAX];
	if (rc == 0)
		socket_text(what, "socketpair", domain, type);
	made_pair(rc, sv, HS_FDK_SOCKET, HS_FDC_SOCKETPAIR, type & SOCK_CLOEXEC, what, site);
	return rc;
}

int hs_fd_pipe_made(int rc, const int *fds, int cloexec, uint64_t site)
{
	if (rc == 0) {
		hs_fd_made(fds[0], HS_FDK_PIPE, HS_FDC_PIPE, cloexec, "pipe read end", site);
		hs_fd_made(fds[1], HS_FDK_PIPE, HS_FDC_PIPE, cloexec, "pipe write end", site);
	}
	return rc;
}

int hs_fd_accepted(int fd, int lfd, const struct sockaddr *addr, const socklen_t *len, int cloexec, uint64_t site)
{
	char text[HS_FD_PATH_MAX];
	size_t n;
	if (fd < 0)
		return fd;
	n = cat(text, 0, "peer ");
	sockaddr_text(text, n, addr, addr && len ? *len : 0);
	if (!text[n]) {
		n = cat(text, 0, "accepted on fd ");
		cat_num(text, n, (uint64_t)lfd);
	}
	return hs_fd_made(fd, HS_FDK_SOCKET, HS_FDC_ACCEPT, cloexec, text, site);
}

int hs_fd_memfd_made(int fd, const char *name, int cloexec, uint64_t site)
{
	char text[HS_FD_PATH_MAX];
	size_t n;
	if (fd >= 0) {
		n = cat(text, 0, "memfd:");
		cat(text, n, name ? name : "");
	}
	return hs_fd_made(fd, HS_FDK_MEMFD, HS_FDC_MEMFD, cloexec, text, site);
}

ssize_t hs_fd_received(ssize_t rc, int fd, const struct msghdr *msg, int flags, uint64_t site)
{
	if (rc >= 0 && msg && msg->msg_control && msg->msg_controllen >= sizeof(struct cmsghdr) && hs_fd_on()) {
		char text[HS_FD_PATH_MAX];
		size_t n = cat(text, 0, "received on fd ");
		cat_num(text, n, (uint64_t)fd);
		for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR((struct msghdr *)msg, c)) {
			if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS || c->cmsg_len < CMSG_LEN(0))
				continue;
			size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
			for (size_t i = 0; i < k; i++) {
				int nfd;
				memcpy(&nfd, CMSG_DATA(c) + i * sizeof(int), sizeof nfd);
				hs_fd_made(nfd, HS_FDK_RECEIVED, HS_FDC_RECVMSG, flags & MSG_CMSG_CLOEXEC, text, site);
			}
		}
	}
	return rc;
}

void hs_fd_describe(int fd, const char *what, const struct sockaddr *addr, socklen_t len)
{
	int e = errno;
	struct hs_tls *t;
	if (!hs_fd_on())
		return;
	if ((t = hs_enter()) != NULL) {
		struct hs_fd *s = slot_of(fd);
		char text[HS_FD_PATH_MAX];
		uint32_t q;
		size_t n = cat(text, 0, what);
		sockaddr_text(text, n, addr, len);
		if (s && text[n] && claim(s, &q)) {
			if (s->state == HS_FDS_OPEN && s->kind == HS_FDK_SOCKET)
				memcpy(s->path, text, sizeof s->path);
			release(s, q);
		}
		hs_leave(t);
	}
	errno = e;
}

/*
 * fd is a copy of old (dup, dup2, dup3, F_DUPFD): the kind and description
 * are old's.  replaces: dup2/dup3 closed what fd held first (recorded now:
 * the number was never free in between).
 */
static inline __attribute__((always_inline)) void duplicated(int old, int fd, int cloexec, unsigned call, int replaces,
								 uint64_t site)
{
	int e = errno;
	struct hs_tls *t = hs_enter();
	if (t) {
		struct hs_fd *o = slot_of(old);
		char text[HS_FD_PATH_MAX];
		struct birth b = {.call = (uint8_t)call, .flags = cloexec ? HS_FDF_CLOEXEC : 0, .path = text};
		uint32_t stack = fd_stack(t, site);
		uint64_t now = fd_clock(t);
		size_t n;
		struct hs_fd_pre p;
		if (replaces)
			closing(t, fd, call, stack, now, &p);
		/* relaxed copy of old's description: a torn one only spoils it */
		n = cat(text, 0, "dup of fd ");
		n = cat_num(text, n, (uint64_t)old);
		if (o && o->state == HS_FDS_OPEN) {
			char src[HS_FD_PATH_MAX];
			memcpy(src, o->path, sizeof src);
			src[sizeof src - 1] = '\0';
			b.kind = o->kind;
			if (src[0]) {
				n = cat(text, n, ": ");
				cat(text, n, src);
			}
		}
		created(t, fd, &b, stack, now);
		hs_leave(t);
	}
	errno = e;
}

int hs_fd_duplicated(int fd, int old, int cloexec, unsigned call, int replaces, uint64_t site)
{
	if (fd >= 0 && hs_fd_on())
		duplicated(old, fd, cloexec, call, replaces, site);
	return fd;
}

/* F_SETFD: the close-on-exec flag of fd's open generation. */
static void set_cloexec(int fd, int on)
{
	struct hs_tls *t = hs_enter();
	if (t) {
		struct hs_fd *s = slot_of(fd);
		uint32_t q;
		if (s && claim(s, &q)) {
			if (s->state == HS_FDS_OPEN)
				s->flags = on ? s->flags | HS_FDF_CLOEXEC : s->flags & ~HS_FDF_CLOEXEC;
			release(s, q);
		}
		hs_leave(t);
	}
}

int hs_fd_after_fcntl(int rc, int fd, int cmd, void *arg, uint64_t site)
{
	if (rc < 0 || !hs_fd_on())
		return rc;
	if (cmd == F_DUPFD || cmd == F_DUPFD_CLOEXEC) {
		duplicated(fd, rc, cmd == F_DUPFD_CLOEXEC, HS_FDC_FCNTL_DUPFD, 0, site);
	} else if (cmd == F_SETFD) {
		int e = errno;
		set_cloexec(fd, (int)(intptr_t)arg & FD_CLOEXEC);
		errno = e;
	}
	return rc;
}

/* ---- the interceptors' entries: objects that carry their generation ---------------- */

/*
 * An object (a FILE, a DIR, an owner tag) takes over fd's open generation:
 * fdopen, fdopendir, heisen_fd_set_owner.  A number heisen never saw open
 * (but the call proved open) becomes an unseen generation first.  Returns 0,
 * or -1 when fd has no slot.
 */
static int take_over(struct hs_tls *t, int fd, uint64_t owner, uint32_t owner_flag, unsigned call, uint64_t site)
{
	struct hs_fd *s = slot_of(fd);
	struct hs_fd_event e;
	uint32_t stack, q;
	uint64_t now;
	if (!s)
		return -1;
	stack = fd_stack(t, site);
	now = fd_clock(t);
	if (!claim(s, &q))
		return -1;
	if (s->state != HS_FDS_OPEN)
		unseen_generation(s, fd, now, now);
	s->owner = owner;
	s->flags = (s->flags & ~HS_FDF_OWNERS) | owner_flag;
	event_init(&e, t, fd, s->gen, HS_FDE_OWNER, call, stack, now);
	e.owner = owner;
	e.kind = s->kind;
	e.flags = s->flags;
	event_add(s, &e);
	release(s, q);
	return 0;
}

FILE *hs_fd_fopened(FILE *fp, const char *path, const char *mode, unsigned call, uint64_t site)
{
	int e = errno, fd;
	struct hs_tls *t;
	if (!fp || !hs_fd_on() || (fd = fileno_unlocked(fp)) < 0 || !(t = hs_enter())) {
		errno = e;
		return fp;
	}
	{
		struct birth b = {.kind = HS_FDK_FILE, .call = (uint8_t)call, .owner = (uint64_t)(uintptr_t)fp,
				  .flags = HS_FDF_OWNER_FILE | (mode && strchr(mode, 'e') ? HS_FDF_CLOEXEC : 0),
				  .path = path ? path : "(reopened)"};
		created(t, fd, &b, fd_stack(t, site), fd_clock(t));
	}
	hs_leave(t);
	errno = e;
	return fp;
}

DIR *hs_fd_dir_opened(DIR *d, const char *path, uint64_t site)
{
	int fd;
	if (d && hs_fd_on() && (fd = dirfd(d)) >= 0) {
		struct birth b = {.kind = HS_FDK_DIR, .call = HS_FDC_OPENDIR, .owner = (uint64_t)(uintptr_t)d,
				  .flags = HS_FDF_OWNER_DIR | HS_FDF_CLOEXEC};
		b.at = 1;
		b.dirfd = AT_FDCWD;
		b.path = path;
		note_created(fd, &b, site);
	}
	return d;
}

void *hs_fd_taken_over(void *obj, int fd, uint32_t owner_flag, unsigned call, uint64_t site)
{
	struct hs_tls *t;
	if (obj && hs_fd_on()) {
		int e = errno;
		if ((t = hs_enter()) != NULL) {
			take_over(t, fd, (uint64_t)(uintptr_t)obj, owner_flag, call, site);
			hs_leave(t);
		}
		errno = e;
	}
	return obj;
}

/* ---- the interceptors' entries: closing ------------------------------------------------ */

/*
 * Before an object's number is closed by its close call (fclose, closedir,
 * freopen): the ownership check and the record.  c->fd is the number, or
 * -1 when nothing was recorded.  Keeps errno.
 */
static void object_close_begin(struct hs_fd_closing *c, int fd, uint64_t owner, uint32_t owner_flag, unsigned rule,
			       unsigned call, uint64_t site)
{
	int e = errno;
	struct hs_tls *t;
	memset(c, 0, sizeof *c);
	c->fd = -1;
	c->site = site;
	c->call = call;
	c->object = 1;
	if (fd < 0 || !(t = hs_enter())) {
		errno = e;
		return;
	}
	c->fd = fd;
	c->stack = fd_stack(t, site);
	c->now = fd_clock(t);
	object_closing(t, fd, owner, owner_flag, rule, call, c->stack, c->now, &c->p);
	hs_leave(t);
	errno = e;
}

void hs_fd_file_close_begin(struct hs_fd_closing *c, FILE *fp, unsigned call, uint64_t site)
{
	if (fp && hs_fd_on()) {
		object_close_begin(c, fileno_unlocked(fp), (uint64_t)(uintptr_t)fp, HS_FDF_OWNER_FILE, HS_FD_RULE_FILE,
				   call, site);
		return;
	}
	c->fd = -1;
	c->now = 0;
	c->object = 1;
}

void hs_fd_dir_close_begin(struct hs_fd_closing *c, DIR *d, uint64_t site)
{
	if (hs_fd_on()) {
		object_close_begin(c, dirfd(d), (uint64_t)(uintptr_t)d, HS_FDF_OWNER_DIR, HS_FD_RULE_DIR,
				   HS_FDC_CLOSEDIR, site);
		return;
	}
	c->fd = -1;
	c->now = 0;
	c->object = 1;
}

static inline __attribute__((always_inline)) void close_begin(struct hs_fd_closing *c, int fd, unsigned call,
								 uint64_t site)
{
	struct hs_tls *t;
	int e;
	memset(&c->p, 0, sizeof c->p);
	c->fd = fd;
	c->site = site;
	c->call = call;
	c->stack = 0;
	c->now = 0;
	c->object = 0;
	if (hs_fd_on() && (t = hs_enter()) != NULL) {
		struct hs_fd_pre *p = &c->p;
		e = errno;
		c->stack = fd_stack(t, site);
		c->now = fd_clock(t);
		closing(t, fd, call, c->stack, c->now, p);
		if (call == HS_FDC_CLOSE && p->state == HS_FDS_OPEN && (p->flags & HS_FDF_OWNERS))
			owned_by_tag_closed(t, fd, p, c->stack,
					    (p->flags & HS_FDF_OWNER_TAG)    ? HS_FD_RULE_OWNER
					    : (p->flags & HS_FDF_OWNER_FILE) ? HS_FD_RULE_FILENO
									     : HS_FD_RULE_DIRFD);
		hs_leave(t);
		errno = e;
	}
}

static inline __attribute__((always_inline)) int close_end(struct hs_fd_closing *c, int rc)
{
	struct hs_tls *t;
	int e;
	if (c->object) {
		if (c->fd < 0)
			return rc;
		e = errno;
		if ((t = hs_enter()) != NULL) {
			after_close(t, c->fd, c->call, c->stack, c->now, c->site, &c->p, rc != 0 ? -1 : 0, e);
			hs_leave(t);
		}
		errno = e;
		return rc;
	}
	if (c->now && rc == 0 && c->p.state == HS_FDS_OPEN) {
		/* the common case: it closed what the table said was open; only the
		 * sweep detector's note (this thread's own state) changes */
		hs_tls.fd_last = c->fd;
		hs_tls.fd_last_site = c->site;
	} else if (c->now) {
		e = errno;
		if ((t = hs_enter()) != NULL) {
			after_close(t, c->fd, c->call, c->stack, c->now, c->site, &c->p, rc, rc ? e : 0);
			hs_leave(t);
		}
		errno = e;
	}
	return rc;
}

int hs_fd_close_end(struct hs_fd_closing *c, int rc)
{
	return close_end(c, rc);
}

/* close(): record, close once (never retried on EINTR: the number may
 * already be someone else's), look at the result.  close_begin and
 * close_end written out for close() alone: its common case, a number the
 * table says open closed with success, touches only this thread's state
 * after the call.  In close itself (below) and in hs_fd_close. */
static inline __attribute__((always_inline)) int close_record(int fd, unsigned call, uint64_t site)
{
	struct hs_tls *t;
	struct hs_fd_pre p;
	uint32_t stack;
	uint64_t now;
	int e, rc, *ep, one;

	/* hs_fork_pending is 1 only while hs_recording is 0 (init.c atfork_child):
	 * its line is read only then */
	if (HS_UNLIKELY(!__atomic_load_n(&hs_recording, __ATOMIC_RELAXED)) &&
	    HS_UNLIKELY(__atomic_load_n(&hs_fork_pending, __ATOMIC_RELAXED)) && hs_fork_close(fd, &rc))
		return rc; /* a fork child before its first event (init.c) */
	if (!hs_fd_on())
		return HS_REAL(close)(fd);
	ep = fd_errno(&hs_tls);
	e = *ep;
	if (!(t = hs_enter()))
		return hs_fd_hot.real_close(fd);
	stack = fd_stack(t, site);
	now = fd_clock(t);
	one = one_thread(); /* for the record and the call: only this thread could start another */
	closing_one(t, fd, call, stack, now, &p, one);
	/* the flags first: the common path falls through after one test */
	if (HS_UNLIKELY(p.flags & HS_FDF_OWNERS) && call == HS_FDC_CLOSE && p.state == HS_FDS_OPEN)
		owned_by_tag_closed(t, fd, &p, stack,
				    (p.flags & HS_FDF_OWNER_TAG)    ? HS_FD_RULE_OWNER
				    : (p.flags & HS_FDF_OWNER_FILE) ? HS_FD_RULE_FILENO
								    : HS_FD_RULE_DIRFD);
	hs_leave(t);
	*ep = e;
	/* mode is ON (hs_fd_on above, acquire): real_close and raw_calls are set */
	rc = HS_LIKELY(hs_fd_hot.raw_calls && one) ? sys_result(fd_sys(SYS_close, fd, 0, 0, 0), ep)
						   : hs_fd_hot.real_close(fd);
	if (HS_LIKELY(rc == 0 && p.state == HS_FDS_OPEN)) {
		/* it closed what the table said was open: only the sweep detector's
		 * note (this thread's own state) changes */
		t->fd_last = fd;
		t->fd_last_site = site;
		return rc;
	}
	e = errno;
	if ((t = hs_enter()) != NULL) {
		after_close(t, fd, call, stack, now, site, &p, rc, rc ? e : 0);
		hs_leave(t);
	}
	errno = e;
	return rc;
}

int hs_fd_close(int fd, unsigned call, uint64_t site)
{
	return close_record(fd, call, site);
}

/*
 * close: the interceptor and close_record in one frame, as open64 above
 * (the other interceptor outside fd_hooks.c).  libunwind's validation
 * pipe (VALIDATE_FD) closes nothing; faults.c and chaos.c: --fail close,
 * --chaos (an injected failure still closes).
 */
HS_EXPORT int close(int fd)
{
	if (HS_UNLIKELY(fd == VALIDATE_FD))
		return 0; /* libunwind closing the pipe it never had (fd_hooks.c, VALIDATE_FD) */
	HS_FAULT_CLOSE(fd, hs_fd_close(fd, HS_FDC_CLOSE, HS_FD_SITE()));
	return close_record(fd, HS_FDC_CLOSE, HS_FD_SITE());
}

/*
 * Every open generation of [first, last] is closed by this call (recorded
 * before it).  A number of the range whose generation heisen saw closed
 * (and not reused since) is closed again: a double close, as valgrind
 * reports for close_range — the kernel says nothing (close_range skips
 * closed numbers), so close_failed gets errno 0.  Numbers never seen
 * (a close-everything sweep after fork) are not.
 */
static void closing_range(unsigned first, unsigned last, uint64_t site)
{
	struct hs_tls *t = hs_enter();
	uint32_t cap, stack;
	uint64_t now;
	struct hs_fd_pre p;
	if (!t)
		return;
	cap = hs_seg.hdr->tables[HS_T_FDS].capacity;
	stack = fd_stack(t, site);
	now = fd_clock(t);
	/* only the blocks of slots this process wrote (shim.h): a close-everything
	   sweep touches no page of the table where nothing was ever recorded */
	for (uint32_t fd = first < cap ? first : cap; hs_fd_seen_next(&fd, cap);) {
		if (fd < first)
			fd = first;
		for (uint64_t end = ((uint64_t)fd | (HS_FD_SEEN_BLOCK - 1)) + 1; fd < end && fd <= last && fd < cap; fd++) {
			struct hs_fd *s = slot_of((int)fd);
			/* relaxed look first: most numbers of a range are not open */
			uint8_t state = s ? __atomic_load_n(&s->state, __ATOMIC_RELAXED) : HS_FDS_NONE;
			if (state == HS_FDS_OPEN)
				closing(t, (int)fd, HS_FDC_CLOSE_RANGE, stack, now, &p);
			else if (state == HS_FDS_CLOSED)
				close_failed(t, (int)fd, __atomic_load_n(&s->gen, __ATOMIC_RELAXED), HS_FDC_CLOSE_RANGE,
					     stack, now, 0, 0, 0);
		}
		if (fd > last)
			break;
	}
	hs_leave(t);
}

void hs_fd_range_closing(unsigned first, unsigned last, uint64_t site)
{
	int e = errno;
	if (hs_fd_on()) {
		closing_range(first, last, site);
		errno = e;
	}
}

int hs_fd_range_cloexec(int rc, unsigned first, unsigned last)
{
	int e = errno;
	if (rc == 0 && hs_fd_on()) {
		uint32_t cap = hs_recording ? hs_seg.hdr->tables[HS_T_FDS].capacity : 0;
		/* only the blocks of slots this process wrote: nothing is open elsewhere */
		for (uint32_t fd = first < cap ? first : cap; hs_fd_seen_next(&fd, cap);) {
			if (fd < first)
				fd = first;
			for (uint64_t end = ((uint64_t)fd | (HS_FD_SEEN_BLOCK - 1)) + 1; fd < end && fd <= last && fd < cap;
			     fd++)
				if (__atomic_load_n(&slot_of((int)fd)->state, __ATOMIC_RELAXED) == HS_FDS_OPEN)
					set_cloexec((int)fd, 1);
			if (fd > last)
				break;
		}
		errno = e;
	}
	return rc;
}

/* ---- the annotation API (heisen/heisen.h) ---------------------------------------- */

/* Owner 0 is "unowned" (fdsan's tag 0): fd's open generation loses its tag. */
static int untag(int fd)
{
	struct hs_fd *s = slot_of(fd);
	uint32_t q;
	if (!s)
		return -1;
	if (!claim(s, &q))
		return -1;
	if (s->state == HS_FDS_OPEN && (s->flags & HS_FDF_OWNER_TAG)) {
		s->flags &= ~HS_FDF_OWNER_TAG;
		s->owner = 0;
	}
	release(s, q);
	return 0;
}

HS_EXPORT int heisen_fd_set_owner(int fd, uint64_t owner)
{
	uint64_t site = HS_FD_SITE();
	struct hs_tls *t;
	int rc = -1, e = errno;
	if (!hs_fd_on() || !(t = hs_enter()))
		return -1;
	/* the kernel's word on whether fd is open, without the fcntl hook */
	if (hs_sys.fcntl(fd, F_GETFD, 0) < 0)
		e = EBADF;
	else if (owner == 0)
		rc = untag(fd);
	else if (take_over(t, fd, owner, HS_FDF_OWNER_TAG, HS_FDC_SET_OWNER, site) == 0)
		rc = 0;
	hs_leave(t);
	errno = e;
	return rc;
}

HS_EXPORT int heisen_fd_close_owned(int fd, uint64_t owner)
{
	uint64_t site = HS_FD_SITE();
	struct hs_fd_event ev[CHAIN_MAX], hist[CHAIN_MAX], fail;
	const struct hs_fd_event *mine = NULL, *cur;
	struct hs_finding f;
	struct hs_tls *t;
	struct hs_fd *s;
	uint32_t q, stack, gen;
	uint64_t now;
	unsigned n, m;
	int state;

	if (!hs_fd_on() || !(t = hs_enter()) || !(s = slot_of(fd))) {
		if (t)
			hs_leave(t);
		return HS_REAL(close)(fd);
	}
	if (!claim(s, &q)) {
		hs_leave(t);
		return hs_fd_close(fd, HS_FDC_CLOSE_OWNED, site);
	}
	state = s->state;
	gen = s->gen;
	if (state == HS_FDS_OPEN && (((s->flags & HS_FDF_OWNER_TAG) && s->owner == owner) ||
				     (owner == 0 && !(s->flags & HS_FDF_OWNER_TAG)))) {
		/* its owner's close, or an unowned number closed as unowned (tag 0, fdsan) */
		release(s, q);
		hs_leave(t);
		return hs_fd_close(fd, HS_FDC_CLOSE_OWNED, site);
	}
	/* not this owner's number (any more): record the attempt, do not close */
	stack = fd_stack(t, site);
	now = hs_now();
	event_init(&fail, t, fd, gen, HS_FDE_CLOSE_FAILED, HS_FDC_CLOSE_OWNED, stack, now);
	fail.err = EBADF;
	fail.owner = owner;
	fail.kind = s->kind;
	fail.flags = s->flags;
	event_add(s, &fail);
	n = chain(fd, s->last_event, ev, CHAIN_MAX);
	release(s, q);
	mine = owned_by(ev, n, owner, HS_FDF_OWNER_TAG, gen);
	cur = find_ev(ev, n, gen, HS_FDE_CREATE);
	finding_init(&f, HS_FIND_STALE_CLOSE, HS_FD_RULE_OWNER, fd, gen, EBADF);
	roles(&f, t->tid, stack, mine, cur);
	m = story(ev, n, mine ? mine->gen : gen, hist);
	fd_finding(t, &f, hist, m);
	hs_leave(t);
	errno = EBADF;
	return -1;
}

/* ---- start-up and fork --------------------------------------------------------------- */

/* The kind of an inherited fd, from its /proc/self/fd link. */
static unsigned kind_of_link(const char *l)
{
	if (!strncmp(l, "socket:", 7))
		return HS_FDK_SOCKET;
	if (!strncmp(l, "pipe:", 5))
		return HS_FDK_PIPE;
	if (!strcmp(l, "anon_inode:[eventfd]"))
		return HS_FDK_EVENTFD;
	if (!strcmp(l, "anon_inode:[eventpoll]"))
		return HS_FDK_EPOLL;
	if (!strcmp(l, "anon_inode:[timerfd]"))
		return HS_FDK_TIMERFD;
	if (!strcmp(l, "anon_inode:[signalfd]"))
		return HS_FDK_SIGNALFD;
	if (!strcmp(l, "anon_inode:inotify"))
		return HS_FDK_INOTIFY;
	if (!strncmp(l, "/memfd:", 7))
		return HS_FDK_MEMFD;
	if (l[0] == '/')
		return HS_FDK_FILE;
	return HS_FDK_UNKNOWN;
}

/* Mark fd as open when this image started: a generation inherited, not created. */
static void inherited(int fd, const char *link, int cloexec, uint64_t now)
{
	struct hs_fd *s = slot_of(fd);
	struct hs_fd_event e;
	uint32_t q;
	if (!s) {
		__atomic_add_fetch(&hs_seg.hdr->fd_beyond, 1, __ATOMIC_RELAXED);
		return;
	}
	if (!claim(s, &q))
		return;
	s->gen++;
	s->state = HS_FDS_OPEN;
	s->kind = (uint8_t)kind_of_link(link);
	s->call = HS_FDC_INHERITED;
	s->close_call = HS_FDC_NONE;
	s->flags = HS_FDF_INHERITED | (cloexec ? HS_FDF_CLOEXEC : 0);
	s->tid = 0;
	s->stack = 0;
	s->ts_ns = now;
	s->owner = 0;
	put_text(s->path, link);
	event_init(&e, NULL, fd, s->gen, HS_FDE_CREATE, HS_FDC_INHERITED, 0, now);
	e.kind = s->kind;
	e.flags = s->flags;
	memcpy(e.path, s->path, sizeof e.path);
	event_add(s, &e);
	release(s, q);
}

/* One entry of /proc/self/fd for scan_inherited. */
struct inherited_scan {
	int dfd;               /* the directory's own descriptor: not the program's */
	uint64_t now;
};

static int inherited_entry(void *arg, const char *name, unsigned type)
{
	const struct inherited_scan *sc = arg;
	char link[HS_FD_PATH_MAX * 4];
	long fd = 0, m;
	const char *c = name;
	(void)type;
	if (!*c)
		return 0;
	for (; *c >= '0' && *c <= '9' && fd < (1l << 30); c++)
		fd = fd * 10 + (*c - '0');
	if (*c || fd == sc->dfd)
		return 0; /* ".", "..", the scan's own descriptor */
	m = hs_sys.readlinkat(sc->dfd, name, link, sizeof link - 1);
	link[m > 0 ? m : 0] = '\0';
	inherited((int)fd, link, hs_sys.fcntl((int)fd, F_GETFD, 0) & FD_CLOEXEC, sc->now);
	return 0;
}

/*
 * The fds open at the start of this image (or in a fork child), from
 * /proc/self/fd, with the shim's own system calls only (hs_sys, hs_dir_each):
 * async-signal-safe.  When /proc/self/fd cannot be opened or read (no
 * /proc, a failed getdents64), the numbers not seen are not marked
 * inherited: a later close of one is an unseen generation's (after_close),
 * never a finding; the numbers seen before a failure are marked.
 */
#define SCAN_RING_AHEAD 3 /* 0, 1 and 2: what nearly every process inherits */
static void scan_inherited(void)
{
	struct inherited_scan sc = {.now = hs_now()};
	const struct hs_table *te = &hs_seg.hdr->tables[HS_T_FD_EVENTS];
	uint64_t head = __atomic_load_n(&hs_seg.hdr->fd_event_head, __ATOMIC_RELAXED);
	sc.dfd = hs_sys.open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0);
	if (sc.dfd < 0)
		return;
	/* the event ring's store for the first inherited fds' events in one
	   system call (they straddle a page in the default layout: two
	   MADV_POPULATE_WRITE otherwise); a failure is left to ring_commit,
	   which says it */
	if (te->capacity >= SCAN_RING_AHEAD && (head & (te->capacity - 1)) <= te->capacity - SCAN_RING_AHEAD)
		(void)hs_seg_commit(&hs_seg, te->offset + (head & (te->capacity - 1)) * te->entry_size,
				    (uint64_t)SCAN_RING_AHEAD * te->entry_size);
	hs_dir_each(sc.dfd, inherited_entry, &sc);
	hs_sys.close(sc.dfd);
}

/*
 * At the end of the process — exit (on_exit, before init.c's record of the
 * end) and _exit/_Exit (init.c's hooks, before the same record) — ask the
 * kernel about every number the table says is open (fcntl F_GETFD, a raw
 * system call).  One it says is closed (EBADF) was closed where heisen
 * does not look — libuv closes with syscall(SYS_close), Go and io_uring
 * with raw system calls — and is marked closed (close_call HS_FDC_GONE, no
 * stack), so that heisen-dump never calls it leaked.  One that is open
 * again under another generation heisen did not see cannot be told from
 * ours here: it stays ours.  Async-signal-safe (raw system calls, no
 * allocation, no lock: a slot claim spins a bounded time): _exit is called
 * from signal handlers and in fork children.  Nothing in a vfork child
 * (the segment is its parent's), nor when the thread is inside the shim.
 */
void hs_fds_verify_open(void)
{
	struct hs_tls *t = &hs_tls;
	uint32_t cap;
	uint64_t now;
	if (__atomic_load_n(&hs_fd_mode, __ATOMIC_ACQUIRE) != HS_FD_MODE_ON || !hs_seg.hdr ||
	    hs_seg.hdr->pid != (int32_t)hs_sys.getpid() || t->in_hook)
		return;
	t->in_hook = 1;
	cap = hs_seg.hdr->tables[HS_T_FDS].capacity;
	now = hs_now();
	/* only the blocks of slots this process wrote: the others hold nothing open
	   (and their pages stay untouched) */
	for (uint32_t fd = 0; hs_fd_seen_next(&fd, cap);) {
		for (uint32_t end = fd + HS_FD_SEEN_BLOCK; fd < end && fd < cap; fd++) {
			struct hs_fd *s = slot_of((int)fd);
			struct hs_fd_event e;
			uint32_t q;
			if (__atomic_load_n(&s->state, __ATOMIC_RELAXED) != HS_FDS_OPEN)
				continue;
			if (hs_sys.fcntl((int)fd, F_GETFD, 0) >= 0 || errno != EBADF || !claim(s, &q))
				continue;
			if (s->state == HS_FDS_OPEN) {
				s->state = HS_FDS_CLOSED;
				s->close_call = HS_FDC_GONE;
				s->close_tid = 0;
				s->close_stack = 0;
				s->close_ns = now;
				event_init(&e, NULL, (int)fd, s->gen, HS_FDE_CLOSE, HS_FDC_GONE, 0, now);
				e.kind = s->kind;
				e.flags = s->flags;
				e.owner = s->owner;
				event_add(s, &e);
				count(&hs_seg.hdr->fd_closed);
			}
			release(s, q);
		}
	}
	t->in_hook = 0;
}

static void verify_open_at_exit(int status, void *arg)
{
	(void)status;
	(void)arg;
	hs_fds_verify_open();
}

static void mark_header(void)
{
	struct hs_header *h = hs_seg.hdr;
	h->fd_stacks = full_stacks ? HS_HEAP_STACKS_FULL : HS_HEAP_STACKS_SITE;
	__atomic_or_fetch(&h->flags, HS_HDR_FDS, __ATOMIC_RELAXED);
}

void hs_fds_after_fork_child(void)
{
	if (__atomic_load_n(&hs_fd_mode, __ATOMIC_ACQUIRE) != HS_FD_MODE_ON || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	hs_tls.vfork_pid = 0;
	hs_tls.fd_last = -1;
	hs_fd_seen_clear(); /* the new segment's table is empty */
	mark_header();
	scan_inherited();
}

/* f is libc's own (libc.so.6's), not another interposer's: fd_sys.  The
 * object is glibc's _dl_find_object's (a lock-free search of the loaded
 * objects' ranges), not dladdr's, which also scans libc's ~3,000 symbols
 * for the nearest one (~90,000 instructions a call at every start). */
static int libc_own(void *f)
{
	struct dl_find_object o;
	const char *n, *b;
	if (!f || _dl_find_object(f, &o) != 0 || !o.dlfo_link_map || !(n = o.dlfo_link_map->l_name))
		return 0;
	b = strrchr(n, '/');
	return strcmp(b ? b + 1 : n, "libc.so.6") == 0;
}

HS_HIDDEN void hs_fds_init(void)
{
	uint8_t expect = HS_FD_MODE_UNKNOWN;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	if (!__atomic_compare_exchange_n(&hs_fd_mode, &expect, HS_FD_MODE_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	t->in_hook = 1;
	if (!hs_getenv_bool("HEISEN_FDS", 1)) { /* on unless HEISEN_FDS=0 */
		__atomic_store_n(&hs_fd_mode, HS_FD_MODE_OFF, __ATOMIC_RELEASE);
		t->in_hook = was;
		return;
	}
	static const char *const fd_stacks[] = {"site", "full"};
	full_stacks = (uint8_t)(hs_getenv_enum("HEISEN_FD_STACKS", fd_stacks, 2, 0) == 1);
	hs_fd_hot.tsc_ok = (uint8_t)tsc_invariant();
	hs_fd_hot.real_open64 = HS_REAL(open64);
	hs_fd_hot.real_close = HS_REAL(close);
#if defined(__x86_64__)
	hs_fd_hot.raw_calls = (uint8_t)(libc_own((void *)hs_fd_hot.real_open64) && libc_own((void *)hs_fd_hot.real_close));
#endif
	t->fd_last = -1;
	mark_header();
	scan_inherited();
	/* after init.c's on_exit: runs before it (handlers run in reverse) */
	on_exit(verify_open_at_exit, NULL);
	/* release: the settings above are visible to every hook that sees HS_FD_MODE_ON */
	__atomic_store_n(&hs_fd_mode, HS_FD_MODE_ON, __ATOMIC_RELEASE);
	t->in_hook = was;
}
