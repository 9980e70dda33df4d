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

#define ORDER_RECS 4096u         /* records in the pool (a power of two; 512 KiB, page-aligned, taken from the start) */
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

/*
 * The records and their index (handover.c explains the placement).
 * hs_order_tab: the pool, record 0 never given out; a sync object gets a
 * record at its first release (the last one given back by an object that
 * ended, else the pool's next unused one) and gives it back when it ends
 * (hs_order_forget), so the pages written grow with the objects in use at
 * once, not with the objects ever seen.
 * hs_order_idx: from an address's hash to its record: ORDER_IDX_BUCKETS
 * buckets of ORDER_IDX_WAYS 4-byte entries (16 bytes, in one cache line),
 * two buckets per key (two-choice: an entry goes into the first with room).
 * An entry is (the key's bits 34..52 as a tag) | ORDER_ENTRY_FIXED (the
 * record is placed by the key, shared, never given back: the pool was used
 * up) | the record's number; 0 is empty.  32 KiB: 8 pages.
 * hs_order_idx_written: a byte per page of the index, set before its first
 * entry is written; a page never written is not read (a read faulted in
 * the kernel's zero page, and the first write then faulted again).
 */
#define ORDER_IDX_BUCKETS 2048u
#define ORDER_IDX_WAYS 4u
#define ORDER_IDX_PAGES (ORDER_IDX_BUCKETS * ORDER_IDX_WAYS * 4u / 4096u)
#define ORDER_ENTRY_REC 0xfffu       /* the record's number, 1..ORDER_RECS - 1 */
#define ORDER_ENTRY_FIXED 0x1000u    /* the record is placed by the key (shared), not taken from the pool */
#define ORDER_ENTRY_TAG 0xffffe000u  /* bits 34..52 of the key */
_Static_assert(ORDER_RECS - 1 == ORDER_ENTRY_REC, "an entry holds a record's number");
_Static_assert(ORDER_IDX_BUCKETS == 1u << 11, "order_bucket takes 11 bits of the key");

extern struct order_rec hs_order_tab[ORDER_RECS] HS_HIDDEN;
extern uint32_t hs_order_idx[ORDER_IDX_BUCKETS][ORDER_IDX_WAYS] HS_HIDDEN;
extern uint8_t hs_order_idx_written[ORDER_IDX_PAGES] HS_HIDDEN;
extern const struct order_rec hs_order_none HS_HIDDEN; /* all zero, read-only: the record of an object with none */
extern uint32_t hs_order_pending_n[ORDER_SLOTS] HS_HIDDEN;
/* Bumped by hs_order_forget when an object's record is given back (before
 * another object can take it): a thread's cached records (struct
 * order_self) are used only while it is the value they were cached at, so
 * no thread writes to or reads from a record that another object has
 * taken since, through the address of the object that ended. */
struct order_epoch {
	uint32_t n;
	char pad[60]; /* a line of its own: read by every hook, written by a forget that gives a record back */
};
extern struct order_epoch hs_order_epoch HS_HIDDEN;

/* The record's key: one multiply (Fibonacci hashing), never 0 (a zeroed record matches no object). */
static inline uint64_t order_key(uint64_t addr)
{
	return (addr * 0x9e3779b97f4a7c15ull) | 1;
}

/* Word i of r when it belongs to key, else 0. */
static inline uint64_t order_word(const struct order_rec *r, unsigned i, uint64_t key)
{
	uint64_t v, c;
	v = __atomic_load_n(&r->w[i].val, __ATOMIC_RELAXED);
	c = __atomic_load_n(&r->w[i].chk, __ATOMIC_RELAXED);
	return (c ^ v) == key ? v : 0;
}

static inline void order_put(struct order_rec *r, unsigned i, uint64_t key, uint64_t v)
{
	__atomic_store_n(&r->w[i].val, v, __ATOMIC_RELAXED);
	__atomic_store_n(&r->w[i].chk, key ^ v, __ATOMIC_RELAXED);
}


/* A thread's memo entry: the object at addr, its key and its record (never
 * hs_order_none nor handover.c's order_sink). */
struct order_memo {
	uint64_t addr, key;
	struct order_rec *rec;
};

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
	struct order_rec *rel_rec;         /* its record (handover.c order_sink when it has none) */
	uint64_t acq_addr, acq_key;        /* the last acquisition looked up */
	const struct order_rec *acq_rec;   /* its record when looked up (hs_order_none when it had none) */
	/* the records of the last two objects looked up in the index (newest first; addr 0: none),
	 * so that a thread alternating between two objects (a lock nested in another, a
	 * condition's mutex and the queue's) does not look them up again */
	struct order_memo memo[2];
	uint32_t epoch;                    /* hs_order_epoch when the records above were cached */
	uint64_t seen[ORDER_SEEN];
};
_Static_assert(sizeof(struct order_self) <= HS_AREA_ORDER_SIZE, "the order state fits the area");

/* Out of line (handover.c): the rare paths of the functions below. */
struct order_self *hs_order_self_bind(struct order_self *me, const struct hs_tls *t) HS_HIDDEN;
/* a release of another object than the thread's last one (or the epoch moved): its record (taken at its first release), stamped */
void hs_order_release_new(struct order_self *me, uint64_t addr) HS_HIDDEN;
/* an acquisition of another object than the thread's last one (or the epoch moved): its key and record into me->acq_* */
void hs_order_acquire_look(struct order_self *me, uint64_t addr) HS_HIDDEN;
/* an acquisition whose object another thread released last (last: way 0 of its record, 0 when
 * it holds none of this object's): learn the record's releases into me->seen */
void hs_order_learn(struct order_self *me, uint64_t last) HS_HIDDEN;
void hs_order_pending_settle(struct hs_tls *t, uint32_t slot, int32_t tid, int ended) HS_HIDDEN;
/* hs_order_handed_over_by (shim.h) when the lock's last release is known to
 * be by slot `from` (the slot of its last acquirer; ORDER_SLOTS: unknown):
 * with way 0 of its record taken by another object (records shared once
 * the pool is used up), the lock's way of `from` still gives that release.
 * For hs_order_acquirer_changed and unit tests. */
int hs_order_handed_over_from(uint32_t slot, const uint64_t *seen, uint64_t addr, uint32_t from) HS_HIDDEN;
/* The record of the object at addr, NULL when it has none (unit tests). */
const struct order_rec *hs_order_rec_of(uint64_t addr) HS_HIDDEN;

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
	if (HS_LIKELY(addr == me->rel_addr && me->epoch == __atomic_load_n(&hs_order_epoch.n, __ATOMIC_RELAXED))) {
		order_put(me->rel_rec, 0, me->rel_key, me->rel_v);
		return;
	}
	hs_order_release_new(me, addr);
}

static inline void hs_order_acquire(struct hs_tls *t, uint64_t addr)
{
	struct order_self *me = order_self(t);
	uint64_t last;
	if (HS_UNLIKELY(!me))
		return;
	if (HS_UNLIKELY(__atomic_load_n(&hs_order_pending_n[me->slot], __ATOMIC_RELAXED)))
		hs_order_pending_settle(t, me->slot, t->tid, 0); /* this thread goes on: what it handed over was a hand-over */
	if (HS_UNLIKELY(addr != me->acq_addr || me->epoch != __atomic_load_n(&hs_order_epoch.n, __ATOMIC_RELAXED)))
		hs_order_acquire_look(me, addr);
	last = order_word(me->acq_rec, 0, me->acq_key);
	/* another thread released it last, or its record holds no release of it (none yet, or it
	 * has another record since it was looked up): learn its releases */
	if ((last >> 48) != (uint64_t)me->slot + 1)
		hs_order_learn(me, last);
}

#endif
