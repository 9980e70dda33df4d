/* SPDX-License-Identifier: MIT */
/*
 * shim/lockpath.h — what the pthread lock hooks (locks.c) and the
 * semaphore hooks (semaphores.c) share inline: the held chains kept per
 * held entry, the release counts of locks released by another thread
 * (hs_relgen), the held entry pushed in four stores, and the common Python
 * lock pair's two halves (lock_acq_uncontended, lock_release_top), inline
 * in sem_trywait's fast path and sem_post so that a `with lock:` pair is
 * two calls fewer.  docs/design.md "Lock order".  Included by locks.c,
 * semaphores.c and python.c (the GIL's id and the take's site stack).
 */
#ifndef HEISEN_LOCKPATH_H
#define HEISEN_LOCKPATH_H

#include <stddef.h>
#include <string.h>

#include "shim.h"

/*
 * This thread's chain of return addresses for each held entry (same index
 * as held[], checked by address), kept raw and interned only when an edge,
 * a self-deadlock or a wait needs the exact stack (hs_chain_read,
 * hs_chain_stack).  held[].stack is the call site's cached stack until
 * then, the exact one after.  An acquisition reads its chain straight into
 * the slot of the entry it will push (no copy), and what that slot held
 * last (the previous acquisition at the same nesting depth, released since)
 * is the shadow the read reuses; the slot also remembers the last site's
 * cached stack and the last lock's id, each checked before it is used.
 */
struct held_chain {
	uint64_t addr;          /* the held entry's lock */
	uint16_t exact;         /* 1: held[].stack is already this chain, interned */
	uint16_t leaf;          /* 1: taken on the leaf path (lock_leaf): no chain read, c is an older
				   acquisition's (the shadow only), held[].stack the site's (HS_HELDF_SITE) */
	uint32_t site_stack;    /* hs_stack_site(stack_site) in the segment of generation site_gen */
	uint32_t site_gen;
	uint64_t stack_site;
	uint64_t lock_addr;     /* lock_id is hs_lock_id(lock_addr) while that lock lives */
	uint32_t lock_id;       /* ... in the segment of generation lock_gen (ids grow within one) */
	uint32_t lock_gen;
	struct hs_chain c;
};
#define HELD_CHAINS 8 /* the innermost 8 held entries keep a chain; deeper ones the site's stack */
/* [HELD_CHAINS]: the acquisition in progress when HELD_CHAINS are held
 * already.  In the thread's area (shim.h, hs_area), not in static TLS; NULL
 * when the area could not be mapped: no chains then, the sites' stacks. */
_Static_assert(sizeof(struct held_chain) * (HELD_CHAINS + 1) <= HS_AREA_LOCKS_SIZE, "held chains fit the area");
static inline struct held_chain *held_chains_of(void)
{
	char *a = hs_area();
	return a ? (struct held_chain *)(void *)(a + HS_AREA_LOCKS) : NULL;
}

/*
 * The stacks of this thread's recent lock call sites: hs_stack_site(site)
 * of a hook's return address, in LOCK_SITE_SETS sets of two (picked by the
 * address's Fibonacci hash; the newest first, the one it displaces
 * second), each for the segment of generation gen (a
 * site's stack is interned once per segment and stays: a hit is what
 * hs_stack_site would return; stack 0, none interned, is never kept).  A
 * held chain slot remembers one site, and one depth of a thread's held
 * stack is reached from several in turn (sqlite's connection mutex from
 * sqlite3_step, sqlite3_reset, the prepare functions ...; its memory mutex
 * from sqlite3Malloc, sqlite3_free, sqlite3Realloc), and a GIL take
 * (python.c gil_wait_begin) from a few: half the acquisitions and every
 * take under bench/py_workload.py asked hs_stack_site, ~75-100
 * instructions each with the misses of the thread's shared site cache
 * behind it (bench/README.md "The GIL take's and the mutex hooks' own
 * instructions").  In the thread's area (HS_AREA_LOCKSITES, 1 KiB: not in
 * static TLS, which glibc takes from the thread's stack), written only
 * inside a hook (the guard held), so a signal handler of the thread never
 * reads half an entry.
 */
#define LOCK_SITE_SETS 32u
struct lock_site {
	uint64_t site;  /* the hook's return address, 0: none */
	uint32_t stack; /* hs_stack_site(site) in the segment of generation gen */
	uint32_t gen;
};
_Static_assert(sizeof(struct lock_site) * 2 * LOCK_SITE_SETS <= HS_AREA_LOCKSITES_SIZE, "the lock sites fit the area");
/* The miss: hs_stack_site(site) kept as the newest of set w (locks.c). */
uint32_t hs_lock_site_learn(struct lock_site *w, uint64_t site, uint32_t gen) HS_HIDDEN;

static inline int lock_site_is(const struct lock_site *e, uint64_t site, uint32_t gen)
{
	return e->site == site && e->gen == gen && e->stack != 0;
}

/* hs_stack_site(site) through the thread's memo in area a (hs_area(), not
 * NULL); gen: hs_seg_gen. */
static inline __attribute__((always_inline)) uint32_t lock_site_stack_in(char *a, uint64_t site, uint32_t gen)
{
	struct lock_site *w = (struct lock_site *)(void *)(a + HS_AREA_LOCKSITES) +
			      2 * ((site * 0x9e3779b97f4a7c15ull) >> 59);
	if (HS_LIKELY(lock_site_is(&w[0], site, gen)))
		return w[0].stack;
	if (HS_LIKELY(lock_site_is(&w[1], site, gen)))
		return w[1].stack;
	return hs_lock_site_learn(w, site, gen);
}

/* The same for a caller without the area at hand: hs_stack_site itself
 * when the thread has none. */
static inline __attribute__((always_inline)) uint32_t lock_site_stack(uint64_t site, uint32_t gen)
{
	char *a = hs_area();
	return HS_LIKELY(a != NULL) ? lock_site_stack_in(a, site, gen) : hs_stack_site(site);
}
_Static_assert(LOCK_SITE_SETS == 1u << (64 - 59), "lock_site_stack takes the hash's top 5 bits");

/*
 * The leaf path (docs/design.md "Lock order"): a lock that has never been
 * the first lock of an edge -- never held while this process took another
 * lock or the GIL -- needs its exact held stack only if that happens some
 * day, and most such locks (sqlite's global memory mutex, taken around
 * every allocation; a C library's registry mutex) are taken thousands of
 * times and never nested.  So after LEAF_AFTER acquisitions with nothing
 * nested (short programs and tests keep exact stacks), a pthread lock's
 * acquisition reads no chain and no Python token: its held entry keeps
 * the call site's cached stack, marked HS_HELDF_SITE.  Not a Python lock
 * (a semaphore, semaphores.c): its call site is CPython's lock code,
 * shared by every Python lock, so that site's stack would name another
 * lock's Python lines; and its lazy read in a loop is the token's compare
 * already (lock_chain_read_lazy).  The first time it is held
 * while another lock or the GIL is taken, it stops being a leaf
 * (lock_leaf_nested; later acquisitions read chains again), and a new
 * edge made from that holding is recorded with the site's stack, marked
 * HS_EDGE_FROM_SITE, and rewritten with the exact stack the next time the
 * order is seen (lockgraph.c hs_graph_add).
 *
 * Per lock id, process-private, modulo LEAF_SLOTS and checked by id and
 * segment generation (a fork child's new segment starts over): a slot that
 * another id takes over starts counting again, so a collision costs
 * exact stacks, never a missed nesting of a lock seen as a leaf.  count
 * stops being written at LEAF_AFTER (no cache line passed between threads
 * that take a shared leaf lock); nested is set once and stays.
 */
#define LEAF_SLOTS 65536u
#define LEAF_AFTER 64u   /* the default of HEISEN_LOCK_LEAF_AFTER */
#define LEAF_AFTER_MAX 255u /* count is a byte */
/* HEISEN_LOCK_LEAF_AFTER (1..LEAF_AFTER_MAX; 0 turns the leaf path off:
 * UINT32_MAX here), 0 until read (locks.c lock_leaf_after_read). */
extern uint32_t hs_lock_leaf_after HS_HIDDEN;
uint32_t hs_lock_leaf_after_read(void) HS_HIDDEN;
struct lock_leaf {
	uint32_t id;            /* lock id the slot counts for (0: none) */
	uint16_t gen;           /* hs_seg_gen's low 16 bits */
	uint8_t count;          /* acquisitions counted, up to LEAF_AFTER */
	uint8_t nested;         /* [atomic] 1: held while another lock or the GIL was taken */
};
extern struct lock_leaf hs_lock_leaf[LEAF_SLOTS] HS_HIDDEN; /* defined in locks.c */

/* The slot of lock id (gen: hs_seg_gen) made its own: count and nested 0. */
static __attribute__((noinline, cold, unused)) void lock_leaf_claim(struct lock_leaf *l, uint32_t id, uint32_t gen)
{
	__atomic_store_n(&l->id, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&l->count, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&l->nested, 0, __ATOMIC_RELAXED);
	l->gen = (uint16_t)gen;
	__atomic_store_n(&l->id, id, __ATOMIC_RELEASE);
}

/* 1 when this acquisition of lock id takes the leaf path (no chain read),
 * counting it otherwise.  gen: hs_seg_gen. */
static inline __attribute__((always_inline)) int lock_leaf(uint32_t id, uint32_t gen)
{
	struct lock_leaf *l = &hs_lock_leaf[id & (LEAF_SLOTS - 1)];
	uint32_t after = __atomic_load_n(&hs_lock_leaf_after, __ATOMIC_RELAXED);
	if (HS_UNLIKELY(after - 1 >= LEAF_AFTER_MAX)) {
		/* not read yet (0), or off */
		if (after || (after = hs_lock_leaf_after_read()) > LEAF_AFTER_MAX)
			return 0;
	}
	if (HS_UNLIKELY(__atomic_load_n(&l->id, __ATOMIC_ACQUIRE) != id || l->gen != (uint16_t)gen)) {
		lock_leaf_claim(l, id, gen);
		return 0;
	}
	if (__atomic_load_n(&l->nested, __ATOMIC_RELAXED))
		return 0;
	uint8_t k = __atomic_load_n(&l->count, __ATOMIC_RELAXED);
	if (HS_LIKELY(k >= after))
		return 1;
	__atomic_store_n(&l->count, (uint8_t)(k + 1), __ATOMIC_RELAXED); /* a lost count: one more exact read */
	return 0;
}

/* Lock id was held while another lock or the GIL was taken: no leaf from
 * now on.  Returns its count of acquisitions (at most LEAF_AFTER; for an
 * entry taken on the leaf path, the count with nothing nested before). */
static inline uint32_t lock_leaf_nested(uint32_t id)
{
	struct lock_leaf *l = &hs_lock_leaf[id & (LEAF_SLOTS - 1)];
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	if (__atomic_load_n(&l->id, __ATOMIC_ACQUIRE) != id || l->gen != (uint16_t)gen)
		lock_leaf_claim(l, id, gen);
	if (!__atomic_load_n(&l->nested, __ATOMIC_RELAXED))
		__atomic_store_n(&l->nested, 1, __ATOMIC_RELAXED);
	return __atomic_load_n(&l->count, __ATOMIC_RELAXED);
}

/* Lock id's count of acquisitions with nothing nested (at most LEAF_AFTER),
 * 0 when its slot counts for another id or segment generation; nothing
 * written (a self-deadlock's mark, locks.c self_deadlock). */
static inline uint32_t lock_leaf_count(uint32_t id)
{
	const struct lock_leaf *l = &hs_lock_leaf[id & (LEAF_SLOTS - 1)];
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	if (__atomic_load_n(&l->id, __ATOMIC_ACQUIRE) != id || l->gen != (uint16_t)gen)
		return 0;
	return __atomic_load_n(&l->count, __ATOMIC_RELAXED);
}

/*
 * hs_py_gil_lock()'s common answer inline: the GIL's id kept for this
 * segment generation (python.c), else the call (no Python: 0; a new
 * segment: the GIL's node made there).  Asked at every acquisition made
 * with the GIL held, for the chain cache's key.
 */
extern uint32_t hs_py_gil_id HS_HIDDEN, hs_py_gil_gen HS_HIDDEN; /* defined in python.c */
static inline uint32_t lock_gil_id(void)
{
	uint32_t id = __atomic_load_n(&hs_py_gil_id, __ATOMIC_RELAXED);
	if (HS_LIKELY(id != 0) &&
	    HS_LIKELY(__atomic_load_n(&hs_py_gil_gen, __ATOMIC_RELAXED) == __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED)))
		return id;
	return hs_py_gil_lock();
}

/*
 * hs_locks_before_gil_take's test inline (python.c, at every GIL take):
 * hs_lock_lazy_nogil not 0 when a held entry taken without the GIL may have
 * a lazy chain to complete before the thread takes the GIL (1 + the lowest
 * index such an entry may have, locks.c); when fewer entries are held than
 * that, none is left to complete, and the mark is cleared here.
 */
extern __thread int hs_lock_lazy_nogil __attribute__((tls_model("initial-exec"))) HS_HIDDEN;
static inline void lock_before_gil_take(struct hs_thread *th)
{
	if (HS_UNLIKELY(hs_lock_lazy_nogil)) {
		if ((uint32_t)hs_lock_lazy_nogil > th->held_count)
			hs_lock_lazy_nogil = 0;
		else
			hs_locks_before_gil_take(th);
	}
}

/*
 * The time of an uncontended acquisition or a release: CLOCK_MONOTONIC_COARSE
 * (the last tick, read from the vDSO without the clock source: 4 ms
 * resolution at HZ=250, never ahead of CLOCK_MONOTONIC).  A precise read
 * costs 20-60 ns under a paravirtual clock (kvm-clock), more than the rest of
 * the hook; a wait re-reads the precise clock where it begins and ends.
 */
static inline uint64_t lock_now(void)
{
	return hs_now_coarse();
}

/*
 * Releases by a thread that did not hold the lock (a mutex handed over, a
 * lock unlocked by its waker): counted per lock id (modulo RELGEN_SLOTS,
 * process-private).  A held entry keeps the count it was taken at in flags
 * bits 16..31; when the count moved, another thread released it and the
 * entry is dropped the next time its thread looks (held_purge).  The
 * holder's slot is never written by another thread.
 */
#define RELGEN_SLOTS 65536u
extern uint16_t hs_relgen[RELGEN_SLOTS] HS_HIDDEN; /* defined in locks.c */

static inline uint32_t relgen_of(uint32_t id)
{
	return __atomic_load_n(&hs_relgen[id & (RELGEN_SLOTS - 1)], __ATOMIC_RELAXED);
}

/*
 * Held entry n (n < HS_HELD_MAX, room checked by the caller) pushed in four
 * stores under the seqlock: addr, then lock..recursion and stack..flags as
 * two 64-bit words (recursion 0; flags: extra | the lock's release
 * generation), then since_ns; held_count n + 1.  held_push's fields, for the
 * common acquisitions (locks.c acq_first_after, lock_acq_uncontended).
 */
_Static_assert(offsetof(struct hs_held, lock) == 8 && offsetof(struct hs_held, mode) == 12 &&
		       offsetof(struct hs_held, trylock) == 13 && offsetof(struct hs_held, recursion) == 14 &&
		       offsetof(struct hs_held, stack) == 16 && offsetof(struct hs_held, flags) == 20,
	       "held_push4 writes a held entry's lock..recursion and stack, flags as two 64-bit words");
static inline __attribute__((always_inline)) void held_push4(struct hs_thread *th, uint32_t n, uint64_t addr,
							     uint32_t id, unsigned mode, unsigned trylock,
							     uint32_t stack, uint32_t extra, uint64_t now)
{
	uint64_t s = __atomic_load_n(&th->lock_seq, __ATOMIC_RELAXED);
	struct hs_held *e = &th->held[n];
	uint64_t w1 = (uint64_t)id | (uint64_t)mode << 32 | (uint64_t)trylock << 40;
	uint64_t w2 = (uint64_t)stack | (uint64_t)(extra | relgen_of(id) << HS_HELDF_RELGEN_SHIFT) << 32;
	__atomic_store_n(&th->lock_seq, s + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
	e->addr = addr;
	memcpy(&e->lock, &w1, sizeof w1);
	memcpy(&e->stack, &w2, sizeof w2);
	e->since_ns = now;
	th->held_count = n + 1;
	__atomic_store_n(&th->lock_seq, s + 2, __ATOMIC_RELEASE);
}

/*
 * hs_chain_read_lazy's common case inline (stacks.c has the argument): the
 * chain read last time into c at the same site and CFA, under the same
 * learnt distances, whose return-address slots up to the evaluation loop
 * still hold the same addresses, under the same Python frame token
 * (hs_py_token) -- a `with lock:` in a loop.  Anything else, or a token
 * that changed its evaluation-loop count, is hs_chain_read_lazy's (which
 * looks again from the start).  Returns the depth as hs_chain_read_lazy.
 */
static inline __attribute__((always_inline)) unsigned lock_chain_read_lazy(struct hs_chain *c, uint64_t site,
									   uint64_t cfa)
{
	if (HS_LIKELY(c->lazy && c->site == site && c->cfa == cfa && c->walked &&
		      c->gen == __atomic_load_n(&hs_pcoff_gen, __ATOMIC_ACQUIRE) && hs_chain_top &&
		      *(const uint64_t *)(uintptr_t)(cfa - 8) == site)) {
		unsigned m, d = c->depth;
		for (m = 1; m < d; m++)
			if (*(const uint64_t *)(uintptr_t)(c->sp[m] - 8) != c->pc[m])
				break;
		if (m == d && HS_LIKELY(hs_py_token(&c->tok) && (c->tok.entry ? 2u : 1u) == c->lazy)) {
			c->unchanged = 1;
			return d;
		}
	}
	return hs_chain_read_lazy(c, site, cfa);
}

/*
 * An uncontended acquisition that adds no edge (hs_acq_ordered or the
 * caller's memo said so), recorded after the real call succeeded
 * (semaphores.c's fast path, the common `with lock:`): of hs_acq_before
 * only the chain read stays (this call's exact stack, kept lazily in the
 * slot of the entry it pushes, hs_chain_read_lazy, and interned only when
 * an edge, a finding or a snapshot needs it), then what hs_acq_after does
 * for an acquisition that did not wait: the shared-instance check, the held
 * entry, the ring record.  id, addr: the lock's id and address; site, cfa:
 * the hook's return address and CFA; the held entry's mode hold_mode
 * (enum hs_mode), trylock 0 or 1.  Scalars, not a struct acq: the caller's
 * fast path keeps them in registers (no struct on the stack to fill and
 * read back; bench/README.md "Python lock pairs at a fixed place").
 * Inline in its callers in semaphores.c, so that the pair is one call
 * fewer (bench/README.md, "Python lock pairs in fewer calls").  locks.c's
 * `pending` (the chain of an acquisition between acq_before and acq_after)
 * is not set: no acq_after follows.
 */
static inline __attribute__((always_inline)) void lock_acq_uncontended(struct hs_tls *t, uint32_t id, uint64_t addr,
									 uint64_t site, uint64_t cfa,
									 unsigned hold_mode, unsigned trylock)
{
	struct hs_thread *th = t->slot;
	struct held_chain *held_chains = held_chains_of();
	struct hs_lock *l = &hs_seg.locks[id];
	uint32_t n = th->held_count; /* at most HELD_CHAINS: hs_acq_ordered */
	int32_t last = __atomic_load_n(&l->last_tid, __ATOMIC_RELAXED);
	uint64_t t0 = lock_now();
	uint32_t stack;
	if (HS_UNLIKELY(!held_chains)) {
		stack = hs_stack_site(site);
	} else {
		uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
		struct held_chain *c = &held_chains[n];
		c->addr = addr;
		c->exact = 0;
		c->leaf = 0; /* a Python lock: never the leaf path (lock_leaf) */
		/* the stack is needed only if an edge is made from it later: read lazily */
		lock_chain_read_lazy(&c->c, site, cfa);
		if (HS_UNLIKELY(c->stack_site != site || !c->site_stack || c->site_gen != gen)) {
			c->site_stack = lock_site_stack(site, gen);
			c->stack_site = site;
			c->site_gen = gen;
		}
		stack = c->site_stack;
	}
	if (HS_UNLIKELY(last != t->tid) && !(__atomic_load_n(&l->flags, __ATOMIC_RELAXED) & HS_LOCKF_SHARED)) {
		/* a second thread, an instance not known shared (hs_acq_after) */
		if (last)
			hs_order_acquirer_changed(t, id, addr, last, 0, stack, t0);
		__atomic_store_n(&l->last_tid, t->tid, __ATOMIC_RELAXED);
	}
	/* held_push, its chain in place already (n <= HELD_CHAINS: room) */
	held_push4(th, n, addr, id, hold_mode, trylock, stack, 0, t0);
	hs_rec(t, t0, HS_REC_LOCK_ACQUIRED, stack, addr, id, (uint64_t)hold_mode | (uint64_t)trylock << 8);
}

/*
 * The release of the thread's innermost held entry when it is addr's and
 * taken once, its edge to the GIL known to be there (the caller's memo):
 * hs_release without its searches, the pop one store outside the seqlock
 * (release_end).  Returns 0, doing nothing, in any other case: hs_release
 * then.  Inline in its one caller, sem_post.
 */
static inline __attribute__((always_inline)) int lock_release_top(struct hs_tls *t, uint64_t addr)
{
	struct hs_thread *th = t->slot;
	uint32_t n = th->held_count;
	const struct hs_held *h;
	if (HS_UNLIKELY(n == 0 || n > HS_HELD_MAX))
		return 0;
	h = &th->held[n - 1];
	if (h->addr != addr || h->recursion ||
	    HS_UNLIKELY((h->flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(h->lock)))
		return 0;
	uint32_t id = h->lock;
	/* one store outside the seqlock (release_end) */
	__atomic_store_n(&th->held_count, n - 1, __ATOMIC_RELEASE);
	hs_rec_released(t, lock_now(), addr, id);
	return 1;
}

#endif
