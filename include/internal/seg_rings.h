/* SPDX-License-Identifier: MIT */
/*
 * internal/seg_rings.h — the records a process has written, as its rings'
 * heads say: one sum for heisen-dump (dumper/segment.c hs_seg_events, the
 * "events recorded" of a report and a part of stall.c's progress) and
 * heisen-run's watchdog (launcher/segment.c hr_seg_progress), and the head
 * of each live thread's ring, a part of a thread's progress for both
 * (internal/still.h; launcher/segment.c hr_seg_thread_heads, dumper/stall.c
 * hs_measure_still).  Not part of the installed API.
 *
 * The format keeps no shared counter (include/heisen/format.h): thread
 * slot i owns ring i, and a ring's head counts the records ever written to
 * it.  Slots are claimed in order (shim/threads.c), so the first slot still
 * HS_THREAD_FREE ends the rings that ever held a record.  The table
 * descriptors passed in may be the live shared memory (the watchdog keeps
 * a mapping and reads it every tick), so they are checked against the
 * mapping on every call.  Memory reads only.  Design: docs/design.md "The
 * session reader".
 */
#ifndef HEISEN_INTERNAL_SEG_RINGS_H
#define HEISEN_INTERNAL_SEG_RINGS_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <heisen/format.h>

/* The rings and thread tables of h lie inside a mapping of len bytes (and
 * inside h's segment_size), 8-byte aligned, with entries at least this
 * reader's structures: 1, else 0. */
static inline int hs_rings_usable(const struct hs_header *h, uint64_t len)
{
	const struct hs_table *t = &h->tables[HS_T_RINGS], *th = &h->tables[HS_T_THREADS];
	if (h->segment_size > len)
		return 0;
	if (t->capacity && (t->entry_size < sizeof(struct hs_ring_header) || t->offset % 8 || t->entry_size % 8 ||
			    t->offset > h->segment_size ||
			    (uint64_t)t->entry_size * t->capacity > h->segment_size - t->offset))
		return 0;
	if (th->capacity && (th->entry_size < sizeof(struct hs_thread) || th->offset % 8 || th->entry_size % 8 ||
			     th->offset > h->segment_size ||
			     (uint64_t)th->entry_size * th->capacity > h->segment_size - th->offset))
		return 0;
	return 1;
}

/* Thread slot i and its ring in the mapping base (hs_rings_usable checked;
 * i below both capacities). */
static inline const struct hs_thread *hs_rings_slot(const void *base, const struct hs_header *h, uint32_t i)
{
	const struct hs_table *th = &h->tables[HS_T_THREADS];
	return (const struct hs_thread *)(const void *)((const char *)base + th->offset + (uint64_t)i * th->entry_size);
}

static inline const struct hs_ring_header *hs_rings_ring(const void *base, const struct hs_header *h, uint32_t i)
{
	const struct hs_table *t = &h->tables[HS_T_RINGS];
	return (const struct hs_ring_header *)(const void *)((const char *)base + t->offset +
							     (uint64_t)i * t->entry_size);
}

/* How many slots to look at: both tables' capacity, the smaller. */
static inline uint32_t hs_rings_slots(const struct hs_header *h)
{
	uint32_t a = h->tables[HS_T_RINGS].capacity, b = h->tables[HS_T_THREADS].capacity;
	return a < b ? a : b;
}

/*
 * The records written to the rings of a segment mapped at base (len bytes;
 * h: its header, the live one or a checked copy): the sum of the heads of
 * the rings of every thread slot ever used, into *events.  Returns 0, or
 * -1 when the tables do not fit the mapping (*events untouched).
 */
static inline int hs_rings_events(const void *base, uint64_t len, const struct hs_header *h, uint64_t *events)
{
	uint64_t sum = 0;
	if (!base || !hs_rings_usable(h, len))
		return -1;
	for (uint32_t i = 0, n = hs_rings_slots(h); i < n; i++) {
		if (__atomic_load_n(&hs_rings_slot(base, h, i)->state, __ATOMIC_ACQUIRE) == HS_THREAD_FREE)
			break;
		sum += __atomic_load_n(&hs_rings_ring(base, h, i)->head, __ATOMIC_ACQUIRE);
	}
	*events = sum;
	return 0;
}

/*
 * The head of the ring of every live thread slot (HS_THREAD_LIVE) of the
 * segment mapped at base (len bytes; h: its header, the live one or a
 * checked copy): tids[i] and heads[i], at most max.  Returns how many, 0
 * when the tables do not fit the mapping.
 */
static inline size_t hs_rings_thread_heads(const void *base, uint64_t len, const struct hs_header *h, pid_t *tids,
					   uint64_t *heads, size_t max)
{
	size_t n = 0;
	if (!base || !hs_rings_usable(h, len))
		return 0;
	for (uint32_t i = 0, ns = hs_rings_slots(h); i < ns && n < max; i++) {
		const struct hs_thread *ts = hs_rings_slot(base, h, i);
		uint32_t state = __atomic_load_n(&ts->state, __ATOMIC_ACQUIRE);
		if (state == HS_THREAD_FREE)
			break; /* slots are claimed in order: none after */
		if (state != HS_THREAD_LIVE)
			continue;
		tids[n] = ts->tid;
		heads[n++] = __atomic_load_n(&hs_rings_ring(base, h, i)->head, __ATOMIC_RELAXED);
	}
	return n;
}

#endif
