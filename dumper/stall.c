/* SPDX-License-Identifier: MIT */
/*
 * dumper/stall.c — hang snapshots from the outside (see stall.h).  A
 * snapshot request is a queued signal to one thread, so it reaches threads
 * blocked anywhere — a lock, read(), poll(), a futex in a library — and
 * the thread records its own stack in its slot (shim/signals.c).  Progress
 * is what heisen-run's watchdog measures too, the same code
 * (internal/still.h): ring records, CPU time and, for a thread, the
 * system call it is in; a process blocked everywhere moves none.  The per-thread hang rule
 * (hs_judge_still) judges, from /proc and without ptrace-stopping anyone,
 * what each thread that stopped moving waits for: a busy thread does not
 * hide a stuck one, and a wait for the outside world or another live
 * process is not a hang.
 * Design: docs/design.md "Hangs"; docs/interfaces.md "Python and the GIL".
 */
#include "stall.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/sock_diag.h>
#include <linux/unix_diag.h>
#include <sys/socket.h>

#include <internal/proc_stat.h>
#include <internal/seg_rings.h>
#include <internal/snapshot_request.h>
#include <internal/still.h>

/*
 * One item of a --stall or --still list at c: "PID:SECONDS", or with tid
 * "PID/TID:SECONDS" (pid and tid 1..2^30, seconds 0..1e9).  Returns where
 * the next item starts (past its comma, or at the end), NULL when malformed.
 */
static const char *parse_still_item(const char *c, int with_tid, int32_t *pid, int32_t *tid, double *sec)
{
	char *end;
	long v = strtol(c, &end, 10);
	if (end == c || *end != (with_tid ? '/' : ':') || v <= 0 || v > 0x3fffffff)
		return NULL;
	*pid = (int32_t)v;
	if (with_tid) {
		c = end + 1;
		v = strtol(c, &end, 10);
		if (end == c || *end != ':' || v <= 0 || v > 0x3fffffff)
			return NULL;
		*tid = (int32_t)v;
	}
	c = end + 1;
	*sec = strtod(c, &end);
	if (end == c || (*end && *end != ',') || !(*sec >= 0) || *sec > 1e9)
		return NULL;
	return *end ? end + 1 : end;
}

/* Items in a comma-separated list. */
static size_t list_items(const char *arg)
{
	size_t k = 1;
	for (const char *q = arg; *q; q++)
		k += *q == ',';
	return k;
}

int hs_stalls_parse(const char *arg, struct hs_stall **v, size_t *n)
{
	size_t k = list_items(arg), have = *n;
	struct hs_stall *nv;
	const char *c = arg;
	if (!(nv = realloc(*v, (have + k) * sizeof *nv)))
		return -1;
	*v = nv;
	for (size_t i = 0; i < k; i++) {
		int32_t pid, tid;
		double sec;
		if (!(c = parse_still_item(c, 0, &pid, &tid, &sec)))
			return -1;
		nv[have + i] = (struct hs_stall){.pid = pid, .seconds = sec};
	}
	*n = have + k;
	return 0;
}

const char *hs_no_snapshot_reason(const struct hs_proc *p, const struct hs_tsnap *t)
{
	static char why[200];
	int sig = p->seg.hdr.snapshot_signal, how;
	if (sig <= 0 || !hs_proc_alive(p))
		return NULL;
	how = hs_thread_takes_signal(p->seg.hdr.pid, t->t.tid, sig);
	if (how == HS_TAKES_BLOCKED)
		snprintf(why, sizeof why,
			 "it blocks SIGRTMAX-%d, heisen's snapshot signal (a thread that takes its signals itself: "
			 "sigwait, signalfd), so it was not asked; its stack is unknown",
			 SIGRTMAX - sig);
	else if (how == HS_TAKES_WAITING)
		snprintf(why, sizeof why,
			 "it waits for signals itself (sigwait, sigwaitinfo, sigtimedwait) and could take SIGRTMAX-%d, "
			 "heisen's snapshot signal, as its own, so it was not asked; its stack is unknown",
			 SIGRTMAX - sig);
	else
		return NULL;
	return why;
}

unsigned hs_snapshot_proc(const struct hs_proc *p)
{
	char why[200];
	if (!p->seg.hdr.snapshot_signal)
		return 0;
	if (hs_snapshot_target_verify(p->seg.hdr.pid, p->seg.hdr.start_ticks, p->seg.owner_uid, why, sizeof why) != 0) {
		if (strcmp(why, "gone") != 0)
			fprintf(stderr, "heisen-dump: %s: not asking pid %d for a snapshot: %s\n", p->seg.name,
				(int)p->seg.hdr.pid, why);
		return 0;
	}
	return hs_snapshot_request_all(p->seg.hdr.pid, hs_snapshot_signal(), hs_snapshot_value(p->seg.hdr.start_real_ns));
}

/* utime + stime of pid in clock ticks (internal/proc_stat.h), 0 when it cannot be read. */
static uint64_t cpu_ticks(int32_t pid)
{
	struct hs_proc_stat ps;
	return hs_proc_stat_read(pid, 0, &ps) == 0 ? ps.utime + ps.stime : 0;
}

uint64_t hs_progress(const struct hs_proc *p)
{
	return hs_still_proc_progress(hs_seg_events(&p->seg), cpu_ticks(p->seg.hdr.pid));
}

static void sleep_ms(long ms)
{
	struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) != 0 && errno == EINTR)
		;
}

int hs_snapshot_session(struct hs_session *s, double sample_s, int wait_ms, struct hs_stall **stalls,
			size_t *nstalls)
{
	uint64_t *before = calloc(s->nprocs + 1, sizeof *before);
	int rc = 0;
	if (!before)
		return -1;
	for (size_t i = 0; i < s->nprocs; i++)
		if (hs_proc_alive(&s->procs[i]))
			before[i] = hs_progress(&s->procs[i]);
	sleep_ms((long)(sample_s * 1000));
	for (size_t i = 0; i < s->nprocs && rc == 0; i++) {
		struct hs_proc *p = &s->procs[i];
		char arg[64];
		if (!hs_proc_alive(p) || hs_progress(p) != before[i])
			continue;
		snprintf(arg, sizeof arg, "%d:%.3f", (int)p->seg.hdr.pid, sample_s);
		rc = hs_stalls_parse(arg, stalls, nstalls);
	}
	/* after the sample: a snapshot is progress too */
	for (size_t i = 0; i < s->nprocs; i++)
		if (hs_proc_alive(&s->procs[i]))
			hs_snapshot_proc(&s->procs[i]);
	sleep_ms(wait_ms);
	free(before);
	return rc;
}

int hs_stalls_noted(struct hs_session *s, struct hs_stall **stalls, size_t *nstalls)
{
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		char path[4096], buf[128];
		unsigned long long since;
		double sec;
		struct stat st;
		size_t len = strlen(p->seg.name), k;
		ssize_t n;
		int fd;
		struct hs_stall *v;
		if (hs_proc_alive(p) || (p->pstate != HS_P_KILLED && p->pstate != HS_P_VANISHED) || len < 5)
			continue;
		for (k = 0; k < *nstalls && (*stalls)[k].pid != p->seg.hdr.pid; k++)
			;
		if (k < *nstalls)
			continue;
		snprintf(path, sizeof path, "%s/%.*s.stall", s->dir, (int)(len - 4), p->seg.name);
		/* O_NONBLOCK and a regular file only: a FIFO named so must not block */
		if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY)) < 0)
			continue;
		if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
			close(fd);
			continue;
		}
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n <= 0)
			continue;
		buf[n] = '\0';
		if (sscanf(buf, "%llu %lf", &since, &sec) != 2 || !(sec > 0) || sec > 1e9)
			continue;
		if (!(v = realloc(*stalls, (*nstalls + 1) * sizeof *v)))
			return -1;
		*stalls = v;
		v[*nstalls] = (struct hs_stall){.pid = p->seg.hdr.pid, .seconds = sec, .since_ns = since};
		(*nstalls)++;
	}
	return 0;
}

/* ---- the per-thread rule -------------------------------------------------- */

int hs_still_parse(const char *arg, struct hs_still **v, size_t *n)
{
	size_t k = list_items(arg), have = *n;
	struct hs_still *nv;
	const char *c = arg;
	if (!(nv = realloc(*v, (have + k) * sizeof *nv)))
		return -1;
	*v = nv;
	for (size_t i = 0; i < k; i++) {
		int32_t pid, tid;
		double sec;
		if (!(c = parse_still_item(c, 1, &pid, &tid, &sec)))
			return -1;
		nv[have + i] = (struct hs_still){.pid = pid, .tid = tid, .seconds = sec};
	}
	*n = have + k;
	return 0;
}

/* Who holds which pipe or socket inode: every process's fd table, once. */
struct holder {
	uint64_t ino;
	int32_t pid;
};

struct judge {
	struct holder *h;      /* sorted by inode */
	size_t nh;
	bool scanned;
	uint64_t (*peer)[2];   /* unix socket inode -> its peer's inode, sorted */
	size_t npeer;
	bool peers_read;
};

static int by_ino(const void *a, const void *b)
{
	const struct holder *x = a, *y = b;
	return (x->ino > y->ino) - (x->ino < y->ino);
}

static int by_first(const void *a, const void *b)
{
	const uint64_t *x = a, *y = b;
	return (x[0] > y[0]) - (x[0] < y[0]);
}

/* "pipe:[123]" / "socket:[123]": 'p' or 's' and the inode, else 0. */
static char link_ino(const char *link, uint64_t *ino)
{
	char kind = strncmp(link, "pipe:[", 6) == 0 ? 'p' : strncmp(link, "socket:[", 8) == 0 ? 's' : 0;
	if (kind)
		*ino = strtoull(strchr(link, '[') + 1, NULL, 10);
	return kind;
}

static ssize_t fd_link(int32_t pid, int fd, char *buf, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)pid, fd);
	ssize_t n = readlink(path, buf, len - 1);
	buf[n > 0 ? n : 0] = '\0';
	return n;
}

static void scan_holders(struct judge *j)
{
	DIR *d = opendir("/proc");
	struct dirent *de;
	size_t cap = 0;
	j->scanned = true;
	if (!d)
		return;
	while ((de = readdir(d))) {
		long pid = strtol(de->d_name, NULL, 10);
		char path[64], link[128];
		DIR *fdd;
		struct dirent *fe;
		if (pid <= 0)
			continue;
		snprintf(path, sizeof path, "/proc/%ld/fd", pid);
		if (!(fdd = opendir(path)))
			continue;
		while ((fe = readdir(fdd))) {
			uint64_t ino;
			if (fe->d_name[0] == '.' || fd_link((int32_t)pid, atoi(fe->d_name), link, sizeof link) <= 0 ||
			    !link_ino(link, &ino))
				continue;
			if (j->nh == cap) {
				struct holder *v = realloc(j->h, (cap = cap ? cap * 2 : 1024) * sizeof *v);
				if (!v)
					break;
				j->h = v;
			}
			j->h[j->nh++] = (struct holder){ino, (int32_t)pid};
		}
		closedir(fdd);
	}
	closedir(d);
	if (j->nh)
		qsort(j->h, j->nh, sizeof *j->h, by_ino);
}

/* The peers of every unix socket (sock_diag, UDIAG_SHOW_PEER): what
 * /proc/net/unix does not say. */

static void read_unix_peers(struct judge *j)
{
	int fd = socket(AF_NETLINK, SOCK_DGRAM | SOCK_CLOEXEC, NETLINK_SOCK_DIAG);
	struct {
		struct nlmsghdr nlh;
		struct unix_diag_req req;
	} msg = {
		.nlh = {.nlmsg_len = sizeof msg, .nlmsg_type = SOCK_DIAG_BY_FAMILY,
			.nlmsg_flags = NLM_F_REQUEST | NLM_F_DUMP},
		.req = {.sdiag_family = AF_UNIX, .udiag_states = ~0u, .udiag_show = UDIAG_SHOW_PEER},
	};
	static char buf[32768];
	size_t cap = 0;
	j->peers_read = true;
	if (fd < 0)
		return;
	if (send(fd, &msg, sizeof msg, 0) != (ssize_t)sizeof msg) {
		close(fd);
		return;
	}
	for (int done = 0, rounds = 0; !done && rounds < 100000; rounds++) {
		ssize_t n = recv(fd, buf, sizeof buf, 0);
		if (n <= 0)
			break;
		for (struct nlmsghdr *h = (void *)buf; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
			if (h->nlmsg_type == NLMSG_DONE || h->nlmsg_type == NLMSG_ERROR) {
				done = 1;
				break;
			}
			struct unix_diag_msg *m = NLMSG_DATA(h);
			int len = (int)h->nlmsg_len - (int)NLMSG_LENGTH(sizeof *m);
			for (struct rtattr *a = (void *)(m + 1); RTA_OK(a, len); a = RTA_NEXT(a, len)) {
				if (a->rta_type != UNIX_DIAG_PEER)
					continue;
				if (j->npeer == cap) {
					uint64_t(*v)[2] = realloc(j->peer, (cap = cap ? cap * 2 : 256) * sizeof *v);
					if (!v)
						goto out;
					j->peer = v;
				}
				j->peer[j->npeer][0] = m->udiag_ino;
				j->peer[j->npeer++][1] = *(uint32_t *)RTA_DATA(a);
			}
		}
	}
out:
	close(fd);
	if (j->npeer)
		qsort(j->peer, j->npeer, sizeof *j->peer, by_first);
}

/* Add the holders of ino other than pid to peers; how many there were. */
static unsigned add_holders(struct judge *j, uint64_t ino, int32_t pid, int32_t *peers, uint32_t *np)
{
	unsigned others = 0;
	struct holder key = {ino, 0}, *h;
	if (!j->scanned)
		scan_holders(j);
	if (!j->nh || !(h = bsearch(&key, j->h, j->nh, sizeof *j->h, by_ino)))
		return 0;
	while (h > j->h && h[-1].ino == ino)
		h--;
	for (; h < j->h + j->nh && h->ino == ino; h++) {
		uint32_t k = 0;
		if (h->pid == pid)
			continue;
		others++;
		while (k < *np && peers[k] != h->pid)
			k++;
		if (k == *np && *np < HS_TJUDGE_PEERS)
			peers[(*np)++] = h->pid;
	}
	return others;
}

enum fdclass { FD_INTERNAL, FD_PEER, FD_EXTERNAL };

/* What fd of pid waits on: only this process (an eventfd; a pipe or a
 * unix socket whose both ends are here), other live processes (the other
 * end is theirs: peers), or the outside world (the network, a terminal, a
 * file, a timer, a listening socket). */
static enum fdclass classify_fd(struct judge *j, int32_t pid, int fd, int32_t *peers, uint32_t *np, char *desc,
				size_t len)
{
	char link[128];
	uint64_t ino, peer;
	char kind;
	if (fd_link(pid, fd, link, sizeof link) <= 0) {
		snprintf(desc, len, "fd %d", fd);
		return FD_EXTERNAL;
	}
	snprintf(desc, len, "fd %d (%.100s)", fd, link);
	if (strcmp(link, "anon_inode:[eventfd]") == 0)
		return FD_INTERNAL;
	if (!(kind = link_ino(link, &ino)))
		return FD_EXTERNAL;
	if (kind == 's') {
		uint64_t key[2] = {ino, 0}, (*e)[2];
		if (!j->peers_read)
			read_unix_peers(j);
		e = j->npeer ? bsearch(key, j->peer, j->npeer, sizeof *j->peer, by_first) : NULL;
		if (!e || !(peer = (*e)[1]))
			return FD_EXTERNAL; /* TCP, UDP, a listening or unconnected socket */
		if (add_holders(j, ino, pid, peers, np) + add_holders(j, peer, pid, peers, np))
			return FD_PEER;
		snprintf(desc, len, "fd %d (%.80s, a socket pair with both ends in this process)", fd, link);
		return FD_INTERNAL;
	}
	if (add_holders(j, ino, pid, peers, np))
		return FD_PEER;
	snprintf(desc, len, "fd %d (%.80s, both ends in this process)", fd, link);
	return FD_INTERNAL;
}

/* Read len bytes of pid's memory at addr (/proc/PID/mem: needs the same
 * rights as /proc/PID/task/TID/syscall). */
static int read_mem(int32_t pid, uint64_t addr, void *out, size_t len)
{
	char path[64];
	snprintf(path, sizeof path, "/proc/%d/mem", (int)pid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	ssize_t n = pread(fd, out, len, (off_t)addr);
	close(fd);
	return n == (ssize_t)len ? 0 : -1;
}

/* Is addr in a shared mapping of pid (another process may map it too)? */
static bool shared_mapping(int32_t pid, uint64_t addr)
{
	char path[64], line[512];
	bool shared = false;
	snprintf(path, sizeof path, "/proc/%d/maps", (int)pid);
	FILE *f = fopen(path, "re");
	if (!f)
		return false;
	while (fgets(line, sizeof line, f)) {
		unsigned long long lo, hi;
		char perms[8];
		if (sscanf(line, "%llx-%llx %7s", &lo, &hi, perms) == 3 && addr >= lo && addr < hi) {
			shared = perms[3] == 's';
			break;
		}
	}
	fclose(f);
	return shared;
}

/* The verdict over a set of fds waited on with no timeout. */
struct fdset_verdict {
	unsigned internal, peer, external;
	char first[160];
};

static void fdset_add(struct judge *j, int32_t pid, int fd, struct hs_tjudge *t, struct fdset_verdict *v)
{
	char desc[160];
	enum fdclass c = classify_fd(j, pid, fd, t->peers, &t->npeers, desc, sizeof desc);
	if (c == FD_INTERNAL)
		v->internal++;
	else if (c == FD_PEER)
		v->peer++;
	else
		v->external++;
	if (!v->first[0] || (c == FD_EXTERNAL && v->external == 1))
		snprintf(v->first, sizeof v->first, "%s", desc);
}

static void fdset_verdict(struct hs_tjudge *t, const char *call, const struct fdset_verdict *v)
{
	unsigned n = v->internal + v->peer + v->external;
	if (v->external || n == 0) {
		t->verdict = HS_TV_IDLE;
		snprintf(t->what, sizeof t->what, "%s on %.160s%s: waits for the outside world", call, v->first,
			 n > 1 ? " and others" : "");
	} else if (v->peer) {
		t->verdict = HS_TV_PEER;
		snprintf(t->what, sizeof t->what, "%s on %.160s%s: waits for another process", call, v->first,
			 n > 1 ? " and others" : "");
	} else {
		t->verdict = HS_TV_STUCK;
		snprintf(t->what, sizeof t->what, "%s on %.160s%s, with no timeout: only this process can make it ready",
			 call, v->first, n > 1 ? " and others" : "");
	}
}

#ifndef FUTEX_WAIT_BITSET
#define FUTEX_WAIT_BITSET 9
#endif

/* Judge the wait of thread t->tid of pid from the kernel's view of it. */
static void judge_syscall(struct judge *j, int32_t pid, struct hs_tjudge *t)
{
	char path[96], buf[512];
	long nr;
	unsigned long long a[6] = {0};
	snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)t->tid);
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, buf, sizeof buf - 1) : -1;
	int e = errno;
	if (fd >= 0)
		close(fd);
	if (n <= 0) {
		t->verdict = HS_TV_UNKNOWN;
		snprintf(t->what, sizeof t->what, "unknown wait: cannot read %.100s (%s)", path,
			 n < 0 ? strerror(e) : "empty");
		return;
	}
	buf[n] = '\0';
	if (strncmp(buf, "running", 7) == 0) {
		t->verdict = HS_TV_ACTIVE;
		snprintf(t->what, sizeof t->what, "running");
		return;
	}
	if (sscanf(buf, "%ld %llx %llx %llx %llx %llx %llx", &nr, &a[0], &a[1], &a[2], &a[3], &a[4], &a[5]) < 1 ||
	    nr < 0) {
		t->verdict = HS_TV_IDLE;
		snprintf(t->what, sizeof t->what, "blocked outside a system call");
		return;
	}
	struct fdset_verdict v = {0};
	switch (nr) {
	case SYS_futex: {
		unsigned op = (unsigned)a[1] & 127u;
		bool wait = op == 0 /* FUTEX_WAIT */ || op == FUTEX_WAIT_BITSET || op == 6 /* LOCK_PI */ ||
			    op == 11 /* WAIT_REQUEUE_PI */ || op == 13 /* LOCK_PI2 */;
		if (!wait || a[3]) {
			t->verdict = HS_TV_IDLE;
			snprintf(t->what, sizeof t->what, "futex 0x%llx with a timeout", a[0]);
		} else if (!(a[1] & 128u) && shared_mapping(pid, a[0])) {
			t->verdict = HS_TV_IDLE;
			snprintf(t->what, sizeof t->what,
				 "futex 0x%llx in shared memory: another process may wake it", a[0]);
		} else {
			t->verdict = HS_TV_STUCK;
			snprintf(t->what, sizeof t->what,
				 "futex 0x%llx (a lock, a join or a condition), with no timeout", a[0]);
		}
		return;
	}
#ifdef SYS_poll
	case SYS_poll:
#endif
	case SYS_ppoll: {
		bool timed = nr == SYS_ppoll ? a[2] != 0 : (int)a[2] >= 0;
		struct pollfd_raw {
			int32_t fd;
			int16_t events, revents;
		} pfd[64];
		size_t cnt = a[1] < 64 ? (size_t)a[1] : 64;
		const char *call = nr == SYS_ppoll ? "ppoll" : "poll";
		if (timed) {
			t->verdict = HS_TV_IDLE;
			snprintf(t->what, sizeof t->what, "%s with a timeout", call);
			return;
		}
		if (cnt && read_mem(pid, a[0], pfd, cnt * sizeof pfd[0]) != 0) {
			t->verdict = HS_TV_UNKNOWN;
			snprintf(t->what, sizeof t->what, "%s with no timeout on fds heisen cannot read (/proc/%d/mem: %s)",
				 call, (int)pid, strerror(errno));
			return;
		}
		for (size_t i = 0; i < cnt; i++)
			if (pfd[i].fd >= 0)
				fdset_add(j, pid, pfd[i].fd, t, &v);
		fdset_verdict(t, call, &v);
		return;
	}
#ifdef SYS_select
	case SYS_select:
#endif
	case SYS_pselect6: {
		uint64_t set[16] = {0};
		size_t words = ((size_t)(a[0] < 1024 ? a[0] : 1024) + 63) / 64;
		if (a[4]) {
			t->verdict = HS_TV_IDLE;
			snprintf(t->what, sizeof t->what, "select with a timeout");
			return;
		}
		for (int which = 1; which <= 2; which++) {
			if (!a[which] || !words)
				continue;
			if (read_mem(pid, a[which], set, words * 8) != 0) {
				t->verdict = HS_TV_UNKNOWN;
				snprintf(t->what, sizeof t->what, "select on fds heisen cannot read (/proc/%d/mem: %s)",
					 (int)pid, strerror(errno));
				return;
			}
			for (size_t b = 0; b < words * 64 && b < a[0]; b++)
				if (set[b / 64] >> (b % 64) & 1)
					fdset_add(j, pid, (int)b, t, &v);
		}
		fdset_verdict(t, "select", &v);
		return;
	}
#ifdef SYS_epoll_wait
	case SYS_epoll_wait:
#endif
	case SYS_epoll_pwait:
#ifdef SYS_epoll_pwait2
	case SYS_epoll_pwait2:
#endif
	{
		bool timed = (int)a[3] >= 0;
#ifdef SYS_epoll_pwait2
		if (nr == SYS_epoll_pwait2)
			timed = a[3] != 0;
#endif
		char info[256], line[256];
		if (timed) {
			t->verdict = HS_TV_IDLE;
			snprintf(t->what, sizeof t->what, "epoll_wait with a timeout");
			return;
		}
		snprintf(info, sizeof info, "/proc/%d/fdinfo/%d", (int)pid, (int)a[0]);
		FILE *f = fopen(info, "re");
		if (!f) {
			t->verdict = HS_TV_UNKNOWN;
			snprintf(t->what, sizeof t->what, "epoll_wait on fd %d whose set heisen cannot read", (int)a[0]);
			return;
		}
		while (fgets(line, sizeof line, f)) {
			int tfd;
			if (sscanf(line, "tfd: %d", &tfd) == 1)
				fdset_add(j, pid, tfd, t, &v);
		}
		fclose(f);
		fdset_verdict(t, "epoll_wait", &v);
		return;
	}
	case SYS_read:
	case SYS_readv:
	case SYS_recvfrom:
	case SYS_recvmsg:
	case SYS_write:
	case SYS_writev:
	case SYS_sendto:
	case SYS_sendmsg: {
		const char *call = nr == SYS_read ? "read" : nr == SYS_readv ? "readv" : nr == SYS_recvfrom ? "recvfrom"
				 : nr == SYS_recvmsg ? "recvmsg" : nr == SYS_write ? "write" : nr == SYS_writev ? "writev"
				 : nr == SYS_sendto ? "sendto" : "sendmsg";
		fdset_add(j, pid, (int)a[0], t, &v);
		fdset_verdict(t, call, &v);
		return;
	}
	case SYS_wait4:
	case SYS_waitid: {
		long want = nr == SYS_wait4 ? (long)(int)a[0] : a[0] == 1 /* P_PID */ ? (long)(int)a[1] : -1;
		if (want > 0) {
			t->peers[t->npeers++] = (int32_t)want;
		} else {
			/* any child: every child of every thread */
			char tp[64];
			snprintf(tp, sizeof tp, "/proc/%d/task", (int)pid);
			DIR *d = opendir(tp);
			struct dirent *de;
			while (d && (de = readdir(d))) {
				char cp[320];
				if (de->d_name[0] == '.')
					continue;
				snprintf(cp, sizeof cp, "%.64s/%.200s/children", tp, de->d_name);
				FILE *f = fopen(cp, "re");
				int c;
				while (f && fscanf(f, "%d", &c) == 1)
					if (t->npeers < HS_TJUDGE_PEERS)
						t->peers[t->npeers++] = c;
				if (f)
					fclose(f);
			}
			if (d)
				closedir(d);
		}
		t->verdict = t->npeers ? HS_TV_PEER : HS_TV_IDLE;
		snprintf(t->what, sizeof t->what, "%s for %s", nr == SYS_wait4 ? "wait4" : "waitid",
			 want > 0 ? "a child process" : "its child processes");
		return;
	}
	default:
		t->verdict = HS_TV_IDLE;
		snprintf(t->what, sizeof t->what, "system call %ld (a sleep, accept, a signal wait, ...)", nr);
		return;
	}
}

static const struct hs_still *still_of(const struct hs_still *v, size_t n, int32_t pid, int32_t tid)
{
	for (size_t i = 0; i < n; i++)
		if (v[i].pid == pid && v[i].tid == tid)
			return &v[i];
	return NULL;
}

/* One process under judgement. */
struct suspect {
	struct hs_proc *p;
	struct hs_tjudge *t;
	uint32_t nt;
	bool hung;
};

/*
 * The rule over one process.  The main thread stuck is a hang unless
 * another thread may still end its wait: one busy on the CPU (a join of a
 * thread that computes), or one waiting on a live process that does not
 * hang (a pool's result thread).  Otherwise every thread that is neither
 * active nor idle must be stuck, and one at least.
 */
static bool rule_says_hung(const struct suspect *s, const struct suspect *all, size_t n)
{
	unsigned stuck = 0, other = 0, wakers = 0;
	bool main_stuck = false;
	for (uint32_t i = 0; i < s->nt; i++) {
		const struct hs_tjudge *t = &s->t[i];
		bool st = t->verdict == HS_TV_STUCK;
		if (t->verdict == HS_TV_PEER && t->npeers) {
			/* stuck when every process it waits on hangs too */
			st = true;
			for (uint32_t k = 0; k < t->npeers && st; k++) {
				bool peer_hung = false;
				for (size_t q = 0; q < n; q++)
					if (all[q].p->seg.hdr.pid == t->peers[k])
						peer_hung = all[q].hung;
				st = peer_hung;
			}
			wakers += !st;
		}
		wakers += t->busy;
		if (st && t->tid == s->p->seg.hdr.pid)
			main_stuck = true;
		stuck += st;
		other += !st;
	}
	return (main_stuck && !wakers) || (stuck && !other);
}

/* utime + stime of one thread in clock ticks, and whether it is running
 * now (internal/proc_stat.h); 0 when it cannot be read. */
static uint64_t task_cpu(int32_t pid, int32_t tid, bool *running)
{
	struct hs_proc_stat ps;
	*running = false;
	if (hs_proc_stat_read(pid, tid, &ps) != 0)
		return 0;
	*running = ps.state == 'R';
	return ps.utime + ps.stime;
}

#define BUSY_SAMPLE_MS 200  /* how long the CPU time of a process's active threads is watched */
#define BUSY_LOOKS 11       /* how often its state is read meanwhile: at 0, 20, ... 200 ms */

/* peers: a process hangs when the ones it waits on do; the least fixpoint
 * (processes that only wait on each other in a ring are not called hung:
 * the rule says what it is sure of) */
static void fixpoint(struct suspect *sus, size_t ns)
{
	for (size_t round = 0, changed = 1; changed && round <= ns; round++) {
		changed = 0;
		for (size_t i = 0; i < ns; i++) {
			bool h = rule_says_hung(&sus[i], sus, ns);
			changed |= h != sus[i].hung;
			sus[i].hung = h;
		}
	}
}

/*
 * Mark the active threads of the hung suspects that are on the CPU.  A
 * process's active threads are busy together when, over BUSY_SAMPLE_MS,
 * they computed for half of it between them, or one of them at least was
 * runnable (state R) in at least half of BUSY_LOOKS reads spread over it:
 * four workers that share the GIL are each runnable a quarter of the time,
 * but one of them nearly always, and a thread that computes on a loaded
 * machine waits for a CPU in state R without the CPU time to show for it.
 * A thread that only wakes now and then (an I/O thread that retries a
 * connection every 100 ms) is runnable for an instant at most: one read
 * that happens to land on that instant does not make it busy.  (It did:
 * pyzmq's Context.term() beside its retrying I/O thread was cleared about
 * one time in ten.)  The marked threads are the active ones that ran or
 * were runnable during the look.  Returns whether one was found.
 */
static bool sample_busy(struct suspect *sus, size_t ns)
{
	uint64_t *before, *used;
	unsigned *runnable, *any_runnable;
	size_t total = 0, k = 0;
	bool any = false, r;
	long ticks_per_s = sysconf(_SC_CLK_TCK) > 0 ? sysconf(_SC_CLK_TCK) : 100;
	for (size_t i = 0; i < ns; i++)
		total += sus[i].hung ? sus[i].nt : 0;
	if (!total)
		return false;
	before = calloc(total, sizeof *before);
	used = calloc(total, sizeof *used);
	runnable = calloc(total, sizeof *runnable);
	any_runnable = calloc(ns, sizeof *any_runnable);
	if (!before || !used || !runnable || !any_runnable)
		goto out;
	for (unsigned look = 0; look < BUSY_LOOKS; look++) {
		if (look)
			sleep_ms(BUSY_SAMPLE_MS / (BUSY_LOOKS - 1));
		k = 0;
		for (size_t i = 0; i < ns; i++) {
			bool some = false;
			for (uint32_t q = 0; sus[i].hung && q < sus[i].nt; q++, k++) {
				uint64_t now = task_cpu(sus[i].p->seg.hdr.pid, sus[i].t[q].tid, &r);
				if (sus[i].t[q].verdict != HS_TV_ACTIVE)
					continue; /* a wait that lasted the timeout: not the waker */
				runnable[k] += r;
				some |= r;
				if (look == 0)
					before[k] = now;
				else if (look + 1 == BUSY_LOOKS)
					used[k] = now > before[k] ? now - before[k] : 0;
			}
			any_runnable[i] += some;
		}
	}
	k = 0;
	for (size_t i = 0; i < ns; i++) {
		uint64_t ticks = 0;
		size_t first = k;
		if (!sus[i].hung)
			continue;
		for (uint32_t q = 0; q < sus[i].nt; q++)
			ticks += used[first + q];
		double used_ms = (double)ticks * 1000.0 / (double)ticks_per_s;
		bool busy = used_ms >= BUSY_SAMPLE_MS / 2.0 || 2 * any_runnable[i] >= BUSY_LOOKS;
		for (uint32_t q = 0; q < sus[i].nt; q++, k++) {
			struct hs_tjudge *t = &sus[i].t[q];
			t->busy = busy && t->verdict == HS_TV_ACTIVE && (runnable[k] || used[k]);
			any |= t->busy;
		}
	}
out:
	free(before);
	free(used);
	free(runnable);
	free(any_runnable);
	return any;
}

int hs_judge_still(struct hs_session *s, const struct hs_still *still, size_t nstill, double timeout,
		   struct hs_stall **stalls, size_t *nstalls)
{
	struct judge j = {0};
	struct suspect *sus = calloc(s->nprocs + 1, sizeof *sus);
	size_t ns = 0;
	int rc = 0;
	if (!sus)
		return -1;
	for (size_t i = 0; i < s->nprocs && rc == 0; i++) {
		struct hs_proc *p = &s->procs[i];
		int32_t pid = p->seg.hdr.pid;
		bool any = false;
		char path[64];
		DIR *d;
		struct dirent *de;
		if (!hs_proc_alive(p))
			continue;
		for (size_t k = 0; k < nstill && !any; k++)
			any = still[k].pid == pid && hs_still_past(still[k].seconds, timeout);
		if (!any)
			continue;
		snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
		if (!(d = opendir(path)))
			continue;
		struct suspect *x = &sus[ns++];
		size_t cap = 0;
		x->p = p;
		while ((de = readdir(d))) {
			long tid = strtol(de->d_name, NULL, 10);
			const struct hs_still *st;
			struct hs_tjudge *t;
			if (tid <= 0)
				continue;
			if (x->nt == cap) {
				struct hs_tjudge *v = realloc(x->t, (cap = cap ? cap * 2 : 16) * sizeof *v);
				if (!v) {
					rc = -1;
					break;
				}
				x->t = v;
			}
			t = &x->t[x->nt++];
			*t = (struct hs_tjudge){.tid = (int32_t)tid};
			st = still_of(still, nstill, pid, (int32_t)tid);
			if (!st || !hs_still_past(st->seconds, timeout)) {
				t->verdict = HS_TV_ACTIVE;
				snprintf(t->what, sizeof t->what, "made progress within the last %.1f s", timeout);
				continue;
			}
			t->still_seconds = st->seconds;
			const struct hs_tsnap *ts = hs_proc_thread(p, (int32_t)tid);
			if (ts && (ts->t.wait_kind == HS_WAIT_LOCK || ts->t.wait_kind == HS_WAIT_GIL)) {
				t->verdict = HS_TV_STUCK;
				snprintf(t->what, sizeof t->what, "waits for %s",
					 ts->t.wait_kind == HS_WAIT_GIL ? "the GIL" : "a lock");
				continue;
			}
			judge_syscall(&j, pid, t);
		}
		closedir(d);
	}
	/* first without asking who is on the CPU; then, for the processes that
	 * would hang, whether an active thread is busy (it may end the main
	 * thread's wait), and again: being busy only ever clears a hang */
	fixpoint(sus, ns);
	if (sample_busy(sus, ns)) {
		for (size_t i = 0; i < ns; i++)
			sus[i].hung = false;
		fixpoint(sus, ns);
	}
	for (size_t i = 0; i < ns; i++) {
		struct hs_stall *v;
		double longest = 0;
		if (!sus[i].hung || rc != 0) {
			free(sus[i].t);
			continue;
		}
		for (uint32_t k = 0; k < sus[i].nt; k++) {
			struct hs_tjudge *t = &sus[i].t[k];
			if (t->verdict == HS_TV_PEER) {
				/* resolved: stuck when every peer hangs (rule_says_hung) */
				bool all = t->npeers > 0;
				for (uint32_t q = 0; q < t->npeers; q++) {
					bool h = false;
					for (size_t z = 0; z < ns; z++)
						if (sus[z].p->seg.hdr.pid == t->peers[q])
							h = sus[z].hung;
					all &= h;
				}
				if (all)
					t->verdict = HS_TV_STUCK;
			}
			if (t->verdict == HS_TV_STUCK && t->still_seconds > longest)
				longest = t->still_seconds;
		}
		if (!(v = realloc(*stalls, (*nstalls + 1) * sizeof *v))) {
			free(sus[i].t);
			rc = -1;
			continue;
		}
		*stalls = v;
		v[*nstalls] = (struct hs_stall){.pid = sus[i].p->seg.hdr.pid, .seconds = longest,
						.threads = sus[i].t, .nthreads = sus[i].nt};
		(*nstalls)++;
	}
	free(sus);
	free(j.h);
	free(j.peer);
	return rc;
}

/* Progress of thread tid of p's process now: its ring records (read from
 * the live mapping), CPU ticks and the system call it is in — heisen-run's
 * measure, the same code (internal/still.h); 0 when the thread is gone. */
static uint64_t thread_progress(const struct hs_proc *p, int32_t tid)
{
	pid_t tids[1024];
	uint64_t heads[1024], head = 0, cpu = UINT64_MAX, k = 0;
	size_t n = hs_rings_thread_heads(p->seg.base, p->seg.map_size, &p->seg.hdr, tids, heads, 1024);
	for (size_t i = 0; i < n; i++)
		if (tids[i] == tid)
			head = heads[i];
	return hs_still_thread_progress(p->seg.hdr.pid, tid, head, &cpu, &k) == 0 ? k : 0;
}

#define WATCH_STEP_MS 250

int hs_measure_still(struct hs_session *s, double timeout, double cap, struct hs_still **still, size_t *nstill)
{
	struct judge j = {0};
	struct hs_still *v = NULL;
	uint64_t *prog = NULL, *since = NULL;
	const struct hs_proc **who = NULL;
	size_t n = 0, suspects = 0;
	int rc = 0;
	for (size_t i = 0; i < s->nprocs && rc == 0; i++) {
		struct hs_proc *p = &s->procs[i];
		char path[64];
		DIR *d;
		struct dirent *de;
		if (!hs_proc_alive(p))
			continue;
		snprintf(path, sizeof path, "/proc/%d/task", (int)p->seg.hdr.pid);
		if (!(d = opendir(path)))
			continue;
		while ((de = readdir(d))) {
			long tid = strtol(de->d_name, NULL, 10);
			struct hs_tjudge t = {.tid = (int32_t)tid};
			if (tid <= 0)
				continue;
			struct hs_still *nv = realloc(v, (n + 1) * sizeof *nv);
			uint64_t *np = realloc(prog, (n + 1) * sizeof *np), *ns = realloc(since, (n + 1) * sizeof *ns);
			const struct hs_proc **nw = realloc(who, (n + 1) * sizeof *nw);
			if (nv)
				v = nv;
			if (np)
				prog = np;
			if (ns)
				since = ns;
			if (nw)
				who = nw;
			if (!nv || !np || !ns || !nw) {
				rc = -1;
				break;
			}
			v[n] = (struct hs_still){.pid = p->seg.hdr.pid, .tid = (int32_t)tid};
			who[n] = p;
			since[n] = 0;
			prog[n++] = thread_progress(p, (int32_t)tid);
			/* worth watching: a wait only this process, or another one, can end */
			const struct hs_tsnap *ts = hs_proc_thread(p, (int32_t)tid);
			if (ts && (ts->t.wait_kind == HS_WAIT_LOCK || ts->t.wait_kind == HS_WAIT_GIL)) {
				suspects++;
				continue;
			}
			judge_syscall(&j, p->seg.hdr.pid, &t);
			suspects += t.verdict == HS_TV_STUCK || t.verdict == HS_TV_PEER;
		}
		closedir(d);
	}
	free(j.h);
	free(j.peer);
	if (rc == 0 && suspects) {
		double watch = timeout < cap ? timeout : cap;
		long steps = (long)(watch * 1000 / WATCH_STEP_MS) + 1;
		/* the still clock of each thread (internal/still.h), in ms since the first sample */
		for (long k = 1; k <= steps; k++) {
			sleep_ms(WATCH_STEP_MS);
			for (size_t i = 0; i < n; i++)
				hs_still_note(&prog[i], &since[i], thread_progress(who[i], v[i].tid),
					      (uint64_t)k * WATCH_STEP_MS, 0);
		}
		for (size_t i = 0; i < n; i++)
			v[i].seconds = (double)((uint64_t)steps * WATCH_STEP_MS - since[i]) / 1000.0;
		size_t k = 0;
		for (size_t i = 0; i < n; i++)
			if (v[i].seconds > 0)
				v[k++] = v[i];
		n = k;
		struct hs_still *nv = n ? realloc(*still, (*nstill + n) * sizeof *nv) : *still;
		if (n && !nv)
			rc = -1;
		else if (n) {
			memcpy(nv + *nstill, v, n * sizeof *v);
			*still = nv;
			*nstill += n;
		}
	}
	free(v);
	free(prog);
	free(since);
	free(who);
	return rc;
}
