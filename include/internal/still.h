/* SPDX-License-Identifier: MIT */
/*
 * internal/still.h — what counts as progress, and how long a thread has
 * made none: the one measure of a live thread that heisen-run's watchdog
 * (launcher/watchdog.c, every tick) and heisen-dump on its own
 * (dumper/stall.c hs_measure_still: --hang-timeout without --still) take,
 * and the one threshold past which heisen-dump's per-thread rule
 * (dumper/stall.c hs_judge_still) judges a still thread.  heisen-dump is
 * the only judge of a hang; heisen-run keeps the policy (when to sample,
 * which hangs it reported, the kill) and hands it the still threads as
 * --still PID/TID:SECONDS.  Not part of the installed API.
 *
 * Progress of a thread: its own ring records (the head of its ring,
 * internal/seg_rings.h hs_rings_thread_heads), its CPU time and the
 * system call it is in with its arguments (internal/proc_stat.h
 * hs_thread_progress), mixed into one number.  A thread that makes
 * progress only through its ring records (an event loop woken by a
 * producer: the same epoll_wait every time the kernel is asked, next to
 * no CPU) is not still.  Progress of a process: its ring records (all its
 * rings, hs_rings_events) plus its CPU time.  Two samples with the same
 * number mean nothing moved in between.
 *
 * The still clock: since when the number has not changed (milliseconds of
 * the caller's monotonic clock); a sample that moved restarts it unless
 * the caller keeps it (a snapshot's own work is not progress).
 * Design: docs/design.md "Hangs".
 */
#ifndef HEISEN_INTERNAL_STILL_H
#define HEISEN_INTERNAL_STILL_H

#include <stdint.h>
#include <sys/types.h>

#include <internal/proc_stat.h>

/*
 * Progress of thread tid of pid: hs_thread_progress (CPU ticks, the system
 * call it is in) mixed with ring_head, the records its own ring holds so
 * far (0 when it has no thread slot).  *cpu as hs_thread_progress
 * (UINT64_MAX: read it here; set to what was used).  Returns 0 with *out
 * set, or -1 when the thread is gone.
 */
static inline int hs_still_thread_progress(pid_t pid, pid_t tid, uint64_t ring_head, uint64_t *cpu, uint64_t *out)
{
	uint64_t k;
	if (hs_thread_progress(pid, tid, cpu, &k) != 0)
		return -1;
	*out = k + ring_head * 0x9e3779b97f4a7c15ull;
	return 0;
}

/* Progress of a process: records in all its rings (hs_rings_events) plus
 * its CPU time in clock ticks (utime + stime of /proc/PID/stat). */
static inline uint64_t hs_still_proc_progress(uint64_t events, uint64_t cpu_ticks)
{
	return events + cpu_ticks;
}

/*
 * One sample into a still clock: *progress and *since_ms (when it last
 * moved, ms) are the clock; prog is the new sample taken at now_ms.  A
 * change restarts the clock unless keep_clock.  Returns 1 when it moved.
 */
static inline int hs_still_note(uint64_t *progress, uint64_t *since_ms, uint64_t prog, uint64_t now_ms, int keep_clock)
{
	if (*progress == prog)
		return 0;
	*progress = prog;
	if (!keep_clock)
		*since_ms = now_ms;
	return 1;
}

/* Has a thread still for `seconds` been still long enough for the
 * per-thread rule at hang timeout `timeout` (seconds)?  The one threshold:
 * heisen-run passes such threads in --still, heisen-dump judges them. */
static inline int hs_still_past(double seconds, double timeout)
{
	return seconds >= timeout;
}

#endif
