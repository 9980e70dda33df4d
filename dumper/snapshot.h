/* SPDX-License-Identifier: MIT */
/*
 * dumper/snapshot.h — consistent private copies of what a writer publishes.
 *
 * Each function copies one published object out of a validated segment,
 * following the publication rule format.h gives for it (count word, ready
 * word, per-record seqlock, per-thread seqlock), and then clamps or rejects
 * every id, count and depth in the copy.  Callers use only the copies.
 * Anything found corrupt is complained about on the segment (naming table,
 * index and value); something merely not published yet is not an error.
 */
#ifndef HEISEN_DUMPER_SNAPSHOT_H
#define HEISEN_DUMPER_SNAPSHOT_H

#include "segment.h"

/* A thread slot, read under its seqlock. */
struct hs_tsnap {
	struct hs_thread t;                 /* held_count clamped, wait_kind/modes sane */
	char name[HS_THREAD_NAME_MAX + 1];  /* always terminated */
	uint32_t slot;
	bool torn;                          /* the seqlock never settled: fields may disagree */
};

/*
 * Copy thread slot `slot`.  Returns 1 for a live or exited thread (out
 * filled), 0 for a free slot or one past the table.  Retries the seqlock a
 * few times, then sets out->torn and uses the last copy.
 */
int hs_read_thread(struct hs_seg *seg, uint32_t slot, struct hs_tsnap *out);

/*
 * The newest records of ring `slot`, at most max, oldest first, stopping
 * at (and including) the newest HS_REC_THREAD_START so only the current
 * thread's records are returned.  Overwritten or torn records are skipped.
 * An acquisition with its release folded in (format.h HS_REC_FOLD_SHIFT)
 * comes out as two records, the plain acquisition (b = the lock id) and
 * the release after it (hs_folded_release), and an fd creation with its
 * close folded in as the plain creation and the close after it
 * (hs_folded_fd_close), both counted against max: a caller that wants a
 * whole ring passes twice ring_records.  Returns the
 * number copied into out; 0 when the slot has no ring.
 */
size_t hs_read_ring(struct hs_seg *seg, uint32_t slot, struct hs_record *out, size_t max);

/* The c of an HS_REC_LOCK_RELEASED that hs_read_ring made from a folded
 * acquisition (one the shim writes itself has c = 0): reports say so. */
#define HS_REC_RELEASE_FOLDED 1u

/* The release folded into acquisition record acq (acq->b >> HS_REC_FOLD_SHIFT
 * nonzero): an HS_REC_LOCK_RELEASED at the release's time, the same lock
 * (a, b = the lock id), stack 0, c = HS_REC_RELEASE_FOLDED, acq's seq. */
struct hs_record hs_folded_release(const struct hs_record *acq);

/* The close folded into fd creation record cr (cr->b >> HS_REC_FOLD_SHIFT
 * nonzero, format.h HS_REC_FD_FOLD_*): an HS_REC_FD_CLOSED at the close's
 * time with its stack, a = the number, b = the generation, c = its call,
 * cr's seq. */
struct hs_record hs_folded_fd_close(const struct hs_record *cr);

/*
 * Copy stack `id`.  Returns 0 with depth clamped to HS_STACK_DEPTH, or -1
 * for id 0, a stack not yet ready, or an id beyond the table (complained).
 */
int hs_read_stack(struct hs_seg *seg, uint32_t id, struct hs_stack *out);

/* Copy lock / edge `id`.  Returns 0, or -1 for id 0, an unpublished id, or
 * an id beyond the table (complained). */
int hs_read_lock(struct hs_seg *seg, uint32_t id, struct hs_lock *out);
int hs_read_edge(struct hs_seg *seg, uint32_t id, struct hs_edge *out);

/* Edge i of a potential-deadlock finding's cycle: rec->edges[i], or for a
 * cycle longer than HS_CYCLE_MAX, HS_T_CYCLE_EDGES[rec->offset + i].
 * Returns the edge id, 0 when it lies beyond the table (complained). */
uint32_t hs_read_cycle_edge(struct hs_seg *seg, const struct hs_finding *rec, uint32_t i);

/* Copy module `i` (< the modules count).  Returns 0 or -1. */
int hs_read_module(struct hs_seg *seg, uint32_t i, struct hs_module *out);

/*
 * Copy finding `i`.  Returns 0 when it is published (ready == 1) and of a
 * known kind; a potential deadlock's n is clamped to HS_CYCLE_MAX (an fd
 * finding's n counts history events: analyze.c clamps it).  -1 otherwise.  Edge and stack
 * ids inside are not checked here: they are checked where they are read.
 */
int hs_read_finding(struct hs_seg *seg, uint32_t i, struct hs_finding *out);

/* A slot of the fd table, read under its seqlock. */
struct hs_fdsnap {
	struct hs_fd f;       /* state, kind, call and close_call sane; path terminated and cleaned */
	int32_t fd;           /* the number: the slot's index */
	bool torn;            /* the seqlock never settled: fields may disagree */
};

/*
 * Copy slot `fd` of the fd table.  Returns 1 when the number was ever seen
 * (gen != 0; out filled), 0 for a slot never used or one past the table.
 * Retries the seqlock a few times, then sets out->torn.
 */
int hs_read_fd(struct hs_seg *seg, uint32_t fd, struct hs_fdsnap *out);

/*
 * Copy entry `i` of the fd finding history (HS_T_FD_HISTORY).  Returns 0
 * when it is published (seq 1), -1 when not yet, or when i is beyond the
 * table (complained).  op, kind and call are checked, path terminated.
 */
int hs_read_fd_history(struct hs_seg *seg, uint32_t i, struct hs_fd_event *out);

#endif
