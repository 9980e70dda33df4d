/* SPDX-License-Identifier: MIT */
/*
 * dumper/stall.h — hang snapshots from the outside: parsing --stalled,
 * asking every thread of a live process to record its own stack (the
 * snapshot signal, format.h HS_SNAPSHOT_MAGIC), and judging progress
 * (ring records plus CPU time) for heisen-dump --snapshot.  No ptrace.
 * Design: docs/design.md "Hangs"; docs/interfaces.md "Python and the GIL".
 */
#ifndef HEISEN_DUMPER_STALL_H
#define HEISEN_DUMPER_STALL_H

#include "analyze.h"

/*
 * Append the stalls of "PID:SECONDS[,PID:SECONDS...]" to *v (realloc'd).
 * Returns 0, or -1 on a malformed list (nothing appended) or no memory.
 */
int hs_stalls_parse(const char *arg, struct hs_stall **v, size_t *n);

/*
 * Why thread t of p has no snapshot, when that can be told: for a thread
 * of a live process that takes the snapshot signal itself (blocks it, or
 * waits in sigtimedwait; read now from /proc; such a thread is never sent
 * the request, see include/internal/snapshot_request.h), the sentence that
 * says so; else NULL.  The string is static.
 */
const char *hs_no_snapshot_reason(const struct hs_proc *p, const struct hs_tsnap *t);

/*
 * Ask every thread of p's process for a snapshot, with heisen's own signal
 * (hs_snapshot_signal(), never the number the segment holds), and only
 * when p's segment says the handler is installed and the process is
 * verified as the one that wrote it (hs_snapshot_target_verify: start
 * time, the file owner's uid, libheisen.so loaded).  A refusal other than
 * "gone" is said on stderr naming the segment.  Returns the threads asked.
 */
unsigned hs_snapshot_proc(const struct hs_proc *p);

/*
 * Progress of the live process p so far: records written to its rings
 * plus its CPU time in clock ticks (utime + stime, /proc/pid/stat).  Two
 * equal values some time apart mean it did nothing in between.
 */
uint64_t hs_progress(const struct hs_proc *p);

/*
 * heisen-dump --snapshot: sample the progress of every live process of s
 * over sample_s seconds, ask every thread of every live process for a
 * snapshot, wait for them (up to wait_ms), and append each process that
 * made no progress to *stalls.  The caller reloads the session afterwards
 * to see the snapshots.  Returns 0, or -1 out of memory.
 */
int hs_snapshot_session(struct hs_session *s, double sample_s, int wait_ms, struct hs_stall **stalls,
			size_t *nstalls);

/*
 * Append the stalls heisen-run noted in the session ("<pid>.<image>.stall":
 * "since_mono_ns seconds") for processes that were killed or vanished and
 * are not in *stalls yet: the hang they died in.  Returns 0, or -1 out of
 * memory.
 */
int hs_stalls_noted(struct hs_session *s, struct hs_stall **stalls, size_t *nstalls);

/*
 * Append the threads of "PID/TID:SECONDS[,...]" (how long each made no
 * progress, as heisen-run measured it) to *v.  Returns 0, or -1 on a
 * malformed list or no memory.
 */
int hs_still_parse(const char *arg, struct hs_still **v, size_t *n);

/*
 * The per-thread hang rule.  For every live process of s with a thread in
 * still[] still for at least `timeout` seconds, judge each of its threads
 * (analyze.h enum hs_tverdict): from its wait word (a lock, the GIL), else
 * from /proc/PID/task/TID/syscall — the call, its timeout and its fds,
 * read from /proc/PID/mem (poll, select), /proc/PID/fdinfo (epoll) —, the
 * fd's kind from /proc/PID/fd, which processes hold the other end (every
 * process's fd table; unix socket peers from sock_diag), and /proc/PID/maps
 * for a futex in shared memory.  A process hangs when its main thread is
 * stuck, or when every thread that is neither active nor idle is stuck (at
 * least one); a thread waiting on other processes is stuck when they all
 * hang (a child in wait4 hung, the other end of its pipe hung), else idle.
 * Appends one stall with threads[] (malloc'd, every thread) per hung
 * process to *stalls.  An unreadable wait is unknown, never stuck: the
 * rule only says what it is sure of.  Returns 0, or -1 out of memory.
 */
int hs_judge_still(struct hs_session *s, const struct hs_still *still, size_t nstill, double timeout,
		   struct hs_stall **stalls, size_t *nstalls);

/*
 * heisen-dump --hang-timeout on a live session, without heisen-run's
 * measure: when a thread of a live process of s is in a wait the rule
 * could call stuck (a lock or GIL wait word; a futex, poll, read... that
 * only this process or another one can end), watch every thread of every
 * live process for min(timeout, cap) seconds with heisen-run's measure
 * (internal/still.h: its ring records, CPU ticks and the system call it
 * is in), and append each with how long it was still at the end (the
 * seconds watched for one that never moved).  Returns at once when nothing is worth watching.
 * Returns 0, or -1 out of memory.
 */
int hs_measure_still(struct hs_session *s, double timeout, double cap, struct hs_still **still, size_t *nstill);

#endif
