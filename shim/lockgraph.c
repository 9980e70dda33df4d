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
#include <string.h>

#include "shim.h"

static void graph_lock(struct hs_seg *s)
{
	hs_spin_lock(&s->graph_lock);
}

static void graph_unlock(struct hs_seg *s)
{
	hs_spin_unlock(&s->graph_lock);
}

/* The index slot for key: the one holding it, else the empty one where it would go, else NULL (full). */
static struct hs_index_slot *index_probe(struct hs_index_slot *tab, uint32_t capacity, uint64_t key)
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

/* ---- locks ---------------------------------------------------------------- */

uint32_t hs_lock_id(struct hs_seg *s, uint64_t addr, unsigned kind, unsigned flags, uint32_t stack, int32_t tid,
		    uint64_t now)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_LOCKS];
	uint32_t icap = s->hdr->tables[HS_T_LOCK_INDEX].capacity;
	struct hs_index_slot *slot = index_probe(s->lock_index, icap, addr);
	uint32_t id, gen = 1;
	struct hs_lock *l;

	if (HS_LIKELY(slot && __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == addr)) {
		id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
		if (HS_LIKELY(id))
			return id;
	}
	graph_lock(s);
	slot = index_probe(s->lock_index, icap, addr);
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
	slot->aux = gen;
	__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
	if (slot->key != addr)
		__atomic_store_n(&slot->key, addr, __ATOMIC_RELEASE);
	graph_unlock(s);
	return id;
}

void hs_lock_forget(struct hs_seg *s, uint64_t addr)
{
	uint32_t icap = s->hdr->tables[HS_T_LOCK_INDEX].capacity;
	struct hs_index_slot *slot;
	uint32_t id;
	graph_lock(s);
	slot = index_probe(s->lock_index, icap, addr);
	if (slot && slot->key == addr && (id = slot->value) != 0) {
		__atomic_or_fetch(&s->locks[id].flags, HS_LOCKF_DEAD, __ATOMIC_RELAXED);
		slot->aux = s->locks[id].gen;
		/* the next acquisition at addr makes generation aux + 1 */
		__atomic_store_n(&slot->value, 0, __ATOMIC_RELEASE);
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

uint32_t hs_edge_find(struct hs_seg *s, uint64_t key)
{
	struct hs_index_slot *slot = index_probe(s->edge_index, s->hdr->tables[HS_T_EDGE_INDEX].capacity, key);
	if (slot && __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE) == key)
		return __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
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
 * Search a path from the new edge's target back to its source along which
 * every wait can block.  On success the cycle's edges, starting with the new
 * edge, are written to cycle[] and their number is returned; 0 otherwise.
 * Depth-first, bounded by HS_CYCLE_MAX, each (lock, recursive-read-or-not)
 * state visited once per search.  Graph lock held.
 */
static unsigned find_cycle(struct hs_seg *s, uint32_t new_edge, uint32_t cycle[HS_CYCLE_MAX])
{
	const struct hs_edge *ne = &s->edges[new_edge];
	struct dfs_frame fr[HS_CYCLE_MAX];
	unsigned depth = 0;
	uint32_t stamp = ++s->visit_stamp;

	if (stamp == 0) {
		memset(s->visit, 0, (size_t)s->hdr->tables[HS_T_LOCKS].capacity * 2 * sizeof(uint32_t));
		stamp = s->visit_stamp = 1;
	}
	fr[depth++] = (struct dfs_frame){ne->to, ne->to_mode, s->locks[ne->to].first_out, new_edge};
	while (depth > 0) {
		struct dfs_frame *top = &fr[depth - 1];
		uint32_t e = top->next;
		const struct hs_edge *ed;
		unsigned rr;
		if (e == 0) {
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
				cycle[i] = fr[i].via;
			cycle[depth] = e;
			return depth + 1;
		}
		rr = ed->to_mode == HS_MODE_READ_RECURSIVE;
		if (s->visit[2 * ed->to + rr] == stamp || depth + 1 >= HS_CYCLE_MAX)
			continue;
		s->visit[2 * ed->to + rr] = stamp;
		fr[depth++] = (struct dfs_frame){ed->to, ed->to_mode, s->locks[ed->to].first_out, e};
	}
	return 0;
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static void sort_u32(uint32_t *v, unsigned n)
{
	/* insertion sort: n <= HS_CYCLE_MAX, and qsort is not async-signal-safe */
	for (unsigned i = 1; i < n; i++)
		for (unsigned j = i; j > 0 && cmp_u32(&v[j - 1], &v[j]) > 0; j--) {
			uint32_t t = v[j];
			v[j] = v[j - 1];
			v[j - 1] = t;
		}
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
		uint32_t other[HS_CYCLE_MAX];
		if (!__atomic_load_n(&f->ready, __ATOMIC_ACQUIRE) || f->kind != HS_FIND_POTENTIAL_DEADLOCK ||
		    f->n != n)
			continue;
		cycle_locks(s, f->edges, n, other);
		if (memcmp(other, locks, n * sizeof *locks) == 0)
			return f;
	}
	return NULL;
}

uint32_t hs_graph_add(struct hs_seg *s, uint32_t from, unsigned from_mode, uint32_t from_stack, uint32_t to,
		      unsigned to_mode, uint32_t to_stack, uint32_t (*capture)(void), int32_t tid, uint64_t now,
		      int *created, uint32_t *finding_out)
{
	uint64_t key = hs_edge_key(from, to, from_mode, to_mode);
	struct hs_table *tab = &s->hdr->tables[HS_T_EDGES];
	struct hs_index_slot *slot;
	uint32_t id, cycle[HS_CYCLE_MAX];
	unsigned n;
	struct hs_edge *e;

	*created = 0;
	*finding_out = 0;
	id = hs_edge_find(s, key);
	if (HS_LIKELY(id))
		return id;
	/* new (probably): unwind now, outside the graph lock */
	if (!to_stack && capture)
		to_stack = capture();
	graph_lock(s);
	slot = index_probe(s->edge_index, s->hdr->tables[HS_T_EDGE_INDEX].capacity, key);
	if (slot && slot->key == key) {
		id = slot->value;
		graph_unlock(s);
		return id;
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
	e->tid = tid;
	e->ts_ns = now;
	e->next_out = s->locks[from].first_out;
	s->locks[from].first_out = id;
	/* the edge is complete before the count covers it and before the index names it */
	__atomic_store_n(&tab->count, id + 1, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
	__atomic_store_n(&slot->key, key, __ATOMIC_RELEASE);
	*created = 1;

	n = find_cycle(s, id, cycle);
	if (n) {
		uint32_t locks[HS_CYCLE_MAX];
		struct hs_finding *old;
		cycle_locks(s, cycle, n, locks);
		old = same_cycle(s, locks, n);
		if (old) {
			__atomic_add_fetch(&old->count, 1, __ATOMIC_RELAXED);
		} else {
			struct hs_finding f;
			memset(&f, 0, sizeof f);
			f.kind = HS_FIND_POTENTIAL_DEADLOCK;
			f.n = (uint16_t)n;
			f.tid = tid;
			f.ts_ns = now;
			f.stack = to_stack;
			memcpy(f.edges, cycle, n * sizeof *cycle);
			for (unsigned i = 0; i < n; i++)
				__atomic_or_fetch(&s->edges[cycle[i]].flags, HS_EDGE_IN_CYCLE, __ATOMIC_RELAXED);
			*finding_out = hs_finding_add(s, &f);
		}
	}
	graph_unlock(s);
	return id;
}
