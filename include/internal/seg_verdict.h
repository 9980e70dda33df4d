/* SPDX-License-Identifier: MIT */
/*
 * internal/seg_verdict.h — is there anything in a session worth
 * heisen-dump's full reading?  A quick verdict from each segment's header
 * and the few table words the end-of-run decision needs; heisen-run asks
 * it at the end of a run (launcher/watchdog.c hr_final_report) so that a
 * clean session of hundreds of processes costs milliseconds, not a full
 * reading of every segment.  Not part of the installed API; any reader may
 * use it (heisen-dump's own checks of the header are the same code,
 * internal/seg_header.h).
 *
 * The verdict is one-sided: HS_QUICK_CLEAN only where heisen-dump's
 * analysis (dumper/analyze.c hs_analyze_stalled) can find nothing and
 * report no error; everything else is HS_QUICK_LOOK (read it all) or
 * HS_QUICK_BAD (a file heisen-dump names as unreadable).  A segment is
 * clean when:
 *   - it is a regular file whose header passes hs_header_check;
 *   - its process ended by itself: state EXITED (any status) or EXECED —
 *     never RUNNING (it may have vanished: killed, OOM), CRASHED, KILLED or
 *     SIGNALED;
 *   - its findings table is empty and nothing was dropped from any table
 *     nor from the findings (limit findings), it is not suspect and did
 *     not change its uid (HS_HDR_SUSPECT, HS_HDR_UID_CHANGED);
 *   - none of its thread slots waits for a lock or the GIL (a wait-for
 *     cycle in an ended process is a deadlock), and none holds what the
 *     reader would complain about (a wait kind it does not know, more
 *     held locks than HS_HELD_MAX);
 *   - an ended image that tracked fds (HS_HDR_FDS, state EXITED) left no
 *     HS_FD_LEAK_MIN fds open that it created at one site (the fd-leak
 *     rule's first test; analyze.c decides the rest), and no fd slot holds
 *     a state, kind or call the reader does not know;
 * and the session is clean when every segment in it is, no misnamed "*.seg"
 * is there (heisen-dump names it as an error) and no stall note ("*.stall",
 * left by a watchdog that saw a hang) is: the names and the opening are
 * internal/seg_dir.h's, as heisen-dump's.
 *
 * Costs: per segment one open, one fstat, one pread of the header, one
 * pread per used thread slot (slots are claimed in order: the first FREE
 * ends them) and preads of 16 KiB of fd slots up to hs_header.fd_max (the
 * shim's own clean-end test, shim/segment.c fds_left_open, reads the
 * same).  The first segment that is not clean ends the reading.  No
 * mapping, so a hole of a sparse segment is never touched.  What is not
 * read (rings, stacks, strings) cannot make the verdict LOOK: heisen-dump
 * reads those only to print a report, which a clean session does not get.
 * Design: docs/design.md "Processes".
 */
#ifndef HEISEN_INTERNAL_SEG_VERDICT_H
#define HEISEN_INTERNAL_SEG_VERDICT_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <heisen/format.h>
#include <internal/seg_dir.h>
#include <internal/seg_header.h>

/* fd-leak: a site with this many fds still open at the end (README "File
 * descriptors"; dumper/analyze.h uses it for its rule). */
#define HS_FD_LEAK_MIN 3
/* Far above any real HEISEN_THREADS / HEISEN_FD_NUMBERS: heisen-dump reads
 * no more (dumper/session.c) and complains beyond, an error. */
#define HS_THREADS_READ_MAX 16384u
#define HS_FDS_READ_MAX (1u << 20)

enum hs_quick {
	HS_QUICK_CLEAN = 0, /* nothing heisen-dump would report */
	HS_QUICK_LOOK = 1,  /* something to report, or something only a full reading can tell */
	HS_QUICK_BAD = 2,   /* a file heisen-dump cannot read: an error it names */
};

/* pread exactly n bytes at off; 0, or -1 (a short file reads short). */
static inline int hs_quick_pread(int fd, void *buf, size_t n, uint64_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = pread(fd, (char *)buf + got, n - got, (off_t)(off + got));
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		got += (size_t)k;
	}
	return 0;
}

static inline enum hs_quick hs_quick_say(enum hs_quick v, char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 4, 5)));
static inline enum hs_quick hs_quick_say(enum hs_quick v, char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	if (why && whylen)
		vsnprintf(why, whylen, fmt, ap);
	va_end(ap);
	return v;
}

/* The thread slots of h (see the top of this file). */
static inline enum hs_quick hs_quick_threads(int fd, const struct hs_header *h, char *why, size_t whylen)
{
	const struct hs_table *t = &h->tables[HS_T_THREADS];
	/* only its head is read: state, tid, name, times, generation, held_overflow, lock_seq,
	   held_count, wait_kind */
	struct hs_thread slot;
	const struct hs_thread *th = &slot;
	if (t->capacity > HS_THREADS_READ_MAX)
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "threads table capacity %u", t->capacity);
	for (uint32_t i = 0; i < t->capacity; i++) {
		if (hs_quick_pread(fd, &slot, offsetof(struct hs_thread, wait_addr), t->offset + (uint64_t)i * t->entry_size) != 0)
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "thread slot %u cannot be read", i);
		if (th->state == HS_THREAD_FREE)
			break; /* slots are claimed in order (shim/threads.c): none after */
		if (th->state != HS_THREAD_LIVE && th->state != HS_THREAD_EXITED)
			continue; /* not a slot heisen-dump reads */
		if (th->wait_kind > HS_WAIT_GIL || th->held_count > HS_HELD_MAX)
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "thread slot %u: wait kind %u, %u held", i,
					    th->wait_kind, th->held_count);
		if (th->state == HS_THREAD_LIVE && (th->wait_kind == HS_WAIT_LOCK || th->wait_kind == HS_WAIT_GIL))
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "thread %d waits for a lock", th->tid);
	}
	return HS_QUICK_CLEAN;
}

/* The fd slots of h, an ended image that tracked fds (see the top of this
 * file), read HS_QUICK_CHUNK bytes at a time: a forked child's table holds
 * its parent's numbers too (inherited), hundreds of slots. */
#define HS_QUICK_CHUNK 16384
static inline enum hs_quick hs_quick_fds(int fd, const struct hs_header *h, char *why, size_t whylen)
{
	const struct hs_table *t = &h->tables[HS_T_FDS];
	unsigned char buf[HS_QUICK_CHUNK] __attribute__((aligned(8)));
	struct hs_fd slot;
	const struct hs_fd *s = &slot;
	uint32_t stacks[64], counts[64], nsites = 0, per, have = 0, first = 0;
	/* numbers this image created are at most fd_max: the slots above hold only inherited ones */
	uint64_t end = (uint64_t)h->fd_max + 1;
	if (t->capacity > HS_FDS_READ_MAX)
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "fd table capacity %u", t->capacity);
	if (end > t->capacity)
		end = t->capacity;
	/* whole entries per chunk, or one entry's head at a time when they are larger */
	per = t->entry_size <= sizeof buf ? (uint32_t)(sizeof buf / t->entry_size) : 0;
	for (uint32_t i = 0; i < end; i++) {
		uint32_t k;
		uint64_t off = t->offset + (uint64_t)i * t->entry_size;
		if (per == 0) {
			if (hs_quick_pread(fd, &slot, offsetof(struct hs_fd, ts_ns), off) != 0)
				return hs_quick_say(HS_QUICK_LOOK, why, whylen, "fd slot %u cannot be read", i);
		} else {
			if (i >= first + have) {
				first = i;
				have = end - i < per ? (uint32_t)(end - i) : per;
				if (hs_quick_pread(fd, buf, (size_t)have * t->entry_size, off) != 0)
					return hs_quick_say(HS_QUICK_LOOK, why, whylen, "fd slot %u cannot be read", i);
			}
			memcpy(&slot, buf + (size_t)(i - first) * t->entry_size, offsetof(struct hs_fd, ts_ns));
		}
		if (s->gen == 0)
			continue;
		if (s->state > HS_FDS_CLOSED || s->kind >= HS_FDK_COUNT || s->call >= HS_FDC_COUNT ||
		    s->close_call >= HS_FDC_COUNT)
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "fd %u: state %u, kind %u, call %u/%u", i,
					    s->state, s->kind, s->call, s->close_call);
		if (s->state != HS_FDS_OPEN || i <= 2 || (s->flags & (HS_FDF_INHERITED | HS_FDF_UNSEEN)))
			continue;
		for (k = 0; k < nsites && stacks[k] != s->stack; k++)
			;
		if (k == nsites) {
			if (nsites == sizeof stacks / sizeof stacks[0])
				return hs_quick_say(HS_QUICK_LOOK, why, whylen, "fds left open at %u sites", nsites);
			stacks[nsites] = s->stack;
			counts[nsites++] = 0;
		}
		if (++counts[k] >= HS_FD_LEAK_MIN)
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "%u fds left open at one site",
					    HS_FD_LEAK_MIN);
	}
	return HS_QUICK_CLEAN;
}

/*
 * The verdict on one segment file, open as fd (read access; nothing is
 * mapped, the position is not used).  HS_QUICK_BAD and HS_QUICK_LOOK say
 * why in why[whylen] (may be NULL): for BAD, heisen-dump's own words.
 */
static inline enum hs_quick hs_seg_quick(int fd, char *why, size_t whylen)
{
	struct stat st;
	struct hs_header raw, h = {0};
	uint64_t avail;
	char err[200];
	unsigned state;
	enum hs_quick v;
	if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode))
		return hs_quick_say(HS_QUICK_BAD, why, whylen, "not a regular file");
	avail = (uint64_t)st.st_size < sizeof raw ? (uint64_t)st.st_size : sizeof raw;
	if (avail && hs_quick_pread(fd, &raw, (size_t)avail, 0) != 0)
		return hs_quick_say(HS_QUICK_BAD, why, whylen, "cannot read: %s", strerror(errno ? errno : EIO));
	if (hs_header_check(avail ? (const unsigned char *)&raw : NULL, (uint64_t)st.st_size, &h, err, sizeof err) != 0)
		return hs_quick_say(HS_QUICK_BAD, why, whylen, "%s", err);
	state = HS_STATE_OF(h.state);
	if (state != HS_STATE_EXITED && state != HS_STATE_EXECED)
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "pid %d: state %u", h.pid, state);
	if (h.tables[HS_T_FINDINGS].count || h.findings_dropped)
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "pid %d: %u findings, %llu dropped", h.pid,
				    h.tables[HS_T_FINDINGS].count, (unsigned long long)h.findings_dropped);
	if (h.flags & (HS_HDR_SUSPECT | HS_HDR_UID_CHANGED))
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "pid %d: flags %#x", h.pid, h.flags);
	for (int t = 0; t < HS_T_COUNT; t++)
		if (h.tables[t].dropped)
			return hs_quick_say(HS_QUICK_LOOK, why, whylen, "pid %d: table %s dropped %u", h.pid,
					    hs_table_name(t), h.tables[t].dropped);
	if ((v = hs_quick_threads(fd, &h, why, whylen)) != HS_QUICK_CLEAN)
		return v;
	if ((h.flags & HS_HDR_FDS) && state == HS_STATE_EXITED)
		return hs_quick_fds(fd, &h, why, whylen);
	return HS_QUICK_CLEAN;
}

/*
 * The verdict on the session directory dirfd: CLEAN when each of its
 * segments (internal/seg_dir.h, the names heisen-dump reads) is, else
 * the verdict on the first one that is not, with its reason in
 * why[whylen] as "NAME: reason"; LOOK when a stall note is there or the
 * directory cannot be listed.  *nsegs: the segments judged (all of them
 * when CLEAN; no segment at all is CLEAN).
 */
static inline enum hs_quick hs_session_quick(int dirfd, size_t *nsegs, char *why, size_t whylen)
{
	enum hs_quick v = HS_QUICK_CLEAN;
	char one[256];
	struct hs_seg_dirent e;
	struct stat st;
	DIR *d = hs_seg_dir_open(dirfd);
	*nsegs = 0;
	if (why && whylen)
		why[0] = '\0';
	if (!d)
		return hs_quick_say(HS_QUICK_LOOK, why, whylen, "cannot list the session: %s", strerror(errno));
	while (v == HS_QUICK_CLEAN && hs_seg_dir_next(d, &e)) {
		if (e.kind == HS_NAME_STALL) {
			v = hs_quick_say(HS_QUICK_LOOK, why, whylen, "%s: a stall note", e.name);
			continue;
		}
		if (e.kind == HS_NAME_MISNAMED) {
			v = hs_quick_say(HS_QUICK_BAD, one, sizeof one, "%s", HS_SEG_MISNAMED_MSG);
		} else {
			/* the one way a segment is opened (seg_dir.h): a FIFO does not block */
			int sfd = hs_seg_openat(dirfd, e.name, O_RDONLY, &st, one, sizeof one);
			if (sfd >= 0) {
				v = hs_seg_quick(sfd, one, sizeof one);
				close(sfd);
			} else {
				v = HS_QUICK_BAD;
			}
		}
		(*nsegs)++;
		if (v != HS_QUICK_CLEAN)
			hs_quick_say(v, why, whylen, "%s: %s", e.name, one);
	}
	closedir(d);
	return v;
}

#endif
