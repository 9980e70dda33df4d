/* SPDX-License-Identifier: MIT */
/*
 * dumper/snapshot.c — copy published objects out of a segment, then check
 * them.  The publication protocols are those of format.h: tables published
 * by their count word, stacks and findings by their ready word, ring records
 * by a per-record sequence number, thread lock state by a per-thread seqlock.
 * Design: docs/design.md "The flight recorder".
 */
#include "snapshot.h"

#include <sched.h>
#include <string.h>

#define SEQLOCK_TRIES 64

/* Tables whose ids are handed out by the writer: 0 is reserved, ids at or
 * beyond capacity are corrupt, ids at or beyond count are not yet published. */
static const void *checked_id(struct hs_seg *seg, enum hs_table_id t, const char *what, uint32_t id)
{
	const void *e;
	if (id == 0)
		return NULL;
	e = hs_seg_entry(seg, t, id);
	if (!e) {
		hs_seg_complain(seg, "%s id %u out of range (capacity %u)", what, id,
				seg->hdr.tables[t].capacity);
		return NULL;
	}
	if (id >= hs_seg_count(seg, t))
		return NULL;
	return e;
}

static void sanitize_thread(struct hs_seg *seg, struct hs_tsnap *s)
{
	struct hs_thread *t = &s->t;
	if (t->held_count > HS_HELD_MAX) {
		hs_seg_complain(seg, "thread slot %u (tid %d): held_count %u > %u, clamped", s->slot,
				t->tid, t->held_count, HS_HELD_MAX);
		t->held_count = HS_HELD_MAX;
	}
	if (t->wait_kind > HS_WAIT_GIL) {
		hs_seg_complain(seg, "thread slot %u (tid %d): unknown wait kind %u", s->slot, t->tid,
				t->wait_kind);
		t->wait_kind = HS_WAIT_NONE;
	}
	if (t->wait_mode > HS_MODE_READ_RECURSIVE)
		t->wait_mode = HS_MODE_WRITE;
	for (uint32_t i = 0; i < t->held_count; i++)
		if (t->held[i].mode > HS_MODE_READ_RECURSIVE)
			t->held[i].mode = HS_MODE_WRITE;
	memcpy(s->name, t->name, HS_THREAD_NAME_MAX);
	s->name[HS_THREAD_NAME_MAX] = '\0';
	hs_clean(s->name);
}

int hs_read_thread(struct hs_seg *seg, uint32_t slot, struct hs_tsnap *out)
{
	const struct hs_thread *t = hs_seg_entry(seg, HS_T_THREADS, slot);
	uint32_t state;
	int tries;

	memset(out, 0, sizeof *out);
	if (!t)
		return 0;
	state = __atomic_load_n(&t->state, __ATOMIC_ACQUIRE);
	if (state != HS_THREAD_LIVE && state != HS_THREAD_EXITED)
		return 0;
	out->slot = slot;
	for (tries = 0; tries < SEQLOCK_TRIES; tries++) {
		/* acquire: the fields copied below are at least as new as s1 */
		uint64_t s1 = __atomic_load_n(&t->lock_seq, __ATOMIC_ACQUIRE);
		memcpy(&out->t, t, sizeof out->t);
		/* acquire fence: orders the copy before the second read of lock_seq */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(s1 & 1) && __atomic_load_n(&t->lock_seq, __ATOMIC_RELAXED) == s1)
			break;
		if (tries > SEQLOCK_TRIES / 2)
			sched_yield();
	}
	out->torn = tries == SEQLOCK_TRIES;
	out->t.state = state;
	sanitize_thread(seg, out);
	return 1;
}

/* Copy the record at absolute position pos; 0 when it is the one written there. */
static int read_record(const struct hs_record *r, uint64_t pos, struct hs_record *out)
{
	/* acquire: pairs with the writer's release of seq after the payload */
	uint64_t b;
	if (__atomic_load_n(&r->seq, __ATOMIC_ACQUIRE) != pos + 1)
		return -1;
	/* b whole and first: a fold (format.h HS_REC_FOLD_SHIFT) is one 64-bit store to
	   b, and a close folded into an fd creation stores its c before that b (acquire:
	   a folded b comes with its c) */
	b = __atomic_load_n(&r->b, __ATOMIC_ACQUIRE);
	memcpy(out, r, sizeof *out);
	out->b = b;
	if (out->type == HS_REC_FD_CREATED && (b >> HS_REC_FOLD_SHIFT) == 0)
		out->c &= 0xffffu; /* a close's fold caught half-way: the plain creation */
	/* acquire fence: the copy happens before the re-check of seq */
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != pos + 1)
		return -1;
	return 0;
}

struct hs_record hs_folded_fd_close(const struct hs_record *cr)
{
	struct hs_record cl = *cr;
	cl.ts_ns = cr->ts_ns + (cr->b >> HS_REC_FOLD_SHIFT) - 1;
	cl.type = HS_REC_FD_CLOSED;
	cl.stack = (uint32_t)(cr->c >> HS_REC_FD_FOLD_STACK_SHIFT);
	cl.b = cr->b & 0xffffffffu;
	cl.c = (cr->c >> HS_REC_FD_FOLD_CALL_SHIFT) & 0xffu;
	return cl;
}

struct hs_record hs_folded_release(const struct hs_record *acq)
{
	struct hs_record rel = *acq;
	rel.ts_ns = acq->ts_ns + (acq->b >> HS_REC_FOLD_SHIFT) - 1;
	rel.type = HS_REC_LOCK_RELEASED;
	rel.stack = 0;
	rel.c = HS_REC_RELEASE_FOLDED;
	rel.b = acq->b & 0xffffffffu;
	return rel;
}

size_t hs_read_ring(struct hs_seg *seg, uint32_t slot, struct hs_record *out, size_t max)
{
	const struct hs_ring_header *rh = hs_seg_entry(seg, HS_T_RINGS, slot);
	const struct hs_record *recs;
	uint64_t nrec = seg->hdr.ring_records, head, oldest, pos;
	size_t n = 0;

	if (!rh || nrec == 0 || max == 0)
		return 0;
	/* validated: the ring entry holds the header and nrec records */
	recs = (const struct hs_record *)(const void *)((const unsigned char *)rh + sizeof *rh);
	head = __atomic_load_n(&rh->head, __ATOMIC_ACQUIRE);
	oldest = head > nrec ? head - nrec : 0;
	/* Walk newest to oldest, fill out[] from the end, then slide to the front. */
	for (pos = head; pos > oldest && n < max; pos--) {
		struct hs_record r;
		if (read_record(&recs[(pos - 1) & (nrec - 1)], pos - 1, &r) != 0)
			continue;
		if (r.type == HS_REC_LOCK_ACQUIRED && (r.b >> HS_REC_FOLD_SHIFT) != 0) {
			/* a folded release: the release (newer) first, then the plain acquisition */
			out[max - 1 - n++] = hs_folded_release(&r);
			r.b &= 0xffffffffu;
			if (n == max)
				break;
		} else if (r.type == HS_REC_FD_CREATED && (r.b >> HS_REC_FOLD_SHIFT) != 0) {
			/* a folded close: the close (newer) first, then the plain creation */
			out[max - 1 - n++] = hs_folded_fd_close(&r);
			r.b &= 0xffffffffu;
			r.c &= 0xffffu;
			if (n == max)
				break;
		}
		out[max - 1 - n++] = r;
		if (r.type == HS_REC_THREAD_START)
			break;
	}
	memmove(out, out + (max - n), n * sizeof *out);
	return n;
}

int hs_read_stack(struct hs_seg *seg, uint32_t id, struct hs_stack *out)
{
	const struct hs_stack *s;
	if (id == 0)
		return -1;
	s = hs_seg_entry(seg, HS_T_STACKS, id);
	if (!s) {
		hs_seg_complain(seg, "stack id %u out of range (capacity %u)", id,
				seg->hdr.tables[HS_T_STACKS].capacity);
		return -1;
	}
	/* acquire: pairs with the writer's release of ready after pc[] */
	if (__atomic_load_n(&s->ready, __ATOMIC_ACQUIRE) != 1)
		return -1;
	memcpy(out, s, sizeof *out);
	if (out->depth > HS_STACK_DEPTH) {
		hs_seg_complain(seg, "stack %u: depth %u > %u, clamped", id, out->depth, HS_STACK_DEPTH);
		out->depth = HS_STACK_DEPTH;
	}
	return 0;
}

int hs_read_lock(struct hs_seg *seg, uint32_t id, struct hs_lock *out)
{
	const struct hs_lock *l = checked_id(seg, HS_T_LOCKS, "lock", id);
	if (!l)
		return -1;
	memcpy(out, l, sizeof *out);
	return 0;
}

int hs_read_edge(struct hs_seg *seg, uint32_t id, struct hs_edge *out)
{
	const struct hs_edge *e = checked_id(seg, HS_T_EDGES, "edge", id);
	if (!e)
		return -1;
	memcpy(out, e, sizeof *out);
	return 0;
}

uint32_t hs_read_cycle_edge(struct hs_seg *seg, const struct hs_finding *rec, uint32_t i)
{
	const uint64_t *e;
	if (rec->n <= HS_CYCLE_MAX)
		return i < HS_CYCLE_MAX ? rec->edges[i] : 0;
	if ((uint64_t)rec->offset + i >= hs_seg_count(seg, HS_T_CYCLE_EDGES) ||
	    !(e = hs_seg_entry(seg, HS_T_CYCLE_EDGES, rec->offset + i))) {
		hs_seg_complain(seg, "cycle edge %u + %u out of range (count %u)", rec->offset, i,
				hs_seg_count(seg, HS_T_CYCLE_EDGES));
		return 0;
	}
	return (uint32_t)__atomic_load_n(e, __ATOMIC_RELAXED);
}

int hs_read_module(struct hs_seg *seg, uint32_t i, struct hs_module *out)
{
	const struct hs_module *m;
	if (i >= hs_seg_count(seg, HS_T_MODULES) || !(m = hs_seg_entry(seg, HS_T_MODULES, i)))
		return -1;
	memcpy(out, m, sizeof *out);
	return 0;
}

int hs_read_finding(struct hs_seg *seg, uint32_t i, struct hs_finding *out)
{
	const struct hs_finding *f = hs_seg_entry(seg, HS_T_FINDINGS, i);
	if (!f)
		return -1;
	/* acquire: pairs with the writer's release of ready after the entry */
	if (__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) != 1)
		return -1;
	memcpy(out, f, sizeof *out);
	if (out->kind < HS_FIND_POTENTIAL_DEADLOCK || out->kind > HS_FIND_HEAP_BUFFER_OVERFLOW) {
		hs_seg_complain(seg, "finding %u: unknown kind %u", i, out->kind);
		return -1;
	}
	/* a longer cycle is in HS_T_CYCLE_EDGES[offset .. offset + n): all of it must be there */
	if (out->kind == HS_FIND_POTENTIAL_DEADLOCK && out->n > HS_CYCLE_MAX &&
	    (uint64_t)out->offset + out->n > hs_seg_count(seg, HS_T_CYCLE_EDGES)) {
		hs_seg_complain(seg, "finding %u: %u edges at %u beyond the cycle edges (%u), clamped", i, out->n,
				out->offset, hs_seg_count(seg, HS_T_CYCLE_EDGES));
		out->n = HS_CYCLE_MAX;
	}
	return 0;
}

/* ---- file descriptors ---------------------------------------------------- */

static void clean_path(char *path)
{
	path[HS_FD_PATH_MAX - 1] = '\0';
	hs_clean(path);
}

int hs_read_fd(struct hs_seg *seg, uint32_t fd, struct hs_fdsnap *out)
{
	const struct hs_fd *s = hs_seg_entry(seg, HS_T_FDS, fd);
	int tries;

	memset(out, 0, sizeof *out);
	if (!s)
		return 0;
	for (tries = 0; tries < SEQLOCK_TRIES; tries++) {
		/* acquire: the fields copied below are at least as new as q */
		uint32_t q = __atomic_load_n(&s->seq, __ATOMIC_ACQUIRE);
		memcpy(&out->f, s, sizeof out->f);
		/* acquire fence: orders the copy before the second read of seq */
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (!(q & 1) && __atomic_load_n(&s->seq, __ATOMIC_RELAXED) == q)
			break;
		if (tries > SEQLOCK_TRIES / 2)
			sched_yield();
	}
	out->torn = tries == SEQLOCK_TRIES;
	out->fd = (int32_t)fd;
	if (out->f.gen == 0)
		return 0;
	if (out->f.state > HS_FDS_CLOSED) {
		hs_seg_complain(seg, "fd %u: unknown state %u", fd, out->f.state);
		out->f.state = HS_FDS_CLOSED;
	}
	if (out->f.kind >= HS_FDK_COUNT) {
		hs_seg_complain(seg, "fd %u: unknown kind %u", fd, out->f.kind);
		out->f.kind = HS_FDK_UNKNOWN;
	}
	if (out->f.call >= HS_FDC_COUNT || out->f.close_call >= HS_FDC_COUNT) {
		hs_seg_complain(seg, "fd %u: unknown call %u/%u", fd, out->f.call, out->f.close_call);
		out->f.call = out->f.call >= HS_FDC_COUNT ? HS_FDC_NONE : out->f.call;
		out->f.close_call = out->f.close_call >= HS_FDC_COUNT ? HS_FDC_NONE : out->f.close_call;
	}
	clean_path(out->f.path);
	return 1;
}

int hs_read_fd_history(struct hs_seg *seg, uint32_t i, struct hs_fd_event *out)
{
	const struct hs_fd_event *e = hs_seg_entry(seg, HS_T_FD_HISTORY, i);
	if (!e) {
		hs_seg_complain(seg, "fd history entry %u out of range (capacity %u)", i,
				seg->hdr.tables[HS_T_FD_HISTORY].capacity);
		return -1;
	}
	/* acquire: pairs with the writer's release of seq after the copy */
	if (__atomic_load_n(&e->seq, __ATOMIC_ACQUIRE) != 1)
		return -1;
	memcpy(out, e, sizeof *out);
	if (out->op < HS_FDE_CREATE || out->op > HS_FDE_OWNER || out->kind >= HS_FDK_COUNT || out->call >= HS_FDC_COUNT) {
		hs_seg_complain(seg, "fd history entry %u: unknown op %u, kind %u or call %u", i, out->op, out->kind,
				out->call);
		return -1;
	}
	clean_path(out->path);
	return 0;
}
