/* SPDX-License-Identifier: MIT */
/*
 * shim/lockgraph.c — lock identities, the lock-order graph and its cycle
 * search: Linux lockdep's idea, without recompiling.  Whenever a thread
 * blocks to acquire B while holding A, the edge A -> B is added, once, with
 * both acquisition stacks.  A new edge that closes a cycle in which every
 * wait could block is a potential deadlock, reported even though this run
 * did not hang, once per set of locks.
 *
 * The rules (lockdep's, see format.h enum hs_mode): a trylock never adds an
 * edge into the lock it takes (it cannot block); a wait to acquire L in mode
 * READ_RECURSIVE cannot be blocked by a holder of L in a read mode, so a
 * cycle that passes through L that way is not a deadlock.
 *
 * Lookups (lock id by address, edge by key) are lock-free on the hot path.
 * Creating a lock or an edge and the cycle search run under the graph lock,
 * a spin lock taken only on these slow paths, never while unwinding or
 * calling out of the shim.
 */
#include <sched.h>
#include <string.h>
#include <time.h>

#include "shim.h"

/*
 * The graph lock: a spin lock whose holder may stop running while it holds
 * it (it commits segment pages, which enters the kernel and may fault; it
 * may be preempted).  A waiter that only spins never gives way: under
 * SCHED_FIFO a holder of the same priority waits for a CPU that spinning
 * waiters never give up, for good (bench/py_workload.py under `chrt -f 1`
 * on 2 CPUs locked up in 3 runs of about 40, every thread spinning in
 * hs_lock_id; bench/README.md "GIL hand-offs").  So a waiter spins
 * GRAPH_SPINS times, then yields GRAPH_YIELDS times (sched_yield: a holder
 * of its priority runs), then sleeps 50 us between looks (a holder of a
 * lower priority runs).  Uncontended it is one exchange, as before.  Raw
 * system calls only: async-signal-safe, no lock, no allocation.
 */
#define GRAPH_SPINS 1024u
#define GRAPH_YIELDS 64u
static void graph_lock(struct hs_seg *s)
{
	unsigned waits = 0;
	while (__atomic_exchange_n(&s->graph_lock, 1, __ATOMIC_ACQUIRE))
		while (__atomic_load_n(&s->graph_lock, __ATOMIC_RELAXED)) {
			if (waits < GRAPH_SPINS) {
				__builtin_ia32_pause();
			} else if (waits < GRAPH_SPINS + GRAPH_YIELDS) {
				sched_yield();
			} else {
				struct timespec ts = {0, 50000};
				hs_sys.nanosleep(&ts);
			}
			if (waits < GRAPH_SPINS + GRAPH_YIELDS)
				waits++;
		}
}

static void graph_unlock(struct hs_seg *s)
{
	hs_spin_unlock(&s->graph_lock);
}

/*
 * The lock and edge indexes get their store whole, at the process's first
 * look into either (a process that takes no hooked lock never pays for
 * them: 256 KiB at the default geometry), so their probes, on every lock
 * acquisition's path, ask one word instead of the commit map per slot
 * (hs_seg_ready, ~15 instructions a probe).  graph_ready_gen is the segment
 * generation they were committed in (a fork child's new segment has its
 * own).  0, or -1 when the directory has no room: the indexes then count
 * as full (hs_seg_commit's warning given).
 */
static uint32_t graph_ready_gen; /* [atomic] hs_seg_gen + 1 when committed; 0: not yet */

static __attribute__((noinline, cold)) int graph_indexes_commit(struct hs_seg *s)
{
	const struct hs_table *li = &s->hdr->tables[HS_T_LOCK_INDEX], *ei = &s->hdr->tables[HS_T_EDGE_INDEX];
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE);
	if (hs_seg_commit(s, li->offset, (uint64_t)li->capacity * li->entry_size) != 0 ||
	    hs_seg_commit(s, ei->offset, (uint64_t)ei->capacity * ei->entry_size) != 0)
		return -1;
	__atomic_store_n(&graph_ready_gen, gen + 1, __ATOMIC_RELEASE);
	return 0;
}

static inline int graph_indexes_ready(struct hs_seg *s)
{
	return HS_LIKELY(__atomic_load_n(&graph_ready_gen, __ATOMIC_ACQUIRE) ==
			 __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) + 1) ||
	       graph_indexes_commit(s) == 0;
}

/* The index slot for key: the one holding it, else the empty one where it would go, else NULL (full). */
static struct hs_index_slot *index_probe_in(struct hs_index_slot *tab, uint32_t capacity, uint64_t key)
{
	uint32_t mask = capacity - 1;
	uint32_t i = (uint32_t)hs_mix64(key) & mask;
	for (uint32_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
		uint64_t k = __atomic_load_n(&tab[i].key, __ATOMIC_ACQUIRE);
		if (k == key || k == 0)
			return &tab[i];
	}
	return NULL;
}

/* index_probe_in once the indexes have store (the check here, in the caller,
 * keeps the probe loop a leaf function). */
static inline struct hs_index_slot *index_probe(struct hs_seg *s, struct hs_index_slot *tab, uint32_t capacity,
						uint64_t key)
{
	if (!graph_indexes_ready(s))
		return NULL; /* no room for the indexes: as if full */
	return index_probe_in(tab, capacity, key);
}

/* ---- locks ---------------------------------------------------------------- */

/*
 * Locks outlived from thread to thread (the GIL rule, gil_cycle_can_deadlock):
 * T1 used the lock and ended, then T2 took it (handover.c).  Process-private,
 * per lock id (modulo OUTLIVED_SLOTS, checked by id): T2's tid and when it
 * took the lock, the latest such successor of this instance.
 */
#define OUTLIVED_SLOTS 4096u
static struct {
	uint32_t id;
	int32_t tid;
	uint64_t since;         /* when tid took it: its edges from then on count */
} outlived[OUTLIVED_SLOTS];

static void outlived_clear(uint32_t id)
{
	if (outlived[id & (OUTLIVED_SLOTS - 1)].id == id)
		outlived[id & (OUTLIVED_SLOTS - 1)].id = 0;
}

/* The successor of lock id recorded by hs_graph_lock_outlived (0 = none) and since when. */
static int32_t outlived_tid(uint32_t id, uint64_t *since)
{
	if (outlived[id & (OUTLIVED_SLOTS - 1)].id != id)
		return 0;
	*since = outlived[id & (OUTLIVED_SLOTS - 1)].since;
	return outlived[id & (OUTLIVED_SLOTS - 1)].tid;
}


/* Where lock addresses were ever noted: 4 KiB pages and 64-byte granules,
 * each modulo its map; frees elsewhere skip the lock graph at the cost of a
 * load or two (process-private; shim.h hs_lock_mem_seen). */
HS_HIDDEN uint64_t hs_lock_pages[HS_LOCK_PAGE_BITS / 64];
HS_HIDDEN uint64_t hs_lock_granules[HS_LOCK_GRANULE_BITS / 64];

static inline void bit_note(uint64_t *map, uint32_t b)
{
	if (!(__atomic_load_n(&map[b / 64], __ATOMIC_RELAXED) & (1ull << (b % 64))))
		__atomic_or_fetch(&map[b / 64], 1ull << (b % 64), __ATOMIC_RELAXED);
}

static inline int bit_seen(const uint64_t *map, uint32_t b)
{
	return (__atomic_load_n(&map[b / 64], __ATOMIC_RELAXED) >> (b % 64)) & 1;
}

int hs_lock_mem_seen_long(uint64_t lo, uint64_t hi)
{
	uint64_t last = hi > lo ? hi - 1 : lo;
	if (last - lo < 4096) /* at most 65 granules: two loads */
		return hs_lock_bits_any(hs_lock_granules, HS_LOCK_GRANULE_BITS, lo >> HS_LOCK_GRANULE_SHIFT,
					last >> HS_LOCK_GRANULE_SHIFT);
	if ((last >> 12) - (lo >> 12) >= 256)
		return 1;
	return hs_lock_bits_any(hs_lock_pages, HS_LOCK_PAGE_BITS, lo >> 12, last >> 12);
}

/* A lock node is made at addr: its granule, its page and the page of its
 * last byte (a lock that straddles a page) are noted. */
static void addr_note(uint64_t addr)
{
	bit_note(hs_lock_granules, hs_lock_granule_bit(addr));
	bit_note(hs_lock_pages, hs_lock_page_bit(addr));
	bit_note(hs_lock_pages, hs_lock_page_bit(addr + 63));
}

static int addr_seen(uint64_t addr)
{
	return bit_seen(hs_lock_granules, hs_lock_granule_bit(addr));
}

/*
 * The slot where key goes in an index whose entries can die (value 0 with a
 * key: a destroyed lock's address, a consumed class): the slot holding key,
 * else the first dead slot on its probe path, else the empty one; NULL when
 * full.  Graph lock held.  A dead slot taken over loses its old key's last
 * generation (the next lock there starts again at 1).
 */
static struct hs_index_slot *index_place_in(struct hs_index_slot *tab, uint32_t capacity, uint64_t key)
{
	uint32_t mask = capacity - 1;
	uint32_t i = (uint32_t)hs_mix64(key) & mask;
	struct hs_index_slot *dead = NULL;
	for (uint32_t probe = 0; probe <= mask; probe++, i = (i + 1) & mask) {
		uint64_t k = tab[i].key;
		if (k == key)
			return &tab[i];
		if (k == 0)
			return dead ? dead : &tab[i];
		if (!dead && tab[i].value == 0)
			dead = &tab[i];
	}
	return dead;
}

static inline struct hs_index_slot *index_place(struct hs_seg *s, struct hs_index_slot *tab, uint32_t capacity,
						uint64_t key)
{
	if (!graph_indexes_ready(s))
		return NULL; /* no room for the indexes: as if full */
	return index_place_in(tab, capacity, key);
}

/* The class key of a lock: its kind and the stack of its first acquisition.
 * Above every address (user addresses are below 2^47). */
static inline uint64_t class_key(unsigned kind, uint32_t stack)
{
	return 1ull << 63 | (uint64_t)(kind & 0xff) << 32 | stack;
}

/* Name slot's key `key` and value `id` (graph lock held); readers re-check the key. */
static void index_set(struct hs_index_slot *slot, uint64_t key, uint32_t id, uint32_t aux)
{
	if (slot->key != key) {
		__atomic_store_n(&slot->value, 0, __ATOMIC_RELEASE);
		__atomic_store_n(&slot->key, key, __ATOMIC_RELEASE);
	}
	slot->aux = aux;
	__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
}

uint32_t hs_lock_id(struct hs_seg *s, uint64_t addr, unsigned kind, unsigned flags, uint32_t stack, int32_t tid,
		    uint64_t now)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_LOCKS];
	uint32_t icap = s->hdr->tables[HS_T_LOCK_INDEX].capacity;
	struct hs_index_slot *slot = index_probe(s, s->lock_index, icap, addr), *cslot;
	uint32_t id, gen = 1;
	struct hs_lock *l;

	if (HS_LIKELY(slot && __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == addr)) {
		id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
		/* a dead slot may be taken over for another key: the key must not have changed */
		if (HS_LIKELY(id) && HS_LIKELY(__atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == addr))
			return id;
	}
	graph_lock(s);
	slot = index_place(s, s->lock_index, icap, addr);
	if (!slot) {
		__atomic_add_fetch(&s->hdr->tables[HS_T_LOCK_INDEX].dropped, 1, __ATOMIC_RELAXED);
		graph_unlock(s);
		return 0;
	}
	if (slot->key == addr) {
		id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
		if (id) {
			graph_unlock(s);
			return id;
		}
		gen = slot->aux + 1;
	}
	addr_note(addr);
	/* a destroyed (or freed) lock of the same class: its node again (lockdep's lock classes) */
	cslot = stack ? index_probe(s, s->lock_index, icap, class_key(kind, stack)) : NULL;
	if (cslot && cslot->key == class_key(kind, stack) && (id = cslot->value) != 0 && id < tab->count &&
	    (s->locks[id].flags & HS_LOCKF_DEAD) && s->locks[id].first_stack == stack) {
		l = &s->locks[id];
		__atomic_store_n(&cslot->value, 0, __ATOMIC_RELEASE); /* consumed until it dies again */
		l->addr = addr;
		gen = l->gen + 1 > gen ? l->gen + 1 : gen;
		l->gen = gen;
		__atomic_store_n(&l->flags, (uint16_t)(flags & ~(HS_LOCKF_DEAD | HS_LOCKF_SHARED)), __ATOMIC_RELAXED);
		__atomic_store_n(&l->last_tid, 0, __ATOMIC_RELAXED); /* a new instance: not shared yet */
		outlived_clear(id);
		/* the slot may be cslot's neighbour: place again, the class slot is dead now */
		slot = index_place(s, s->lock_index, icap, addr);
		if (slot)
			index_set(slot, addr, id, gen);
		graph_unlock(s);
		return id;
	}
	id = tab->count;
	if (id >= tab->capacity || hs_seg_commit_entry(s, HS_T_LOCKS, id) != 0) {
		__atomic_add_fetch(&tab->dropped, 1, __ATOMIC_RELAXED);
		graph_unlock(s);
		return 0;
	}
	l = &s->locks[id];
	memset(l, 0, sizeof *l);
	l->addr = addr;
	l->gen = gen;
	l->kind = (uint16_t)kind;
	l->flags = (uint16_t)flags;
	l->first_stack = stack;
	l->first_tid = tid;
	l->first_ns = now;
	/* the entry is complete before the count covers it and before the index names it */
	__atomic_store_n(&tab->count, id + 1, __ATOMIC_RELEASE);
	index_set(slot, addr, id, gen);
	graph_unlock(s);
	return id;
}

/* Forget the live lock at addr (graph lock held): dead, its address slot
 * dead, its class slot names it for the next lock of its class.  Returns
 * its id, 0 when none. */
static uint32_t forget_locked(struct hs_seg *s, uint64_t addr)
{
	uint32_t icap = s->hdr->tables[HS_T_LOCK_INDEX].capacity;
	struct hs_index_slot *slot = index_probe(s, s->lock_index, icap, addr), *cslot;
	struct hs_lock *l;
	uint32_t id;
	if (!slot || slot->key != addr || (id = slot->value) == 0)
		return 0;
	l = &s->locks[id];
	__atomic_or_fetch(&l->flags, HS_LOCKF_DEAD, __ATOMIC_RELAXED);
	slot->aux = l->gen;
	/* the next acquisition at addr makes generation aux + 1 */
	__atomic_store_n(&slot->value, 0, __ATOMIC_RELEASE);
	if (l->first_stack && l->kind) {
		uint64_t ck = class_key(l->kind, l->first_stack);
		cslot = index_place(s, s->lock_index, icap, ck);
		if (cslot && (cslot->key != ck || cslot->value == 0))
			index_set(cslot, ck, id, 0);
	}
	return id;
}

uint32_t hs_lock_find(struct hs_seg *s, uint64_t addr)
{
	struct hs_index_slot *slot = index_probe(s, s->lock_index, s->hdr->tables[HS_T_LOCK_INDEX].capacity, addr);
	uint32_t id;
	if (!slot || __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) != addr)
		return 0;
	id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
	return __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == addr ? id : 0;
}

void hs_lock_forget(struct hs_seg *s, uint64_t addr)
{
	/* pthread_*_init of a fresh lock: nothing to forget, no graph lock */
	if (!addr_seen(addr) || !hs_lock_find(s, addr))
		return;
	graph_lock(s);
	forget_locked(s, addr);
	graph_unlock(s);
}

void hs_lock_forget_range(struct hs_seg *s, uint64_t lo, uint64_t hi)
{
	if (hi <= lo || !hs_lock_mem_seen(lo, hi))
		return;
	if (hi - lo <= 4096) {
		/* a lock is 8-byte aligned: look each candidate of a noted granule
		   up, lock-free first (the index's lines are other cores' writes) */
		const uint64_t g = 1ull << HS_LOCK_GRANULE_SHIFT;
		for (uint64_t gs = lo & ~(g - 1); gs < hi; gs += g) {
			if (!addr_seen(gs))
				continue;
			for (uint64_t a = gs > lo ? gs : (lo + 7) & ~7ull; a < gs + g && a < hi; a += 8)
				if (hs_lock_find(s, a)) {
					graph_lock(s);
					forget_locked(s, a);
					graph_unlock(s);
				}
		}
		return;
	}
	graph_lock(s);
	for (uint32_t id = 1, n = s->hdr->tables[HS_T_LOCKS].count; id < n; id++) {
		const struct hs_lock *l = &s->locks[id];
		if (l->addr >= lo && l->addr < hi && !(l->flags & HS_LOCKF_DEAD))
			forget_locked(s, l->addr);
	}
	graph_unlock(s);
}

/* ---- findings -------------------------------------------------------------- */

uint32_t hs_finding_add(struct hs_seg *s, const struct hs_finding *f)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_FINDINGS];
	uint32_t i = __atomic_fetch_add(&tab->count, 1, __ATOMIC_RELAXED);
	struct hs_finding *d;
	if (i >= tab->capacity) {
		__atomic_add_fetch(&s->hdr->findings_dropped, 1, __ATOMIC_RELAXED);
		return 0;
	}
	d = &s->findings[i];
	memcpy(d, f, sizeof *d);
	d->ready = 0;
	if (!d->count)
		d->count = 1;
	/* the finding is complete before ready says so */
	__atomic_store_n(&d->ready, 1, __ATOMIC_RELEASE);
	return i + 1;
}

/* ---- edges and cycles ------------------------------------------------------ */

/* hs_edge_find before the indexes have store: commit them, then look. */
static __attribute__((noinline, cold)) uint32_t edge_find_first(struct hs_seg *s, uint64_t key)
{
	return graph_indexes_commit(s) == 0 ? hs_edge_find(s, key) : 0;
}

uint32_t hs_edge_find(struct hs_seg *s, uint64_t key)
{
	struct hs_index_slot *slot;
	if (HS_UNLIKELY(__atomic_load_n(&graph_ready_gen, __ATOMIC_ACQUIRE) !=
			__atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED) + 1))
		return edge_find_first(s, key); /* a tail call: the look itself saves no registers for it */
	slot = index_probe_in(s->edge_index, s->hdr->tables[HS_T_EDGE_INDEX].capacity, key);
	if (HS_LIKELY(slot) && __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == key)
		return __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
	/* keys go in only with their edge (hs_graph_add, graph lock held): the index,
	   twice the table, cannot run out unless someone wrote over it */
	if (!slot)
		HS_ASSERT_IN(s, hs_index_may_fill(s->hdr->tables[HS_T_EDGE_INDEX].capacity,
					    s->hdr->tables[HS_T_EDGES].capacity));
	return 0;
}

/* Can a thread waiting to take a lock in mode `acq` be blocked by a thread holding it in mode `hold`? */
static inline int can_block(unsigned acq, unsigned hold)
{
	return !(acq == HS_MODE_READ_RECURSIVE && hold != HS_MODE_WRITE);
}

struct dfs_frame {
	uint32_t node;      /* lock id */
	uint32_t in_mode;   /* how the path acquires node */
	uint32_t next;      /* next edge out of node to try */
	uint32_t via;       /* edge that led here */
};

/*
 * The search's memory, writer-private and used under the graph lock only
 * (never on a thread's stack: a cycle may be thousands of locks long).  A
 * search deeper than HS_DFS_MAX locks is cut and counted in
 * tables[HS_T_CYCLE_EDGES].dropped, which the dumper reports as a limit.
 */
#define HS_DFS_MAX 8192u
#define ONPATH_MAX 65536u
static struct dfs_frame dfs[HS_DFS_MAX];
static uint32_t cycle_buf[HS_DFS_MAX], locks_buf[HS_DFS_MAX], other_buf[HS_DFS_MAX];
static uint8_t onpath[ONPATH_MAX];   /* lock id -> on the current path (ids beyond: a scan) */

static int on_path(uint32_t node, unsigned depth)
{
	if (node < ONPATH_MAX)
		return onpath[node];
	for (unsigned i = 0; i < depth; i++)
		if (dfs[i].node == node)
			return 1;
	return 0;
}

static void path_mark(uint32_t node, uint8_t v)
{
	if (node < ONPATH_MAX)
		onpath[node] = v;
}

/*
 * Search a path from the new edge's target back to its source along which
 * every wait can block, passing through each lock at most once.  On success
 * the cycle's edges, starting with the new edge, are written to cycle_buf and
 * their number is returned; 0 otherwise.  Depth-first, each (lock,
 * recursive-read-or-not) state visited once per search, any length up to
 * HS_DFS_MAX.  Graph lock held.
 */
static unsigned find_cycle(struct hs_seg *s, uint32_t new_edge)
{
	const struct hs_edge *ne = &s->edges[new_edge];
	unsigned depth = 0, found = 0;
	uint32_t stamp = ++s->visit_stamp;

	if (stamp == 0) {
		memset(s->visit, 0, (size_t)s->hdr->tables[HS_T_LOCKS].capacity * 2 * sizeof(uint32_t));
		stamp = s->visit_stamp = 1;
	}
	dfs[depth++] = (struct dfs_frame){ne->to, ne->to_mode, s->locks[ne->to].first_out, new_edge};
	path_mark(ne->to, 1);
	path_mark(ne->from, 1);
	while (depth > 0) {
		struct dfs_frame *top = &dfs[depth - 1];
		uint32_t e = top->next;
		const struct hs_edge *ed;
		unsigned rr;
		if (e == 0) {
			path_mark(top->node, 0);
			depth--;
			continue;
		}
		ed = &s->edges[e];
		top->next = ed->next_out;
		if (e == new_edge || !can_block(top->in_mode, ed->from_mode))
			continue;
		if (ed->to == ne->from) {
			if (!can_block(ed->to_mode, ne->from_mode))
				continue;
			for (unsigned i = 0; i < depth; i++)
				cycle_buf[i] = dfs[i].via;
			cycle_buf[depth] = e;
			found = depth + 1;
			break;
		}
		rr = ed->to_mode == HS_MODE_READ_RECURSIVE;
		if (s->visit[2 * ed->to + rr] == stamp || on_path(ed->to, depth))
			continue;
		if (depth + 1 >= HS_DFS_MAX) {
			__atomic_add_fetch(&s->hdr->tables[HS_T_CYCLE_EDGES].dropped, 1, __ATOMIC_RELAXED);
			continue;
		}
		s->visit[2 * ed->to + rr] = stamp;
		dfs[depth++] = (struct dfs_frame){ed->to, ed->to_mode, s->locks[ed->to].first_out, e};
		path_mark(ed->to, 1);
	}
	/* leave onpath[] all clear for the next search */
	for (unsigned i = 0; i < depth; i++)
		path_mark(dfs[i].node, 0);
	path_mark(ne->from, 0);
	return found;
}

static void sift_down(uint32_t *v, unsigned r, unsigned n)
{
	for (unsigned c; (c = 2 * r + 1) < n; r = c) {
		uint32_t t;
		if (c + 1 < n && v[c + 1] > v[c])
			c++;
		if (v[r] >= v[c])
			return;
		t = v[r];
		v[r] = v[c];
		v[c] = t;
	}
}

static void sort_u32(uint32_t *v, unsigned n)
{
	/* heap sort: n may be thousands, and qsort is not async-signal-safe */
	for (unsigned k = n / 2; k > 0; k--)
		sift_down(v, k - 1, n);
	for (unsigned end = n; end > 1; end--) {
		uint32_t t = v[0];
		v[0] = v[end - 1];
		v[end - 1] = t;
		sift_down(v, 0, end - 1);
	}
}

static uint64_t *cycle_edges(struct hs_seg *s)
{
	return (uint64_t *)((char *)s->hdr + s->hdr->tables[HS_T_CYCLE_EDGES].offset);
}

/* Edge i of finding f's cycle. */
static uint32_t finding_edge(struct hs_seg *s, const struct hs_finding *f, unsigned i)
{
	if (f->n <= HS_CYCLE_MAX)
		return f->edges[i];
	return (uint32_t)cycle_edges(s)[f->offset + i];
}

/* The sorted lock ids of a cycle: its identity for "reported once". */
static void cycle_locks(struct hs_seg *s, const uint32_t *edges, unsigned n, uint32_t *out)
{
	for (unsigned i = 0; i < n; i++)
		out[i] = s->edges[edges[i]].from;
	sort_u32(out, n);
}

/* An earlier potential-deadlock finding over the same locks, or NULL. */
static struct hs_finding *same_cycle(struct hs_seg *s, const uint32_t *locks, unsigned n)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_FINDINGS];
	uint32_t count = __atomic_load_n(&tab->count, __ATOMIC_ACQUIRE);
	if (count > tab->capacity)
		count = tab->capacity;
	for (uint32_t i = 0; i < count; i++) {
		struct hs_finding *f = &s->findings[i];
		if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) || f->kind != HS_FIND_POTENTIAL_DEADLOCK ||
		    f->n != n)
			continue;
		for (unsigned k = 0; k < n; k++)
			other_buf[k] = s->edges[finding_edge(s, f, k)].from;
		sort_u32(other_buf, n);
		if (memcmp(other_buf, locks, n * sizeof *locks) == 0)
			return f;
	}
	return NULL;
}

/*
 * The rule for a cycle through the GIL.  The GIL is taken and dropped all
 * the time by every Python thread, so GIL -> L and L -> GIL from one thread
 * on a lock no other thread uses (sqlite3's connection mutex taken by
 * create_function with the GIL held, then by sqlite3_step running a Python
 * callback) is no deadlock: it needs a second thread that can hold L.  So a
 * cycle through the GIL is a potential deadlock only when (1) every native
 * lock in it is shared (this instance's HS_LOCKF_SHARED: acquired by two
 * threads without a hand-over between them, handover.c; a lock that
 * becomes shared searches the cycles it closes then, hs_graph_lock_shared),
 * and (2) its edges were not all made by one thread.  Cycles without the
 * GIL keep lockdep's rule (one thread's two orders are enough).
 */
static int gil_cycle_can_deadlock(struct hs_seg *s, unsigned n)
{
	int gil = 0, one_thread = 1;
	int32_t tid = s->edges[cycle_buf[0]].tid;
	for (unsigned i = 0; i < n; i++) {
		const struct hs_edge *e = &s->edges[cycle_buf[i]];
		gil |= s->locks[e->from].kind == HS_LOCK_GIL;
		one_thread &= e->tid == tid;
	}
	if (!gil)
		return 1;
	if (one_thread)
		return 0;
	for (unsigned i = 0; i < n; i++) {
		uint32_t id = s->edges[cycle_buf[i]].from;
		const struct hs_lock *l = &s->locks[id];
		int32_t next;
		uint64_t since = 0;
		int made = 0;
		if (l->kind == HS_LOCK_GIL || (__atomic_load_n(&l->flags, __ATOMIC_RELAXED) & HS_LOCKF_SHARED))
			continue;
		/* outlived: shared for the cycles its successor made an edge of once it had taken it */
		if ((next = outlived_tid(id, &since)) != 0)
			for (unsigned k = 0; k < n; k++)
				made |= s->edges[cycle_buf[k]].tid == next && s->edges[cycle_buf[k]].ts_ns >= since;
		if (!made)
			return 0;
	}
	return 1;
}

static uint32_t lock_recheck(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack);

/*
 * Report the cycle in cycle_buf[0..n) as a potential deadlock (tid: the
 * thread whose action closed it, at now; stack: that action's), or count it
 * on an earlier finding over the same locks.  Under the graph lock.
 * Returns the new finding's index + 1, 0 when none was added.
 */
static uint32_t report_cycle(struct hs_seg *s, unsigned n, int32_t tid, uint64_t now, uint32_t stack)
{
	struct hs_finding *old;
	struct hs_finding f;
	cycle_locks(s, cycle_buf, n, locks_buf);
	old = same_cycle(s, locks_buf, n);
	if (old) {
		__atomic_add_fetch(&old->count, 1, __ATOMIC_RELAXED);
		return 0;
	}
	memset(&f, 0, sizeof f);
	f.kind = HS_FIND_POTENTIAL_DEADLOCK;
	f.n = (uint16_t)n;
	f.tid = tid;
	f.ts_ns = now;
	f.stack = stack;
	memcpy(f.edges, cycle_buf, (n < HS_CYCLE_MAX ? n : HS_CYCLE_MAX) * sizeof *cycle_buf);
	if (n > HS_CYCLE_MAX) {
		/* the whole cycle goes to the cycle-edge table, the finding points into it */
		struct hs_table *ct = &s->hdr->tables[HS_T_CYCLE_EDGES];
		if (n > 0xffff || ct->count + n > ct->capacity) {
			__atomic_add_fetch(&ct->dropped, 1, __ATOMIC_RELAXED);
			return 0;
		}
		f.offset = ct->count;
		for (unsigned i = 0; i < n; i++)
			cycle_edges(s)[ct->count + i] = cycle_buf[i];
		__atomic_store_n(&ct->count, ct->count + n, __ATOMIC_RELEASE);
	}
	for (unsigned i = 0; i < n; i++)
		__atomic_or_fetch(&s->edges[cycle_buf[i]].flags, HS_EDGE_IN_CYCLE, __ATOMIC_RELAXED);
	return hs_finding_add(s, &f);
}

uint32_t hs_graph_lock_shared(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack)
{
	struct hs_lock *l = &s->locks[id];
	if (__atomic_or_fetch(&l->flags, HS_LOCKF_SHARED, __ATOMIC_RELAXED) & HS_LOCKF_DEAD)
		return 0;
	return lock_recheck(s, id, tid, now, stack);
}

uint32_t hs_graph_lock_outlived(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack)
{
	if (__atomic_load_n(&s->locks[id].flags, __ATOMIC_RELAXED) & (HS_LOCKF_DEAD | HS_LOCKF_SHARED))
		return 0;
	graph_lock(s);
	outlived[id & (OUTLIVED_SLOTS - 1)].id = id;
	outlived[id & (OUTLIVED_SLOTS - 1)].tid = tid;
	outlived[id & (OUTLIVED_SLOTS - 1)].since = now;
	graph_unlock(s);
	return lock_recheck(s, id, tid, now, stack);
}

/* The GIL cycles through lock id, searched again: it may count as shared now. */
static uint32_t lock_recheck(struct hs_seg *s, uint32_t id, int32_t tid, uint64_t now, uint32_t stack)
{
	struct hs_lock *l = &s->locks[id];
	uint32_t finding = 0, f;
	graph_lock(s);
	/* a cycle through it uses one of its out-edges; only a GIL cycle can have waited for this */
	for (uint32_t e = l->first_out; e; e = s->edges[e].next_out) {
		unsigned n = find_cycle(s, e);
		if (n && gil_cycle_can_deadlock(s, n) && (f = report_cycle(s, n, tid, now, stack)) != 0 && !finding)
			finding = f;
	}
	graph_unlock(s);
	return finding;
}

/* Edge id, marked HS_EDGE_FROM_SITE, gets the exact stack of its held lock
 * (from_stack, not 0): the stack first, the mark cleared last, under the
 * graph lock (a second thread's rewrite waits, then finds it done).  A
 * reader may see the exact stack still marked, never the site's unmarked. */
static __attribute__((noinline, cold)) void edge_exact(struct hs_seg *s, uint32_t id, uint32_t from_stack)
{
	struct hs_edge *e = &s->edges[id];
	graph_lock(s);
	if (__atomic_load_n(&e->flags, __ATOMIC_RELAXED) & HS_EDGE_FROM_SITE) {
		__atomic_store_n(&e->from_stack, from_stack, __ATOMIC_RELAXED);
		__atomic_store_n(&e->from_site_n, 0, __ATOMIC_RELAXED);
		__atomic_and_fetch(&e->flags, (uint16_t)~HS_EDGE_FROM_SITE, __ATOMIC_RELEASE);
	}
	graph_unlock(s);
}

/* Edge id seen again with from_stack (from_site_n 0: exact): an edge still
 * marked HS_EDGE_FROM_SITE gets it (edge_exact). */
static inline void edge_seen_again(struct hs_seg *s, uint32_t id, uint32_t from_stack, uint32_t from_site_n)
{
	if (HS_UNLIKELY(__atomic_load_n(&s->edges[id].flags, __ATOMIC_RELAXED) & HS_EDGE_FROM_SITE) &&
	    !from_site_n && from_stack)
		edge_exact(s, id, from_stack);
}

uint32_t hs_graph_add(struct hs_seg *s, uint32_t from, unsigned from_mode, uint32_t from_stack, uint32_t from_site_n,
		      uint32_t to, unsigned to_mode, uint32_t to_stack, uint32_t (*capture)(void), int32_t tid,
		      uint64_t now, int *created, uint32_t *finding_out)
{
	uint64_t key = hs_edge_key(from, to, from_mode, to_mode);
	struct hs_table *tab = &s->hdr->tables[HS_T_EDGES];
	struct hs_index_slot *slot;
	uint32_t id;
	unsigned n;
	struct hs_edge *e;

	*created = 0;
	*finding_out = 0;
	id = hs_edge_find(s, key);
	if (HS_LIKELY(id)) {
		edge_seen_again(s, id, from_stack, from_site_n);
		return id;
	}
	/* new (probably): unwind now, outside the graph lock */
	if (!to_stack && capture)
		to_stack = capture();
	graph_lock(s);
	slot = index_probe(s, s->edge_index, s->hdr->tables[HS_T_EDGE_INDEX].capacity, key);
	if (slot && slot->key == key) {
		id = slot->value;
		graph_unlock(s);
		if (id)
			edge_seen_again(s, id, from_stack, from_site_n);
		return id;
	}
	if (!slot && (__atomic_load_n(&s->hdr->flags, __ATOMIC_ACQUIRE) & HS_HDR_SUSPECT)) {
		graph_unlock(s); /* the index was written over (hs_edge_find went quiet): no table was full */
		return 0;
	}
	id = tab->count;
	if (!slot || id >= tab->capacity || hs_seg_commit_entry(s, HS_T_EDGES, id) != 0) {
		__atomic_add_fetch(&tab->dropped, 1, __ATOMIC_RELAXED);
		graph_unlock(s);
		return 0;
	}
	e = &s->edges[id];
	memset(e, 0, sizeof *e);
	e->from = from;
	e->to = to;
	e->from_mode = (uint8_t)from_mode;
	e->to_mode = (uint8_t)to_mode;
	e->from_stack = from_stack;
	e->to_stack = to_stack;
	if (from_site_n) {
		e->flags = HS_EDGE_FROM_SITE;
		e->from_site_n = from_site_n;
	}
	e->tid = tid;
	e->ts_ns = now;
	e->next_out = s->locks[from].first_out;
	s->locks[from].first_out = id;
	/* the edge is complete before the count covers it and before the index names it */
	__atomic_store_n(&tab->count, id + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->key, key, __ATOMIC_RELEASE);
	*created = 1;

	n = find_cycle(s, id);
	if (n && !gil_cycle_can_deadlock(s, n))
		n = 0; /* the edges stay; the cycle is not a deadlock (yet) */
	if (n)
		*finding_out = report_cycle(s, n, tid, now, to_stack);
	graph_unlock(s);
	return id;
}
