/* SPDX-License-Identifier: MIT */
/*
 * heisen/snapshot_request.h — how a watcher asks one thread of a recorded
 * process to record its own stack (format.h: HS_SNAPSHOT_SIGNAL_OFFSET,
 * HS_SNAPSHOT_MAGIC; the answer lands in hs_thread.snap_*).  Shared by
 * heisen-run and heisen-dump; not part of the installed API.
 */
#ifndef HEISEN_SNAPSHOT_REQUEST_H
#define HEISEN_SNAPSHOT_REQUEST_H

#include <signal.h>
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

#endif
