/* SPDX-License-Identifier: MIT */
/*
 * launcher/procfs.c — what /proc says about a pid.
 *
 * Three questions: when did this pid start (field 22 of /proc/pid/stat,
 * the same clock-tick count the shim stores as hs_header.start_ticks, so a
 * reused pid is told apart from the process that made a segment), and which
 * are its children (/proc/pid/task/<tid>/children, one file per thread, since
 * a child belongs to the thread that forked it).  A zombie still answers
 * both until it is reaped, which is why the reaper asks before reaping.
 * And how much CPU time has it used (a part of the watchdog's measure of
 * progress, internal/still.h, heisen-dump's too).  The stat line is read by internal/proc_stat.h
 * and a snapshot request to every thread is internal/snapshot_request.h's
 * hs_snapshot_request_all, both heisen-dump's too.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <internal/proc_stat.h>
#include <internal/snapshot_request.h>

#include "heisen/format.h"
#include "launcher.h"

/*
 * Start time of pid in clock ticks since boot (internal/proc_stat.h).
 * Returns 0 and sets *ticks, or -1 when the pid does not exist (or /proc
 * cannot be read).
 */
int hr_proc_start_ticks(pid_t pid, uint64_t *ticks)
{
	struct hs_proc_stat ps;
	if (hs_proc_stat_read(pid, 0, &ps) != 0)
		return -1;
	*ticks = ps.start_ticks;
	return 0;
}

/*
 * Children of pid (of all its threads).  Writes at most max pids to out and
 * returns how many; 0 when pid is gone or the kernel lacks
 * CONFIG_PROC_CHILDREN.
 */
size_t hr_proc_children(pid_t pid, pid_t *out, size_t max)
{
	char path[64], buf[4096];
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	DIR *d = opendir(path);
	if (!d)
		return 0;
	size_t n = 0;
	struct dirent *de;
	while (n < max && (de = readdir(d))) {
		if (de->d_name[0] < '0' || de->d_name[0] > '9')
			continue;
		char cpath[sizeof path + sizeof de->d_name + 16];
		snprintf(cpath, sizeof cpath, "%s/%s/children", path, de->d_name);
		if (hs_read_small(cpath, buf, sizeof buf) <= 0)
			continue;
		for (char *s = buf; n < max;) {
			char *end;
			long c = strtol(s, &end, 10);
			if (end == s)
				break;
			if (c > 0)
				out[n++] = (pid_t)c;
			s = end;
		}
	}
	closedir(d);
	return n;
}

/* Parent of pid (field 4 of /proc/pid/stat), or -1 when pid is gone. */
pid_t hr_proc_ppid(pid_t pid)
{
	struct hs_proc_stat ps;
	return hs_proc_stat_read(pid, 0, &ps) == 0 ? (pid_t)ps.ppid : -1;
}

/* CPU time of pid, all its threads, in clock ticks (utime + stime, fields
 * 14 and 15 of /proc/pid/stat), and its start time (field 22, as
 * hr_proc_start_ticks) from the same reading.  Returns 0, or -1 when pid is
 * gone. */
int hr_proc_cpu_ticks(pid_t pid, uint64_t *ticks, uint64_t *start_ticks)
{
	struct hs_proc_stat ps;
	if (hs_proc_stat_read(pid, 0, &ps) != 0)
		return -1;
	*ticks = ps.utime + ps.stime;
	*start_ticks = ps.start_ticks;
	return 0;
}
