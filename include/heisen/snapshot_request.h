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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "format.h"

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

#endif
