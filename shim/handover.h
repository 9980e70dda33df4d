/* SPDX-License-Identifier: MIT */
/*
 * shim/handover.h — the hand-over order's records and the fast paths of
 * its release and acquisition, inline in the lock hooks (locks.c,
 * semaphores.c); handover.c has the rest and explains the rule
 * (docs/design.md "A GIL cycle needs two threads").
 *
 * hs_order_release(t, addr): the calling thread releases the sync object
 * at addr (a mutex, a spin lock, a semaphore posted onto 0; never an
 * rwlock, never the GIL's own); call before the real release, so that an
 * acquirer sees the record.  hs_order_acquire(t, addr): the calling thread
 * acquired it (after the real acquisition): learn the releases it is
 * ordered after.  Both: t is the hook's hs_enter() state; async-signal-
 * safe, no lock; a thread without its area records nothing.
 */
#ifndef HEISEN_HANDOVER_H
#define HEISEN_HANDOVER_H

#include "shim.h"

#define ORDER_RECS 8192u         /* records in the table (a power of two; 1 MiB, page-aligned, touched where used) */
#define ORDER_WAYS 7u            /* per-slot ways of a record (way 0 is the last release) */
#define ORDER_SEEN HS_ORDER_SEEN /* a thread's seen entries (a power of two) */
#define ORDER_SLOTS 4096u        /* thread slots (HEISEN_THREADS is at most 4096) */
#define COUNT_MASK 0xffffffffffffull /* a value: (slot + 1) << 48 | count (48 bits) */

/* One object's record: w[0].val the last release, w[1 + slot % ORDER_WAYS].val
 * each slot's last; w[i].chk = key ^ w[i].val (key: the address's hash).
 * Each word beside its check, so that a word is one cache line: a release
 * writes way 0 and its own way (one line, or two when the way is 4..7),
 * an acquisition that finds its own release last reads one line.  (With
 * the checks apart from the words, each was two lines, passed between the
 * cores of threads that take a lock in turn; bench/README.md "The lock
 * path by time".) */
struct order_pair {
	uint64_t chk, val;
};
struct order_rec {
	struct order_pair w[ORDER_WAYS + 1];
};
_Static_assert(sizeof(struct order_rec) == 128, "a record is two cache lines");
_Static_assert(ORDER_SEEN * sizeof(uint64_t) <= HS_AREA_ORDER_SIZE, "seen fits the area");

extern struct order_rec hs_order_tab[ORDER_RECS] HS_HIDDEN;

/*
 * The pages of hs_order_tab (page-aligned) written so far, a byte each:
 * set by a release before it writes its records (order_release_at, the
 * only writer of nonzero words); a word of a page never written is zero,
 * no object's, and is not read (order_word).  That read faulted the
 * kernel's zero page in -- a semaphore's sem_init forgets the last one at
 * its address (hs_order_forget), a lock is acquired before its first
 * release -- and the page's first write then faulted once more: ~160 of a
 * Python start's page faults (bench/README.md "A Python start's system
 * calls and page faults").
 */
#define ORDER_PAGE_RECS (4096u / (unsigned)sizeof(struct order_rec))
#define ORDER_PAGES (ORDER_RECS / ORDER_PAGE_RECS)
extern uint8_t hs_order_written[ORDER_PAGES] HS_HIDDEN; /* a byte a page: fewer instructions than a bit */

/* r's page: the table's 256 pages are 256 consecutive page numbers,
 * distinct modulo 256 (a shift and a mask, no subtraction) */
static inline unsigned order_page_of(const struct order_rec *r)
{
	return (unsigned)((uintptr_t)r >> 12) & (ORDER_PAGES - 1);
}
_Static_assert(ORDER_PAGES == 256, "a page's index is its page number modulo 256");

static inline int order_page_written(const struct order_rec *r)
{
	return __atomic_load_n(&hs_order_written[order_page_of(r)], __ATOMIC_RELAXED);
}

static inline void order_page_mark(const struct order_rec *r)
{
	uint8_t *w = &hs_order_written[order_page_of(r)];
	if (HS_UNLIKELY(!__atomic_load_n(w, __ATOMIC_RELAXED)))
		__atomic_store_n(w, 1, __ATOMIC_RELAXED);
}
extern uint32_t hs_order_pending_n[ORDER_SLOTS] HS_HIDDEN;

/* The record's key: one multiply (Fibonacci hashing), never 0 (a zeroed record matches no object). */
static inline uint64_t order_key(uint64_t addr)
{
	return (addr * 0x9e3779b97f4a7c15ull) | 1;
}

/*
 * An object's two records (two-choice hashing): each release is written to
 * both, a reader takes whichever still holds the word, so an ordering is
 * lost only when other objects took that word in both.  One record alone
 * lost it whenever another object of the same thread shared the entry
 * (the thread's own releases write the same way): a false hand-over miss
 * in about one run in 30 of tests/test_gil_order.py's connection pool.
 */
static inline struct order_rec *order_rec_of(uint64_t key)
{
	return &hs_order_tab[key >> (64 - 13)];
}

static inline struct order_rec *order_rec2_of(uint64_t key)
{
	return &hs_order_tab[(key >> 32) & (ORDER_RECS - 1)];
}
_Static_assert(ORDER_RECS == 1u << 13, "order_rec_of takes the key's top 13 bits");

/* Word i of r when it belongs to key, else 0 (a page never written is not read). */
static inline uint64_t order_word(const struct order_rec *r, unsigned i, uint64_t key)
{
	uint64_t v, c;
	if (HS_UNLIKELY(!order_page_written(r)))
		return 0;
	v = __atomic_load_n(&r->w[i].val, __ATOMIC_RELAXED);
	c = __atomic_load_n(&r->w[i].chk, __ATOMIC_RELAXED);
	return (c ^ v) == key ? v : 0;
}

static inline void order_put(struct order_rec *r, unsigned i, uint64_t key, uint64_t v)
{
	__atomic_store_n(&r->w[i].val, v, __ATOMIC_RELAXED);
	__atomic_store_n(&r->w[i].chk, key ^ v, __ATOMIC_RELAXED);
}


/*
 * The calling thread's state, in its area (HS_AREA_ORDER): its slot (the
 * index cached for t->slot, which a fork changes), its way, its seen
 * entries, and its last release and acquisition (address, key, record) so
 * that a lock taken and released again and again by one thread costs a
 * compare and two stores: a release of the object this thread released
 * last, with no other release of its own since, keeps its count (nothing
 * of this thread's came in between) and only says again that it was last.
 */
struct order_self {
	const struct hs_thread *slot_of;   /* t->slot the index below is for */
	uint32_t slot, way;
	uint64_t rel_addr, rel_key, rel_v; /* the last release: rel_v as stored */
	struct order_rec *rel_rec, *rel_rec2;
	uint64_t acq_addr, acq_key;        /* the last acquisition looked up */
	const struct order_rec *acq_rec, *acq_rec2;
	uint64_t seen[ORDER_SEEN];
};
_Static_assert(sizeof(struct order_self) <= HS_AREA_ORDER_SIZE, "the order state fits the area");

/* Out of line (handover.c): the rare paths of the functions below. */
struct order_self *hs_order_self_bind(struct order_self *me, const struct hs_tls *t) HS_HIDDEN;
void hs_order_release_new(struct order_self *me, uint64_t addr) HS_HIDDEN;
void hs_order_learn(const struct order_rec *r, const struct order_rec *r2, uint64_t *seen, uint64_t key,
		    uint64_t last) HS_HIDDEN;
void hs_order_pending_settle(struct hs_tls *t, uint32_t slot, int32_t tid, int ended) HS_HIDDEN;
/* hs_order_handed_over_by (shim.h) when the lock's last release is known to
 * be by slot `from` (the slot of its last acquirer; ORDER_SLOTS: unknown):
 * with way 0 of both its records taken by other objects (collisions), the
 * lock's way of `from` still gives that release.  For hs_order_acquirer_changed and
 * unit tests. */
int hs_order_handed_over_from(uint32_t slot, const uint64_t *seen, uint64_t addr, uint32_t from) HS_HIDDEN;

/* The calling thread's order state, NULL when it has no area or no slot index. */
static inline struct order_self *order_self(const struct hs_tls *t)
{
	char *a = hs_area();
	struct order_self *me;
	if (HS_UNLIKELY(!a))
		return NULL;
	me = (struct order_self *)(void *)(a + HS_AREA_ORDER);
	if (HS_UNLIKELY(me->slot_of != t->slot))
		return hs_order_self_bind(me, t);
	return me;
}

static inline void hs_order_release(struct hs_tls *t, uint64_t addr)
{
	struct order_self *me = order_self(t);
	if (HS_UNLIKELY(!me))
		return;
	if (HS_LIKELY(addr == me->rel_addr)) {
		order_put(me->rel_rec, 0, me->rel_key, me->rel_v);
		order_put(me->rel_rec2, 0, me->rel_key, me->rel_v);
		return;
	}
	hs_order_release_new(me, addr);
}

static inline void hs_order_acquire(struct hs_tls *t, uint64_t addr)
{
	struct order_self *me = order_self(t);
	if (HS_UNLIKELY(!me))
		return;
	if (HS_UNLIKELY(__atomic_load_n(&hs_order_pending_n[me->slot], __ATOMIC_RELAXED)))
		hs_order_pending_settle(t, me->slot, t->tid, 0); /* this thread goes on: what it handed over was a hand-over */
	if (HS_UNLIKELY(addr != me->acq_addr)) {
		me->acq_addr = addr;
		me->acq_key = order_key(addr);
		me->acq_rec = order_rec_of(me->acq_key);
		me->acq_rec2 = order_rec2_of(me->acq_key);
	}
	{
		uint64_t last = order_word(me->acq_rec, 0, me->acq_key);
		if (HS_UNLIKELY(!last))
			last = order_word(me->acq_rec2, 0, me->acq_key);
		/* another thread released it last, or its way 0 is another object's in both
		 * records (or it was never released): its ways may still hold its releases */
		if ((last >> 48) != (uint64_t)me->slot + 1)
			hs_order_learn(me->acq_rec, me->acq_rec2, me->seen, me->acq_key, last);
	}
}

#endif
