/* SPDX-License-Identifier: MIT */
/*
 * shim/locks.c — the pthread lock hooks: mutexes, rwlocks, spin locks and
 * condition-variable waits.  Each hook keeps the thread's held-lock stack in
 * its slot (so an outside reader sees who holds what), feeds the lock-order
 * graph before it blocks (so a run that then deadlocks is still predicted),
 * publishes "waiting for L since t" while it is blocked, and records what
 * happened in the thread's ring.  docs/design.md "Lock order", "Hangs".
 *
 * Every blocking acquire first tries the lock: an uncontended acquisition
 * never publishes a wait, and a contended one does so before it blocks.
 * Every hook resolves its original once, takes the reentrancy guard, calls
 * the original and records only what actually happened (docs/design.md
 * "Rules of the code", 4).
 */
#include <errno.h>
#include <stddef.h>
#include <malloc.h>
#include <pthread.h>
#include <string.h>

#include "handover.h" /* the hand-over order (GIL rule) */
#include "hooks.h"
#include "inject.h" /* fault injection and chaos: one line per hook */
#include "shim.h"
#include "lockpath.h" /* the held chains, release counts and the common Python lock pair */

#define RET_ADDR() ((uint64_t)(uintptr_t)__builtin_extract_return_addr(__builtin_return_address(0)))
/* The hook's CFA = its caller's stack pointer at the return address (the shim
 * keeps frame pointers; hs_stack_call checks that RET_ADDR sits at CFA - 8). */
#define CALLER_SP() ((uint64_t)(uintptr_t)__builtin_frame_address(0) + 16)

static __thread struct held_chain *pending __attribute__((tls_model("initial-exec"))); /* the acquisition in progress, NULL: none kept */
/*
 * Whether a held entry taken without the GIL may have a lazy chain to
 * complete before the thread takes the GIL (hs_locks_before_gil_take):
 * 0 none; else 1 + the lowest index such an entry may have (every such
 * entry is at index hs_lock_lazy_nogil - 1 or above).  So a take that
 * finds fewer entries held than that clears it without looking
 * (lock_before_gil_take): a Python thread holds its thread-state lock for
 * life, and with a plain "may" flag, cleared only when nothing was held,
 * every GIL take after a sqlite call made without the GIL looked over the
 * held entries for nothing (~56 instructions, 8.7k takes a run of
 * bench/py_workload.py 3000; bench/README.md "Lock hooks around the GIL's
 * windows").  A removal from the middle of the held stack (held_remove:
 * the entries above move down) lowers it to the removed index + 1, never
 * raises it; a release of everything clears it.  lockpath.h.
 */
__thread int hs_lock_lazy_nogil __attribute__((tls_model("initial-exec"))); /* lockpath.h */

/* Held entry n was pushed with a lazy chain taken without the GIL. */
static inline void lazy_nogil_note(uint32_t n)
{
	if (hs_lock_lazy_nogil == 0 || (uint32_t)hs_lock_lazy_nogil > n + 1)
		hs_lock_lazy_nogil = (int)(n + 1);
}

/*
 * "Does this thread hold the GIL?" asked once per change.  A thread takes
 * and drops the GIL only by locking the GIL's own mutex (CPython 3.8-3.13
 * take_gil and drop_gil both begin with MUTEX_LOCK(gil->mutex), a
 * pthread_mutex_lock that the hooks pass through: hs_py_internal), so
 * while this thread has not locked it since the last answer, the answer
 * stands.  gil_mutex_epoch counts those lockings (the pass-through
 * branches below); gil_q keeps the last answer with the epoch and segment
 * generation it was given at (a fork child's new segment asks anew).  An
 * epoch of 0 (no locking seen yet) always asks.  The question itself
 * (python.c hs_py_holds_gil) is two calls into the interpreter and a
 * thread-specific read, asked twice a mutex pair: ~4 % of the lock path's
 * time under py_workload (bench/README.md "The lock path by time").
 * Written epoch last, after a zero, so a signal handler of this thread
 * never takes a half-written answer.  Limits: a signal handler that takes
 * a mutex between take_gil's return and the thread state's swap (no
 * program code runs there) could keep "not held" until the next take or
 * drop; a sub-interpreter with a GIL of its own (3.12+, its state outside
 * _PyRuntime) is not seen taking it, as its mutex is not passed through.
 */
static __thread uint64_t gil_mutex_epoch __attribute__((tls_model("initial-exec")));
static __thread struct {
	uint64_t epoch; /* gil_mutex_epoch of the answer, 0: none */
	uint32_t gen;   /* hs_seg_gen of the answer */
	int holds;
} gil_q __attribute__((tls_model("initial-exec")));

static inline void gil_mutex_locking(void)
{
	gil_mutex_epoch++;
}

/* The question asked (holds_gil_now's rare case, out of line): the answer
 * kept for epoch e and segment generation gen. */
static __attribute__((noinline)) int holds_gil_ask(uint64_t e, uint32_t gen)
{
	int holds = hs_py_holds_gil();
	gil_q.epoch = 0;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	gil_q.gen = gen;
	gil_q.holds = holds;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	gil_q.epoch = e;
	return holds;
}

/* hs_py_holds_gil(), asked only when this thread locked the GIL's mutex
 * since the last answer (hs_py_present checked by the caller); the check
 * inline in the hooks, the question out of line. */
static inline __attribute__((always_inline)) int holds_gil_now(void)
{
	uint64_t e = gil_mutex_epoch;
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	if (HS_LIKELY(e != 0 && gil_q.epoch == e && gil_q.gen == gen))
		return gil_q.holds;
	return holds_gil_ask(e, gen);
}

uint16_t hs_relgen[RELGEN_SLOTS]; /* lockpath.h */
struct lock_leaf hs_lock_leaf[LEAF_SLOTS]; /* lockpath.h, the leaf path */
uint32_t hs_lock_leaf_after;                /* lockpath.h */

/* lock_site_stack's miss (lockpath.h): the site's stack asked of stacks.c
 * and kept first in set w, the entry there before moved second, unless none
 * was interned (0) or it was cut short below HS_STACK_DEPTH (the call site
 * alone, which stacks.c gives on a thread stack too small to unwind on and
 * never caches: a later call with room unwinds). */
__attribute__((noinline)) uint32_t hs_lock_site_learn(struct lock_site *w, uint64_t site, uint32_t gen)
{
	uint32_t stack = hs_stack_site(site);
	const struct hs_stack *st = stack ? &hs_seg.stacks[stack] : NULL;
	if (st && !((st->flags & HS_STACK_TRUNCATED) && st->depth < HS_STACK_DEPTH)) {
		w[1] = w[0];
		w[0].site = site;
		w[0].stack = stack;
		w[0].gen = gen;
	}
	return stack;
}

/* HEISEN_LOCK_LEAF_AFTER read once (two threads may both read it: the same
 * answer): the acquisitions with nothing nested after which a pthread lock
 * keeps its call site's stack only, 1 to 255 (default LEAF_AFTER); 0:
 * never (every acquisition reads its stack), kept as UINT32_MAX. */
__attribute__((noinline, cold)) uint32_t hs_lock_leaf_after_read(void)
{
	uint32_t n = (uint32_t)hs_getenv_num("HEISEN_LOCK_LEAF_AFTER", LEAF_AFTER, 0, LEAF_AFTER_MAX, NULL);
	if (n == 0)
		n = UINT32_MAX;
	__atomic_store_n(&hs_lock_leaf_after, n, __ATOMIC_RELAXED);
	return n;
}

static void held_remove(struct hs_thread *th, int i);

/* 1 when edge e has its held lock's call site only (HS_EDGE_FROM_SITE). */
static inline int edge_from_site(uint32_t e)
{
	return (__atomic_load_n(&hs_seg.edges[e].flags, __ATOMIC_RELAXED) & HS_EDGE_FROM_SITE) != 0;
}

/* Drop the held entries another thread released since (see relgen). */
static inline void held_purge(struct hs_thread *th)
{
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (int i = (int)n - 1; i >= 0; i--)
		if (HS_UNLIKELY((th->held[i].flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(th->held[i].lock)))
			held_remove(th, i);
}

/* The exact stack of held entry i, interned now if it was not yet; the
 * site's (held[i].stack) for an entry taken on the leaf path. */
static uint32_t held_stack(struct hs_thread *th, int i)
{
	struct held_chain *held_chains = held_chains_of();
	struct held_chain *c = held_chains ? &held_chains[i < HELD_CHAINS ? i : 0] : NULL;
	uint32_t id;
	if (!c || i >= HELD_CHAINS || c->addr != th->held[i].addr || c->c.depth == 0 || c->exact || c->leaf)
		return th->held[i].stack;
	id = hs_chain_stack(&c->c);
	if (id) {
		hs_lockstate_begin(th);
		th->held[i].stack = id;
		hs_lockstate_end(th);
		c->exact = 1;
	}
	return th->held[i].stack;
}

/*
 * The stack a new edge from held entry i gets, and that entry's lock no
 * leaf from now on (lock_leaf_nested): its exact stack (held_stack,
 * *site_n 0), or for an entry taken on the leaf path its call site's
 * stack, *site_n then the lock's count of acquisitions with nothing nested
 * (at least 1; the edge is marked HS_EDGE_FROM_SITE).
 */
uint32_t hs_locks_held_stack(struct hs_thread *th, int i, uint32_t *site_n)
{
	uint32_t n = lock_leaf_nested(th->held[i].lock);
	*site_n = 0;
	if (th->held[i].flags & HS_HELDF_SITE) {
		*site_n = n ? n : 1;
		return th->held[i].stack;
	}
	return held_stack(th, i);
}

/* The work of hs_locks_before_gil_take, out of line. */
static __attribute__((noinline, cold)) void held_complete_lazy(struct hs_thread *th)
{
	struct held_chain *held_chains = held_chains_of();
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	hs_lock_lazy_nogil = 0;
	for (uint32_t i = 0; held_chains && i < n && i < HELD_CHAINS; i++) {
		struct held_chain *c = &held_chains[i];
		if (c->addr == th->held[i].addr && c->c.lazy && !c->exact && !c->leaf &&
		    !(th->held[i].flags & HS_HELDF_GIL))
			(void)hs_chain_complete(&c->c);
	}
}

void hs_locks_before_gil_take(struct hs_thread *th)
{
	if (HS_UNLIKELY(hs_lock_lazy_nogil) && th) {
		if ((uint32_t)hs_lock_lazy_nogil > th->held_count)
			hs_lock_lazy_nogil = 0; /* released since: none left where one may need completing */
		else
			held_complete_lazy(th);
	}
}

/* The GIL's own mutex is being locked outside python.c's hooks (a take
 * inside the interpreter, or entry points not hooked): the same, when the
 * thread is not inside a hook already. */
static __attribute__((noinline, cold)) void gil_mutex_locked(void)
{
	struct hs_tls *t = hs_enter();
	if (!t)
		return;
	hs_locks_before_gil_take(t->slot);
	hs_leave(t);
}

/* A held entry taken on the leaf path keeps its call site's stack and its
 * mark: nothing kept proves its taking call still live (docs/design.md
 * "Lock order", the leaf path), so it is not completed here. */
void hs_locks_snapshot_held(struct hs_thread *th)
{
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (uint32_t i = 0; i < n && i < HELD_CHAINS; i++)
		(void)held_stack(th, (int)i);
}

static int held_index(const struct hs_thread *th, uint64_t addr)
{
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (int i = (int)n - 1; i >= 0; i--)
		if (th->held[i].addr == addr)
			return i;
	return -1;
}

/* A self-deadlock finding for lock id, once per lock.  Its stack2 is the
 * held entry's exact stack, or for an entry taken on the leaf path
 * (HS_HELDF_SITE) its call site's only: then offset says so, with the
 * lock's count of acquisitions with nothing nested (format.h, struct
 * hs_finding; as an edge's from_site_n).  A relock nests no other lock:
 * the lock stays a leaf. */
static void self_deadlock(struct hs_tls *t, struct acq *a, const struct hs_held *h)
{
	struct hs_table *tab = &hs_seg.hdr->tables[HS_T_FINDINGS];
	uint32_t n = __atomic_load_n(&tab->count, __ATOMIC_ACQUIRE);
	struct hs_finding f;
	uint32_t idx;
	if (n > tab->capacity)
		n = tab->capacity;
	for (uint32_t i = 0; i < n; i++) {
		struct hs_finding *o = &hs_seg.findings[i];
		if (__atomic_load_n(&o->ready, __ATOMIC_ACQUIRE) && o->kind == HS_FIND_SELF_DEADLOCK &&
		    o->lock == a->id) {
			__atomic_add_fetch(&o->count, 1, __ATOMIC_RELAXED);
			return;
		}
	}
	memset(&f, 0, sizeof f);
	f.kind = HS_FIND_SELF_DEADLOCK;
	f.tid = t->tid;
	f.ts_ns = a->t0;
	f.stack = hs_stack_here();
	f.stack2 = held_stack(t->slot, (int)(h - t->slot->held));
	if (h->flags & HS_HELDF_SITE) {
		uint32_t k = lock_leaf_count(h->lock);
		f.offset = k ? k : 1;
	}
	f.lock = a->id;
	f.addr = a->addr;
	idx = hs_finding_add(&hs_seg, &f);
	if (idx)
		hs_rec(t, a->t0, HS_REC_FINDING, f.stack, idx - 1, a->addr, 0);
}

/* Add the edge from -> to (one of them the GIL) and note it in the ring. */
static void gil_edge(struct hs_tls *t, uint32_t from, unsigned from_mode, uint32_t from_stack,
		     uint32_t from_site_n, uint32_t to, unsigned to_mode, uint32_t to_stack, uint64_t now)
{
	int created;
	uint32_t finding, e;
	if (!from || !to || from == to)
		return;
	e = hs_graph_add(&hs_seg, from, from_mode, from_stack, from_site_n, to, to_mode, to_stack, hs_stack_here,
			 t->tid, now, &created, &finding);
	if (created)
		hs_rec(t, now, HS_REC_NEW_EDGE, hs_seg.edges[e].to_stack, e, from, to);
	if (finding)
		hs_rec(t, now, HS_REC_FINDING, 0, finding - 1, 0, 0);
}

/* A new edge's stack: this call's whole stack, else (no room left on a small
 * thread stack to unwind, shim.h HS_UNWIND_ROOM) the call site's. */
static __thread uint64_t edge_site __attribute__((tls_model("initial-exec")));
static uint32_t edge_to_stack(void)
{
	uint32_t id = hs_stack_here();
	return id ? id : hs_stack_site(edge_site);
}

/*
 * Held-lock chains whose edges are all in the lock-order graph (lockdep's
 * chain cache, docs/design.md "Lock order"): an acquisition of lock L in
 * mode m while holding (l1, m1) ... (ln, mn), with or without the GIL, adds
 * exactly the edges li -> L (and GIL -> L), which depend on nothing else;
 * edges are never removed from a segment.  So once every one of them is in
 * the graph, the same chain again adds nothing: its key (a 64-bit hash of
 * the held ids and modes, L, m and the GIL's id) is kept in a two-way
 * per-thread table (the newest key of a set first, the one it displaces
 * second: two chains a thread alternates between that fall in one set both
 * stay; direct-mapped, such a pair missed at every acquisition under
 * py_workload, ~4,000 misses of 66,000, bench/README.md "The pthread lock
 * hooks under a threaded Python service"), and the next acquisition with
 * that key skips the lookups.  A chain with a semaphore counter in it
 * (skipped, its flag may change) or an edge the graph had no room for is
 * never kept.  In the thread's area, after the held chains; keys of
 * another segment generation (a fork child's parent's) are dropped at the
 * first look.
 */
#define EDGE_CHAINS 64u /* a power of two: EDGE_CHAINS / 2 sets of two */
struct edge_chains {
	uint32_t gen; /* hs_seg_gen the keys are of */
	uint32_t pad;
	uint64_t key[EDGE_CHAINS];
};
_Static_assert(sizeof(struct held_chain) * (HELD_CHAINS + 1) + sizeof(struct edge_chains) <= HS_AREA_LOCKS_SIZE,
	       "the chain cache fits the area after the held chains");

static inline struct edge_chains *edge_chains_of(void)
{
	char *a = hs_area();
	return a ? (struct edge_chains *)(void *)(a + HS_AREA_LOCKS +
						   sizeof(struct held_chain) * (HELD_CHAINS + 1))
		 : NULL;
}

/* The set of key (its two slots, one 16-byte pair): the key's low bit is
 * always 1 (edge_chain_key_of), so the set comes from the bits above it. */
static inline const uint64_t *edge_chain_set(const struct edge_chains *ec, uint64_t key)
{
	return &ec->key[(key >> 1 & (EDGE_CHAINS / 2 - 1)) * 2];
}

/* 1 when key is in its set. */
static inline int edge_chain_has(const struct edge_chains *ec, uint64_t key)
{
	const uint64_t *k = edge_chain_set(ec, key);
	return k[0] == key || k[1] == key;
}

/* Key into its set, first; the key that was first moves second (a signal
 * handler of this thread looking meanwhile may miss either: it then looks
 * the edges up, as for a chain never seen). */
static inline void edge_chain_put(struct edge_chains *ec, uint64_t key)
{
	uint64_t *k = (uint64_t *)(uintptr_t)edge_chain_set(ec, key);
	if (k[0] != key) {
		k[1] = k[0];
		k[0] = key;
	}
}

/* The key of acquiring lock id in mode acq_mode (GIL id gil or 0) over held[0 .. n-1]. */
static inline uint64_t edge_chain_key_of(const struct hs_thread *th, uint32_t n, uint32_t id, unsigned acq_mode,
					 uint32_t gil)
{
	uint64_t k = hs_mix64((uint64_t)id << 8 | acq_mode | (uint64_t)gil << 40);
	for (uint32_t i = 0; i < n; i++)
		k = hs_mix64(k ^ ((uint64_t)th->held[i].lock << 8 | th->held[i].mode));
	return k | 1; /* never 0: an empty entry */
}

static inline uint64_t edge_chain_key(const struct hs_thread *th, uint32_t n, const struct acq *a, uint32_t gil)
{
	return edge_chain_key_of(th, n, a->id, a->acq_mode, gil);
}

/* 1 when the chain cache holds the key of acquiring lock id in mode
 * acq_mode over held[0 .. n-1] (GIL id gil or 0): every edge it adds is in
 * the graph already (acq_edges would return at its first look). */
static inline int edge_chain_known(const struct hs_thread *th, uint32_t n, uint32_t id, unsigned acq_mode,
				   uint32_t gil)
{
	const struct edge_chains *ec = edge_chains_of();
	uint64_t key;
	if (HS_UNLIKELY(!ec) || HS_UNLIKELY(ec->gen != __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED)))
		return 0;
	key = edge_chain_key_of(th, n, id, acq_mode, gil);
	return edge_chain_has(ec, key);
}

/*
 * The chain cache's answer for the thread's last known chains at held
 * depths 1 and 2, with and without the GIL, without their keys: acquiring
 * lock id (in write mode, the common path's, acq_first_before) over held
 * entries whose lock, mode, trylock and recursion words are below[0 .. n-1],
 * with GIL id gil (0: not held), in the segment of generation gen, was
 * found in the chain cache (every edge in the graph: edges are never
 * removed from a segment), so the same again adds nothing.  The key
 * (edge_chain_key_of) is a hs_mix64 per held entry and one more, ~45
 * instructions for sqlite's memory mutex taken under its connection mutex
 * under a Python thread's thread-state lock, 40k times a run of
 * bench/py_workload.py 3000; a compare per word here (bench/README.md "Lock
 * hooks around the GIL's windows").  sqlite takes both mutexes with the
 * GIL held and without it in turn, hence an entry for each.  In the
 * thread's area after the chain cache (128 of the 320 bytes the lock
 * range had free); written only inside a hook (the guard held), the id
 * zeroed first and written last; a fork child's new segment has another
 * generation.
 */
#define CHAIN_KNOWN_DEPTHS 2u
struct chain_known {
	uint64_t below[CHAIN_KNOWN_DEPTHS];
	uint32_t id, gil, gen, pad;
};
_Static_assert(sizeof(struct held_chain) * (HELD_CHAINS + 1) + sizeof(struct edge_chains) +
			       sizeof(struct chain_known) * CHAIN_KNOWN_DEPTHS * 2 <=
		       HS_AREA_LOCKS_SIZE,
	       "the known chains fit the area after the chain cache");

/* The entry of depth n (1 or 2), with the GIL or not, in area a (hs_area()). */
static inline struct chain_known *chain_known_of(char *a, uint32_t n, uint32_t gil)
{
	return (struct chain_known *)(void *)(a + HS_AREA_LOCKS + sizeof(struct held_chain) * (HELD_CHAINS + 1) +
					      sizeof(struct edge_chains)) +
	       (n - 1) * 2 + (gil != 0);
}

/* A held entry's lock, mode, trylock and recursion as one word (lockpath.h held_push4). */
static inline uint64_t held_word_of(const struct hs_held *he)
{
	uint64_t w;
	memcpy(&w, &he->lock, sizeof w);
	return w;
}

/* 1 when acquiring id over held[0 .. n-1] with GIL id gil is the known chain of its depth (area a). */
static inline __attribute__((always_inline)) int chain_known_again(char *a, const struct hs_thread *th,
								   uint32_t n, uint32_t id, uint32_t gil,
								   uint32_t gen)
{
	const struct chain_known *k;
	if (n - 1 >= CHAIN_KNOWN_DEPTHS)
		return 0; /* nothing held (the GIL alone: one hs_mix64), or deeper */
	k = chain_known_of(a, n, gil);
	return k->id == id && k->gil == gil && k->gen == gen && held_word_of(&th->held[0]) == k->below[0] &&
	       (n == 1 || held_word_of(&th->held[1]) == k->below[1]);
}

/* edge_chain_known for acq_first_before, its yes kept as its depth's known chain (area a). */
static __attribute__((noinline)) int chain_known_ask(char *a, const struct hs_thread *th, uint32_t n, uint32_t id,
						     uint32_t gil, uint32_t gen)
{
	struct chain_known *k;
	if (!edge_chain_known(th, n, id, HS_MODE_WRITE, gil))
		return 0;
	if (n - 1 < CHAIN_KNOWN_DEPTHS) {
		k = chain_known_of(a, n, gil);
		k->id = 0;
		for (uint32_t i = 0; i < n; i++)
			k->below[i] = held_word_of(&th->held[i]);
		k->gil = gil;
		k->gen = gen;
		k->id = id;
	}
	return 1;
}

/* The edges held -> a->id of a blocking acquisition (n held entries), and
 * the GIL -> it when the thread holds the GIL; out of line (most
 * acquisitions hold nothing, or find their chain's edges known). */
static __attribute__((noinline)) void acq_edges(struct hs_tls *t, struct acq *a, uint32_t n)
{
	struct hs_thread *th = t->slot;
	struct edge_chains *ec = edge_chains_of();
	uint32_t gil = a->holds_gil ? lock_gil_id() : 0;
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	uint64_t key = 0;
	int all = 1; /* every edge of the chain is in the graph */
	if (ec) {
		if (HS_UNLIKELY(ec->gen != gen)) {
			memset(ec->key, 0, sizeof ec->key);
			ec->gen = gen;
		}
		key = edge_chain_key(th, n, a, gil);
		if (edge_chain_has(ec, key))
			return; /* this chain's edges are known */
	}
	if (gil && gil != a->id) {
		if (!hs_edge_find(&hs_seg, hs_edge_key(gil, a->id, HS_MODE_WRITE, a->acq_mode))) {
			gil_edge(t, gil, HS_MODE_WRITE, 0, 0, a->id, a->acq_mode, 0, a->t0);
			all &= hs_edge_find(&hs_seg, hs_edge_key(gil, a->id, HS_MODE_WRITE, a->acq_mode)) != 0;
		}
	}
	edge_site = a->site;
	for (uint32_t i = 0; i < n; i++) {
		const struct hs_held *he = &th->held[i];
		int created;
		uint32_t finding, e;
		uint32_t from_stack, site_n;
		if (he->lock == a->id || he->lock == 0)
			continue;
		if (__atomic_load_n(&hs_seg.locks[he->lock].flags, __ATOMIC_RELAXED) & HS_LOCKF_COUNTER) {
			all = 0;
			continue;
		}
		/* an edge there already: nothing to add (hs_graph_add would find it again) unless
		 * it has its held lock's call site only; a new edge gets the held lock's exact
		 * stack, or its site's when it was taken on the leaf path (then no leaf any more) */
		e = hs_edge_find(&hs_seg, hs_edge_key(he->lock, a->id, he->mode, a->acq_mode));
		if (HS_LIKELY(e) && HS_LIKELY(!edge_from_site(e))) {
			if (HS_UNLIKELY(he->flags & HS_HELDF_SITE))
				(void)lock_leaf_nested(he->lock); /* its nesting was not counted (a slot taken over) */
			continue;
		}
		from_stack = hs_locks_held_stack(th, (int)i, &site_n);
		e = hs_graph_add(&hs_seg, he->lock, he->mode, from_stack, site_n, a->id, a->acq_mode, 0,
				 edge_to_stack, t->tid, a->t0, &created, &finding);
		if (!e || edge_from_site(e))
			all = 0; /* no room: not in the graph; or its call site only: again next time */
		if (created)
			hs_rec(t, a->t0, HS_REC_NEW_EDGE, hs_seg.edges[e].to_stack, e, he->lock, a->id);
		if (finding)
			hs_rec(t, a->t0, HS_REC_FINDING, 0, finding - 1, 0, 0);
	}
	if (ec && all)
		edge_chain_put(ec, key);
}

/* flags of acq_before: a mutex's flags, read from the mutex only where they
 * are needed (a new lock, a relock): the common acquisition never reads them. */
#define FLAGS_OF_MUTEX 0xffffffffu
#define FLAGS_OF_MUTEX_OR_0(kind) ((kind) == HS_LOCK_MUTEX ? FLAGS_OF_MUTEX : 0u) /* a spin lock has none */
static inline unsigned flags_of(const struct acq *a, unsigned flags)
{
	return flags == FLAGS_OF_MUTEX ? hs_mutex_flags((const void *)(uintptr_t)a->addr) : flags;
}

/* A relock of held entry h (index): a recursive re-entry, or a self-deadlock. */
static __attribute__((noinline)) void acq_relock(struct hs_tls *t, struct acq *a, unsigned flags, int h)
{
	const struct hs_held *he = &t->slot->held[h];
	flags = flags_of(a, flags);
	if (a->kind == HS_LOCK_MUTEX && (flags & HS_LOCKF_RECURSIVE)) {
		a->reentry = h + 1;
		return;
	}
	if (a->kind == HS_LOCK_RWLOCK && a->acq_mode == HS_MODE_READ_RECURSIVE && he->mode != HS_MODE_WRITE) {
		a->reentry = h + 1;
		return;
	}
	if (!a->trylock)
		self_deadlock(t, a, he);
}

/* A lock named by heisen_name_lock() before its first use gets its kind now
 * (a lock's kind, once set, stays: a slot's cached id was through here). */
static inline void lock_named_first_use(const struct acq *a, uint32_t id, unsigned flags)
{
	if (HS_UNLIKELY(hs_seg.locks[id].kind == 0)) {
		hs_seg.locks[id].flags = (uint16_t)flags_of(a, flags);
		__atomic_store_n(&hs_seg.locks[id].kind, a->kind, __ATOMIC_RELEASE);
	}
}

/* The lock's id and the site's stack without the thread's area (no chains). */
static __attribute__((noinline)) void acq_identify_no_area(struct hs_tls *t, struct acq *a, unsigned flags)
{
	pending = NULL;
	if (!a->stack)
		a->stack = hs_stack_site(a->site);
	if (!a->id)
		a->id = hs_lock_id(&hs_seg, a->addr, a->kind, flags_of(a, flags), a->stack, t->tid, a->t0);
	if (a->id)
		lock_named_first_use(a, a->id, flags);
}

/* Drop the held entries another thread released since; out of line (rare). */
static __attribute__((noinline)) void held_purge_slow(struct hs_thread *th)
{
	held_purge(th);
}

/*
 * Before acquiring: identify the lock, catch a relock of a held lock, and
 * add the edges held -> this lock for a blocking acquisition.  Inline in the
 * pthread hooks (acq_before), out of line for semaphores.c (hs_acq_before).
 * The common case -- the slot's last lock and site again, nothing held or
 * every edge known -- is a chain read and a few compares; the rest is out
 * of line.
 */
static inline __attribute__((always_inline)) void acq_before(struct hs_tls *t, struct acq *a, unsigned flags)
{
	struct hs_thread *th = t->slot;
	struct held_chain *held_chains = held_chains_of();
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	int h = -1, stale = 0;

	a->t0 = lock_now();
	/* one pass over the held stack: a relock (h), and entries another thread released (stale) */
	for (int i = (int)n - 1; i >= 0; i--) {
		stale |= (th->held[i].flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(th->held[i].lock);
		if (th->held[i].addr == a->addr && h < 0)
			h = i;
	}
	if (HS_UNLIKELY(stale)) {
		held_purge_slow(th);
		n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
		h = held_index(th, a->addr);
	}
	if (HS_UNLIKELY(!held_chains)) {
		acq_identify_no_area(t, a, flags);
	} else {
		struct held_chain *p = &held_chains[n < HELD_CHAINS ? n : HELD_CHAINS];
		pending = p;
		p->addr = a->addr;
		p->exact = 0;
		p->leaf = 0;
		uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
		if (!a->stack) {
			/* the site's cached stack: the slot's last one, else the thread's cache (hs_stack_site) */
			if (HS_UNLIKELY(p->stack_site != a->site || !p->site_stack || p->site_gen != gen)) {
				p->site_stack = hs_stack_site(a->site);
				p->stack_site = a->site;
				p->site_gen = gen;
			}
			a->stack = p->site_stack;
		}
		if (!a->id) {
			uint32_t id = p->lock_id;
			/* the id this slot saw for this address in this segment (so below the locks'
			 * count), while that lock lives (not destroyed or freed); it was named then */
			if (HS_UNLIKELY(p->lock_addr != a->addr || !id || p->lock_gen != gen ||
					__atomic_load_n(&hs_seg.locks[id].addr, __ATOMIC_RELAXED) != a->addr ||
					(__atomic_load_n(&hs_seg.locks[id].flags, __ATOMIC_RELAXED) & HS_LOCKF_DEAD))) {
				id = hs_lock_id(&hs_seg, a->addr, a->kind, flags_of(a, flags), a->stack, t->tid,
						 a->t0);
				p->lock_addr = a->addr;
				p->lock_id = id;
				p->lock_gen = gen;
				if (id)
					lock_named_first_use(a, id, flags);
			}
			a->id = id;
		} else {
			lock_named_first_use(a, a->id, flags);
		}
		/* this call's chain, kept raw in the slot it will be held in; the site's cached
		 * stack stands for it until needed.  Under Python, lazily (its frames up to the
		 * evaluation loop, the Python frame as a token: docs/design.md "Lazy lock
		 * stacks"); else the whole chain, inline.  None for a pthread lock that is a
		 * leaf so far (lockpath.h, lock_leaf) and not relocked (a self-deadlock's or
		 * re-entry's held entry is found below) */
		if (a->id && h < 0 && a->kind != HS_LOCK_SEMAPHORE && lock_leaf(a->id, gen))
			p->leaf = 1;
		else if (hs_py_frames_maybe())
			hs_chain_read_lazy(&p->c, a->site, a->cfa);
		else
			hs_chain_read_inline(&p->c, a->site, a->cfa);
	}
	if (HS_UNLIKELY(!a->id))
		return;
	if (HS_UNLIKELY(h >= 0)) {
		acq_relock(t, a, flags, h);
		return;
	}
	a->holds_gil = !a->gil_safe && __atomic_load_n(&hs_py_present, __ATOMIC_RELAXED) && holds_gil_now();
	if (a->trylock || a->fresh)
		return; /* a trylock cannot block, nor can a fresh lock's first taking: no edge into it */
	if (n || a->holds_gil)
		acq_edges(t, a, n);
}

void hs_acq_before(struct hs_tls *t, struct acq *a, unsigned flags)
{
	acq_before(t, a, flags);
}

/* Publish "waiting for this lock since t0" in the thread's slot. */
void hs_wait_begin(struct hs_tls *t, const struct acq *a, unsigned kind, uint64_t addr)
{
	struct hs_thread *th = t->slot;
	hs_lockstate_begin(th);
	th->wait_kind = kind;
	th->wait_addr = addr;
	th->wait_lock = a->id;
	th->wait_mode = a->acq_mode;
	th->wait_flags = a->holds_gil ? HS_WAITF_HOLDS_GIL : 0;
	th->wait_stack = a->stack;
	th->wait_since_ns = a->t0;
	hs_lockstate_end(th);
}

void hs_wait_end(struct hs_tls *t)
{
	struct hs_thread *th = t->slot;
	hs_lockstate_begin(th);
	th->wait_kind = HS_WAIT_NONE;
	hs_lockstate_end(th);
}

/* Copy held chain slot src into dst: the chain and the state of its held entry. */
static void held_chain_copy(struct held_chain *dst, const struct held_chain *src)
{
	dst->addr = src->addr;
	dst->exact = src->exact;
	dst->leaf = src->leaf;
	dst->site_stack = src->site_stack;
	dst->site_gen = src->site_gen;
	dst->stack_site = src->stack_site;
	dst->lock_addr = src->lock_addr;
	dst->lock_id = src->lock_id;
	dst->lock_gen = src->lock_gen;
	hs_chain_copy(&dst->c, &src->c);
}

/* Push h; chain (may be NULL) is this acquisition's raw chain, in its slot already or not. */
static void held_push(struct hs_thread *th, const struct hs_held *h, const struct held_chain *chain)
{
	uint32_t n = th->held_count;
	hs_lockstate_begin(th);
	if (th->held_count < HS_HELD_MAX)
		th->held[th->held_count++] = *h;
	else
		th->held_overflow++;
	hs_lockstate_end(th);
	struct held_chain *held_chains = held_chains_of();
	if (n < HELD_CHAINS && held_chains) {
		struct held_chain *c = &held_chains[n];
		if (chain && chain->addr == h->addr) {
			if (chain != c)
				held_chain_copy(c, chain);
		} else {
			c->addr = h->addr;
			c->exact = 0;
			c->leaf = 0;
			c->c.depth = 0;
			c->c.walked = 0;
			c->c.python = 0;
			c->c.lazy = 0;
		}
	}
}

/*
 * A fork child's thread takes over an entry its forking thread held at the
 * fork (init.c, fork_held): h->lock is the lock's id in the child's segment;
 * its release count is this process's for that id, so the entry is not
 * purged as released by another thread.  The chain kept at the same index
 * (held_chains, copied with the thread's memory) still matches by address.
 * Async-signal-safe.
 */
void hs_locks_adopt_held(struct hs_thread *th, const struct hs_held *h)
{
	struct hs_held e = *h;
	e.flags = (e.flags & ((1u << HS_HELDF_RELGEN_SHIFT) - 1)) | relgen_of(e.lock) << HS_HELDF_RELGEN_SHIFT;
	hs_lockstate_begin(th);
	if (th->held_count < HS_HELD_MAX)
		th->held[th->held_count++] = e;
	else
		th->held_overflow++;
	hs_lockstate_end(th);
}

/* Remove held entry i (whole, recursion included). */
static void held_remove(struct hs_thread *th, int i)
{
	if (!HS_ASSERT(hs_held_index_ok(th->held_count, i)))
		return;
	hs_lockstate_begin(th);
	if ((uint32_t)i + 1 < th->held_count)
		memmove(&th->held[i], &th->held[i + 1], (th->held_count - (uint32_t)i - 1) * sizeof th->held[0]);
	th->held_count--;
	hs_lockstate_end(th);
	/* the entries above i move down: the lowest that may need completing is at i or above */
	if (hs_lock_lazy_nogil > i + 1)
		hs_lock_lazy_nogil = i + 1;
	/* the top entry's slot keeps its chain: the shadow of the next acquisition there */
	struct held_chain *held_chains = held_chains_of();
	for (uint32_t k = (uint32_t)i; held_chains && k < th->held_count && k + 1 < HELD_CHAINS; k++)
		held_chain_copy(&held_chains[k], &held_chains[k + 1]);
}

/* The held chain slot n after a push whose chain was not read in place there. */
static __attribute__((noinline)) void held_chain_set(struct held_chain *c, uint64_t addr,
						     const struct held_chain *chain)
{
	if (chain && chain->addr == addr) {
		held_chain_copy(c, chain);
	} else {
		c->addr = addr;
		c->exact = 0;
		c->leaf = 0;
		c->c.depth = 0;
		c->c.walked = 0;
		c->c.python = 0;
		c->c.lazy = 0;
	}
}

/* hs_acq_after's rare cases: a failed call, a recursive re-entry. */
static __attribute__((noinline)) void acq_after_slow(struct hs_tls *t, struct acq *a, int rc, uint64_t now)
{
	struct hs_thread *th = t->slot;
	if (rc == EBUSY || rc == ETIMEDOUT) {
		hs_rec(t, now, HS_REC_LOCK_BUSY, a->stack, a->addr, a->id, (uint64_t)rc);
	} else if (rc != 0 && rc != EOWNERDEAD) {
		hs_rec(t, now, HS_REC_LOCK_ERROR, a->stack, a->addr, a->id, (uint64_t)rc);
	} else {
		hs_lockstate_begin(th);
		th->held[a->reentry - 1].recursion++;
		hs_lockstate_end(th);
	}
}

/*
 * After the real call (rc its result), while the lock is held: what must be
 * there before the caller runs with it -- the held entry (pushed in place;
 * the chain is already in its slot), the acquirer check of the hand-over
 * order, the ring record -- and nothing else.  Inline in the pthread hooks
 * (acq_after), out of line for semaphores.c (hs_acq_after).
 */
static inline __attribute__((always_inline)) void acq_after(struct hs_tls *t, struct acq *a, int rc)
{
	struct hs_thread *th = t->slot;
	/* an acquisition that did not wait happened at t0: spare a clock read */
	uint64_t now = a->waited ? hs_now() : a->t0;
	uint64_t waited;
	struct hs_lock *l;
	int32_t last;
	int ordered;
	uint32_t n;
	if (HS_UNLIKELY((rc != 0 && rc != EOWNERDEAD) ||
			(a->reentry && (uint32_t)a->reentry <= th->held_count))) {
		acq_after_slow(t, a, rc, now);
		if (rc != 0 && rc != EOWNERDEAD)
			return;
	} else {
		/* push the held entry, in place */
		n = th->held_count;
		hs_lockstate_begin(th);
		if (HS_LIKELY(n < HS_HELD_MAX)) {
			struct hs_held *e = &th->held[n];
			e->addr = a->addr;
			e->lock = a->id;
			e->mode = a->hold_mode;
			e->trylock = a->trylock;
			e->recursion = 0;
			e->stack = a->stack;
			e->flags = (a->holds_gil ? HS_HELDF_GIL : 0) |
				   (pending && pending->leaf && pending->addr == a->addr ? HS_HELDF_SITE : 0) |
				   relgen_of(a->id) << HS_HELDF_RELGEN_SHIFT;
			e->since_ns = now;
			th->held_count = n + 1;
		} else {
			th->held_overflow++;
		}
		hs_lockstate_end(th);
		if (n < HELD_CHAINS) {
			struct held_chain *held_chains = held_chains_of();
			/* the chain was read into its slot (acq_before): nothing to copy */
			if (held_chains && HS_UNLIKELY(pending != &held_chains[n] || pending->addr != a->addr))
				held_chain_set(&held_chains[n], a->addr, pending);
			if (held_chains && held_chains[n].c.lazy && !held_chains[n].leaf && !a->holds_gil)
				lazy_nogil_note(n); /* completed before this thread takes the GIL, if still held */
		}
	}
	l = &hs_seg.locks[a->id];
	last = __atomic_load_n(&l->last_tid, __ATOMIC_RELAXED);
	ordered = a->kind == HS_LOCK_MUTEX || a->kind == HS_LOCK_SPIN; /* a sync object of handover.c */
	if (HS_UNLIKELY(last != t->tid) && !(__atomic_load_n(&l->flags, __ATOMIC_RELAXED) & HS_LOCKF_SHARED)) {
		/* a second thread: the instance is shared unless it was handed over (the GIL rule,
		 * lockgraph.c; handover.c).  A shared instance's last acquirer is never looked at
		 * again: it is not written, so threads taking a shared lock in turn do not pass its
		 * node's cache line back and forth while they hold the lock. */
		if (last)
			hs_order_acquirer_changed(t, a->id, a->addr, last, ordered, a->stack, a->t0);
		__atomic_store_n(&l->last_tid, t->tid, __ATOMIC_RELAXED);
	}
	if (ordered)
		hs_order_acquire(t, a->addr);
	waited = a->waited ? now - a->t0 : 0;
	if (waited > 0xffffffffffffull)
		waited = 0xffffffffffffull;
	hs_rec(t, now, HS_REC_LOCK_ACQUIRED, a->stack, a->addr, a->id,
	       (uint64_t)a->hold_mode | (uint64_t)a->trylock << 8 | waited << 16);
}

void hs_acq_after(struct hs_tls *t, struct acq *a, int rc)
{
	acq_after(t, a, rc);
}


/* acq_first_before's steps out of line: the lock not identified by the slot's
 * cached id (a new lock, another lock at this depth, a new segment; returns
 * the lock's id, 0: untracked, the lock table full), and the edges held ->
 * lock and GIL -> lock (acq_edges: most chains' edges are known). */
static __attribute__((noinline)) uint32_t acq_first_identify(struct hs_tls *t, struct held_chain *p, uint64_t addr,
							   unsigned kind, uint32_t stack, uint64_t now, uint32_t gen)
{
	struct acq a = {.addr = addr, .kind = (uint8_t)kind, .stack = stack, .t0 = now};
	uint32_t id = hs_lock_id(&hs_seg, addr, kind, flags_of(&a, FLAGS_OF_MUTEX_OR_0(kind)), stack, t->tid, now);
	p->lock_addr = addr;
	p->lock_id = id;
	p->lock_gen = gen;
	if (id)
		lock_named_first_use(&a, id, FLAGS_OF_MUTEX_OR_0(kind));
	return id;
}

static __attribute__((noinline)) void acq_first_edges(struct hs_tls *t, uint64_t addr, uint64_t site,
						      unsigned kind, uint32_t id, uint32_t stack, uint64_t now,
						      int holds_gil, uint32_t n)
{
	struct acq a = {.addr = addr, .site = site, .kind = (uint8_t)kind, .acq_mode = HS_MODE_WRITE,
			.hold_mode = HS_MODE_WRITE, .id = id, .stack = stack, .t0 = now, .holds_gil = holds_gil};
	acq_edges(t, &a, n);
}

/*
 * The common blocking acquisition of a mutex or spin lock, in two halves
 * around the real call, by a thread that holds n < HELD_CHAINS locks (its
 * area there; p its held chain slot n): what acq_before and acq_after do for
 * it, in registers (no struct acq, no second pass over the held stack).
 *
 * acq_first_before, before the real call (outside the lock's critical
 * section, as acq_before): a lock already in the held stack (a relock or a
 * recursive re-entry) or an entry another thread released is left to the
 * shared steps: returns 0 then, having done nothing.  Otherwise one clock
 * read (the release reads the other), the chain read into held chain slot
 * n, the site's stack and the lock's id checked against that slot's last
 * ones (*id 0: untracked, the lock table full), the GIL question, and the
 * edges held -> lock and GIL -> lock when something is held or the GIL is
 * (acq_edges, out of line: most chains' edges are known); returns 1.
 *
 * acq_first_after, once the real call took the lock (the values from
 * acq_first_before; nothing of the held stack changed in between: the
 * guard is held): the held entry in four stores under the seqlock, the
 * shared-instance check, the hand-over order, the ring record.  kind:
 * HS_LOCK_MUTEX or HS_LOCK_SPIN.  docs/design.md "Lock order", "Cost".
 */
_Static_assert(HELD_CHAINS < HS_HELD_MAX, "acq_first's entry n < HELD_CHAINS has room");
static inline __attribute__((always_inline)) int acq_first_before(struct hs_tls *t, struct held_chain *p,
								  uint64_t addr, uint64_t site, uint64_t cfa,
								  unsigned kind, uint32_t n, uint64_t *now_,
								  uint32_t *id_, uint32_t *stack_, int *gil_)
{
	struct hs_thread *th = t->slot;
	uint64_t now;
	uint32_t gen, id, stack;
	int holds_gil;
	for (uint32_t i = 0; i < n; i++)
		if (th->held[i].addr == addr ||
		    HS_UNLIKELY((th->held[i].flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(th->held[i].lock)))
			return 0;
	now = lock_now();
	if (p->addr != addr)
		p->addr = addr;
	if (p->exact)
		p->exact = 0;
	gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	if (HS_UNLIKELY(p->stack_site != site || !p->site_stack || p->site_gen != gen)) {
		p->site_stack = lock_site_stack_in(t->area, site, gen);
		p->stack_site = site;
		p->site_gen = gen;
	}
	stack = p->site_stack;
	id = p->lock_id;
	if (HS_UNLIKELY(p->lock_addr != addr || !id || p->lock_gen != gen ||
			__atomic_load_n(&hs_seg.locks[id].addr, __ATOMIC_RELAXED) != addr ||
			(__atomic_load_n(&hs_seg.locks[id].flags, __ATOMIC_RELAXED) & HS_LOCKF_DEAD)))
		id = acq_first_identify(t, p, addr, kind, stack, now, gen);
	/* the chain into slot n, unless a leaf so far (lock_leaf) */
	if (HS_LIKELY(id) && lock_leaf(id, gen)) {
		p->leaf = 1;
	} else {
		p->leaf = 0;
		if (hs_py_frames_maybe())
			hs_chain_read_lazy(&p->c, site, cfa);
		else
			hs_chain_read_inline(&p->c, site, cfa);
	}
	holds_gil = id && __atomic_load_n(&hs_py_present, __ATOMIC_RELAXED) && holds_gil_now();
	/* the edges held -> lock and GIL -> lock: the depth's last known chain compared inline, the
	 * chain cache (chain_known_ask), acq_edges (out of line) for a chain not known */
	if (id && (n || HS_UNLIKELY(holds_gil))) {
		uint32_t gil = holds_gil ? lock_gil_id() : 0;
		if (!chain_known_again(t->area, th, n, id, gil, gen) && !chain_known_ask(t->area, th, n, id, gil, gen))
			acq_first_edges(t, addr, site, kind, id, stack, now, holds_gil, n);
	}
	*now_ = now;
	*id_ = id;
	*stack_ = stack;
	*gil_ = holds_gil;
	return 1;
}

static inline __attribute__((always_inline)) void acq_first_after(struct hs_tls *t, const struct held_chain *p,
								  uint64_t addr, uint32_t n, uint64_t now,
								  uint32_t id, uint32_t stack, int holds_gil)
{
	struct hs_thread *th = t->slot;
	held_push4(th, n, addr, id, HS_MODE_WRITE, 0, stack, (holds_gil ? HS_HELDF_GIL : 0) | (p->leaf ? HS_HELDF_SITE : 0),
		   now);
	if (p->c.lazy && !p->leaf && !holds_gil)
		lazy_nogil_note(n); /* completed before this thread takes the GIL, if still held */
	{
		struct hs_lock *l = &hs_seg.locks[id];
		int32_t last = __atomic_load_n(&l->last_tid, __ATOMIC_RELAXED);
		if (HS_UNLIKELY(last != t->tid) && !(__atomic_load_n(&l->flags, __ATOMIC_RELAXED) & HS_LOCKF_SHARED)) {
			/* a second thread (acq_after) */
			if (last)
				hs_order_acquirer_changed(t, id, addr, last, 1, stack, now);
			__atomic_store_n(&l->last_tid, t->tid, __ATOMIC_RELAXED);
		}
	}
	hs_order_acquire(t, addr);
	hs_rec(t, now, HS_REC_LOCK_ACQUIRED, stack, addr, id, (uint64_t)HS_MODE_WRITE);
}


/*
 * Lock-order edges known to be in the graph: a process-private
 * direct-mapped memo of edge keys (hs_edge_key) and the segment generation
 * they were found in, so that an acquisition under locks already ordered
 * before it checks each held entry with a load and a compare instead of an
 * index lookup.  Edges are never removed from a segment; an entry of an
 * older segment (a fork child's new one) does not match.  Two threads may
 * write one slot at once: each field is written whole, and both write the
 * current generation, so a mixed read is still an edge that exists.
 */
#define EDGE_MEMO 4096u
static struct {
	uint64_t key;   /* [atomic] */
	uint32_t gen;   /* [atomic] */
} edge_memo[EDGE_MEMO];

/* 1 when the edge with this key is in the memo (a load and a compare). */
static inline int edge_memoised(uint64_t key, uint32_t gen)
{
	unsigned i = (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 52) & (EDGE_MEMO - 1);
	return __atomic_load_n(&edge_memo[i].key, __ATOMIC_RELAXED) == key &&
	       __atomic_load_n(&edge_memo[i].gen, __ATOMIC_RELAXED) == gen;
}

/* 1 when the edge with this key is in the graph, memoised then; 0 too
 * for an edge with its held lock's call site only (edge_from_site): the
 * next acquisition in that order is to record it exactly. */
static int edge_found(uint64_t key, uint32_t gen)
{
	unsigned i = (unsigned)((key * 0x9e3779b97f4a7c15ull) >> 52) & (EDGE_MEMO - 1);
	uint32_t e = hs_edge_find(&hs_seg, key);
	if (!e || edge_from_site(e))
		return 0;
	__atomic_store_n(&edge_memo[i].gen, gen, __ATOMIC_RELAXED);
	__atomic_store_n(&edge_memo[i].key, key, __ATOMIC_RELAXED);
	return 1;
}

int hs_edge_known(uint64_t key)
{
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	return edge_memoised(key, gen) || edge_found(key, gen);
}

HS_HOT int hs_acq_ordered(struct hs_tls *t, const struct acq *a)
{
	const struct hs_thread *th = t->slot;
	uint32_t n = th->held_count, gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED);
	if (HS_UNLIKELY(n > HELD_CHAINS))
		return 0;
	for (uint32_t i = 0; i < n; i++) {
		const struct hs_held *he = &th->held[i];
		uint64_t key;
		/* released by another thread since (relgen): hs_acq_before drops it */
		if (HS_UNLIKELY((he->flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(he->lock)))
			return 0;
		if (he->addr == a->addr)
			return 0; /* a relock or a re-entry: hs_acq_before's to judge */
		if (he->lock == a->id || he->lock == 0 || a->fresh)
			continue;
		key = hs_edge_key(he->lock, a->id, he->mode, a->acq_mode);
		if (HS_LIKELY(edge_memoised(key, gen)))
			continue;
		if (__atomic_load_n(&hs_seg.locks[he->lock].flags, __ATOMIC_RELAXED) & HS_LOCKF_COUNTER)
			continue; /* no edge from a counter */
		if (!edge_found(key, gen))
			return 0;
	}
	return 1;
}



/*
 * A release in two halves around the real one, so that the lock is free as
 * early as it can be (the bookkeeping outside its critical section: other
 * threads waiting for it do not wait for heisen too; docs/design.md "Lock
 * order").
 *
 * release_begin, before the real release: the index of this thread's held
 * entry for addr (-1: none, or one another thread released since, see
 * relgen), and for a lock this thread does not hold, the release counted
 * for its holder (*id its lock id, 0 when unknown) -- before the real
 * release, so that a thread that takes the lock next does not take its held
 * entry for one released by another thread.  Reads the thread's own held
 * stack only.
 *
 * release_end, after it (index i from release_begin, nothing of this
 * thread's held stack changed in between: the hook's guard is held, so a
 * signal handler running in between records nothing): the lock -> GIL edge
 * of a lock taken without the GIL and released with it, the held entry
 * dropped (or its recursion count), the entries other threads released
 * since purged, and the ring record (rc: the real call's result; a failed
 * release of a lock this thread does not hold takes its count back, so its
 * holder keeps its entry: an error-checking mutex refuses a foreign unlock
 * with EPERM, and its owner still holds it).  Until it runs the held stack
 * still shows the lock: a reader may briefly see it held by this thread and
 * by the thread that took it next, never held by nobody while it is held.
 */
static inline int release_begin(struct hs_tls *t, uint64_t addr, uint32_t *id)
{
	struct hs_thread *th = t->slot;
	uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	*id = 0;
	for (int i = (int)n - 1; i >= 0; i--)
		if (th->held[i].addr == addr) {
			if (HS_LIKELY((th->held[i].flags >> HS_HELDF_RELGEN_SHIFT) == relgen_of(th->held[i].lock)))
				return i;
			break; /* released by another thread since: no longer this thread's */
		}
	if ((*id = hs_lock_find(&hs_seg, addr)) != 0)
		/* not ours: released for its holder, whose entry is dropped when it next looks */
		__atomic_add_fetch(&hs_relgen[*id & (RELGEN_SLOTS - 1)], 1, __ATOMIC_RELAXED);
	return -1;
}

/* After a release left n entries held: nothing held, nothing for the lazy
 * chain to complete; else the entries another thread released since are
 * purged (the scan inline, the purge out of line).  (A mark left with
 * fewer entries held than its index is cleared at the take instead:
 * lock_before_gil_take, one compare there rather than one at every
 * release.) */
static inline __attribute__((always_inline)) void after_release(struct hs_thread *th, uint32_t n)
{
	if (!n) {
		if (HS_UNLIKELY(hs_lock_lazy_nogil))
			hs_lock_lazy_nogil = 0;
		return;
	}
	for (uint32_t k = 0; k < n && k < HS_HELD_MAX; k++)
		if (HS_UNLIKELY((th->held[k].flags >> HS_HELDF_RELGEN_SHIFT) != relgen_of(th->held[k].lock))) {
			held_purge_slow(th);
			return;
		}
}

/* Held entry i, taken without the GIL, is released with it: the GIL was
 * taken while holding it (the edge lock -> GIL); out of line. */
static __attribute__((noinline)) void release_gil_edge(struct hs_tls *t, int i)
{
	struct hs_thread *th = t->slot;
	uint32_t id = th->held[i].lock;
	/* a new edge gets the held lock's exact stack (interned only then) */
	uint32_t gil = hs_py_gil_lock();
	unsigned mode = th->held[i].mode;
	/* an edge there already: nothing to add (one lookup, no clock read); a
	 * holding that orders nothing (lock 0: a semaphore its holder probed,
	 * semaphores.c sem_probed) makes no edge, so its stack is never read */
	uint32_t e, site_n;
	if (id && gil && gil != id) {
		e = hs_edge_find(&hs_seg, hs_edge_key(id, gil, mode, HS_MODE_WRITE));
		if (!e || edge_from_site(e)) {
			uint32_t from_stack = hs_locks_held_stack(th, i, &site_n);
			gil_edge(t, id, mode, from_stack, site_n, gil, HS_MODE_WRITE, 0, hs_now());
		} else if (th->held[i].flags & HS_HELDF_SITE) {
			(void)lock_leaf_nested(id);
		}
	}
	th->held[i].flags |= HS_HELDF_GIL;
}

static inline __attribute__((always_inline)) void release_end(struct hs_tls *t, uint64_t addr, int i, uint32_t id,
								int rc)
{
	struct hs_thread *th = t->slot;
	if (HS_UNLIKELY(rc != 0) && i < 0 && id)
		/* it failed (EPERM: an error-checking or recursive mutex unlocked by a thread that does
		 * not own it): its holder still holds it; the count taken back */
		__atomic_sub_fetch(&hs_relgen[id & (RELGEN_SLOTS - 1)], 1, __ATOMIC_RELAXED);
	if (HS_LIKELY(i >= 0)) {
		struct hs_held *he = &th->held[i];
		id = he->lock;
		if (!(he->flags & HS_HELDF_GIL) && __atomic_load_n(&hs_py_present, __ATOMIC_RELAXED) &&
		    holds_gil_now())
			release_gil_edge(t, i);
		if (HS_UNLIKELY(he->recursion)) {
			hs_lockstate_begin(th);
			he->recursion--;
			hs_lockstate_end(th);
		} else if (HS_LIKELY((uint32_t)i + 1 == th->held_count)) {
			/* the top entry (last in, first out): its chain slot stays as the next shadow.
			 * One store, outside the seqlock: the entries stay as they are, so a reader
			 * copying meanwhile gets the stack before or after this release, each whole;
			 * the next push rewrites the entry under the seqlock (format.h, struct
			 * hs_thread; docs/design.md "Lock order") */
			__atomic_store_n(&th->held_count, (uint32_t)i, __ATOMIC_RELEASE);
		} else {
			held_remove(th, i);
		}
	}
	after_release(th, th->held_count);
	if (HS_LIKELY(rc == 0))
		hs_rec_released(t, lock_now(), addr, id);
	else
		hs_rec(t, lock_now(), HS_REC_LOCK_ERROR, 0, addr, id, (uint64_t)rc);
}

/* 1 when the thread's innermost held entry is addr's, taken once and still
 * this thread's (not released by another since, see relgen): the common
 * release, whose search (release_begin) is this one compare. */
static inline __attribute__((always_inline)) int release_is_top(const struct hs_thread *th, uint64_t addr)
{
	uint32_t i = th->held_count - 1;
	return HS_LIKELY(i < HS_HELD_MAX) && HS_LIKELY(th->held[i].addr == addr) && HS_LIKELY(!th->held[i].recursion) &&
	       HS_LIKELY((th->held[i].flags >> HS_HELDF_RELGEN_SHIFT) == relgen_of(th->held[i].lock));
}

/* release_end for the entry release_is_top found (rc: the real release's
 * result), everything read again after the real call (nothing of the
 * thread's held stack changed meanwhile: the guard is held), so that little
 * lives across it. */
static __attribute__((noinline)) void release_top_failed(struct hs_tls *t, uint64_t addr, int rc)
{
	release_end(t, addr, (int)t->slot->held_count - 1, 0, rc);
}

static inline __attribute__((always_inline)) void release_top_end(struct hs_tls *t, uint64_t addr, int rc)
{
	struct hs_thread *th = t->slot;
	uint32_t i = th->held_count - 1;
	struct hs_held *he = &th->held[i];
	uint32_t id = he->lock;
	if (HS_UNLIKELY(rc != 0)) {
		release_top_failed(t, addr, rc);
		return;
	}
	if (!(he->flags & HS_HELDF_GIL) && __atomic_load_n(&hs_py_present, __ATOMIC_RELAXED) && holds_gil_now())
		release_gil_edge(t, (int)i);
	/* one store outside the seqlock (release_end) */
	__atomic_store_n(&th->held_count, i, __ATOMIC_RELEASE);
	after_release(th, i);
	hs_rec_released(t, lock_now(), addr, id);
}

void hs_release(struct hs_tls *t, uint64_t addr)
{
	uint32_t id;
	int i = release_begin(t, addr, &id);
	release_end(t, addr, i, id, 0);
}

/* The lock at addr is gone (destroyed, initialised again): this thread no
 * longer holds it, and the next lock there is a new one. */
static void gone(struct hs_thread *th, uint64_t addr)
{
	int i;
	while ((i = held_index(th, addr)) >= 0)
		held_remove(th, i);
	hs_lock_forget(&hs_seg, addr);
	hs_order_forget(addr);
}

static void destroyed(struct hs_tls *t, uint64_t addr)
{
	gone(t->slot, addr);
	hs_rec(t, lock_now(), HS_REC_LOCK_DESTROYED, 0, addr, 0, 0);
}

/* [lo, hi) passed the filter: the thread's held entries in it end and its
 * locks are forgotten.  Out of line: the common free saves no registers. */
static __attribute__((noinline)) void locks_freed(uint64_t lo, uint64_t hi)
{
	struct hs_thread *th = hs_tls.slot;
	uint32_t n;
	if (!th || hs_tls.dead || hs_tls.seg_gen != __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE))
		return;
	n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
	for (int i = (int)n - 1; i >= 0; i--)
		if (th->held[i].addr >= lo && th->held[i].addr < hi)
			held_remove(th, i);
	hs_lock_forget_range(&hs_seg, lo, hi);
}

/*
 * A bound on the usable bytes of glibc's block p, from its chunk header
 * alone: the size word 8 bytes before the block (its low three bits
 * flags: PREV_INUSE, IS_MMAPPED, NON_MAIN_ARENA) less 8, which is
 * malloc_usable_size of an in-use heap chunk (the next chunk's prev_size
 * word is the block's) and 8 more than that of an mmapped one (glibc
 * malloc.c musable; the layout of every glibc since 2.0).  One load where
 * the exported call (a call through a pointer, glibc's own checks) took
 * ~30 instructions at each free with the heap checker off (bench/README.md
 * "Lock hooks around the GIL's windows").  Used only as the filter's range:
 * a range that passes is taken again with the exact size, so a bound
 * that runs past the block forgets nothing that lives after it.
 */
static inline uint64_t libc_block_bound(const void *p)
{
	uint64_t w;
	memcpy(&w, (const char *)p - 8, sizeof w);
	w &= ~(uint64_t)7;
	return w > 8 ? w - 8 : 0;
}

/* The block [p, hi) that hs_locks_on_free's one-word look did not clear
 * (size 0: glibc's block, hi its header's bound) is being freed: the whole
 * filter (hs_lock_mem_seen), again over the exact bytes (glibc's size)
 * when hi was a bound, then locks_freed.  Out of line: the common free
 * saves no registers. */
static __attribute__((noinline)) void locks_on_free_look(void *p, size_t size, uint64_t hi)
{
	uint64_t lo = (uint64_t)(uintptr_t)p;
	if (!hs_lock_mem_seen(lo, hi))
		return;
	if (!size) {
		size = hs_libc_usable_size(p);
		if (!hs_lock_mem_seen(lo, lo + size))
			return;
	}
	locks_freed(lo, lo + size);
}

void hs_locks_on_free(void *p, size_t size)
{
	uint64_t lo = (uint64_t)(uintptr_t)p, hi;
	if (!p || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	/* no lock address ever noted in [lo, hi): none lives there, none is held there.
	   size 0: the heap checker off, every block is glibc's (the exported hook would ask the
	   guard pages and the heap checker first): the filter asked over the header's bound, a
	   superset of the block's bytes, and glibc's exact size only when that passes.
	   hs_lock_mem_seen's one- and two-word cases here (a block up to 4 KiB), its long look
	   out of line */
	hi = lo + (size ? size : libc_block_bound(p));
	if (HS_LIKELY(hs_lock_mem_seen_short(lo, hi) == 0))
		return;
	locks_on_free_look(p, size, hi);
}

/*
 * The body every acquiring hook shares.  TRY is the non-blocking call, BLOCK
 * the blocking one (NULL for a trylock hook); both expressions use `lock`.
 */
#define ACQUIRE(kind_, acq_mode_, hold_mode_, flags_, is_try, TRY, BLOCK)                        \
	do {                                                                                     \
		struct hs_tls *t;                                                                \
		if (HS_UNLIKELY(hs_py_internal(lock))) {                                         \
			gil_mutex_locking(); /* a GIL take or drop may follow */                 \
			if (HS_UNLIKELY(hs_lock_lazy_nogil))                                      \
				gil_mutex_locked(); /* a GIL take may follow */                  \
			t = NULL;                                                                \
		} else {                                                                         \
			t = hs_enter();                                                          \
		}                                                                                \
		if (!t)                                                                          \
			return is_try ? (TRY) : (BLOCK);                                         \
		ACQUIRE_ENTERED(kind_, acq_mode_, hold_mode_, flags_, is_try, TRY, BLOCK);       \
	} while (0)

/* ACQUIRE's body once the hook holds the guard (t). */
#define ACQUIRE_ENTERED(kind_, acq_mode_, hold_mode_, flags_, is_try, TRY, BLOCK)                \
	do {                                                                                     \
		struct acq a;                                                                    \
		int rc;                                                                          \
		/* every other member 0 */                                                      \
		a = (struct acq){.addr = (uint64_t)(uintptr_t)lock,                              \
				 .site = site,                                                   \
				 .cfa = cfa,                                                     \
				 .kind = kind_,                                                  \
				 .acq_mode = acq_mode_,                                          \
				 .hold_mode = hold_mode_,                                        \
				 .trylock = is_try};                                             \
		acq_before(t, &a, flags_);                                                       \
		rc = (TRY);                                                                      \
		if (!is_try && rc == EBUSY) {                                                    \
			a.waited = 1;                                                            \
			a.t0 = hs_now(); /* the wait begins: the precise clock */                \
			/* it blocks: the wait gets this call's whole stack, Python frames too */ \
			if ((a.stack = hs_stack_here()) != 0) {                                  \
				if (pending)                                                     \
					pending->exact = 1, pending->leaf = 0; /* the held entry keeps it */ \
			} else                                                                   \
				a.stack = hs_stack_site(site);                                   \
			hs_wait_begin(t, &a, HS_WAIT_LOCK, a.addr);                                 \
			rc = (BLOCK);                                                            \
			hs_wait_end(t);                                                          \
		}                                                                                \
		if (a.id)                                                                        \
			acq_after(t, &a, rc);                                                    \
		if (rc == 0) HS_CHAOS(HS_CHAOS_LOCK); /* chaos.c: --chaos, holding it longer */  \
		hs_leave(t);                                                                     \
		return rc;                                                                       \
	} while (0)

/*
 * The body every releasing hook shares: what must precede the real release
 * (release_begin; the hand-over record, handover.c: an acquirer must see
 * it), the real release, then the rest of the bookkeeping outside the
 * lock's critical section (release_end).
 */
#define RELEASE(ordered, REAL)                                                                   \
	do {                                                                                     \
		struct hs_tls *t = hs_py_internal(lock) ? NULL : hs_enter();                     \
		uint64_t addr_ = (uint64_t)(uintptr_t)lock;                                      \
		uint32_t id_;                                                                    \
		int rc, i_;                                                                      \
		if (!t)                                                                          \
			return (REAL);                                                           \
		i_ = release_begin(t, addr_, &id_);                                              \
		if (ordered)                                                                     \
			hs_order_release(t, addr_);                                              \
		rc = (REAL);                                                                     \
		release_end(t, addr_, i_, id_, rc);                                              \
		hs_leave(t);                                                                     \
		HS_CHAOS(HS_CHAOS_UNLOCK); /* chaos.c: --chaos */                                \
		return rc;                                                                       \
	} while (0)

#define DESTROY(REAL)                                                                            \
	do {                                                                                     \
		struct hs_tls *t = hs_enter();                                                   \
		if (t) {                                                                         \
			destroyed(t, (uint64_t)(uintptr_t)lock);                                 \
			hs_leave(t);                                                             \
		}                                                                                \
		return (REAL);                                                                   \
	} while (0)

/* ---- mutexes -------------------------------------------------------------- */

#define MUTEX_TRY HS_REAL(pthread_mutex_trylock)(lock)

/* A blocking mutex acquisition the common path leaves (the lock already in
 * the held stack, an entry another thread released, HELD_CHAINS or more
 * held, a thread without its area): the shared body, the guard held (t). */
static __attribute__((noinline)) int mutex_lock_entered(struct hs_tls *t, pthread_mutex_t *lock, uint64_t site,
							uint64_t cfa)
{
	ACQUIRE_ENTERED(HS_LOCK_MUTEX, HS_MODE_WRITE, HS_MODE_WRITE, FLAGS_OF_MUTEX, 0, MUTEX_TRY,
			HS_REAL(pthread_mutex_lock)(lock));
}

/* The try after acq_first_before did not take the lock (rc: EBUSY, it will
 * block; EOWNERDEAD, a robust mutex acquired whose owner died; an error):
 * the rest of the shared body with acq_first_before's results, the wait
 * published before blocking as ACQUIRE does. */
static __attribute__((noinline)) int mutex_lock_rest(struct hs_tls *t, pthread_mutex_t *lock, uint64_t site,
						     uint64_t cfa, struct held_chain *p, uint64_t now, uint32_t id,
						     uint32_t stack, int holds_gil, int rc)
{
	struct acq a = {.addr = (uint64_t)(uintptr_t)lock,
			.site = site,
			.cfa = cfa,
			.t0 = now,
			.id = id,
			.stack = stack,
			.kind = HS_LOCK_MUTEX,
			.acq_mode = HS_MODE_WRITE,
			.hold_mode = HS_MODE_WRITE,
			.holds_gil = holds_gil};
	pending = p; /* acq_after's chain: read into slot p */
	if (rc == EBUSY) {
		a.waited = 1;
		a.t0 = hs_now(); /* the wait begins: the precise clock */
		/* it blocks: the wait gets this call's whole stack, Python frames too */
		if ((a.stack = hs_stack_here()) != 0)
			p->exact = 1, p->leaf = 0; /* the held entry keeps it */
		else
			a.stack = hs_stack_site(site);
		hs_wait_begin(t, &a, HS_WAIT_LOCK, a.addr);
		rc = HS_REAL(pthread_mutex_lock)(lock);
		hs_wait_end(t);
	}
	if (a.id)
		acq_after(t, &a, rc);
	if (rc == 0)
		HS_CHAOS(HS_CHAOS_LOCK); /* chaos.c: --chaos, holding it longer */
	hs_leave(t);
	return rc;
}

/*
 * The common acquisition (fewer than HELD_CHAINS locks held, the thread's
 * area there) runs acq_first_before and acq_first_after around the real
 * try, and blocks (mutex_lock_rest) only when the try finds the lock busy;
 * nothing held, a C program's common case, is compiled apart (no held-stack
 * scan, no edge call).  Everything else takes the shared body.  flatten:
 * the inline helpers of shim.h and handover.h (hs_rec, hs_order_acquire)
 * stay inline in this large body, where GCC would otherwise call them.
 */
static __attribute__((noinline, flatten)) int mutex_lock_tracked(pthread_mutex_t *lock, uint64_t site,
								   uint64_t cfa)
{
	uint64_t addr = (uint64_t)(uintptr_t)lock, now;
	struct hs_tls *t;
	struct held_chain *p;
	uint32_t n, id, stack;
	int holds_gil, rc;
	t = hs_enter();
	if (HS_UNLIKELY(t == NULL))
		return HS_REAL(pthread_mutex_lock)(lock);
	n = t->slot->held_count;
	if (HS_UNLIKELY(n >= HELD_CHAINS || t->area == NULL))
		return mutex_lock_entered(t, lock, site, cfa);
	p = (struct held_chain *)(void *)(t->area + HS_AREA_LOCKS) + n;
	if (HS_LIKELY(n == 0)) {
		(void)acq_first_before(t, p, addr, site, cfa, HS_LOCK_MUTEX, 0, &now, &id, &stack, &holds_gil);
		rc = MUTEX_TRY;
		if (HS_LIKELY(rc == 0) && HS_LIKELY(id != 0))
			acq_first_after(t, p, addr, 0, now, id, stack, holds_gil);
	} else {
		if (!acq_first_before(t, p, addr, site, cfa, HS_LOCK_MUTEX, n, &now, &id, &stack, &holds_gil))
			return mutex_lock_entered(t, lock, site, cfa);
		rc = MUTEX_TRY;
		if (HS_LIKELY(rc == 0) && HS_LIKELY(id != 0))
			acq_first_after(t, p, addr, n, now, id, stack, holds_gil);
	}
	if (HS_UNLIKELY(rc != 0))
		return mutex_lock_rest(t, lock, site, cfa, p, now, id, stack, holds_gil, rc);
	hs_leave(t);
	HS_CHAOS(HS_CHAOS_LOCK); /* chaos.c: --chaos, holding it longer */
	return 0;
}

/*
 * The exported hook: the GIL's own mutex passed straight through (ACQUIRE),
 * every other mutex to mutex_lock_tracked, a tail call with the call
 * site and the caller's CFA.  Apart so that the pass-through (half of the
 * calls under a threaded Python service: take_gil and drop_gil lock it)
 * saves and restores none of the registers the tracked body needs.
 */
static __attribute__((noinline, cold)) int mutex_lock_resolve(pthread_mutex_t *lock)
{
	return HS_REAL(pthread_mutex_lock)(lock);
}

static __attribute__((noinline)) int mutex_lock_gil(pthread_mutex_t *lock)
{
	int (*real)(pthread_mutex_t *) = hs_real_pthread_mutex_lock;
	gil_mutex_locking(); /* a GIL take or drop may follow */
	if (HS_UNLIKELY(hs_lock_lazy_nogil))
		gil_mutex_locked(); /* a GIL take may follow */
	return HS_LIKELY(real != NULL) ? real(lock) : mutex_lock_resolve(lock);
}

HS_EXPORT HS_HOT int pthread_mutex_lock(pthread_mutex_t *lock)
{
	if (hs_py_internal(lock))
		return mutex_lock_gil(lock);
	return mutex_lock_tracked(lock, RET_ADDR(), CALLER_SP());
}

HS_EXPORT int pthread_mutex_trylock(pthread_mutex_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	ACQUIRE(HS_LOCK_MUTEX, HS_MODE_WRITE, HS_MODE_WRITE, FLAGS_OF_MUTEX, 1, MUTEX_TRY, 0);
}

HS_EXPORT int pthread_mutex_timedlock(pthread_mutex_t *lock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	ACQUIRE(HS_LOCK_MUTEX, HS_MODE_WRITE, HS_MODE_WRITE, FLAGS_OF_MUTEX, 0, MUTEX_TRY,
		HS_REAL(pthread_mutex_timedlock)(lock, abstime));
}

HS_EXPORT int pthread_mutex_clocklock(pthread_mutex_t *lock, clockid_t clock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	ACQUIRE(HS_LOCK_MUTEX, HS_MODE_WRITE, HS_MODE_WRITE, FLAGS_OF_MUTEX, 0, MUTEX_TRY,
		HS_REAL(pthread_mutex_clocklock)(lock, clock, abstime));
}

/* Every other mutex release (not the innermost entry, a recursive one, an
 * entry released by another thread, a lock this thread does not hold):
 * RELEASE's body, the guard held (t). */
static __attribute__((noinline)) int mutex_unlock_entered(struct hs_tls *t, pthread_mutex_t *lock)
{
	uint64_t addr = (uint64_t)(uintptr_t)lock;
	uint32_t id;
	int rc, i = release_begin(t, addr, &id);
	hs_order_release(t, addr);
	rc = HS_REAL(pthread_mutex_unlock)(lock);
	release_end(t, addr, i, id, rc);
	hs_leave(t);
	HS_CHAOS(HS_CHAOS_UNLOCK); /* chaos.c: --chaos */
	return rc;
}

/* The release of the innermost held entry, taken once and still this
 * thread's (the common case, last in first out): release_begin's search is
 * one compare. */
static __attribute__((noinline)) int mutex_unlock_tracked(pthread_mutex_t *lock)
{
	struct hs_tls *t;
	uint64_t addr = (uint64_t)(uintptr_t)lock;
	int rc;
	t = hs_enter();
	if (HS_UNLIKELY(t == NULL))
		return HS_REAL(pthread_mutex_unlock)(lock);
	if (HS_UNLIKELY(!release_is_top(t->slot, addr)))
		return mutex_unlock_entered(t, lock);
	hs_order_release(t, addr);
	rc = HS_REAL(pthread_mutex_unlock)(lock);
	release_top_end(t, addr, rc);
	hs_leave(t);
	HS_CHAOS(HS_CHAOS_UNLOCK); /* chaos.c: --chaos */
	return rc;
}

/* The exported hook: the GIL's own mutex passed straight through (RELEASE),
 * every other mutex to mutex_unlock_tracked (a tail call; apart for the
 * reason pthread_mutex_lock is). */
static __attribute__((noinline, cold)) int mutex_unlock_resolve(pthread_mutex_t *lock)
{
	return HS_REAL(pthread_mutex_unlock)(lock);
}

HS_EXPORT HS_HOT int pthread_mutex_unlock(pthread_mutex_t *lock)
{
	int (*real)(pthread_mutex_t *) = hs_real_pthread_mutex_unlock;
	if (hs_py_internal(lock))
		return HS_LIKELY(real != NULL) ? real(lock) : mutex_unlock_resolve(lock);
	return mutex_unlock_tracked(lock);
}

HS_EXPORT int pthread_mutex_destroy(pthread_mutex_t *lock)
{
	DESTROY(HS_REAL(pthread_mutex_destroy)(lock));
}

/* Initialising a lock (again) ends the old one: held state and identity. */
#define INIT(REAL)                                                                               \
	do {                                                                                     \
		struct hs_tls *t = hs_enter();                                                   \
		if (t) {                                                                         \
			gone(t->slot, (uint64_t)(uintptr_t)lock);                                \
			hs_leave(t);                                                             \
		}                                                                                \
		return (REAL);                                                                   \
	} while (0)

HS_EXPORT int pthread_mutex_init(pthread_mutex_t *lock, const pthread_mutexattr_t *attr)
{
	INIT(HS_REAL(pthread_mutex_init)(lock, attr));
}

/* ---- rwlocks ---------------------------------------------------------------- */

/* A read acquisition: recursive unless the rwlock makes readers queue behind writers. */
static inline unsigned read_mode(unsigned flags)
{
	return (flags & HS_LOCKF_WRITER_PREF) ? HS_MODE_READ : HS_MODE_READ_RECURSIVE;
}

#define RD_TRY HS_REAL(pthread_rwlock_tryrdlock)(lock)
#define WR_TRY HS_REAL(pthread_rwlock_trywrlock)(lock)

HS_EXPORT int pthread_rwlock_rdlock(pthread_rwlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, read_mode(f), HS_MODE_READ, f, 0, RD_TRY, HS_REAL(pthread_rwlock_rdlock)(lock));
}

HS_EXPORT int pthread_rwlock_wrlock(pthread_rwlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, HS_MODE_WRITE, HS_MODE_WRITE, f, 0, WR_TRY, HS_REAL(pthread_rwlock_wrlock)(lock));
}

HS_EXPORT int pthread_rwlock_tryrdlock(pthread_rwlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, read_mode(f), HS_MODE_READ, f, 1, RD_TRY, 0);
}

HS_EXPORT int pthread_rwlock_trywrlock(pthread_rwlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, HS_MODE_WRITE, HS_MODE_WRITE, f, 1, WR_TRY, 0);
}

HS_EXPORT int pthread_rwlock_timedrdlock(pthread_rwlock_t *lock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, read_mode(f), HS_MODE_READ, f, 0, RD_TRY,
		HS_REAL(pthread_rwlock_timedrdlock)(lock, abstime));
}

HS_EXPORT int pthread_rwlock_timedwrlock(pthread_rwlock_t *lock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, HS_MODE_WRITE, HS_MODE_WRITE, f, 0, WR_TRY,
		HS_REAL(pthread_rwlock_timedwrlock)(lock, abstime));
}

HS_EXPORT int pthread_rwlock_clockrdlock(pthread_rwlock_t *lock, clockid_t clock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, read_mode(f), HS_MODE_READ, f, 0, RD_TRY,
		HS_REAL(pthread_rwlock_clockrdlock)(lock, clock, abstime));
}

HS_EXPORT int pthread_rwlock_clockwrlock(pthread_rwlock_t *lock, clockid_t clock, const struct timespec *abstime)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	unsigned f = hs_rwlock_flags(lock);
	ACQUIRE(HS_LOCK_RWLOCK, HS_MODE_WRITE, HS_MODE_WRITE, f, 0, WR_TRY,
		HS_REAL(pthread_rwlock_clockwrlock)(lock, clock, abstime));
}

HS_EXPORT int pthread_rwlock_unlock(pthread_rwlock_t *lock)
{
	RELEASE(0, HS_REAL(pthread_rwlock_unlock)(lock));
}

HS_EXPORT int pthread_rwlock_destroy(pthread_rwlock_t *lock)
{
	DESTROY(HS_REAL(pthread_rwlock_destroy)(lock));
}

HS_EXPORT int pthread_rwlock_init(pthread_rwlock_t *lock, const pthread_rwlockattr_t *attr)
{
	INIT(HS_REAL(pthread_rwlock_init)(lock, attr));
}

/* ---- spin locks ------------------------------------------------------------- */

#define SPIN_TRY HS_REAL(pthread_spin_trylock)(lock)

HS_EXPORT int pthread_spin_lock(pthread_spinlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	ACQUIRE(HS_LOCK_SPIN, HS_MODE_WRITE, HS_MODE_WRITE, 0, 0, SPIN_TRY, HS_REAL(pthread_spin_lock)(lock));
}

HS_EXPORT int pthread_spin_trylock(pthread_spinlock_t *lock)
{
	uint64_t site = RET_ADDR(), cfa = CALLER_SP();
	ACQUIRE(HS_LOCK_SPIN, HS_MODE_WRITE, HS_MODE_WRITE, 0, 1, SPIN_TRY, 0);
}

HS_EXPORT int pthread_spin_unlock(pthread_spinlock_t *lock)
{
	RELEASE(1, HS_REAL(pthread_spin_unlock)(lock));
}

HS_EXPORT int pthread_spin_destroy(pthread_spinlock_t *lock)
{
	DESTROY(HS_REAL(pthread_spin_destroy)(lock));
}

HS_EXPORT int pthread_spin_init(pthread_spinlock_t *lock, int pshared)
{
	INIT(HS_REAL(pthread_spin_init)(lock, pshared));
}

/* ---- condition variables ---------------------------------------------------- */

/*
 * A wait releases the mutex and retakes it before returning: take it off the
 * held stack for the wait, publish the wait, and on return put it back,
 * adding the edges held -> mutex that the retake implies.
 */
struct cond_wait {
	struct hs_held saved;
	struct held_chain chain;
	int had;
	struct acq a;
};

static void cond_before(struct hs_tls *t, struct cond_wait *w, void *cond, void *mutex, uint64_t site,
			uint64_t cfa)
{
	struct hs_thread *th = t->slot;
	int i = held_index(th, (uint64_t)(uintptr_t)mutex);
	memset(w, 0, sizeof *w);
	w->a.addr = (uint64_t)(uintptr_t)mutex;
	w->a.site = site;
	w->a.kind = HS_LOCK_MUTEX;
	w->a.t0 = hs_now();
	w->a.stack = hs_stack_call(site, cfa);
	if (i >= 0) {
		w->had = 1;
		w->saved = th->held[i];
		struct held_chain *held_chains = held_chains_of();
		if (i < HELD_CHAINS && held_chains)
			held_chain_copy(&w->chain, &held_chains[i]);
		w->a.id = w->saved.lock;
		held_remove(th, i);
	}
	hs_order_release(t, w->a.addr); /* the wait releases the mutex (handover.c) */
	hs_rec(t, w->a.t0, HS_REC_COND_WAIT, w->a.stack, (uint64_t)(uintptr_t)cond, w->a.addr, 0);
	hs_wait_begin(t, &w->a, HS_WAIT_COND, (uint64_t)(uintptr_t)cond);
}

static void cond_after(struct hs_tls *t, struct cond_wait *w, void *cond, int rc)
{
	struct hs_thread *th = t->slot;
	uint64_t now = hs_now();
	hs_wait_end(t);
	hs_order_acquire(t, w->a.addr); /* and takes it back */
	if (w->had) {
		uint32_t n = th->held_count < HS_HELD_MAX ? th->held_count : HS_HELD_MAX;
		for (uint32_t i = 0; i < n; i++) {
			const struct hs_held *he = &th->held[i];
			int created;
			uint32_t finding, e, from_stack, site_n;
			if (he->lock == w->saved.lock || he->lock == 0)
				continue;
			/* a known edge: nothing to add; else the held lock's stack as acq_edges gives it */
			e = hs_edge_find(&hs_seg, hs_edge_key(he->lock, w->saved.lock, he->mode, HS_MODE_WRITE));
			if (e && !edge_from_site(e))
				continue;
			from_stack = hs_locks_held_stack(th, (int)i, &site_n);
			e = hs_graph_add(&hs_seg, he->lock, he->mode, from_stack, site_n, w->saved.lock, HS_MODE_WRITE,
					 w->a.stack, NULL, t->tid, now, &created, &finding);
			if (created)
				hs_rec(t, now, HS_REC_NEW_EDGE, w->a.stack, e, he->lock, w->saved.lock);
			if (finding)
				hs_rec(t, now, HS_REC_FINDING, 0, finding - 1, 0, 0);
		}
		w->saved.since_ns = now;
		held_push(th, &w->saved, &w->chain);
	}
	hs_rec(t, now, HS_REC_COND_WOKE, 0, (uint64_t)(uintptr_t)cond, w->a.addr, (uint64_t)rc);
}

#define COND(REAL)                                                                               \
	do {                                                                                     \
		uint64_t site = RET_ADDR(), cfa = CALLER_SP();                                                      \
		struct hs_tls *t = hs_py_internal(mutex) ? NULL : hs_enter();                    \
		struct cond_wait w;                                                              \
		int rc;                                                                          \
		if (!t)                                                                          \
			return (REAL);                                                           \
		cond_before(t, &w, cond, mutex, site, cfa);                                         \
		rc = (REAL);                                                                     \
		cond_after(t, &w, cond, rc);                                                     \
		hs_leave(t);                                                                     \
		return rc;                                                                       \
	} while (0)

HS_EXPORT int pthread_cond_wait(pthread_cond_t *cond, pthread_mutex_t *mutex)
{
	COND(HS_REAL(pthread_cond_wait)(cond, mutex));
}

HS_EXPORT int pthread_cond_timedwait(pthread_cond_t *cond, pthread_mutex_t *mutex, const struct timespec *abstime)
{
	COND(HS_REAL(pthread_cond_timedwait)(cond, mutex, abstime));
}

HS_EXPORT int pthread_cond_clockwait(pthread_cond_t *cond, pthread_mutex_t *mutex, clockid_t clock,
				     const struct timespec *abstime)
{
	COND(HS_REAL(pthread_cond_clockwait)(cond, mutex, clock, abstime));
}
