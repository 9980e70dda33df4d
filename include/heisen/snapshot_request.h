/* SPDX-License-Identifier: MIT */
/*
 * heisen/snapshot_request.h — how a watcher asks one thread of a recorded
 * process to record its own stack (format.h: HS_SNAPSHOT_SIGNAL_OFFSET,
 * HS_SNAPSHOT_MAGIC; the answer lands in hs_thread.snap_*).  Shared by
 * heisen-run and heisen-dump; not part of the installed API.
 */
#ifndef HEISEN_SNAPSHOT_REQUEST_H
#define HEISEN_SNAPSHOT_REQUEST_H

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "format.h"

/*
 * Send the snapshot request to thread tid of process pid: signal sig (the
 * one the process put in hs_header.snapshot_signal), si_code SI_QUEUE and
 * si_value HS_SNAPSHOT_MAGIC, so the process tells it from its own uses of
 * that signal.  Returns 0, or -1 with errno from rt_tgsigqueueinfo (ESRCH:
 * the thread is gone; EPERM: not ours).
 */
static inline int hs_snapshot_request_tid(pid_t pid, pid_t tid, int sig)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_ptr = (void *)(uintptr_t)HS_SNAPSHOT_MAGIC;
	return (int)syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
}

/*
 * The snapshot signal heisen sends: always SIGRTMAX - HS_SNAPSHOT_SIGNAL_OFFSET,
 * heisen's own constant.  hs_header.snapshot_signal only says whether the
 * process installed the handler (non-zero); its value is never sent, since
 * a segment is writable by whoever owns it and could name SIGKILL.
 */
static inline int hs_snapshot_signal(void)
{
	return SIGRTMAX - HS_SNAPSHOT_SIGNAL_OFFSET;
}

/* One line of /proc/PID/maps ends with ".../libheisen.so" (or " libheisen.so"). */
static inline int hs_maps_line_is_heisen(const char *line, size_t len)
{
	static const char lib[] = "libheisen.so";
	size_t l = sizeof lib - 1;
	return len > l && memcmp(line + len - l, lib, l) == 0 && (line[len - l - 1] == '/' || line[len - l - 1] == ' ');
}

/*
 * Is pid a process of the session whose segment names it, so that heisen may
 * signal it?  The segment (pid, start_ticks, and the uid that owns its file)
 * is shared memory anyone owning the file can forge, so the target is checked
 * against what the kernel says, through one /proc/PID directory descriptor
 * (it stays bound to that process: if the pid dies and is reused meanwhile,
 * the later reads fail instead of reading the newcomer):
 *   - start time: field 22 of /proc/PID/stat equals start_ticks, which must
 *     be non-zero (0 is what a forged or unfinished header says);
 *   - owner: the segment file's owner is root or the process's real or
 *     saved uid — the kernel's own rule for who may signal whom (kill(2)),
 *     so a forged segment never lets its owner reach a process it could not
 *     signal itself, even when heisen-dump or heisen-run runs as root (and a
 *     process that dropped privileges after root made its segment is still
 *     reached);
 *   - heisen loaded: /proc/PID/maps maps a file named libheisen.so (a
 *     process without the shim has no handler and the signal's default
 *     action would kill it).
 * Returns 0 when all hold; otherwise -1 and why[whylen] says which failed
 * (e.g. "start time 123 is not the segment's 456").  ESRCH-like failures
 * (the process is gone) say "gone".  Allocates nothing; uses no stdio
 * streams (snprintf only).
 */
static inline int hs_snapshot_target_verify(pid_t pid, uint64_t start_ticks, uid_t owner, char *why,
					    size_t whylen)
{
	char path[64], buf[4096];
	ssize_t n;
	int pfd, fd, rc = -1;

	if (pid <= 0) {
		snprintf(why, whylen, "no such pid");
		return -1;
	}
	if (start_ticks == 0) {
		snprintf(why, whylen, "the segment gives no start time");
		return -1;
	}
	snprintf(path, sizeof path, "/proc/%d", (int)pid);
	if ((pfd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
		snprintf(why, whylen, "gone");
		return -1;
	}
	/* start time: comm may hold spaces and parentheses, fields restart after the last ')' */
	if ((fd = openat(pfd, "stat", O_RDONLY | O_CLOEXEC)) < 0 || (n = read(fd, buf, sizeof buf - 1)) <= 0) {
		if (fd >= 0)
			close(fd);
		snprintf(why, whylen, "gone");
		goto out;
	}
	close(fd);
	buf[n] = '\0';
	{
		const char *p = strrchr(buf, ')');
		unsigned long long ticks = 0;
		for (int field = 2; p && field < 22; field++)
			p = strchr(p + 1, ' ');
		if (!p || (ticks = strtoull(p + 1, NULL, 10)) != start_ticks) {
			snprintf(why, whylen, "its start time %llu is not the segment's %llu (another process has the pid)",
				 ticks, (unsigned long long)start_ticks);
			goto out;
		}
	}
	/* owner: "Uid:\treal\teffective\tsaved\tfs" */
	if ((fd = openat(pfd, "status", O_RDONLY | O_CLOEXEC)) < 0 || (n = read(fd, buf, sizeof buf - 1)) <= 0) {
		if (fd >= 0)
			close(fd);
		snprintf(why, whylen, "gone");
		goto out;
	}
	close(fd);
	buf[n] = '\0';
	{
		const char *u = strstr(buf, "\nUid:");
		unsigned long ruid, euid, suid;
		char *e;
		if (!u) {
			snprintf(why, whylen, "its uid cannot be read");
			goto out;
		}
		ruid = strtoul(u + 5, &e, 10);
		euid = strtoul(e, &e, 10);
		suid = strtoul(e, &e, 10);
		(void)euid;
		/* root may signal anyone, and only root can own a root-owned segment */
		if (owner != 0 && ruid != (unsigned long)owner && suid != (unsigned long)owner) {
			snprintf(why, whylen, "it runs as uid %lu, the segment file belongs to uid %u", ruid,
				 (unsigned)owner);
			goto out;
		}
	}
	/* heisen loaded: a maps line ending in libheisen.so, read in pieces */
	if ((fd = openat(pfd, "maps", O_RDONLY | O_CLOEXEC)) < 0) {
		snprintf(why, whylen, "its memory map cannot be read: %s", strerror(errno));
		goto out;
	}
	{
		size_t have = 0;
		int found = 0;
		while (!found && (n = read(fd, buf + have, sizeof buf - 1 - have)) > 0) {
			size_t len = have + (size_t)n, start = 0;
			for (size_t i = 0; i < len; i++)
				if (buf[i] == '\n') {
					if (hs_maps_line_is_heisen(buf + start, i - start)) {
						found = 1;
						break;
					}
					start = i + 1;
				}
			/* keep the unfinished line; a line longer than the buffer is not a path we look for */
			have = start < len && len - start < sizeof buf / 2 ? len - start : 0;
			memmove(buf, buf + len - have, have);
		}
		close(fd);
		if (!found) {
			snprintf(why, whylen, "libheisen.so is not loaded in it");
			goto out;
		}
	}
	rc = 0;
out:
	close(pfd);
	return rc;
}

#endif
