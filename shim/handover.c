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
 *   - each sync object has a record, taken at its first release and
 *     given back when the object ends (hs_order_forget: a semaphore's
 *     sem_destroy or sem_init, a mutex's destroy or init), holding its
 *     last release (slot, count, way 0) and, in ORDER_WAYS ways indexed
 *     by slot, each releasing slot's last count.  Placement is dense: the
 *     records are a pool taken in order (the last one given back first,
 *     else the pool's next unused one), so the pages written grow with
 *     the objects in use at once, not with the objects ever seen (a
 *     Python service makes a queue waiter lock per blocking wait, each at
 *     a new address while the heap's quarantine holds the last ones: with
 *     two records placed by the address's hash, every page of a 1 MiB
 *     table was written; bench/README.md "The hand-over records on the
 *     pages of the objects in use").  An index of 4-byte entries (bucketed,
 *     two buckets per address: two-choice) maps the address's hash to its
 *     record, with 19 bits of the hash as a tag.  A record is one
 *     object's alone, so another object's releases never take its words;
 *     an ordering is lost only when (a) both of its index buckets are full
 *     (eight other objects of those buckets in use: it gets no record),
 *     (b) the pool is used up (ORDER_RECS - 1 objects in use: the next
 *     ones share records placed by the hash, as a direct-mapped table),
 *     or (c) two slots of one way (slot % ORDER_WAYS) released it.  A
 *     thread caches its last objects' records (handover.h struct
 *     order_self); a forget that gives a record back first moves
 *     hs_order_epoch, and a thread uses its cached records only at the
 *     epoch it cached them at, so no thread writes or reads, through the
 *     address of an object that ended, a record that another object took
 *     since (the object made again at that address gets its own).  A
 *     long-lived lock keeps its record however many short-lived objects
 *     come and go around it (they take and give back other records); a
 *     lost way 0 still leaves the other ways: an acquirer learns them,
 *     and a lock's last release is read from its last acquirer's way.
 *     A lost ordering makes the lock shared, never the reverse: each word
 *     is stored with a check word (the address's hash xor the value), so
 *     a torn word, a word of the record's earlier owner or of an object
 *     sharing it is never read as this object's;
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
 * thread released last is a compare and two stores; another is a call, a
 * multiply, the index's lookup (one or two 16-byte buckets; none when the
 * thread acquired that object last), a count and four stores; an
 * acquisition whose object this thread released last is two loads (one
 * line) and a compare, plus the index's lookup when it is another object
 * than the thread's last acquisition; only an acquisition from another
 * thread reads the ways (bench/README.md "Hand-over order").
 * Async-signal-safe, lock-free (the index's entries and the list of
 * records given back change by compare-and-swap), no allocation; the
 * pending list has a spin lock, taken only inside a hook (the guard held),
 * never while waiting.  The pool, the index and the list are
 * process-private .bss: a fork child keeps them, with its addresses.
 */
#include <string.h>

#include "handover.h"

struct order_rec hs_order_tab[ORDER_RECS] __attribute__((aligned(4096)));
uint32_t hs_order_idx[ORDER_IDX_BUCKETS][ORDER_IDX_WAYS] __attribute__((aligned(4096))); /* [atomic] handover.h */
uint8_t hs_order_idx_written[ORDER_IDX_PAGES]; /* [atomic] handover.h */
const struct order_rec hs_order_none; /* never written (read-only) */
uint32_t hs_order_pending_n[ORDER_SLOTS]; /* [atomic] hand-overs pending per slot (below) */
struct order_epoch hs_order_epoch __attribute__((aligned(64))); /* [atomic] handover.h */
/* each slot's release count; written by the slot's thread only, at each
 * release of another object than its last: one cache line a slot, so that
 * threads releasing at once on two cores do not pass one line between them
 * (eight slots' counts shared one; 256 KiB of address space, a page per 64
 * slots backed as they are used) */
static struct {
	uint64_t count;
	char pad[56];
} order_clock[ORDER_SLOTS] __attribute__((aligned(64)));
/* The records given back (a stack, lock-free): order_free the top, (pops
 * << 32) | its number (0: empty; the pop count makes a compare-and-swap
 * fail after an A-B-A of the top), order_free_next each one's next; and
 * the pool's records taken so far (the next unused one is order_used + 1). */
static uint64_t order_free;                  /* [atomic] */
static uint32_t order_free_next[ORDER_RECS]; /* [atomic] */
static uint32_t order_used;                  /* [atomic] */
/* Where a release writes when the object has no record (both its index
 * buckets full): written, never read. */
static struct order_rec order_sink;

/* Bucket k (0, 1) of key: bits 53..63, bits 23..33. */
static inline uint32_t *order_bucket(uint64_t key, unsigned k)
{
	return hs_order_idx[k ? (key >> 23) & (ORDER_IDX_BUCKETS - 1) : key >> 53];
}

/* key's tag in an entry: its bits 34..52 (neither bucket's) */
static inline uint32_t order_tag(uint64_t key)
{
	return (uint32_t)(key >> 21) & ORDER_ENTRY_TAG;
}

/* b's page of the index: its pages (page-aligned) are consecutive page numbers */
static inline uint8_t *order_idx_page(const uint32_t *b)
{
	return &hs_order_idx_written[((uintptr_t)b >> 12) & (ORDER_IDX_PAGES - 1)];
}

static inline struct order_rec *order_rec_at(uint32_t e)
{
	return &hs_order_tab[e & ORDER_ENTRY_REC];
}

/* The index entry of key (its value into *ev), NULL when it has none. */
static uint32_t *order_find(uint64_t key, uint32_t *ev)
{
	uint32_t tag = order_tag(key);
	for (unsigned k = 0; k < 2; k++) {
		uint32_t *b = order_bucket(key, k);
		if (!__atomic_load_n(order_idx_page(b), __ATOMIC_RELAXED))
			continue; /* never written: not read */
		for (unsigned i = 0; i < ORDER_IDX_WAYS; i++) {
			uint32_t e = __atomic_load_n(&b[i], __ATOMIC_RELAXED);
			if (e && (e & ORDER_ENTRY_TAG) == tag) {
				*ev = e;
				return &b[i];
			}
		}
	}
	return NULL;
}

/* An empty entry for key: the first of its first bucket, else of its second; NULL when both are full. */
static uint32_t *order_empty(uint64_t key)
{
	for (unsigned k = 0; k < 2; k++) {
		uint32_t *b = order_bucket(key, k);
		if (!__atomic_load_n(order_idx_page(b), __ATOMIC_RELAXED))
			return b; /* a page never written is empty: not read (its first touch a write) */
		for (unsigned i = 0; i < ORDER_IDX_WAYS; i++)
			if (!__atomic_load_n(&b[i], __ATOMIC_RELAXED))
				return &b[i];
	}
	return NULL;
}

/* A record from the ones given back, else the pool's next unused one; 0 when the pool is used up. */
static uint32_t order_take(void)
{
	uint64_t h = __atomic_load_n(&order_free, __ATOMIC_ACQUIRE);
	uint32_t r;
	while ((uint32_t)h) {
		uint64_t n = ((h >> 32) + 1) << 32 |
			     __atomic_load_n(&order_free_next[(uint32_t)h & ORDER_ENTRY_REC], __ATOMIC_RELAXED);
		if (__atomic_compare_exchange_n(&order_free, &h, n, 0, __ATOMIC_ACQUIRE, __ATOMIC_ACQUIRE))
			return (uint32_t)h & ORDER_ENTRY_REC;
	}
	if (__atomic_load_n(&order_used, __ATOMIC_RELAXED) >= ORDER_RECS - 1)
		return 0; /* (checked first: the count never wraps round) */
	r = __atomic_add_fetch(&order_used, 1, __ATOMIC_RELAXED);
	return r < ORDER_RECS ? r : 0;
}

/* Give record r back (its object ended). */
static void order_give(uint32_t r)
{
	uint64_t h = __atomic_load_n(&order_free, __ATOMIC_RELAXED), n;
	do {
		__atomic_store_n(&order_free_next[r], (uint32_t)h, __ATOMIC_RELAXED);
		n = ((h >> 32) + 1) << 32 | r;
	} while (!__atomic_compare_exchange_n(&order_free, &h, n, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED));
}

/*
 * The record of key for a release: its own when the index has it, else a
 * new one entered in the index (shared, placed by the key, when the pool
 * is used up; order_sink when both buckets are full).  Two threads making
 * the first release of one object at once (two sem_posts) race for the
 * same empty entry: the loser finds the winner's entry and gives its
 * record back.
 */
static struct order_rec *order_claim(uint64_t key)
{
	uint32_t e, *slot, r;
	for (;;) {
		if ((slot = order_find(key, &e)) != NULL)
			return order_rec_at(e);
		if (!(slot = order_empty(key)))
			return &order_sink; /* eight objects in use in its two buckets: it has none */
		r = order_take();
		e = order_tag(key) | (r ? r : ORDER_ENTRY_FIXED | ((uint32_t)(key >> 52) ? (uint32_t)(key >> 52) : 1));
		{
			uint8_t *w = order_idx_page(slot);
			if (HS_UNLIKELY(!__atomic_load_n(w, __ATOMIC_RELAXED)))
				__atomic_store_n(w, 1, __ATOMIC_RELAXED);
		}
		{
			uint32_t empty = 0;
			if (__atomic_compare_exchange_n(slot, &empty, e, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				return order_rec_at(e);
		}
		if (r)
			order_give(r);
	}
}

const struct order_rec *hs_order_rec_of(uint64_t addr)
{
	uint32_t e;
	return order_find(order_key(addr), &e) ? order_rec_at(e) : NULL;
}

/* The record of key for a reader: its own, else hs_order_none. */
static const struct order_rec *order_rec_read(uint64_t key)
{
	uint32_t e;
	return order_find(key, &e) ? order_rec_at(e) : &hs_order_none;
}

/* A release by slot of the object of key, at its record r; returns the value stored. */
static inline uint64_t order_release_at(struct order_rec *r, uint32_t slot, unsigned way, uint64_t key)
{
	uint64_t v = (uint64_t)(slot + 1) << 48 | (++order_clock[slot].count & COUNT_MASK);
	order_put(r, way, key, v);
	order_put(r, 0, key, v);
	return v;
}

void hs_order_release_by(uint32_t slot, uint64_t addr)
{
	uint64_t key = order_key(addr);
	if (slot < ORDER_SLOTS)
		(void)order_release_at(order_claim(key), slot, 1 + slot % ORDER_WAYS, key);
}

/* Learn v (a release of its slot) into seen. */
static inline void seen_learn(uint64_t *seen, uint64_t v)
{
	uint64_t *e = &seen[(v >> 48) & (ORDER_SEEN - 1)];
	if ((*e >> 48) != (v >> 48) || *e < v)
		*e = v; /* another slot in the entry: the newer one wins (the older's orderings are lost) */
}

/* Learn the releases of record r of key (its last one: last, 0 when unknown) into seen. */
static void order_learn_rec(const struct order_rec *r, uint64_t *seen, uint64_t key, uint64_t last)
{
	if (last)
		seen_learn(seen, last);
	for (unsigned i = 1; i <= ORDER_WAYS; i++) {
		uint64_t v = order_word(r, i, key);
		if (v)
			seen_learn(seen, v);
	}
}

void hs_order_acquire_by(uint32_t slot, uint64_t *seen, uint64_t addr)
{
	uint64_t key = order_key(addr);
	const struct order_rec *r = order_rec_read(key);
	uint64_t last = order_word(r, 0, key);
	if ((last >> 48) == (uint64_t)slot + 1)
		return; /* this thread released it last: nothing new to learn */
	/* way 0 lost (last 0): the ways may still be its */
	order_learn_rec(r, seen, key, last);
}

/*
 * The last release of the lock of key: way 0 of its record when it is the
 * lock's; else (another object took way 0: a record shared once the pool
 * was used up, or given back and taken while still cached) the lock's way
 * of slot `from` when it holds from's release.  That is the lock's last
 * release when `from` is the slot of its last acquirer: a lock is
 * released by its holder, and each release by a slot writes its way.  0
 * when unknown.
 */
static uint64_t lock_last_release(uint64_t key, uint32_t from)
{
	const struct order_rec *r = order_rec_read(key);
	uint64_t v = order_word(r, 0, key);
	if (v || from >= ORDER_SLOTS)
		return v;
	v = order_word(r, 1 + from % ORDER_WAYS, key);
	return (v >> 48) == (uint64_t)from + 1 ? v : 0;
}

/* Whether this thread (slot, seen) is ordered after release v of another slot. */
static int seen_after(uint32_t slot, const uint64_t *seen, uint64_t v)
{
	uint64_t e;
	if (!v || (v >> 48) == (uint64_t)slot + 1)
		return 0; /* no record (lost), or released last by this thread for another holder */
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

/*
 * The object at addr ended: its index entries are emptied, its words in
 * its record cleared (a record placed by the key may hold other objects'
 * words too: only its own), and its record given back.  An entry emptied
 * by one caller (the compare-and-swap) is given back once.
 */
void hs_order_forget(uint64_t addr)
{
	uint64_t key = order_key(addr);
	uint32_t tag = order_tag(key);
	for (unsigned k = 0; k < 2; k++) {
		uint32_t *b = order_bucket(key, k);
		if (!__atomic_load_n(order_idx_page(b), __ATOMIC_RELAXED))
			continue;
		for (unsigned i = 0; i < ORDER_IDX_WAYS; i++) {
			uint32_t e = __atomic_load_n(&b[i], __ATOMIC_RELAXED);
			struct order_rec *r;
			if (!e || (e & ORDER_ENTRY_TAG) != tag ||
			    !__atomic_compare_exchange_n(&b[i], &e, 0, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
				continue;
			r = order_rec_at(e);
			for (unsigned w = 0; w <= ORDER_WAYS; w++)
				if (order_word(r, w, key))
					order_put(r, w, key, 0);
			if (!(e & ORDER_ENTRY_FIXED)) {
				/* the threads' records cached through addr are stale from here; then the record
				 * is emptied whole (a word a stale cache wrote meanwhile included) and given back */
				__atomic_add_fetch(&hs_order_epoch.n, 1, __ATOMIC_SEQ_CST);
				for (unsigned w = 0; w <= ORDER_WAYS; w++) {
					__atomic_store_n(&r->w[w].val, 0, __ATOMIC_RELAXED);
					__atomic_store_n(&r->w[w].chk, 0, __ATOMIC_RELAXED);
				}
				order_give(e & ORDER_ENTRY_REC);
			}
		}
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
	me->memo[0].addr = me->memo[1].addr = 0;
	me->epoch = __atomic_load_n(&hs_order_epoch.n, __ATOMIC_RELAXED);
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

/* The memo's entry of addr, NULL when it has none. */
static inline struct order_memo *order_memo_of(struct order_self *me, uint64_t addr)
{
	if (me->memo[0].addr == addr)
		return &me->memo[0];
	if (me->memo[1].addr == addr)
		return &me->memo[1];
	return NULL;
}

/* addr's record (never hs_order_none nor order_sink) into the memo, as its newest entry. */
static inline void order_memo_put(struct order_self *me, uint64_t addr, uint64_t key, struct order_rec *rec)
{
	me->memo[1] = me->memo[0];
	me->memo[0] = (struct order_memo){addr, key, rec};
}

/* The thread's cached records dropped when a record was given back since they were cached. */
static inline void order_self_epoch(struct order_self *me)
{
	uint32_t e = __atomic_load_n(&hs_order_epoch.n, __ATOMIC_RELAXED);
	if (HS_UNLIKELY(me->epoch != e)) {
		me->epoch = e;
		me->rel_addr = me->acq_addr = 0;
		me->memo[0].addr = me->memo[1].addr = 0;
	}
}

/* A release of another object than this thread's last one (or the epoch moved). */
void hs_order_release_new(struct order_self *me, uint64_t addr)
{
	const struct order_memo *m;
	order_self_epoch(me);
	m = order_memo_of(me, addr);
	me->rel_addr = addr;
	if (m) {
		me->rel_key = m->key;
		me->rel_rec = m->rec;
	} else {
		me->rel_key = order_key(addr);
		me->rel_rec = order_claim(me->rel_key);
		if (me->rel_rec != &order_sink)
			order_memo_put(me, addr, me->rel_key, me->rel_rec);
	}
	me->rel_v = order_release_at(me->rel_rec, me->slot, me->way, me->rel_key);
}

/* An acquisition of another object than this thread's last one (or the epoch moved). */
void hs_order_acquire_look(struct order_self *me, uint64_t addr)
{
	const struct order_memo *m;
	uint32_t e;
	order_self_epoch(me);
	m = order_memo_of(me, addr);
	me->acq_addr = addr;
	if (m) {
		me->acq_key = m->key;
		me->acq_rec = m->rec;
		return;
	}
	me->acq_key = order_key(addr);
	if (order_find(me->acq_key, &e)) {
		me->acq_rec = order_rec_at(e);
		order_memo_put(me, addr, me->acq_key, order_rec_at(e));
	} else {
		me->acq_rec = &hs_order_none;
	}
}

/* Forget what the thread keeps of addr's record (its last release and
 * acquisition, its memo): the object ended, or its record changed. */
static void order_self_drop(struct order_self *me, uint64_t addr)
{
	if (me->rel_addr == addr)
		me->rel_addr = 0;
	if (me->acq_addr == addr)
		me->acq_addr = 0;
	for (unsigned i = 0; i < 2; i++)
		if (me->memo[i].addr == addr)
			me->memo[i].addr = 0;
}

void hs_order_learn(struct order_self *me, uint64_t last)
{
	if (!last) {
		/* none of its releases in the record looked up: it may have another record since
		 * (its own, given back and taken again), or one now */
		uint64_t addr = me->acq_addr;
		const struct order_rec *r = order_rec_read(me->acq_key);
		if (r != me->acq_rec) {
			order_self_drop(me, addr);
			me->acq_addr = addr;
			me->acq_rec = r;
		}
		if (r == &hs_order_none)
			return; /* never released (or lost): nothing to learn */
		last = order_word(r, 0, me->acq_key);
		if ((last >> 48) == (uint64_t)me->slot + 1)
			return;
	}
	order_learn_rec(me->acq_rec, me->seen, me->acq_key, last);
}

/*
 * The slot of thread tid among the releases in the ways of the record of
 * key (the lock's last acquirer, for lock_last_release when way 0 was
 * taken by another object); ORDER_SLOTS when none is its.
 */
static uint32_t way_slot_of(uint64_t key, int32_t tid)
{
	uint32_t cap = hs_seg.hdr->tables[HS_T_THREADS].capacity;
	const struct order_rec *r = order_rec_read(key);
	for (unsigned i = 1; i <= ORDER_WAYS; i++) {
		uint64_t v = order_word(r, i, key);
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
		rec = lock_last_release(key, ORDER_SLOTS);
		if (!rec) /* way 0 taken by another object: the last acquirer's own way */
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
