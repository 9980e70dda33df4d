/* SPDX-License-Identifier: MIT */
/*
 * dumper/analyze.h — the findings of a session, most serious first.
 *
 * Two sources: what the writer recorded in its findings table (potential
 * deadlocks, self-deadlocks, crashes, double and invalid frees, heap
 * overflows, double and stale closes), and what the dumper computes from
 * the thread slots it copied: the wait-for graph (thread -> lock it waits
 * for -> thread holding it), whose cycles are deadlocks, and threads blocked
 * longer than the hang timeout, which are hangs; and from the fd table it
 * copied: the fds still open at a hang or at the end, which are fd-leaks.  Reports read findings;
 * they never re-derive them.  Design: docs/design.md "Lock order" to
 * "Processes".
 */
#ifndef HEISEN_DUMPER_ANALYZE_H
#define HEISEN_DUMPER_ANALYZE_H

#include "session.h"
#include <internal/seg_verdict.h>

/* In severity order: the order findings are reported in. */
enum hs_fkind {
	HS_F_CRASH,
	HS_F_OOM_KILL,          /* a process that vanished, and the evidence says the OOM killer */
	HS_F_KILLED,            /* a process that died without running any code (procs.c) */
	HS_F_DEADLOCK,
	HS_F_DOUBLE_FREE,       /* heap findings: recorded by the writer at the free */
	HS_F_USE_AFTER_FREE,    /* guard findings: a sampled guard-page block touched after its free (the fault) */
	HS_F_HEAP_BUFFER_OVERFLOW, /* guard findings: the guard page next to a sampled block touched */
	HS_F_HEAP_OVERFLOW,
	HS_F_INVALID_FREE,
	HS_F_STALE_CLOSE,       /* fd findings: recorded by the writer at the close */
	HS_F_DOUBLE_CLOSE,
	HS_F_SELF_DEADLOCK,
	HS_F_HANG,
	HS_F_POTENTIAL,
	HS_F_FD_LEAK,           /* computed from the fd table: at a hang, or at the end */
	HS_F_LIMIT,             /* a table of the lock-order graph or of stacks was full: findings may be missing */
	HS_F_KINDS
};

/* fd-leak: the open fds created at one site (one creation stack). */
struct hs_fd_group {
	uint32_t stack;
	const struct hs_fdsnap **fds;   /* by number */
	uint32_t nfds;
};

/* fd-leak at the end of a process: a site with this many fds still open
 * (README "File descriptors": the rule).  At a normal end (exit), the site
 * must also have grown: its still-open fds created in HS_FD_LEAK_PHASES or
 * more of the run's HS_FD_RUN_PHASES equal parts, or HS_FD_LEAK_MANY or
 * more of them at all; the rest are "open at exit". */
/* HS_FD_LEAK_MIN (3) is in internal/seg_verdict.h: heisen-run's quick verdict tests it too */
#define HS_FD_RUN_PHASES 8
#define HS_FD_LEAK_PHASES 3
#define HS_FD_LEAK_MANY 64

struct hs_fnd {
	enum hs_fkind kind;
	struct hs_proc *proc;
	uint32_t index;                      /* entry in the segment's findings table, if from there */
	struct hs_finding rec;               /* crash, self-deadlock, potential, heap: the writer's copy
						(heap: stack ids beyond the table are zeroed, complained) */
	struct hs_edge *edges;               /* potential: the cycle's valid edges, copied (rec.n of them,
						any length; freed by hs_findings_free) */
	uint32_t *edge_ids;
	uint32_t nedges;
	const struct hs_tsnap **threads;     /* deadlock, hang: the blocked threads, by tid;
						stalled hang: every live thread */
	uint32_t nthreads;
	double stalled_seconds;              /* hang: > 0 when the process made no progress (--stalled) */
	uint64_t since_ns;                   /* stalled hang: when the stall began; crash: rec.ts_ns
						(the writer's CLOCK_MONOTONIC): older snapshots are stale */
	const struct hs_tsnap **others;      /* crash: the other threads that took a crash snapshot;
					      * lock-wait hang: the live threads it names neither
					      * blocked nor holding */
	uint32_t nothers;
	bool heap_abort;                     /* crash: a SIGABRT raised by the process itself after
						a heap finding of its own (HEISEN_ON_HEAP_ERROR=abort) */
	bool in_block;                       /* invalid-free: addr is inside a block of size rec.size
						that starts at block (rec.offset bytes before addr) */
	uint64_t block;
	int32_t stalled_child;               /* stalled hang: a descendant process that is stalled too (the
						nearest, by pid order), 0 = none: this one may only wait for it */
	const struct hs_stall *stall;        /* stalled hang: the judgement it came from (threads[] when per-thread) */
	struct hs_death death;               /* killed, oom-kill: what is known and the evidence (procs.h);
						threads = every thread of the process, rec.tid = its pid,
						rec.ts_ns = its last sign of life */
	/* fd findings */
	struct hs_fd_event hist[HS_FD_FINDING_EVENTS]; /* double-/stale-close: the history, oldest first */
	uint32_t nhist;
	struct hs_fd_group *groups;          /* fd-leak: by count, largest first */
	uint32_t ngroups;
	uint32_t nleaked;                    /* fd-leak: fds in the groups */
	bool at_hang;                        /* fd-leak: of a hung process (every fd it created), not its end */
	char limit[512];                     /* limit: the full tables and their dropped insertions, as text */
	bool unrecorded;                     /* limit: not a full table but a process that could not be recorded
						after a privilege drop (HS_HDR_UID_CHANGED); limit says what */
};

/* Append a zeroed finding of kind about p to out; NULL out of memory.  For
 * the analyses that live in other files (procs.c). */
struct hs_findings;
struct hs_fnd *hs_finding_new(struct hs_findings *out, enum hs_fkind kind, struct hs_proc *p);

/* A heap finding kind? */
static inline bool hs_fkind_heap(enum hs_fkind k)
{
	return k == HS_F_DOUBLE_FREE || k == HS_F_HEAP_OVERFLOW || k == HS_F_INVALID_FREE || k == HS_F_USE_AFTER_FREE ||
	       k == HS_F_HEAP_BUFFER_OVERFLOW;
}

/* A guard finding (format.h "guard findings": a fault in the guard-page pool)? */
static inline bool hs_fkind_guard(enum hs_fkind k)
{
	return k == HS_F_USE_AFTER_FREE || k == HS_F_HEAP_BUFFER_OVERFLOW;
}

/* An fd finding kind (double-close, stale-close)? */
static inline bool hs_fkind_fd(enum hs_fkind k)
{
	return k == HS_F_DOUBLE_CLOSE || k == HS_F_STALE_CLOSE;
}

/*
 * How the per-thread hang rule (stall.c hs_judge_still) saw one thread of
 * a process: active (it moved within the hang timeout), idle (it waits for
 * the outside world: a timer, the network, a terminal, accept), stuck (it
 * stayed in one wait that only this process can end — a lock, the GIL, a
 * join, a private futex, a read or poll on an eventfd or a pipe or socket
 * pair with both ends here — for longer than the timeout), waiting on
 * peers (other live processes: a child in wait4, the other end of a pipe
 * or unix socket; stuck only when every peer is hung), or unknown (its
 * wait could not be read: /proc/PID/task/TID/syscall needs ptrace rights).
 */
enum hs_tverdict { HS_TV_ACTIVE, HS_TV_IDLE, HS_TV_STUCK, HS_TV_PEER, HS_TV_UNKNOWN };

#define HS_TJUDGE_PEERS 8
struct hs_tjudge {
	int32_t tid;
	double still_seconds;            /* no progress for this long (0: moved within the timeout) */
	enum hs_tverdict verdict;
	int32_t peers[HS_TJUDGE_PEERS];  /* HS_TV_PEER: the processes it waits on */
	uint32_t npeers;
	bool busy;                       /* on the CPU while heisen judged (stall.c sample_busy: its process's active threads busy) */
	char what[320];                  /* the wait in words: "poll on fd 12 (eventfd)" */
};

/* A process that hangs: it made no progress (no ring records, no CPU time)
 * for `seconds`, as judged by heisen-run's watchdog or heisen-dump
 * --snapshot; or, with threads[] (the per-thread rule, --still), its main
 * thread is stuck or every thread that is not idle is stuck. */
struct hs_stall {
	int32_t pid;
	double seconds;
	uint64_t since_ns;  /* when it began (the writer's CLOCK_MONOTONIC), 0 = seconds before now */
	struct hs_tjudge *threads;  /* per-thread rule: every thread of the process, by tid; NULL otherwise */
	uint32_t nthreads;
};

/* A thread that made no progress (ring records, CPU time, the syscall it
 * is in) for `seconds`, as measured by heisen-run (--still PID/TID:SECONDS). */
struct hs_still {
	int32_t pid, tid;
	double seconds;
};

struct hs_findings {
	struct hs_fnd *v;
	size_t n;
};

/*
 * Analyze s.  hang_timeout (seconds): a live process's thread waiting longer
 * is blocked.  with_recorded: include the segments' findings tables
 * (--check-hang does not need them).  Returns 0, or -1 out of memory (out
 * then holds what was found so far).  Free out with hs_findings_free.
 */
int hs_analyze(struct hs_session *s, double hang_timeout, bool with_recorded, struct hs_findings *out);

/*
 * hs_analyze, and also a `hang` finding for each live process of stalls[]
 * (every live thread, with its snapshot), which replaces the lock-wait hang
 * of that process; a process with a deadlock gets no extra hang finding.
 */
int hs_analyze_stalled(struct hs_session *s, double hang_timeout, bool with_recorded,
		       const struct hs_stall *stalls, size_t nstalls, struct hs_findings *out);

/*
 * Does t hold the GIL?  Known from its wait word (HS_WAITF_HOLDS_GIL: it is
 * blocked on a native lock with the GIL), from the GIL node in its held
 * stack, or from a snapshot taken at or after `since` (0: any snapshot)
 * with HS_SNAPF_HOLDS_GIL.
 */
bool hs_holds_gil(const struct hs_proc *p, const struct hs_tsnap *t, uint64_t since);

/* Is t's snapshot one that finding f can show as current (taken after the
 * stall began, or after the crash)?  false when it has none. */
bool hs_snapshot_fresh(const struct hs_fnd *f, const struct hs_tsnap *t);

/* "hang", "crash" or "snapshot" (neither flag): why t took its snapshot. */
const char *hs_snapshot_why(const struct hs_tsnap *t);

void hs_findings_free(struct hs_findings *f);

/* "crash", "deadlock", ... as in the JSON schema. */
const char *hs_fkind_name(enum hs_fkind k);

/*
 * The threads of p that hold what t waits for in a mode that blocks it,
 * at most max of them into out.  Returns how many were found (may exceed
 * max).  Works for a thread that is not blocked (returns 0).
 */
size_t hs_holders(const struct hs_proc *p, const struct hs_tsnap *t, const struct hs_tsnap **out,
		  size_t max);

/* How long t has waited, in seconds: until now for a live process, until
 * its end for one that is gone.  0 when it is not waiting. */
double hs_wait_seconds(const struct hs_session *s, const struct hs_proc *p, const struct hs_tsnap *t);

/* The stable one-line signature of a deadlock or hang finding:
 * "kind pid tid,tid,... 0xaddr,0xaddr,..." (tids and addresses sorted). */
void hs_signature(const struct hs_fnd *f, char *buf, size_t len);

#endif
