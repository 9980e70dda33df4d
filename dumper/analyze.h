/* SPDX-License-Identifier: MIT */
/*
 * dumper/analyze.h — the findings of a session, most serious first.
 *
 * Two sources: what the writer recorded in its findings table (potential
 * deadlocks, self-deadlocks, crashes), and what the dumper computes from
 * the thread slots it copied: the wait-for graph (thread -> lock it waits
 * for -> thread holding it), whose cycles are deadlocks, and threads blocked
 * longer than the hang timeout, which are hangs.  Reports read findings;
 * they never re-derive them.  Design: DESIGN.md "What is detected".
 */
#ifndef HEISEN_DUMPER_ANALYZE_H
#define HEISEN_DUMPER_ANALYZE_H

#include "session.h"

/* In severity order: the order findings are reported in. */
enum hs_fkind {
	HS_F_CRASH,
	HS_F_DEADLOCK,
	HS_F_SELF_DEADLOCK,
	HS_F_HANG,
	HS_F_POTENTIAL,
	HS_F_KINDS
};

struct hs_fnd {
	enum hs_fkind kind;
	struct hs_proc *proc;
	uint32_t index;                      /* entry in the segment's findings table, if from there */
	struct hs_finding rec;               /* crash, self-deadlock, potential: the writer's copy */
	struct hs_edge edges[HS_CYCLE_MAX];  /* potential: the cycle's valid edges, copied */
	uint32_t edge_ids[HS_CYCLE_MAX];
	uint32_t nedges;
	const struct hs_tsnap **threads;     /* deadlock, hang: the blocked threads, by tid */
	uint32_t nthreads;
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
