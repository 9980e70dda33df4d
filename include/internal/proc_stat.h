/* SPDX-License-Identifier: MIT */
/*
 * internal/proc_stat.h — the one reader of /proc/PID/stat and
 * /proc/PID/task/TID/stat for heisen-run (launcher/procfs.c: start times,
 * parents, CPU time for the watchdog) and heisen-dump (dumper/liveness.c:
 * is the segment's process still the one that made it; dumper/stall.c: CPU
 * time, running threads).  Not part of the installed API.
 *
 * The line is proc(5)'s: "pid (comm) state ppid ... utime stime ...
 * starttime ...".  comm may hold spaces and parentheses, so fields are
 * counted from the last ')'.  Only what the readers use is kept: field 3
 * (state), 4 (ppid), 14 and 15 (utime, stime, clock ticks) and 22
 * (starttime, clock ticks since boot: the clock the shim stores as
 * hs_header.start_ticks, so a reused pid is told apart from the process
 * that made a segment).  Raw open/read, no stdio: the readers call it
 * twice a second for every process of a session.
 */
#ifndef HEISEN_INTERNAL_PROC_STAT_H
#define HEISEN_INTERNAL_PROC_STAT_H

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

/* The fields of one stat line the readers use (see the top of this file). */
struct hs_proc_stat {
	char state;           /* 'R', 'S', 'D', 'Z', 'X', ... */
	int ppid;             /* the parent's pid (0 for init's parent) */
	uint64_t utime;       /* user CPU time, clock ticks */
	uint64_t stime;       /* system CPU time, clock ticks */
	uint64_t start_ticks; /* start time, clock ticks since boot */
};

/* Parse a stat line (NUL-terminated) into *out: 0, or -1 when it is not
 * one (no ')' or fewer than 22 fields). */
static inline int hs_proc_stat_parse(const char *line, struct hs_proc_stat *out)
{
	unsigned long long ut, st, start;
	char state;
	int ppid;
	const char *p = strrchr(line, ')');
	if (!p || sscanf(p + 1, " %c %d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %*d %*d %*d %*d %*d %*d %llu",
			 &state, &ppid, &ut, &st, &start) != 5)
		return -1;
	out->state = state;
	out->ppid = ppid;
	out->utime = ut;
	out->stime = st;
	out->start_ticks = start;
	return 0;
}

/*
 * Read and parse /proc/PID/stat (tid <= 0) or /proc/PID/task/TID/stat.
 * Returns 0, or -1 when the pid or thread does not exist (errno from open)
 * or the line cannot be parsed.  A zombie still answers (state 'Z').
 */
/* Read up to n-1 bytes of a small file (a /proc file) into buf,
 * NUL-terminated, retrying EINTR.  Returns the length, or -1 with errno
 * when it cannot be opened. */
static inline ssize_t hs_read_small(const char *path, char *buf, size_t n)
{
	size_t len = 0;
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	while (len + 1 < n) {
		ssize_t k = read(fd, buf + len, n - 1 - len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	close(fd);
	buf[len] = '\0';
	return (ssize_t)len;
}

static inline int hs_proc_stat_read(pid_t pid, pid_t tid, struct hs_proc_stat *out)
{
	char path[96], buf[1024];
	if (tid > 0)
		snprintf(path, sizeof path, "/proc/%d/task/%d/stat", (int)pid, (int)tid);
	else
		snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	return hs_read_small(path, buf, sizeof buf) > 0 ? hs_proc_stat_parse(buf, out) : -1;
}

/*
 * Progress of thread tid of pid as the kernel shows it, the kernel's part
 * of the one measure heisen-run's watchdog and heisen-dump's still-thread
 * watch compare between two samples (internal/still.h
 * hs_still_thread_progress adds the thread's ring head): its utime + stime
 * (/proc/PID/task/TID/stat) and an FNV-1a hash of the system call it is in
 * (/proc/PID/task/TID/syscall: number, arguments, stack and program
 * counter; left out when it cannot be read), so a thread that stays in one
 * wait keeps the same value.  *cpu: the utime + stime to use, or
 * UINT64_MAX to read it here (the watchdog passes the last value when the
 * whole process's CPU time has not moved: then no thread's has); set to
 * what was used.  Returns 0 with *out set, or -1 when the thread is gone.
 */
static inline int hs_thread_progress(pid_t pid, pid_t tid, uint64_t *cpu, uint64_t *out)
{
	char path[96], buf[512];
	uint64_t h = 1469598103934665603ull;
	ssize_t n = 0;
	int fd;
	if (*cpu == UINT64_MAX) {
		struct hs_proc_stat ps;
		if (hs_proc_stat_read(pid, tid, &ps) != 0)
			return -1;
		*cpu = ps.utime + ps.stime;
	}
	snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
		if (errno == ENOENT)
			return -1; /* gone */
	} else {
		while ((n = read(fd, buf, sizeof buf)) < 0 && errno == EINTR)
			;
		close(fd);
	}
	for (ssize_t i = 0; i < n; i++)
		h = (h ^ (unsigned char)buf[i]) * 1099511628211ull;
	*out = *cpu * 1000003ull + h;
	return 0;
}

#endif
