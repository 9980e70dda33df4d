/* SPDX-License-Identifier: MIT */
/*
 * internal/snapshot_request.h — how a watcher asks one thread of a recorded
 * process to record its own stack (format.h: HS_SNAPSHOT_SIGNAL_OFFSET,
 * HS_SNAPSHOT_MAGIC; the answer lands in hs_thread.snap_*).  Shared by
 * heisen-run and heisen-dump; not part of the installed API.
 */
#ifndef HEISEN_SNAPSHOT_REQUEST_H
#define HEISEN_SNAPSHOT_REQUEST_H

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "heisen/format.h"

/*
 * The si_value of a snapshot request to the process whose segment header
 * says start_real_ns: HS_SNAPSHOT_MAGIC in bits 0..39 and, in bits 40..55,
 * 16 bits mixed from start_real_ns (splitmix64's finalizer), which only a
 * reader of the segment knows.  So a SIGRTMAX-3 that another program queues
 * with the bare magic is not taken for heisen's: it does what it would do
 * without heisen (the program's handler, or the default action, which
 * terminates).  The crash path adds bit 56 (shim/signals.c).
 */
static inline uint64_t hs_snapshot_value(uint64_t start_real_ns)
{
	uint64_t z = start_real_ns + 0x9e3779b97f4a7c15ull;
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	z ^= z >> 31;
	return (uint64_t)HS_SNAPSHOT_MAGIC | (z & 0xffffull) << 40;
}

/*
 * Does thread tid of process pid take signal sig itself, so that a request
 * queued to it would be dequeued by the program as if it were its own
 * signal?  HS_TAKES_BLOCKED: it blocks sig (the "SigBlk:" line of
 * /proc/PID/task/TID/status, a hex mask, bit sig-1), as a thread that reads
 * a signalfd does.  HS_TAKES_WAITING: it waits in rt_sigtimedwait
 * (sigwait, sigwaitinfo, sigtimedwait), whose set the kernel unblocks for
 * the wait — SigBlk does not show it then, and the set is in the program's
 * memory: any such wait counts (/proc/PID/task/TID/syscall).  0 when
 * neither, -1 when that cannot be read (the thread is gone, no /proc).
 */
enum { HS_TAKES_BLOCKED = 1, HS_TAKES_WAITING = 2 };

static inline int hs_thread_takes_signal(pid_t pid, pid_t tid, int sig)
{
	char path[64], buf[2048];
	ssize_t n;
	int fd;
	const char *p;
	unsigned long long mask = 0;
	if (sig <= 0 || sig > 64)
		return -1;
	snprintf(path, sizeof path, "/proc/%d/task/%d/syscall", (int)pid, (int)tid);
	if ((fd = open(path, O_RDONLY | O_CLOEXEC)) >= 0) {
		n = read(fd, buf, sizeof buf - 1);
		close(fd);
		if (n > 0) {
			buf[n] = '\0';
			if (strtol(buf, NULL, 10) == SYS_rt_sigtimedwait && buf[0] >= '0' && buf[0] <= '9')
				return HS_TAKES_WAITING;
		}
	}
	snprintf(path, sizeof path, "/proc/%d/task/%d/status", (int)pid, (int)tid);
	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	n = read(fd, buf, sizeof buf - 1);
	close(fd);
	if (n <= 0)
		return -1;
	buf[n] = '\0';
	p = strstr(buf, "\nSigBlk:");
	if (!p)
		return -1;
	for (p += 8; *p == ' ' || *p == '\t'; p++)
		;
	for (; (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f'); p++)
		mask = mask << 4 | (unsigned)(*p <= '9' ? *p - '0' : *p - 'a' + 10);
	return (mask >> (sig - 1) & 1) ? HS_TAKES_BLOCKED : 0;
}

/*
 * Send the snapshot request to thread tid of process pid: signal sig (the
 * one the process put in hs_header.snapshot_signal), si_code SI_QUEUE and
 * si_value `value` (hs_snapshot_value of its header), so the process tells
 * it from its own uses of that signal.  Never to a thread that takes sig itself
 * (hs_thread_takes_signal): the program would dequeue heisen's request as
 * its own signal; -1 with errno EAGAIN then, and its stack is unknown.  Returns 0, or -1 with errno from
 * rt_tgsigqueueinfo (ESRCH: the thread is gone; EPERM: not ours).
 */
static inline int hs_snapshot_request_tid(pid_t pid, pid_t tid, int sig, uint64_t value)
{
	siginfo_t si;
	if (hs_thread_takes_signal(pid, tid, sig) > 0)
		return errno = EAGAIN, -1;
	memset(&si, 0, sizeof si);
	si.si_signo = sig;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_ptr = (void *)(uintptr_t)value;
	return (int)syscall(SYS_rt_tgsigqueueinfo, pid, tid, sig, &si);
}

/*
 * Send a snapshot request (hs_snapshot_request_tid) to every thread of pid
 * listed in /proc/PID/task, except threads that take sig themselves.  The
 * one way heisen-run's watchdog (launcher/watchdog.c) and heisen-dump
 * --snapshot (dumper/stall.c hs_snapshot_proc) ask a whole process.
 * Returns the number of threads asked; 0 when sig or pid is not positive
 * or the process is gone.
 */
static inline unsigned hs_snapshot_request_all(pid_t pid, int sig, uint64_t value)
{
	char path[64];
	struct dirent *de;
	unsigned sent = 0;
	DIR *d;
	if (sig <= 0 || pid <= 0)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
	if (!(d = opendir(path)))
		return 0;
	while ((de = readdir(d))) {
		long tid = strtol(de->d_name, NULL, 10);
		if (tid > 0 && hs_snapshot_request_tid(pid, (pid_t)tid, sig, value) == 0)
			sent++;
	}
	closedir(d);
	return sent;
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
