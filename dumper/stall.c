/* SPDX-License-Identifier: MIT */
/*
 * dumper/stall.c — hang snapshots from the outside (see stall.h).  A
 * snapshot request is a queued signal to one thread, so it reaches threads
 * blocked anywhere — a lock, read(), poll(), a futex in a library — and
 * the thread records its own stack in its slot (shim/signals.c).  Progress
 * is what heisen-run's watchdog measures too: ring records and CPU time;
 * a process blocked everywhere moves neither.
 * Design: DESIGN.md "Hangs"; docs/interfaces.md "Python and the GIL".
 */
#include "stall.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <heisen/snapshot_request.h>

int hs_stalls_parse(const char *arg, struct hs_stall **v, size_t *n)
{
	size_t k = 1, have = *n;
	struct hs_stall *nv;
	const char *c = arg;
	for (const char *q = arg; *q; q++)
		k += *q == ',';
	if (!(nv = realloc(*v, (have + k) * sizeof *nv)))
		return -1;
	*v = nv;
	for (size_t i = 0; i < k; i++) {
		char *end;
		long pid = strtol(c, &end, 10);
		double sec;
		if (end == c || *end != ':' || pid <= 0 || pid > 0x3fffffff)
			return -1;
		c = end + 1;
		sec = strtod(c, &end);
		if (end == c || (*end && *end != ',') || !(sec >= 0) || sec > 1e9)
			return -1;
		nv[have + i].pid = (int32_t)pid;
		nv[have + i].seconds = sec;
		nv[have + i].since_ns = 0;
		c = *end ? end + 1 : end;
	}
	*n = have + k;
	return 0;
}

unsigned hs_snapshot_request(int32_t pid, int sig)
{
	char path[64];
	DIR *d;
	struct dirent *de;
	unsigned sent = 0;
	if (sig <= 0 || pid <= 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return 0;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		if (tid > 0 && hs_snapshot_request_tid((pid_t)pid, (pid_t)tid, sig) == 0)
			sent++;
	}
	closedir(d);
	return sent;
}

/* utime + stime of pid in clock ticks, 0 when it cannot be read. */
static uint64_t cpu_ticks(int32_t pid)
{
	char path[64], buf[1024];
	unsigned long long ut = 0, st = 0;
	ssize_t n;
	int fd;
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0)
		return 0;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields restart after the last ')' */
	char *p = strrchr(buf, ')');
	if (!p || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
		return 0;
	return ut + st;
}

uint64_t hs_progress(const struct hs_proc *p)
{
	return hs_seg_events(&p->seg) + cpu_ticks(p->seg.hdr.pid);
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
		snprintf(arg, sizeof arg, "%d:%.3f", p->seg.hdr.pid, sample_s);
		rc = hs_stalls_parse(arg, stalls, nstalls);
	}
	/* after the sample: a snapshot is progress too */
	for (size_t i = 0; i < s->nprocs; i++)
		if (hs_proc_alive(&s->procs[i]))
			hs_snapshot_request(s->procs[i].seg.hdr.pid, s->procs[i].seg.hdr.snapshot_signal);
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
		if ((fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW)) < 0)
			continue;
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
		v[*nstalls].pid = p->seg.hdr.pid;
		v[*nstalls].seconds = sec;
		v[*nstalls].since_ns = since;
		(*nstalls)++;
	}
	return 0;
}
