/* SPDX-License-Identifier: MIT */
/*
 * shim/handover.c — hand-over order between threads, for the GIL rule
 * (lockgraph.c gil_cycle_can_deadlock; docs/design.md "Lock order", "A
 * GIL cycle needs two threads").
 *
 * A native lock whose acquiring thread changes from T1 to T2 is *shared*
 * (two threads can hold it at the same time) unless the change was a
 * hand-over: T1 released some other sync object after its last release of
 * the lock, and T2 acquired that object afterwards (a connection pool:
 * T1 puts the connection back under the pool's lock or queue, T2 takes it
 * out under the same one).  This is happens-before restricted to one
 * object at a time: the object may pass through any number of threads
 * between T1 and T2 (a pool's lock taken by T3 in between still orders T1
 * before T2, since a lock's critical sections are totally ordered), but an
 * order that crosses two objects (T1 -> X -> T3, then T3 -> Y -> T2) is
 * not a hand-over.  No vector clocks: each
 * object remembers, per releasing thread, that thread's release count at
 * its last release of the object; an acquirer learns those counts.
 *
 * The pieces:
 *   - each thread slot has a release count (order_clock[slot]), bumped at
 *     each release of a sync object (a mutex or spin lock unlock, a
 *     condition wait's release of its mutex, a sem_post that makes the
 *     semaphore available); it lives per slot, not per thread, so it keeps
 *     growing across the threads that reuse a slot (a stale count of a
 *     slot's earlier thread is always lower than its later thread's);
 *   - each sync object has two records (two-choice hashing, two places
 *     picked by different bits of its address's hash, ORDER_RECS records
 *     in all), each holding the last release (slot, count, way 0) and, in
 *     ORDER_WAYS ways indexed by slot, each releasing slot's last count;
 *     a release writes both, a reader takes each word from whichever
 *     record still holds it.  A collision (another object's record in
 *     the same place) overwrites way 0 and the other object's releasing
 *     slot's way; an ordering is lost only when that happens in both
 *     records (with one record, a thread's own other objects sharing the
 *     entry lost it in about one run in 30 of the connection pool of
 *     tests/test_gil_order.py).  A lost way 0 still leaves the other
 *     ways: an acquirer learns them, and a lock's last release is read
 *     from its last acquirer's way.  A lost ordering makes the lock
 *     shared, never the reverse: each word is stored with a check word
 *     (the address's hash xor the value), so a torn or foreign word is
 *     never read as this object's;
 *   - each thread has "seen" (in its area, HS_AREA_ORDER): per releasing
 *     slot (direct-mapped, ORDER_SEEN entries, tagged with the slot), the
 *     highest count of a release it acquired after;
 *   - the check, when lock L's acquirer changes (hs_order_handed_over_by,
 *     from hs_order_acquirer_changed): L's last release was by slot S at
 *     count c; it was handed over iff this thread has seen a release of S
 *     with a count above c — a release made after L's (the record of L
 *     itself is learnt only after the check);
 *   - a hand-over by a thread that then ends before it acquires anything
 *     again is not one: the two threads' uses were ordered by their
 *     lifetimes (CPython's threading takes its own locks at a thread's end
 *     and the next one's start, so start; join orders through one object),
 *     which is how a test runs a deadlock's two sides one after the
 *     other.  Such a lock is *outlived*: it counts as shared for the GIL
 *     cycles its new thread makes an edge of from then on
 *     (hs_graph_lock_outlived).  A thread's end is seen late (its exit
 *     destructor, after a join has returned), so a hand-over from a live
 *     thread waits in a short list (pending) for the first of: that
 *     thread acquires a sync object again (a hand-over), or it ends
 *     (outlived).
 *
 * rwlocks are not sync objects here (two readers do not order each other)
 * and are always judged by the old rule (shared at the first change of
 * acquirer).  CPython's GIL (its mutex and condition variables inside
 * _PyRuntime, hs_py_internal) never reaches these functions: every Python
 * thread takes and drops it all the time, so it would order everything.
 *
 * Cost (handover.h, inline in the hooks): a release of the object this
 * thread released last is a compare and four stores, another is a
 * multiply, a count and eight stores (two records; each word beside its check, so one or two
 * lines a record); an acquisition whose object this thread released last
 * is two loads (one line) and a compare; only an acquisition from another
 * thread reads the ways (bench/README.md "Hand-over order").  Async-signal-safe, no allocation; the
 * pending list has a spin lock, taken only inside a hook (the guard held),
 * never while waiting.
 */
#include <string.h>

#include "handover.h"

struct order_rec hs_order_tab[ORDER_RECS] __attribute__((aligned(4096)));
uint8_t hs_order_written[ORDER_PAGES]; /* [atomic] handover.h */
uint32_t hs_order_pending_n[ORDER_SLOTS]; /* [atomic] hand-overs pending per slot (below) */
/* each slot's release count; written by the slot's thread only, at each
 * release of another object than its last: one cache line a slot, so that
 * threads releasing at once on two cores do not pass one line between them
 * (eight slots' counts shared one; 256 KiB of address space, a page per 64
 * slots backed as they are used) */
static struct {
	uint64_t count;
	char pad[56];
} order_clock[ORDER_SLOTS] __attribute__((aligned(64)));

/* A release by slot of the object of key, at its records r and r2; returns the value stored. */
static inline uint64_t order_release_at(struct order_rec *r, struct order_rec *r2, uint32_t slot, unsigned way,
					uint64_t key)
{
	uint64_t v = (uint64_t)(slot + 1) << 48 | (++order_clock[slot].count & COUNT_MASK);
	order_page_mark(r);
	order_page_mark(r2);
	order_put(r, way, key, v);
	order_put(r, 0, key, v);
	order_put(r2, way, key, v);
	order_put(r2, 0, key, v);
	return v;
}

void hs_order_release_by(uint32_t slot, uint64_t addr)
{
	uint64_t key = order_key(addr);
	if (slot < ORDER_SLOTS)
		(void)order_release_at(order_rec_of(key), order_rec2_of(key), slot, 1 + slot % ORDER_WAYS, key);
}

/* The last release of the object of key as way 0 of either record holds it, else 0. */
static uint64_t order_last(uint64_t key)
{
	uint64_t v = order_word(order_rec_of(key), 0, key);
	return v ? v : order_word(order_rec2_of(key), 0, key);
}

/* Learn v (a release of its slot) into seen. */
static inline void seen_learn(uint64_t *seen, uint64_t v)
{
	uint64_t *e = &seen[(v >> 48) & (ORDER_SEEN - 1)];
	if ((*e >> 48) != (v >> 48) || *e < v)
		*e = v; /* another slot in the entry: the newer one wins (the older's orderings are lost) */
}

/* Learn the releases of the records r and r2 of key (its last one: last, 0 when
 * unknown) into seen; out of line (the rare path). */
void hs_order_learn(const struct order_rec *r, const struct order_rec *r2, uint64_t *seen, uint64_t key,
		    uint64_t last)
{
	if (last)
		seen_learn(seen, last);
	for (unsigned i = 1; i <= ORDER_WAYS; i++) {
		uint64_t v = order_word(r, i, key), v2 = order_word(r2, i, key);
		if (v)
			seen_learn(seen, v);
		if (v2)
			seen_learn(seen, v2);
	}
}

void hs_order_acquire_by(uint32_t slot, uint64_t *seen, uint64_t addr)
{
	uint64_t key = order_key(addr);
	uint64_t last = order_last(key);
	if ((last >> 48) == (uint64_t)slot + 1)
		return; /* this thread released it last: nothing new to learn */
	/* way 0 lost in both records (last 0): the ways may still be its */
	hs_order_learn(order_rec_of(key), order_rec2_of(key), seen, key, last);
}

/*
 * The last release of the lock of key: way 0 of either record when it is
 * the lock's; else (other objects took way 0 of both: collisions) the
 * lock's way of slot `from` in either record when it holds from's
 * release.  That is the lock's last release when `from` is the slot of its
 * last acquirer: a lock is released by its holder, and each release by a
 * slot writes its way.  0 when unknown.
 */
static uint64_t lock_last_release(uint64_t key, uint32_t from)
{
	uint64_t v = order_last(key);
	if (v || from >= ORDER_SLOTS)
		return v;
	v = order_word(order_rec_of(key), 1 + from % ORDER_WAYS, key);
	if ((v >> 48) != (uint64_t)from + 1)
		v = order_word(order_rec2_of(key), 1 + from % ORDER_WAYS, key);
	return (v >> 48) == (uint64_t)from + 1 ? v : 0;
}

/* Whether this thread (slot, seen) is ordered after release v of another slot. */
static int seen_after(uint32_t slot, const uint64_t *seen, uint64_t v)
{
	uint64_t e;
	if (!v || (v >> 48) == (uint64_t)slot + 1)
		return 0; /* no record (lost to a collision), or released last by this thread for another holder */
	e = seen[(v >> 48) & (ORDER_SEEN - 1)];
	return (e >> 48) == (v >> 48) && (e & COUNT_MASK) > (v & COUNT_MASK);
}

int hs_order_handed_over_from(uint32_t slot, const uint64_t *seen, uint64_t addr, uint32_t from)
{
	return seen_after(slot, seen, lock_last_release(order_key(addr), from));
}

int hs_order_handed_over_by(uint32_t slot, const uint64_t *seen, uint64_t addr)
{
	return hs_order_handed_over_from(slot, seen, addr, ORDER_SLOTS);
}

void hs_order_forget(uint64_t addr)
{
	uint64_t key = order_key(addr);
	struct order_rec *r = order_rec_of(key), *r2 = order_rec2_of(key);
	for (unsigned i = 0; i <= ORDER_WAYS; i++) { /* each word: way 0 may be another object's, the ways still its */
		if (order_word(r, i, key))
			order_put(r, i, key, 0);
		if (order_word(r2, i, key))
			order_put(r2, i, key, 0);
	}
}

#ifndef HS_CORE_ONLY
/* First use in this thread (or in a fork child): the slot index for t->slot. */
struct order_self *hs_order_self_bind(struct order_self *me, const struct hs_tls *t)
{
	uint32_t slot = (uint32_t)(t->slot - hs_seg.threads);
	if (slot >= ORDER_SLOTS)
		return NULL;
	me->slot_of = t->slot;
	me->slot = slot;
	me->way = 1 + slot % ORDER_WAYS;
	me->rel_addr = me->acq_addr = 0;
	return me;
}

/*
 * Hand-overs waiting for the fate of the thread that handed over: a lock
 * handed from T1 to T2 is a hand-over only if T1 goes on (it acquires a
 * sync object after T2's check); if T1 ends first, the order between
 * them was the threads' lifetimes (T2 started after T1 ended: how a test
 * runs the two sides of a deadlock one after the other), and the lock is
 * shared.  PENDING_MAX entries under pending_lock; hs_order_pending_n[slot] counts
 * those naming each slot, so an acquisition looks with one load.  A full
 * table makes the lock shared at once.
 */
#define PENDING_MAX 64u
struct pending {
	uint64_t addr;          /* the lock's hs_lock.addr: still that lock while it is the same */
	uint32_t id;            /* its lock id, 0 = a free entry */
	uint32_t slot;          /* T1's slot */
	int32_t tid;            /* T1 */
	int32_t tid2;           /* T2, who took it */
	uint32_t stack;         /* T2's acquisition stack */
	uint64_t when;          /* T2's acquisition time */
	uint32_t gen;           /* hs_seg_gen when made (a fork child ignores its parent's) */
};
static struct pending pending_tab[PENDING_MAX];
static int pending_lock;

/*
 * The lock id (whose hs_lock.addr was addr: still that lock) is shared, or
 * (outlived) was taken by tid2 after its last user ended: search the GIL
 * cycles it closes.
 */
static void order_shared(struct hs_tls *t, uint32_t id, uint64_t addr, int32_t tid2, uint32_t stack, uint64_t now,
			 int outlived)
{
	uint32_t finding;
	if (id >= __atomic_load_n(&hs_seg.hdr->tables[HS_T_LOCKS].count, __ATOMIC_ACQUIRE) ||
	    __atomic_load_n(&hs_seg.locks[id].addr, __ATOMIC_RELAXED) != addr)
		return; /* that lock ended meanwhile */
	finding = outlived ? hs_graph_lock_outlived(&hs_seg, id, tid2, now, stack)
			   : hs_graph_lock_shared(&hs_seg, id, tid2, now, stack);
	if (finding)
		hs_rec(t, now, HS_REC_FINDING, 0, finding - 1, 0, 0);
}

/*
 * Settle the hand-overs from slot `slot`: its thread `tid` goes on
 * (ended = 0: each was a hand-over, unless it names an earlier thread of
 * the slot, which ended unseen) or ends (ended = 1: each lock is shared).
 */
void hs_order_pending_settle(struct hs_tls *t, uint32_t slot, int32_t tid, int ended)
{
	struct pending shared[PENDING_MAX];
	unsigned n = 0;
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	hs_spin_lock(&pending_lock);
	for (unsigned i = 0; i < PENDING_MAX; i++) {
		struct pending *p = &pending_tab[i];
		if (!p->id || p->slot != slot)
			continue;
		if (p->gen == gen && (ended || p->tid != tid))
			shared[n++] = *p;
		p->id = 0;
		__atomic_sub_fetch(&hs_order_pending_n[slot], 1, __ATOMIC_RELAXED);
	}
	hs_spin_unlock(&pending_lock);
	for (unsigned i = 0; i < n; i++)
		order_shared(t, shared[i].id, shared[i].addr, shared[i].tid2, shared[i].stack, shared[i].when, 1);
}

/* A release of another object than this thread's last one. */
void hs_order_release_new(struct order_self *me, uint64_t addr)
{
	me->rel_addr = addr;
	me->rel_key = order_key(addr);
	me->rel_rec = order_rec_of(me->rel_key);
	me->rel_rec2 = order_rec2_of(me->rel_key);
	me->rel_v = order_release_at(me->rel_rec, me->rel_rec2, me->slot, me->way, me->rel_key);
}

/*
 * The slot of thread tid among the releases in the ways of the records of
 * key (the lock's last acquirer, for lock_last_release when way 0 of both
 * was taken by other objects); ORDER_SLOTS when none is its.
 */
static uint32_t way_slot_of(uint64_t key, int32_t tid)
{
	uint32_t cap = hs_seg.hdr->tables[HS_T_THREADS].capacity;
	const struct order_rec *rs[2] = {order_rec_of(key), order_rec2_of(key)};
	for (unsigned k = 0; k < 2; k++)
		for (unsigned i = 1; i <= ORDER_WAYS; i++) {
			uint64_t v = order_word(rs[k], i, key);
			uint32_t s = (uint32_t)(v >> 48) - 1;
			if (v && s < ORDER_SLOTS && s < cap && hs_seg.threads[s].tid == tid)
				return s;
		}
	return ORDER_SLOTS;
}

void hs_order_acquirer_changed(struct hs_tls *t, uint32_t id, uint64_t addr, int32_t last, int ordered,
			       uint32_t stack, uint64_t now)
{
	struct order_self *me = ordered ? order_self(t) : NULL;
	uint32_t from;
	uint64_t rec = 0, key = order_key(addr);
	uint64_t ident = __atomic_load_n(&hs_seg.locks[id].addr, __ATOMIC_RELAXED); /* a class's key, else addr */
	if (me) {
		rec = order_last(key);
		if (!rec) /* way 0 lost to collisions in both records: the last acquirer's own way */
			rec = lock_last_release(key, way_slot_of(key, last));
	}
	if (me && seen_after(me->slot, me->seen, rec)) {
		from = (uint32_t)(rec >> 48) - 1;
		if (from >= ORDER_SLOTS || from >= hs_seg.hdr->tables[HS_T_THREADS].capacity ||
		    __atomic_load_n(&hs_seg.threads[from].state, __ATOMIC_ACQUIRE) != HS_THREAD_LIVE ||
		    hs_seg.threads[from].tid != last) {
			/* handed over by a thread that has ended since: outlived */
			order_shared(t, id, ident, t->tid, stack, now, 1);
			return;
		}
		/* handed over by a thread still live: wait for its fate */
		{
			hs_spin_lock(&pending_lock);
			for (unsigned i = 0; i < PENDING_MAX; i++) {
				struct pending *p = &pending_tab[i];
				if (p->id)
					continue;
				*p = (struct pending){ident, id, from, last, t->tid, stack, now,
						      __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED)};
				__atomic_add_fetch(&hs_order_pending_n[from], 1, __ATOMIC_RELAXED);
				hs_spin_unlock(&pending_lock);
				return;
			}
			hs_spin_unlock(&pending_lock);
		}
	}
	order_shared(t, id, ident, t->tid, stack, now, 0);
}

void hs_order_thread_exit(struct hs_tls *t)
{
	uint32_t slot = (uint32_t)(t->slot - hs_seg.threads);
	if (slot < ORDER_SLOTS && __atomic_load_n(&hs_order_pending_n[slot], __ATOMIC_RELAXED))
		hs_order_pending_settle(t, slot, t->tid, 1);
}
#endif
