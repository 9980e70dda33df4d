/* SPDX-License-Identifier: MIT */
/*
 * shim/stacks.c — call stacks: unwinding with libunwind and the
 * deduplicated stack table in the segment.
 *
 * Unwinding costs microseconds, so the hot path never unwinds.  A lock
 * acquisition reads its own chain of return addresses through distances
 * learnt from real unwinds (hs_chain_read, below), kept raw and interned only
 * when an edge, a self-deadlock or a wait needs it; the call site's cached
 * stack (the site index) stands for it in the flight recorder until then.
 * The stack of a new lock-order edge is captured exactly, once per edge.  Stacks are interned by hash in a
 * lock-free open-addressed index, so a crash handler can intern too.
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <ucontext.h>

#include "shim.h"
#include "unwind_mask.h"

/* Room for the Python frames that replace the evaluation loop's native
 * frames: one more than a stack keeps, so hs_stack_intern sees the cut. */
#define PY_ROOM (HS_STACK_DEPTH + 1)

/*
 * unw_backtrace without its per-thread trace cache until a thread has made
 * HS_LEAN_UNWINDS unwinds: libunwind 1.6 maps and fills a 256 KiB cache
 * (16,384 frame records) in every thread at its first unw_backtrace, and
 * heisen's first-sight stacks reached it in every thread (py_workload:
 * ten threads, 2.5 MiB resident of 13.8 MiB).  A step-by-step unwind costs
 * ~300 instructions a frame more; a thread that unwinds often (full
 * stacks) switches to the cache.  Same frames as unw_backtrace: the first
 * is the return address in the caller.  bench/README.md "libunwind's
 * per-thread trace cache".
 */
#define HS_LEAN_UNWINDS 512u
HS_HIDDEN __attribute__((noinline)) int hs_backtrace(void **buf, int size)
{
	static __thread unsigned lean __attribute__((tls_model("initial-exec")));
	unw_context_t uc;
	unw_cursor_t c;
	int n = 0;
	if (lean >= HS_LEAN_UNWINDS)
		return unw_backtrace(buf, size);
	lean++;
	if (unw_getcontext(&uc) < 0 || unw_init_local(&c, &uc) < 0)
		return 0;
	while (n < size && unw_step(&c) > 0) { /* the first step leaves this frame */
		unw_word_t ip = 0;
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
			break;
		buf[n++] = (void *)(uintptr_t)ip;
	}
	return n;
}

/* unw_backtrace inside one signal-mask change (unwind_mask.c), inlined so
 * the frames it returns are the caller's as before. */
static inline __attribute__((always_inline)) int backtrace_masked(void **buf, int size)
{
	int entered = hs_unwind_enter(), n = hs_backtrace(buf, size);
	hs_unwind_leave(entered);
	return n;
}

static uint64_t stack_hash(const uint64_t *pcs, unsigned depth, unsigned flags)
{
	uint64_t h = 0x9e3779b97f4a7c15ull ^ ((uint64_t)depth << 32) ^ flags;
	for (unsigned i = 0; i < depth; i++)
		h = hs_mix64(h ^ pcs[i]) + i;
	return h ? h : 1;
}

static int same_stack(const struct hs_stack *st, const uint64_t *pcs, unsigned depth, unsigned flags)
{
	return st->depth == depth && st->flags == flags && memcmp(st->pc, pcs, depth * sizeof *pcs) == 0;
}

/*
 * The stack index and the site index in regions.  Both are hash indexes
 * of twice their table's capacity (format.h hs_index_capacity: 64 KiB
 * each at the default geometry), committed a page at a time (segment.c
 * hs_seg_commit), and a key's home slot anywhere in the index made a
 * process's first few dozen keys commit nearly every page of both: ~30
 * tmpfs pages, 2-3 us each, for an `as` that interns 57 stacks, in every
 * process of a build (bench/README.md "A new site's stack through learnt
 * distances").  So the index is cut into disjoint regions, slots
 * [0, 256), [256, 1024), [1024, 4096), ... (each ending at four times the
 * last one's end, the last at the capacity), and a key goes into the
 * first region whose end is more than twice the stack table's count when
 * it is placed (no region more than half full), its home slot in there by
 * its hash, probing linearly inside the region and, should it be full,
 * in the next one.  A look-up probes each region from the current one
 * back to the first, stopping in each at an empty slot or a page never
 * written.  The pages a process commits are those its count needs.  Only
 * the writer reads the indexes (a fork child, its copy of its parent's:
 * the same counts give the same regions); a key placed in a later region
 * by a racing thread while a look-up walked the earlier ones is missed,
 * and the stack interned twice, as a race already could.
 */
#define INDEX_REGION_FIRST 256u /* slots: one 4 KiB page of 16-byte slots */

struct index_region {
	uint32_t lo, n; /* slots [lo, lo + n) */
};

/* Region k of an index of cap slots (k 0 first); n 0 past the last. */
static inline struct index_region index_region_at(unsigned k, uint32_t cap)
{
	struct index_region r = {0, 0};
	uint32_t end = INDEX_REGION_FIRST < cap ? INDEX_REGION_FIRST : cap;
	for (unsigned i = 0; i < k; i++) {
		if (end >= cap)
			return r;
		r.lo = end;
		end = end < cap / 4 ? end * 4 : cap;
	}
	r.n = end - r.lo;
	return r;
}

/* The region keys go into while the stack table holds `entries`. */
static inline unsigned index_region_for(uint32_t entries, uint32_t cap)
{
	unsigned k = 0;
	uint32_t end = INDEX_REGION_FIRST < cap ? INDEX_REGION_FIRST : cap;
	while (end < cap && end / 2 <= entries) {
		end = end < cap / 4 ? end * 4 : cap;
		k++;
	}
	return k;
}

/* A key's home slot in region r: its hash's high half scaled to the region. */
static inline uint32_t index_home(struct index_region r, uint64_t hash)
{
	return r.lo + (uint32_t)(((hash >> 32) * r.n) >> 32);
}

/* The slot after i in region r. */
static inline uint32_t index_next(struct index_region r, uint32_t i)
{
	return i + 1 < r.lo + r.n ? i + 1 : r.lo;
}

/* 1 when the page of index slot `slot` has store (hs_commit_map): a
 * look-up in an earlier region stops at a page never written, and commits
 * none. */
static inline int index_slot_written(const struct hs_seg *s, const struct hs_index_slot *slot)
{
	uint64_t c = (uint64_t)((const char *)slot - (const char *)s->hdr) >> hs_commit_shift;
	return (__atomic_load_n(&hs_commit_map[c >> 6], __ATOMIC_ACQUIRE) >> (c & 63)) & 1;
}

/* hs_index_slot_ready for slot i, the probe'th of a region's probe sequence. */
static inline int region_slot_ready(struct hs_seg *s, const struct hs_index_slot *slot, struct index_region r,
				    uint32_t i, uint32_t probe)
{
	if (HS_LIKELY(probe != 0 && i != r.lo && ((uintptr_t)slot & 4095u) != 0))
		return 1;
	return hs_seg_ready(s, slot, sizeof *slot);
}

/* The stack of (h, pcs, depth, flags) in a region before region `top`, 0 when none. */
static uint32_t stack_find_before(struct hs_seg *s, unsigned top, uint64_t h, const uint64_t *pcs, unsigned depth,
				  unsigned flags)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_STACKS];
	uint32_t cap = s->hdr->tables[HS_T_STACK_INDEX].capacity;
	for (unsigned k = top; k-- > 0;) {
		struct index_region r = index_region_at(k, cap);
		uint32_t i = index_home(r, h);
		for (uint32_t probe = 0; probe < r.n; probe++, i = index_next(r, i)) {
			struct hs_index_slot *slot = &s->stack_index[i];
			uint64_t key;
			if ((probe == 0 || i == r.lo || ((uintptr_t)slot & 4095u) == 0) && !index_slot_written(s, slot))
				break; /* a page never written: not in this region */
			key = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
			if (key == 0)
				break; /* not in this region */
			if (key == h) {
				uint32_t id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
				if (id != 0 && id < tab->capacity && same_stack(&s->stacks[id], pcs, depth, flags))
					return id;
			}
		}
	}
	return 0;
}

uint32_t hs_stack_intern(struct hs_seg *s, const uint64_t *pcs, unsigned depth, unsigned flags)
{
	struct hs_table *tab = &s->hdr->tables[HS_T_STACKS];
	struct hs_table *idx = &s->hdr->tables[HS_T_STACK_INDEX];
	uint32_t cap = idx->capacity, id;
	unsigned k;
	uint64_t h;

	if (depth > HS_STACK_DEPTH) {
		depth = HS_STACK_DEPTH;
		flags |= HS_STACK_TRUNCATED;
	}
	h = stack_hash(pcs, depth, flags);
	k = index_region_for(__atomic_load_n(&tab->count, __ATOMIC_RELAXED), cap);
	if ((id = stack_find_before(s, k, h, pcs, depth, flags)) != 0)
		return id;
	for (;; k++) {
		struct index_region r = index_region_at(k, cap);
		uint32_t i = index_home(r, h);
		if (r.n == 0)
			break; /* every region probed */
		for (uint32_t probe = 0; probe < r.n; probe++, i = index_next(r, i)) {
			struct hs_index_slot *slot = &s->stack_index[i];
			uint64_t key;
			if (!region_slot_ready(s, slot, r, i, probe))
				goto dropped; /* no room for the index's next page: as if full */
			key = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
			if (key == 0) {
				uint64_t expect = 0;
				if (__atomic_compare_exchange_n(&slot->key, &expect, h, 0, __ATOMIC_ACQ_REL,
								__ATOMIC_ACQUIRE)) {
					struct hs_stack *st;
					id = __atomic_fetch_add(&tab->count, 1, __ATOMIC_RELAXED);
					if (id >= tab->capacity || hs_seg_commit_entry(s, HS_T_STACKS, id) != 0) {
						__atomic_add_fetch(&tab->dropped, 1, __ATOMIC_RELAXED);
						return 0;
					}
					st = &s->stacks[id];
					st->hash = h;
					st->depth = (uint16_t)depth;
					st->flags = (uint16_t)flags;
					memcpy(st->pc, pcs, depth * sizeof *pcs);
					/* pc[] is complete before ready, and ready before the index points here */
					__atomic_store_n(&st->ready, 1, __ATOMIC_RELEASE);
					__atomic_store_n(&slot->value, id, __ATOMIC_RELEASE);
					return id;
				}
				key = expect;
			}
			if (key == h) {
				id = __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
				/* id 0: another thread is still writing it; at worst we intern a twin */
				if (id != 0 && id < tab->capacity && same_stack(&s->stacks[id], pcs, depth, flags))
					return id;
			}
		}
	}
	/* every key claimed an entry (tab->count, the table's capacity of slack for the
	   claims in flight): an index that ran out before its table did was written over */
	HS_ASSERT_IN(s, hs_index_may_fill(idx->capacity, (uint64_t)__atomic_load_n(&tab->count, __ATOMIC_RELAXED) +
							 tab->capacity));
dropped:
	__atomic_add_fetch(&tab->dropped, 1, __ATOMIC_RELAXED);
	return 0;
}

/* Drop the shim's own frames from the top; rescan modules for unknown PCs. */
static unsigned trim_and_check(uint64_t *pcs, unsigned n)
{
	unsigned skip = 0;
	while (skip < n && pcs[skip] >= hs_self_lo && pcs[skip] < hs_self_hi)
		skip++;
	if (skip)
		memmove(pcs, pcs + skip, (n - skip) * sizeof *pcs);
	n -= skip;
	for (unsigned i = 0; i < n; i++)
		if (!hs_module_known(pcs[i]))
			hs_module_note_pc(pcs[i], 1); /* loaded by dlopen since: record it while it is here */
	return n;
}

/* The room below the caller's frame: libunwind's context and cursor and the
 * buffers below need HS_UNWIND_ROOM (shim.h, hs_stack_room). */
static inline int room_to_unwind(void)
{
	return hs_stack_room((uintptr_t)__builtin_frame_address(0)) >= HS_UNWIND_ROOM;
}

static __attribute__((noinline)) uint32_t stack_here_unwind(void);
static __attribute__((noinline)) unsigned here_read(uint64_t *pcs, unsigned cap);

uint32_t hs_stack_here(void)
{
	if (HS_UNLIKELY(!room_to_unwind()))
		return 0; /* a small thread stack: no stack rather than an overflow */
	return stack_here_unwind();
}

/*
 * The calling thread's stack, the shim's frames trimmed from the top, Python
 * frames interleaved, interned.  The native frames are those the whole
 * unwind from here gives (hs_backtrace: HS_STACK_DEPTH + 12 return
 * addresses from the one into this function on, the shim's counted), read
 * through the learnt distances from this frame on where they are all known
 * (here_read), so the frames, the cut and the Python frames matched to
 * them are libunwind's, frame for frame.
 */
static uint32_t stack_here_unwind(void)
{
	uint64_t pcs[HS_STACK_DEPTH + 12 + PY_ROOM];
	unsigned n = here_read(pcs, HS_STACK_DEPTH + 12), depth, flags = 0;
	int python;
	if (n == 0)
		return 0;
	depth = trim_and_check(pcs, n);
	if (n == HS_STACK_DEPTH + 12 && depth >= HS_STACK_DEPTH)
		flags |= HS_STACK_TRUNCATED;
	depth = hs_py_interleave(&hs_seg, pcs, depth, depth > PY_ROOM ? depth : PY_ROOM, &python);
	if (python)
		flags |= HS_STACK_PYTHON;
	return hs_stack_intern(&hs_seg, pcs, depth, flags);
}

/* The stack id cached under key in the site index, 0 when none (or being filled). */
/*
 * The site index is looked up on hooks' paths: a probe sequence is bounded
 * (a key lies at most SITE_PROBES slots from its home, or was not cached:
 * counted in the index's dropped), so a nearly full index costs a few
 * cache lines per miss, never a scan of the whole table per call.
 */
#define SITE_PROBES 64u

/* The site index's current region (index_region_for: the stack table's
 * count stands for the sites', each site's stack being in it). */
static inline unsigned site_region(const struct hs_seg *s)
{
	return index_region_for(__atomic_load_n(&s->hdr->tables[HS_T_STACKS].count, __ATOMIC_RELAXED),
				s->hdr->tables[HS_T_SITE_INDEX].capacity);
}

static uint32_t site_get(struct hs_seg *s, uint64_t key)
{
	uint32_t cap = s->hdr->tables[HS_T_SITE_INDEX].capacity;
	uint64_t h = hs_mix64(key);
	unsigned top = site_region(s);
	for (unsigned k = top + 1; k-- > 0;) {
		struct index_region r = index_region_at(k, cap);
		uint32_t i = index_home(r, h);
		for (uint32_t probe = 0; probe < r.n && probe < SITE_PROBES; probe++, i = index_next(r, i)) {
			struct hs_index_slot *slot = &s->site_index[i];
			uint64_t kk;
			if (k != top) {
				if ((probe == 0 || i == r.lo || ((uintptr_t)slot & 4095u) == 0) && !index_slot_written(s, slot))
					break; /* an earlier region's page never written: not there */
			} else if (!region_slot_ready(s, slot, r, i, probe)) {
				return 0; /* no room for the index's next page: not cached */
			}
			kk = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
			if (kk == key)
				return __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE); /* 0: being filled: capture our own */
			if (kk == 0)
				break;
		}
	}
	return 0;
}

/* Cache id under key; the first writer wins.  Returns the cached id. */
static uint32_t site_put(struct hs_seg *s, uint64_t key, uint32_t id)
{
	struct hs_table *idx = &s->hdr->tables[HS_T_SITE_INDEX];
	uint64_t h = hs_mix64(key);

	for (unsigned k = site_region(s);; k++) {
		struct index_region r = index_region_at(k, idx->capacity);
		uint32_t i = index_home(r, h);
		if (r.n == 0)
			break;
		for (uint32_t probe = 0; probe < r.n && probe < SITE_PROBES; probe++, i = index_next(r, i)) {
			struct hs_index_slot *slot = &s->site_index[i];
			uint64_t expect = 0;
			if (!region_slot_ready(s, slot, r, i, probe))
				goto dropped; /* no room for the index's next page: not cached */
			if (__atomic_compare_exchange_n(&slot->key, &expect, key, 0, __ATOMIC_ACQ_REL,
							__ATOMIC_ACQUIRE) ||
			    expect == key) {
				uint32_t none = 0;
				/* first writer wins; later ones keep what is there */
				__atomic_compare_exchange_n(&slot->value, &none, id, 0, __ATOMIC_RELEASE, __ATOMIC_RELAXED);
				return id;
			}
		}
	}
dropped:
	__atomic_add_fetch(&idx->dropped, 1, __ATOMIC_RELAXED);
	return id;
}

uint32_t hs_site_peek(const struct hs_seg *s, uint64_t key)
{
	uint32_t cap = s->hdr->tables[HS_T_SITE_INDEX].capacity;
	uint64_t h = hs_mix64(key);

	for (unsigned k = site_region(s) + 1; k-- > 0;) {
		struct index_region r = index_region_at(k, cap);
		uint32_t i = index_home(r, h);
		for (uint32_t probe = 0; probe < r.n && probe < SITE_PROBES; probe++, i = index_next(r, i)) {
			const struct hs_index_slot *slot = &s->site_index[i];
			uint64_t kk;
			if (!index_slot_written(s, slot))
				break; /* a page without store (as far as this process knows): never touched */
			kk = __atomic_load_n(&slot->key, __ATOMIC_ACQUIRE);
			if (kk == key)
				return __atomic_load_n(&slot->value, __ATOMIC_ACQUIRE);
			if (kk == 0)
				break;
		}
	}
	return 0;
}

uint32_t hs_stack_site_learn(uint64_t key, const struct hs_stack *st)
{
	uint32_t id;
	if (st->depth == 0 || st->depth > HS_STACK_DEPTH || (st->flags & HS_STACK_PYTHON))
		return 0;
	if ((id = site_get(&hs_seg, key)) != 0)
		return id;
	id = hs_stack_intern(&hs_seg, st->pc, st->depth, st->flags);
	return id ? site_put(&hs_seg, key, id) : 0;
}

/* Unwind the calling thread (the shim's frames trimmed) into pcs; returns the depth. */
static unsigned capture(uint64_t *pcs)
{
	void *buf[HS_STACK_DEPTH + 12];
	int n = backtrace_masked(buf, (int)(sizeof buf / sizeof buf[0]));
	if (n <= 0)
		return 0;
	for (int j = 0; j < n; j++)
		pcs[j] = (uint64_t)(uintptr_t)buf[j];
	return trim_and_check(pcs, (unsigned)n);
}

/*
 * In front of the shared site index, each thread keeps the SITE_TC_SETS *
 * SITE_TC_WAYS sites it asked for last: two-way sets by the site (the
 * newest of a set in way 0, the one it displaced in way 1, as locks.c's
 * chain cache), entries tagged with the segment generation (a fork child's
 * new segment has other ids).  Direct-mapped with 32 entries it missed
 * 7.7k to 15.6k times a py_workload run of 3000 requests (sqlite's six
 * connection-mutex sites, the GIL takes' sites and the allocator's falling
 * into the same slots, depending on where the libraries are loaded), each
 * miss ~260 instructions through the shared site index (bench/README.md
 * "The pthread lock hooks under a threaded Python service").  An entry is
 * written site last, after a zero, so a signal handler of the same thread
 * never reads half.  In the tail of the chain memo's range of the thread's
 * area (the memo leaves it free), 1 KiB.
 */
#define SITE_TC_SETS 32u
#define SITE_TC_WAYS 2u
struct site_tc {
	uint64_t site;
	uint32_t id, gen;
};
#define SITE_TC_BYTES (SITE_TC_SETS * SITE_TC_WAYS * sizeof(struct site_tc))
#define SITE_TC_AT (HS_AREA_CHAINMEMO + HS_AREA_CHAINMEMO_SIZE - SITE_TC_BYTES)
/* [SITE_TC_SETS][SITE_TC_WAYS] in the thread's area (shim.h, hs_area), NULL without one */
static inline struct site_tc *site_tc_of(void)
{
	char *a = hs_area();
	return a ? (struct site_tc *)(void *)(a + SITE_TC_AT) : NULL;
}
/* The shadow of hs_stack_call's reads (the fd hooks', sem_init's, a cond
 * wait's), in the area's stacks range. */
static inline struct hs_chain *call_chain_of(void)
{
	char *a = hs_area();
	return a ? (struct hs_chain *)(void *)(a + HS_AREA_STACKS) : NULL;
}
_Static_assert(sizeof(struct hs_chain) <= HS_AREA_STACKS_SIZE, "the call chain fits the area");

/* e <- (key, id, gen), written so that a signal handler never matches half of it. */
static inline void site_tc_write(struct site_tc *e, uint64_t key, uint32_t id, uint32_t gen)
{
	__atomic_store_n(&e->site, 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	e->id = id;
	e->gen = gen;
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&e->site, key, __ATOMIC_RELAXED);
}

static __attribute__((noinline)) uint32_t stack_site_slow(uint64_t key, uint64_t site, uint64_t cfa);
static unsigned site_read(uint64_t *pcs, unsigned cap, uint64_t site, uint64_t cfa, int self_ok);
static unsigned site_unwind_whole(uint64_t *pcs, unsigned cap, uint64_t from);

/*
 * The CFA of the hook whose caller's return address is site, found by
 * walking heisen's own frames by their frame pointers (libheisen is built
 * with them) up to the first return address outside libheisen: that one
 * must be site itself, else (a frame without a frame pointer on the way:
 * the dlsym trampoline) 0.  Every frame read lies on this thread's stack,
 * above this one (the bounds hs_stack_room read, area.c).
 */
static __attribute__((noinline)) uint64_t site_cfa_by_frame_pointers(uint64_t site)
{
	uint64_t fp = (uint64_t)(uintptr_t)__builtin_frame_address(0);
	uint64_t lo = hs_tls.stack_lo, hi = hs_tls.stack_hi;
	if (hi <= lo + 1 || fp < lo || fp + 16 > hi)
		return 0;
	for (unsigned i = 0; i < 64; i++) {
		const uint64_t *f = (const uint64_t *)(uintptr_t)fp;
		uint64_t ret = f[1], next = f[0];
		if (ret < hs_self_lo || ret >= hs_self_hi)
			return ret == site ? fp + 16 : 0;
		if (next <= fp || (next & 7) || next + 16 > hi)
			return 0;
		fp = next;
	}
	return 0;
}

static inline __attribute__((always_inline)) uint32_t stack_site_at(uint64_t key, uint64_t site, uint64_t cfa)
{
	uint32_t gen = __atomic_load_n(&hs_seg_gen, __ATOMIC_RELAXED), id;
	struct site_tc *tc = site_tc_of();
	struct site_tc *e = tc ? &tc[((key ^ key >> 9) & (SITE_TC_SETS - 1)) * SITE_TC_WAYS] : NULL;
	if (e && e[0].site == key && e[0].gen == gen && e[0].id)
		return e[0].id;
	if (e && e[1].site == key && e[1].gen == gen && e[1].id)
		return e[1].id;
	if (HS_UNLIKELY(!room_to_unwind())) {
		/* a small thread stack: the site's stack cached already, else the
		 * call site alone, marked truncated and never cached (a later call
		 * with room unwinds); no unwind that would overflow the stack */
		if ((id = site_get(&hs_seg, key)) != 0)
			return id;
		return hs_stack_intern(&hs_seg, &key, 1, HS_STACK_SITE | HS_STACK_TRUNCATED);
	}
	id = stack_site_slow(key, site, cfa);
	if (id && e) {
		/* the newest first, the one it displaces second */
		if (e[0].site)
			site_tc_write(&e[1], e[0].site, e[0].id, e[0].gen);
		site_tc_write(&e[0], key, id, gen);
	}
	return id;
}

uint32_t hs_stack_site(uint64_t site)
{
	return stack_site_at(site, site, 0);
}

uint32_t hs_stack_site_at(uint64_t key, uint64_t site, uint64_t cfa)
{
	return stack_site_at(key, site, cfa);
}

static uint32_t stack_site_slow(uint64_t key, uint64_t site, uint64_t cfa)
{
	struct hs_seg *s = &hs_seg;
	uint64_t pcs[HS_STACK_DEPTH + 12 + PY_ROOM];
	unsigned depth = 0;
	uint32_t id;
	int python;

	if ((id = site_get(s, key)) != 0)
		return id;
	/* first time at this site: the slow path; through learnt distances
	   from the hook's caller's frame, where the hook said where it is or
	   heisen's own frame pointers lead to it (site_read) */
	if (!cfa && site)
		cfa = site_cfa_by_frame_pointers(site);
	if (cfa && (depth = site_read(pcs, HS_STACK_DEPTH + 12, site, cfa, 0)) == 0)
		depth = site_unwind_whole(pcs, HS_STACK_DEPTH + 12, 0); /* learns for the next ones */
	if (depth == 0)
		depth = capture(pcs);
	if (depth == 0)
		return 0;
	depth = hs_py_interleave(s, pcs, depth, depth > PY_ROOM ? depth : PY_ROOM, &python);
	id = hs_stack_intern(s, pcs, depth, HS_STACK_SITE | (python ? HS_STACK_PYTHON : 0));
#ifndef HS_CORE_ONLY /* init.c: libheisen.so only */
	if (id && HS_UNLIKELY(hs_learn_post != NULL) && !python)
		hs_fork_learn_post(key, &s->stacks[id]); /* for the forking parent's next children (init.c) */
#endif
	return id ? site_put(s, key, id) : 0;
}

/*
 * ---- this call's stack, cheaply: return addresses through learnt offsets ----
 *
 * A site-cached stack is the stack of the first call from that site: through
 * a shared wrapper (Acquire(lock) called from many functions) it names the
 * wrong callers.  hs_stack_call() reads this call's own chain of return
 * addresses instead, the way a frame-pointer unwinder would, but without
 * frame pointers: for each return address pc it uses the distance
 * off(pc) = CFA - SP of the frame that pc returns into, learnt from a real
 * libunwind unwind (DWARF CFI) and checked there (the next return address
 * must sit at CFA - 8).  A pc whose frame showed two different distances
 * (alloca, variable-length arrays), a signal frame, a pc never learnt, a
 * frame of 512 KiB or more or a CFA beyond the deepest one this thread ever
 * unwound through all mean doubt, and doubt means a real unwind (which
 * learns).  A pc is only ever trusted because a real unwind returned into it
 * at a known distance, so the chain read is the chain libunwind would read.
 *
 * A thread reads many chains that share frames (a loop around a lock, a
 * library's mutex reached from a few callers), so a read reuses the last
 * chain kept in the same struct hs_chain (the shadow) where it is provably
 * the same: a frame of this call at the CFA and with the return address of
 * a shadow frame k has, above it, the shadow's CFAs (each the one below
 * plus the learnt distance of its return address, a function of that
 * address only: no distance has turned to doubt since, pcoff_gen), so only
 * each return-address slot above k is compared with the shadow's; the
 * first that differs is read on from there through the learnt distances.
 * A chain from a real unwind is no shadow (its CFAs were not walked).
 */
#define PCOFF_CAP 16384u         /* learnt return addresses (process-private), at most */
#define PCOFF_MIN 2048u          /* the table's first size: four pages */
#define PCOFF_LEVELS 4u          /* sizes PCOFF_MIN << 0 .. 3 */
#define PCOFF_PROBE 16u
#define PCOFF_END 0u             /* the outermost frame: nothing above it */
#define PCOFF_DOUBT 0xffffu      /* seen at two distances, or not learnable */
#define PCOFF_UNIT_SHIFT 3       /* kept in 8-byte units: frames up to 512 KiB */
#define CHAIN_MAX HS_CHAIN_MAX

/*
 * The learnt distances, a table that doubles as it fills.  Entries are
 * (pc << 16) | code; pc is a user-space address (< 2^47), code the CFA - SP
 * distance in 8-byte units (pcoff_code: a return address's slot and the
 * next one's are 8-byte aligned, so every distance is a multiple of 8;
 * in bytes, a frame of 64 KiB or more -- CPython's Py_RunMain keeps a
 * 64 KiB path buffer -- could not be kept and meant a real unwind through
 * it in every process), or PCOFF_END, or PCOFF_DOUBT.  A hashed table is touched at random: at a fixed 16,384 slots
 * (128 KiB) the ~500 return addresses of a Python start wrote every one of
 * its 32 pages, a page fault each (~12 us on a VM).  So the table starts
 * at PCOFF_MIN slots and moves into one twice its size when half full:
 * the sizes lie one after the other in pcoff_store (2048 slots at 0, 4096
 * at 2048, 8192 at 6144, 16384 at 14336), and a move copies
 * the entries over and gives the old pages back (MADV_DONTNEED), so a long
 * run's resident size is the largest table's, as before.
 *
 * Readers take no lock: they load pcoff_tab and pcoff_mask separately and
 * may see one of a move's and one of the last; every combination indexes
 * inside pcoff_store (base + mask < PCOFF_STORE) and an entry is only
 * taken for its own pc, and every slot holding pc's entry holds a distance
 * learnt for pc (a copy, or zeros where pages were given back: a miss,
 * which asks the session's table and at worst unwinds).  Writers (learning,
 * a doubt, a move) hold pcoff_owner (pcoff_take; a fork child lets go of a
 * holder it has not got: hs_stacks_after_fork_child), so a doubt is never
 * lost to a move's copy; a thread that finds the lock its own (a signal handler that
 * unwinds, interrupting its own learning) learns nothing rather than wait.
 */
#define PCOFF_STORE (PCOFF_MIN * ((1u << PCOFF_LEVELS) - 1u))
static uint64_t pcoff_store[PCOFF_STORE] __attribute__((aligned(4096)));
static uint64_t *pcoff_tab = pcoff_store;  /* [atomic] the table in use */
static uint32_t pcoff_mask = PCOFF_MIN - 1; /* [atomic] its slots - 1 */
static uint32_t pcoff_used;                 /* its entries; under pcoff_owner */
/* [atomic] the writer holding the table, 0 when none: the address of its
 * hs_chain_top (a thread's own word; no TLS of its own, whose size would
 * move every thread's stack, and so the chain memo's sets) */
static uintptr_t pcoff_owner;
/* Moves when a learnt distance turns into doubt: a chain walked before that
 * is no shadow any more (its distances are no longer all trusted).
 * [atomic]; shim.h (hs_chain_read_inline) reads it too. */
uint32_t hs_pcoff_gen;
#define pcoff_gen hs_pcoff_gen
/* The highest CFA a real unwind of this thread reached: the fast walk never
 * reads above it.  shim.h (hs_chain_read_inline) reads it too. */
__thread uint64_t hs_chain_top __attribute__((tls_model("initial-exec")));
#define chain_top hs_chain_top
/* Where this thread's last walk stopped in doubt: the chain index of the
 * return address whose distance is not known, CHAIN_MAX for any other
 * doubt (a CFA above chain_top).  Read and reset by the real unwind. */
static __thread unsigned chain_doubt __attribute__((tls_model("initial-exec"))) = CHAIN_MAX;

/* pc's home hash: a multiplicative hash (return addresses are spread enough;
 * one multiply where hs_mix64 takes five operations, once per walked frame);
 * 24 bits, masked by the table's size */
static inline uint32_t pcoff_home(uint64_t pc)
{
	return (uint32_t)((pc * 0x9e3779b97f4a7c15ull) >> 40);
}

static int pcoff_get_shared(uint64_t pc, unsigned *off);

/* A distance in bytes (PCOFF_END, PCOFF_DOUBT as they are) as kept: its
 * code, PCOFF_DOUBT when it is no multiple of 8 or too large. */
static inline unsigned pcoff_code(uint64_t off)
{
	if (off == PCOFF_END)
		return PCOFF_END;
	if ((off & ((1u << PCOFF_UNIT_SHIFT) - 1)) || (off >> PCOFF_UNIT_SHIFT) >= PCOFF_DOUBT)
		return PCOFF_DOUBT;
	return (unsigned)(off >> PCOFF_UNIT_SHIFT);
}

/* A code as kept back into bytes (PCOFF_END, PCOFF_DOUBT as they are). */
static inline unsigned pcoff_bytes(unsigned code)
{
	return code == PCOFF_DOUBT ? PCOFF_DOUBT : code << PCOFF_UNIT_SHIFT;
}

/* pc's learnt distance in bytes into *off: 1; 0 when not learnt here or in
 * the session's table (*off untouched) or doubtful (*off PCOFF_DOUBT). */
static inline int pcoff_get(uint64_t pc, unsigned *off)
{
	const uint64_t *t = __atomic_load_n(&pcoff_tab, __ATOMIC_ACQUIRE);
	uint32_t m = __atomic_load_n(&pcoff_mask, __ATOMIC_RELAXED), i = pcoff_home(pc) & m;
	for (unsigned p = 0; p < PCOFF_PROBE; p++, i = (i + 1) & m) {
		uint64_t w = __atomic_load_n(&t[i], __ATOMIC_RELAXED);
		if (w == 0)
			return pcoff_get_shared(pc, off);
		if (w >> 16 == pc) {
			*off = pcoff_bytes((unsigned)(w & 0xffff));
			return *off != PCOFF_DOUBT;
		}
	}
	return pcoff_get_shared(pc, off);
}

/* Put the entry w (pc's) in table t of mask m at pc's first free slot:
 * 1, 0 when its neighbourhood is full.  Under pcoff_owner. */
static int pcoff_place(uint64_t *t, uint32_t m, uint64_t w)
{
	uint32_t i = pcoff_home(w >> 16) & m;
	for (unsigned p = 0; p < PCOFF_PROBE; p++, i = (i + 1) & m)
		if (__atomic_load_n(&t[i], __ATOMIC_RELAXED) == 0) {
			__atomic_store_n(&t[i], w, __ATOMIC_RELAXED);
			return 1;
		}
	return 0;
}

/* The table in use is half full: its entries into the next size, the
 * old pages given back.  Under pcoff_owner. */
static void pcoff_grow(void)
{
	uint64_t *t = pcoff_tab, *n;
	uint32_t m = pcoff_mask, used = 0;
	if (m + 1 >= PCOFF_CAP)
		return;
	n = t + m + 1; /* the next size starts where this one ends */
	for (uint32_t i = 0; i <= m; i++) {
		uint64_t w = __atomic_load_n(&t[i], __ATOMIC_RELAXED);
		if (w != 0)
			used += (uint32_t)pcoff_place(n, 2 * m + 1, w);
	}
	__atomic_store_n(&pcoff_mask, 2 * m + 1, __ATOMIC_RELAXED);
	__atomic_store_n(&pcoff_tab, n, __ATOMIC_RELEASE);
	pcoff_used = used;
#ifndef HS_CORE_ONLY /* the unit tests' core library calls no system call wrappers */
	/* a reader still in the old table then reads zeros: a miss (the array
	   is page-aligned in .bss, so never in the page the file maps the end
	   of .data into: anonymous memory, zero again after MADV_DONTNEED) */
	(void)hs_sys.madvise(t, (size_t)(m + 1) * sizeof *t, MADV_DONTNEED);
#endif
}

/*
 * Learn pc's distance into this process's table, as its code off
 * (pcoff_code); publish it to the session's table (unwind_share.c, the
 * same codes) when it is new here or turned to doubt, and `publish` (a
 * distance from a real unwind of this process, not one taken from the
 * session's table).
 */
/*
 * Take pcoff_owner for the calling thread: 1, or 0 when this thread holds
 * it already (a signal handler interrupting its own learning, which then
 * learns nothing rather than wait).  A waiter spins PCOFF_SPINS times,
 * then yields PCOFF_YIELDS times, then sleeps 50 us between looks, as
 * lockgraph.c's graph_lock and for its reason: a holder preempted under
 * SCHED_FIFO waits for a CPU that pure spinners of its priority never give
 * up.  Async-signal-safe: no lock of libc's, raw waits.
 */
#define PCOFF_SPINS 1024u
#define PCOFF_YIELDS 64u
static int pcoff_take(void)
{
	uintptr_t me = (uintptr_t)&hs_chain_top, cur = 0;
	unsigned waits = 0;
	while (!__atomic_compare_exchange_n(&pcoff_owner, &cur, me, 0, __ATOMIC_ACQUIRE, __ATOMIC_RELAXED)) {
		if (cur == me)
			return 0;
		cur = 0;
		if (waits < PCOFF_SPINS) {
			__builtin_ia32_pause();
		} else if (waits < PCOFF_SPINS + PCOFF_YIELDS) {
			sched_yield();
		} else {
#ifndef HS_CORE_ONLY /* the unit tests' core library calls no system call wrappers */
			struct timespec ts = {0, 50000};
			hs_sys.nanosleep(&ts);
#else
			sched_yield();
#endif
		}
		if (waits < PCOFF_SPINS + PCOFF_YIELDS)
			waits++;
	}
	return 1;
}

HS_FORK_TEXT HS_HIDDEN void hs_stacks_after_fork_child(void)
{
	/* a load first: a child with nothing to clear takes no copy-on-write fault */
	uintptr_t o = __atomic_load_n(&pcoff_owner, __ATOMIC_RELAXED);
	if (o != 0 && o != (uintptr_t)&hs_chain_top)
		__atomic_store_n(&pcoff_owner, 0, __ATOMIC_RELAXED);
}

static void pcoff_note(uint64_t pc, unsigned off, int publish)
{
	uint64_t want, *t;
	uint32_t m, i;
	int put = 0;
	if (pc == 0 || pc >> 47)
		return;
	if (off >= PCOFF_DOUBT)
		off = PCOFF_DOUBT;
	want = pc << 16 | off;
	if (!pcoff_take())
		return; /* a handler interrupting this thread's own learning */
	t = pcoff_tab, m = pcoff_mask, i = pcoff_home(pc) & m;
	for (unsigned p = 0; p < PCOFF_PROBE; p++, i = (i + 1) & m) {
		uint64_t w = __atomic_load_n(&t[i], __ATOMIC_RELAXED);
		if (w == 0) {
			__atomic_store_n(&t[i], want, __ATOMIC_RELAXED);
			put = publish;
			if (++pcoff_used > (m + 1) / 2)
				pcoff_grow();
			goto out;
		}
		if (w >> 16 == pc) {
			if ((w & 0xffff) != off && (w & 0xffff) != PCOFF_DOUBT) {
				__atomic_store_n(&t[i], pc << 16 | PCOFF_DOUBT, __ATOMIC_RELAXED);
				__atomic_add_fetch(&pcoff_gen, 1, __ATOMIC_RELEASE);
				off = PCOFF_DOUBT, put = 1; /* for the session too */
			}
			goto out;
		}
	}
	put = publish; /* no room here: the session may keep it */
out:
	__atomic_store_n(&pcoff_owner, 0, __ATOMIC_RELEASE);
	if (put)
		hs_frames_put(pc, (unsigned)off);
}

/* A distance in bytes a real unwind of this process saw (PCOFF_END, PCOFF_DOUBT). */
static void pcoff_learn(uint64_t pc, uint64_t off)
{
	pcoff_note(pc, pcoff_code(off), 1);
}

/*
 * A return address this process has not learnt: the distance the
 * session's other processes (or this one, past a full neighbourhood here)
 * learnt for it, if any (unwind_share.c checks the entry and the object's
 * build), kept here as if learnt.  Off the hot path: only where the walk
 * would otherwise doubt, and unwind.
 */
static __attribute__((noinline)) int pcoff_get_shared(uint64_t pc, unsigned *off)
{
	unsigned o;
	if (!hs_frames_get(pc, &o))
		return 0;
	pcoff_note(pc, o, 0);
	*off = pcoff_bytes(o);
	return o != PCOFF_DOUBT;
}

static inline uint64_t slot_at(uint64_t sp)
{
	return *(const uint64_t *)(uintptr_t)(sp - 8);
}

/*
 * Walk on from c's entry n - 1 through learnt distances, up to HS_CHAIN_MAX.
 * Returns the depth, 0 on any doubt (an unknown or doubtful return address,
 * a CFA above chain_top).
 */
static unsigned chain_extend(struct hs_chain *c, unsigned n, uint64_t top)
{
	unsigned off;
	while (n < CHAIN_MAX) {
		uint64_t sp;
		if (!pcoff_get(c->pc[n - 1], &off)) {
			chain_doubt = n - 1;
			return 0;
		}
		if (off == PCOFF_END) {
			c->ended = 1;
			return n;
		}
		sp = c->sp[n - 1] + off;
		if (sp > top) {
			chain_doubt = CHAIN_MAX;
			return 0;
		}
		c->sp[n] = sp;
		c->pc[n] = slot_at(sp);
		n++;
	}
	return n;
}

/*
 * The fast read (see hs_chain_read): c's previous chain is the shadow.  The
 * new call's frames are walked into a side buffer until one sits at the
 * CFA and returns to the address of a shadow frame k; from there on each
 * CFA is the shadow's (sp[k + 1] = sp[k] + off(pc[k]), the same learnt
 * distance: the generation is unchanged) and only each return-address slot
 * is compared.  Returns the depth, 0 on any doubt.
 */
static __attribute__((noinline)) unsigned chain_walk(struct hs_chain *c, uint64_t site, uint64_t cfa,
							 uint64_t top, uint32_t gen, unsigned sn)
{
	uint64_t ipc[CHAIN_MAX], isp[CHAIN_MAX], sp = cfa, pc = site;
	unsigned k = 0, j = 0, keep, m, off = 1;
	int ended = c->ended;

	c->walked = 0;
	for (;;) {
		while (k < sn && c->sp[k] < sp)
			k++;
		if (k < sn && c->sp[k] == sp && c->pc[k] == pc)
			break; /* the shadow's frame k */
		ipc[j] = pc;
		isp[j] = sp;
		j++;
		if (j < CHAIN_MAX && !pcoff_get(pc, &off)) {
			chain_doubt = j - 1;
			return 0;
		}
		if (j == CHAIN_MAX || off == PCOFF_END) {
			/* no frame shared with the shadow: the chain is the side buffer */
			memcpy(c->pc, ipc, j * sizeof ipc[0]);
			memcpy(c->sp, isp, j * sizeof isp[0]);
			c->ended = j < CHAIN_MAX;
			c->depth = j;
			goto done;
		}
		sp += off;
		if (sp > top) {
			chain_doubt = CHAIN_MAX;
			return 0;
		}
		pc = slot_at(sp);
	}
	/* frames 0..j-1 are new, the shadow's k.. follow them */
	keep = sn - k < CHAIN_MAX - j ? sn - k : CHAIN_MAX - j;
	if (j != k) {
		memmove(&c->pc[j], &c->pc[k], keep * sizeof c->pc[0]);
		memmove(&c->sp[j], &c->sp[k], keep * sizeof c->sp[0]);
	}
	for (m = 0; m < j; m++) {
		c->pc[m] = ipc[m];
		c->sp[m] = isp[m];
	}
	for (m = j + 1; m < j + keep; m++)
		if (slot_at(c->sp[m]) != c->pc[m])
			break;
	c->ended = 0;
	if (m < j + keep) {
		/* frame m returns elsewhere now: read on from it */
		c->pc[m] = slot_at(c->sp[m]);
		c->depth = chain_extend(c, m + 1, top);
	} else if (ended && keep == sn - k) {
		c->ended = 1;
		c->depth = j + keep;
	} else {
		c->depth = chain_extend(c, j + keep, top);
	}
	if (!c->depth)
		return 0;
done:
	c->site = site;
	c->cfa = cfa;
	c->gen = gen;
	c->walked = 1;
	return c->depth;
}

/*
 * A real unwind from here into c (site and cfa set), learning each frame's
 * distance; the shim's frames are dropped.  Returns the depth.
 *
 * The unwind goes only as far as it must (libunwind's steps are the costly
 * part: each takes the global cache's lock, signals blocked around it, with
 * Debian's libunwind): when the walk stopped at return address `want - 1`
 * whose distance was not known, the unwind stops once it has learnt that
 * one (the next frame's CFA) and reached a return address whose distance
 * is known, and the chain is walked on from there through learnt distances
 * as hs_chain_read would (chain_extend).  want 0, a walk that then doubts
 * again, or a first unwind of the thread (chain_top 0): the whole unwind.
 * The result is a shadow (walked) only when each of its frames sits at the
 * learnt distance from the one below.
 */
static __attribute__((noinline)) unsigned chain_unwind_steps(struct hs_chain *c, unsigned want);

/*
 * The libunwind cursor's frame: its return address (or the first frame's
 * instruction pointer) into *ip, its stack pointer (the frame's CFA as
 * libunwind gives it) into *sp, and whether it is a signal frame into
 * *sig.  -1 (nothing written) when libunwind cannot say or the address is
 * 0 (the end); 0 otherwise.  Shared by the chain's unwind and a site's.
 */
static inline int unw_frame_read(unw_cursor_t *cur, uint64_t *ip, uint64_t *sp, uint8_t *sig)
{
	unw_word_t i = 0, s = 0;
	if (unw_get_reg(cur, UNW_REG_IP, &i) < 0 || i == 0 || unw_get_reg(cur, UNW_REG_SP, &s) < 0)
		return -1;
	*ip = i;
	*sp = s;
	*sig = unw_is_signal_frame(cur) > 0;
	return 0;
}

/* chain_unwind_steps inside one signal-mask change (unwind_mask.c) */
static unsigned chain_unwind(struct hs_chain *c, unsigned want)
{
	int entered = hs_unwind_enter();
	unsigned d = chain_unwind_steps(c, want);
	hs_unwind_leave(entered);
	return d;
}

static __attribute__((noinline)) unsigned chain_unwind_steps(struct hs_chain *c, unsigned want)
{
	unw_context_t uc;
	unw_cursor_t cur;
	uint64_t ip[CHAIN_MAX + 16], sp[CHAIN_MAX + 16];
	uint8_t sig[CHAIN_MAX + 16];
	unsigned n, skip, out, off, d;
	uint32_t gen;
	int r, partial;
	if (!chain_top)
		want = 0;
again:
	n = skip = 0;
	r = 1;
	partial = 0;
	if (unw_getcontext(&uc) < 0 || unw_init_local(&cur, &uc) < 0)
		return 0;
	while (n < sizeof ip / sizeof ip[0]) {
		if (unw_frame_read(&cur, &ip[n], &sp[n], &sig[n]) < 0)
			break;
		if (n == skip && ip[n] >= hs_self_lo && ip[n] < hs_self_hi)
			skip++;
		n++;
		/* far enough: past the return address in doubt, at one whose distance is known */
		if (want && n - skip > want && n - skip < CHAIN_MAX && !sig[n - 1] && pcoff_get(ip[n - 1], &off) &&
		    off != PCOFF_END) {
			partial = 1;
			break;
		}
		if ((r = unw_step(&cur)) <= 0)
			break;
	}
	for (unsigned k = skip; k < n; k++) {
		if (k + 1 < n) {
			/* the next return address must sit just below the next CFA */
			int ok = !sig[k] && !sig[k + 1] && sp[k + 1] > sp[k] &&
				 *(const uint64_t *)(uintptr_t)(sp[k + 1] - 8) == ip[k + 1];
			pcoff_learn(ip[k], ok ? sp[k + 1] - sp[k] : PCOFF_DOUBT);
		} else if (r == 0) {
			pcoff_learn(ip[k], PCOFF_END); /* the unwinder found no caller */
		}
	}
	if (n > skip && sp[n - 1] > chain_top)
		chain_top = sp[n - 1];
	out = n - skip < CHAIN_MAX ? n - skip : CHAIN_MAX;
	for (unsigned k = 0; k < out; k++) {
		c->pc[k] = ip[skip + k];
		c->sp[k] = sp[skip + k];
	}
	/* every frame learnt, not only those kept: a learnt distance implies a known object (site_read) */
	for (unsigned k = skip; k < n; k++)
		if (!hs_module_known(ip[k]))
			hs_module_note_pc(ip[k], 1);
	c->walked = 0;
	c->ended = 0;
	if (!partial)
		return out;
	/* the rest through learnt distances, from the last frame unwound */
	gen = __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE);
	chain_doubt = CHAIN_MAX;
	if ((d = chain_extend(c, out, chain_top)) == 0) {
		chain_doubt = CHAIN_MAX;
		want = 0; /* doubt further out: the whole unwind */
		goto again;
	}
	/* a shadow when it is the chain a walk from (site, cfa) reads: each frame
	 * unwound at its learnt distance from the one below */
	c->walked = c->pc[0] == c->site && c->sp[0] == c->cfa;
	for (unsigned k = 0; c->walked && k + 1 < out; k++)
		if (!pcoff_get(c->pc[k], &off) || c->sp[k] + off != c->sp[k + 1])
			c->walked = 0;
	c->gen = gen;
	return d;
}

/* A slot of c's shadow changed at m (frames 0..m-1 verified): read on from m. */
static __attribute__((noinline)) unsigned chain_diverged(struct hs_chain *c, unsigned m, uint64_t top)
{
	c->walked = 0;
	c->ended = 0;
	c->pc[m] = slot_at(c->sp[m]);
	if ((c->depth = chain_extend(c, m + 1, top)) == 0)
		return 0;
	c->walked = 1;
	return c->depth;
}

/* The chain's Python frames into c->py, when it passes through the evaluation loop. */
__attribute__((noinline)) void hs_chain_python(struct hs_chain *c)
{
	c->python = hs_py_chain_frames(&hs_seg, c->pc, c->depth, CHAIN_MAX, &c->py) != 0;
}

/*
 * The bound of a thread's first walk, before any real unwind of it set
 * chain_top: with the session's learnt distances (unwind_share.c) the
 * walk may get through without one, read no higher than the top of the
 * thread's stack (its mapping, area.c), from a cfa on it above this frame.
 * 0 (no walk: the real unwind) otherwise.  A walk that gets through sets
 * chain_top to its last CFA, as a real unwind of the same frames would
 * (the inline reads, shim.h hs_chain_read_inline, need it set).
 */
static __attribute__((noinline)) uint64_t chain_top_shared(uint64_t cfa)
{
	uint64_t lo, hi, here = (uint64_t)(uintptr_t)__builtin_frame_address(0);
	/* the bounds not read yet (a thread's first walk, often the guard
	   sampler's): read now, as the real unwind's room check would next */
	if (HS_UNLIKELY(!hs_tls.stack_hi))
		(void)hs_stack_room(here);
	lo = hs_tls.stack_lo, hi = hs_tls.stack_hi;
	if (hi <= lo + 1 || here < lo || cfa <= here || cfa >= hi - 8 || (cfa & 7) || !hs_frames_mapped())
		return 0;
	return hi - 8;
}

/* hs_chain_read's native frames (c->python left as it was). */
static unsigned chain_read_native(struct hs_chain *c, uint64_t site, uint64_t cfa)
{
	uint64_t top = chain_top;
	if (HS_UNLIKELY(!top))
		top = chain_top_shared(cfa);
	uint32_t gen = __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE);
	/* a lazy chain stops at its first evaluation loop: no shadow of the whole */
	unsigned sn = c->walked && c->gen == gen && !c->lazy ? c->depth : 0, m, d;

	c->lazy = 0;
	c->unchanged = 0;
	if (HS_LIKELY(top && slot_at(cfa) == site) && sn && c->site == site && c->cfa == cfa) {
		/* the same call as last time, most often: compare the shadow's slots */
		for (m = 1; m < sn; m++)
			if (slot_at(c->sp[m]) != c->pc[m])
				break;
		c->unchanged = m == sn;
		d = m == sn ? sn : chain_diverged(c, m, top);
	} else {
		d = top && slot_at(cfa) == site ? chain_walk(c, site, cfa, top, gen, sn) : 0;
	}
	if (HS_UNLIKELY(d && !chain_top && c->walked))
		chain_top = c->sp[d - 1]; /* a first walk through the session's distances: as far as a real unwind would set */
	if (d == 0 && HS_UNLIKELY(!room_to_unwind())) {
		/* a small thread stack: no chain rather than an overflow */
		chain_doubt = CHAIN_MAX;
		c->walked = 0;
		c->depth = 0;
		c->python = 0;
		return 0;
	}
	if (d == 0) {
		/* doubt: a real unwind, which learns, from the return address in doubt
		 * (a whole one when the walk did not start: no chain_top, another site) */
		unsigned want = top && slot_at(cfa) == site && chain_doubt < CHAIN_MAX ? chain_doubt + 1 : 0;
		chain_doubt = CHAIN_MAX;
		c->site = site;
		c->cfa = cfa;
		c->depth = chain_unwind(c, want);
	}
	return c->depth;
}

unsigned hs_chain_read(struct hs_chain *c, uint64_t site, uint64_t cfa)
{
	chain_read_native(c, site, cfa);
	c->python = 0;
	if (c->depth && hs_py_frames_maybe())
		hs_chain_python(c);
	return c->depth;
}


/* A lazy chain of depth d read at (site, cfa) under learnt-distance
 * generation gen, walked or taken from the memo: the shadow for the next
 * read, cut at the evaluation loop (not ended). */
static inline void lazy_walked(struct hs_chain *c, unsigned d, uint64_t site, uint64_t cfa, uint32_t gen)
{
	c->depth = d;
	c->site = site;
	c->cfa = cfa;
	c->gen = gen;
	c->walked = 1;
	c->ended = 0;
}
/*
 * hs_chain_read_lazy's walk: only the native frames up to the want-th
 * evaluation-loop call (the return address into it included), through the
 * learnt distances, reusing c's last chain (whole or lazy: its frames are
 * checked only as far as this walk goes) as chain_walk does.  A chain whose
 * first frames are those of the shadow costs a load and a compare per
 * frame, a new frame a lookup of its distance; nothing past the loop is
 * read (the frames further out are the running Python frame's callers,
 * read from the stack when the chain is interned: hs_chain_stack).
 * Returns the depth, 0 on any doubt or when the loop is not within
 * HS_CHAIN_MAX frames (the caller then reads the whole chain).  Sets
 * c->site, cfa, gen and walked; not lazy, tok and python (the caller's).
 */
#define IN_EVAL(pc) ((pc) - ev_lo - 1 < ev_span) /* hs_py_eval_pc, the range read once (hs_py_eval_range) */
static unsigned chain_extend_eval(struct hs_chain *c, unsigned n, uint64_t top, unsigned want, unsigned evals,
				  uint64_t ev_lo, uint64_t ev_span)
{
	unsigned off;
	while (n < CHAIN_MAX) {
		uint64_t sp;
		if (!pcoff_get(c->pc[n - 1], &off)) {
			chain_doubt = n - 1;
			return 0;
		}
		if (off == PCOFF_END)
			return 0; /* the outermost frame, and no loop */
		sp = c->sp[n - 1] + off;
		if (sp > top) {
			chain_doubt = CHAIN_MAX;
			return 0;
		}
		c->sp[n] = sp;
		c->pc[n] = slot_at(sp);
		n++;
		if (IN_EVAL(c->pc[n - 1]) && ++evals == want)
			return n;
	}
	return 0;
}

static __attribute__((noinline)) unsigned chain_walk_eval(struct hs_chain *c, uint64_t site, uint64_t cfa,
							  unsigned want)
{
	uint64_t ipc[CHAIN_MAX], isp[CHAIN_MAX], sp = cfa, pc = site, top = chain_top;
	uint32_t gen = __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE);
	unsigned sn = c->walked && c->gen == gen ? c->depth : 0;
	unsigned k = 0, j = 0, m, n, keep, off = 1, evals = 0, d = 0;
	int shadow_ended = c->ended, diverged = 0;
	uint64_t ev_lo, ev_span;

	if (!top || slot_at(cfa) != site)
		return 0;
	hs_py_eval_range(&ev_lo, &ev_span);
	c->walked = 0;
	for (;;) {
		while (k < sn && c->sp[k] < sp)
			k++;
		if (k < sn && c->sp[k] == sp && c->pc[k] == pc)
			break; /* the shadow's frame k */
		ipc[j] = pc;
		isp[j] = sp;
		j++;
		if (j > 1 && IN_EVAL(pc) && ++evals == want) {
			for (m = 0; m < j; m++) {
				c->pc[m] = ipc[m];
				c->sp[m] = isp[m];
			}
			d = j;
			goto done;
		}
		if (j == CHAIN_MAX || !pcoff_get(pc, &off)) {
			chain_doubt = j < CHAIN_MAX ? j - 1 : CHAIN_MAX;
			return 0;
		}
		if (off == PCOFF_END)
			return 0;
		sp += off;
		if (sp > top) {
			chain_doubt = CHAIN_MAX;
			return 0;
		}
		pc = slot_at(sp);
	}
	/* the shadow's frames k.. checked in place, up to the loop; then moved behind the new ones */
	keep = sn - k < CHAIN_MAX - j ? sn - k : CHAIN_MAX - j;
	for (m = k; m < k + keep; m++) {
		if (m > k && slot_at(c->sp[m]) != c->pc[m]) {
			/* frame m returns elsewhere now: read on from it */
			c->pc[m] = slot_at(c->sp[m]);
			keep = m + 1 - k;
			diverged = 1;
		}
		if ((j || m > k) && IN_EVAL(c->pc[m]) && ++evals == want) {
			keep = m + 1 - k;
			d = j + keep; /* the loop's frame */
			break;
		}
		if (diverged)
			break;
	}
	if (j != k) {
		memmove(&c->pc[j], &c->pc[k], keep * sizeof c->pc[0]);
		memmove(&c->sp[j], &c->sp[k], keep * sizeof c->sp[0]);
	}
	for (m = 0; m < j; m++) {
		c->pc[m] = ipc[m];
		c->sp[m] = isp[m];
	}
	n = j + keep;
	if (!d && (diverged || !(shadow_ended && keep == sn - k)))
		d = chain_extend_eval(c, n, top, want, evals, ev_lo, ev_span);
done:
	if (!d)
		return 0;
	lazy_walked(c, d, site, cfa, gen);
	return d;
}

/*
 * The thread's recent lazy chains (hs_chain_read_lazy), in front of the
 * walk.  One held chain slot serves every acquisition at its held-stack
 * depth, so a lock taken from several call paths in turn (sqlite's
 * mutexes, from each API function) finds the slot's last chain from
 * another path and walks the frames that differ each time
 * (chain_walk_eval, ~450 instructions under py_workload).  The memo keeps
 * CHAIN_MEMO_SETS x CHAIN_MEMO_WAYS of the thread's lazy chains, whichever
 * slot read them, in sets by (site, CFA): a call whose site, CFA,
 * learnt-distance generation and evaluation-loop count (lazy) match an
 * entry, and each of whose return-address slots at the entry's CFAs still
 * holds the entry's address, has that entry's chain, by the argument of
 * the shadow compare (hs_chain_read's: each distance is a function of its
 * return address alone, so the same slots give the same CFAs; each CFA was
 * below chain_top when walked, and chain_top only grows): a load and a
 * compare per frame and a copy instead of the walk.  Under py_workload a
 * worker thread cycles through 30 to 60 such chains (LRU simulation of a
 * trace: 12 entries 65 % hits, 32 70 %, 64 95 %; these 64 in sets: about
 * 83 %).  Entries of CHAIN_MEMO_DEPTH frames at most (a deeper chain is
 * not kept; CFAs kept as they are: the same CFA, the same frames),
 * replaced round-robin within a set;
 * an entry is written with site zero first and site last.  In the
 * thread's area (shim.h, HS_AREA_CHAINMEMO): zero-filled for a new thread,
 * never shared, 13.5 KiB of address space backed as it is touched.
 * docs/design.md "Lock order" (the chain memo).
 */
#define CHAIN_MEMO_SETS 16u
#define CHAIN_MEMO_WAYS 4u
#define CHAIN_MEMO_DEPTH 12u
/* A set's tags, one cache line: a look-up reads this line and, on a match,
 * that way's entry only (with the tags in the entries, a miss read the four
 * entries' lines, 216 bytes apart: ~20 % of the read's time under
 * py_workload, perf annotate; bench/README.md "The lock path by
 * time"; the look-up's time did not measurably change). */
struct chain_memo_tags {
	uint64_t site[CHAIN_MEMO_WAYS]; /* site 0: empty */
	uint64_t cfa[CHAIN_MEMO_WAYS];
};
_Static_assert(sizeof(struct chain_memo_tags) == 64, "a set's tags are one cache line");
struct chain_memo_entry {
	uint32_t gen;           /* pcoff_gen the chain was walked under */
	uint8_t depth, lazy;    /* frames in pc[]/sp[]; the chain's lazy (1 or 2) */
	uint8_t pad[2];
	uint64_t pc[CHAIN_MEMO_DEPTH];  /* as struct hs_chain's; past depth: stale, copied unread */
	uint64_t sp[CHAIN_MEMO_DEPTH];
};
struct chain_memo {
	struct chain_memo_tags tag[CHAIN_MEMO_SETS];
	struct chain_memo_entry e[CHAIN_MEMO_SETS][CHAIN_MEMO_WAYS];
	uint8_t next[CHAIN_MEMO_SETS]; /* the way replaced next */
};
_Static_assert(sizeof(struct chain_memo) <= SITE_TC_AT - HS_AREA_CHAINMEMO, "the chain memo fits the area before the site cache");
_Static_assert(CHAIN_MEMO_DEPTH <= CHAIN_MAX, "a memo entry fits a chain");
_Static_assert(HS_AREA_CHAINMEMO % 64 == 0, "the memo's tags start on a cache line");
static inline struct chain_memo *chain_memo_of(void)
{
	char *a = hs_area();
	return a ? (struct chain_memo *)(void *)(a + HS_AREA_CHAINMEMO) : NULL;
}
static inline unsigned chain_memo_set(uint64_t site, uint64_t cfa)
{
	return (unsigned)(((site ^ cfa) * 0x9e3779b97f4a7c15ull) >> 56) & (CHAIN_MEMO_SETS - 1);
}

/* c from a memo entry of (site, cfa, want) whose slots still hold its frames; 1 on a hit. */
static inline int chain_memo_get(struct chain_memo *mm, struct hs_chain *c, uint64_t site, uint64_t cfa,
				 unsigned want, uint32_t gen)
{
	unsigned s = chain_memo_set(site, cfa);
	const struct chain_memo_tags *tg = &mm->tag[s];
	for (unsigned i = 0; i < CHAIN_MEMO_WAYS; i++) {
		const struct chain_memo_entry *e;
		unsigned m, d;
		if (tg->cfa[i] != cfa || tg->site[i] != site)
			continue;
		e = &mm->e[s][i];
		if (e->gen != gen || e->lazy != want)
			continue;
		d = e->depth;
		for (m = 1; m < d; m++)
			if (slot_at(e->sp[m]) != e->pc[m])
				break;
		if (m != d)
			continue;
		/* whole arrays, a fixed size: a few vector moves, no length loop */
		memcpy(c->pc, e->pc, sizeof e->pc);
		memcpy(c->sp, e->sp, sizeof e->sp);
		lazy_walked(c, d, site, cfa, gen);
		return 1;
	}
	return 0;
}

/* c's lazy chain (just walked) into its set's next way: its site zeroed
 * first and written last, so that a signal handler of this thread reading
 * the memo meanwhile never matches a half-written entry. */
static inline void chain_memo_put(struct chain_memo *mm, const struct hs_chain *c, unsigned want)
{
	unsigned d = c->depth, s = chain_memo_set(c->site, c->cfa), w;
	struct chain_memo_entry *e;
	if (d > CHAIN_MEMO_DEPTH || d == 0)
		return;
	w = mm->next[s];
	mm->next[s] = (uint8_t)(w + 1 < CHAIN_MEMO_WAYS ? w + 1 : 0);
	e = &mm->e[s][w];
	__atomic_store_n(&mm->tag[s].site[w], 0, __ATOMIC_RELAXED);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	mm->tag[s].cfa[w] = c->cfa;
	e->gen = c->gen;
	e->depth = (uint8_t)d;
	e->lazy = (uint8_t)want;
	memcpy(e->pc, c->pc, sizeof e->pc);
	memcpy(e->sp, c->sp, sizeof e->sp);
	__atomic_signal_fence(__ATOMIC_SEQ_CST);
	__atomic_store_n(&mm->tag[s].site[w], c->site, __ATOMIC_RELAXED);
}

HS_HOT unsigned hs_chain_read_lazy(struct hs_chain *c, uint64_t site, uint64_t cfa)
{
	unsigned m, e, k, want;
	uint64_t ev_lo, ev_span;
	uint8_t was_lazy;
	if (HS_LIKELY(c->lazy && c->site == site && c->cfa == cfa && c->walked &&
		      c->gen == __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE) && chain_top && slot_at(cfa) == site)) {
		/* the same native frames as last time up to the evaluation loop(s): compare their slots */
		for (m = 1; m < c->depth; m++)
			if (slot_at(c->sp[m]) != c->pc[m])
				break;
		if (m == c->depth && HS_LIKELY(hs_py_token(&c->tok) && (c->tok.entry ? 2u : 1u) == c->lazy)) {
			c->unchanged = 1;
			return c->depth;
		}
	}
	if (!hs_py_frames_maybe())
		return hs_chain_read(c, site, cfa);
	/* the token first, then the native frames only up to its evaluation-loop call(s); only
	 * once frames are read (hs_py_token's first call may look for CPython, which needs
	 * more stack than a small thread stack has: chain_read_native asks after its room check) */
	hs_py_eval_range(&ev_lo, &ev_span);
	/* the token read into c->tok in place (not lazy meanwhile: c->py, which it shares a union
	 * with, is read again below; c->python 0); when none is read, a lazy chain's frames are
	 * no shadow of the whole for chain_read_native (walked 0: it stops at the loop) */
	was_lazy = c->lazy;
	c->lazy = 0;
	c->python = 0;
	/* a lazy chain's token is the slot's last one: compared first (the same Python frame at
	 * the same instruction under the same callers: sqlite's step, reset and finalize under
	 * one execute()), read whole only when it changed; else c->py's bytes, no token */
	if (!was_lazy)
		c->tok.fp = 0;
	if (ev_span && !(site - ev_lo - 1 < ev_span) && hs_py_token(&c->tok)) {
		struct chain_memo *mm = chain_memo_of();
		want = c->tok.entry ? 2 : 1;
		if (mm && chain_top && slot_at(cfa) == site &&
		    chain_memo_get(mm, c, site, cfa, want, __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE))) {
			c->lazy = (uint8_t)want;
			c->unchanged = 0;
			return c->depth;
		}
		if (chain_walk_eval(c, site, cfa, want)) {
			if (mm)
				chain_memo_put(mm, c, want);
			c->lazy = (uint8_t)want;
			c->unchanged = 0;
			return c->depth;
		}
	} else if (was_lazy) {
		c->walked = 0;
	}
	chain_read_native(c, site, cfa);
	c->python = 0;
	/* c->tok shares a union with c->py: no token kept to compare with */
	if (!c->walked || c->depth == 0 || hs_py_eval_pc(c->pc[0]) || !hs_py_token_read(&c->tok))
		goto whole;
	/* up to the evaluation-loop call running the frame, and its caller's when called from C */
	want = c->tok.entry ? 2 : 1;
	for (e = 1, k = 0; e < c->depth && e < CHAIN_MAX; e++)
		if (hs_py_eval_pc(c->pc[e]) && ++k == want)
			break;
	if (e >= c->depth || e >= CHAIN_MAX)
		goto whole;
	c->depth = e + 1;
	c->ended = 0;
	c->lazy = (uint8_t)want;
	return c->depth;
whole:
	/* no Python frame on the way, or none to keep: the whole chain */
	if (c->depth && hs_py_frames_maybe())
		hs_chain_python(c);
	return c->depth;
}

int hs_chain_complete(struct hs_chain *c)
{
	struct hs_pytoken now;
	unsigned d;
	if (!c->lazy || !c->walked || c->depth == 0 || c->depth >= CHAIN_MAX ||
	    c->gen != __atomic_load_n(&pcoff_gen, __ATOMIC_ACQUIRE) || !chain_top)
		return 0;
	/* the innermost Python frame is still the one the lock was taken under, under the same
	 * frames further out (a new call of the same helpers from another line: not the same) */
	if (!hs_py_token_read(&now) || !hs_py_token_same_call(&now, &c->tok))
		return 0;
	d = chain_extend(c, c->depth, chain_top);
	chain_doubt = CHAIN_MAX;
	if (d == 0)
		return 0; /* pc[0 .. depth) untouched: still the lazy chain */
	c->depth = d;
	c->lazy = 0;
	c->unchanged = 0;
	c->python = 0;
	if (hs_py_frames_maybe())
		hs_chain_python(c);
	return 1;
}

/*
 * c's stack with its Python frames interleaved (struct hs_pychain): each
 * native frame in c->py.consumed replaced by the Python frames standing in
 * for it, the ones after the last native frame appended; at most
 * CHAIN_MAX entries, the cap hs_py_chain_frames read them for.
 */
static unsigned chain_interleave(const struct hs_chain *c, uint64_t *out)
{
	const struct hs_pychain *py = &c->py;
	unsigned o = 0, k = 0, n = c->depth < CHAIN_MAX ? c->depth : CHAIN_MAX;
	for (unsigned i = 0; i < n && o < CHAIN_MAX; i++) {
		if (!(py->consumed >> i & 1)) {
			out[o++] = c->pc[i];
			continue;
		}
		while (k < py->n && py->at[k] == i && o < CHAIN_MAX)
			out[o++] = HS_PC_PYTHON | py->id[k++];
	}
	while (k < py->n && py->at[k] >= n && o < CHAIN_MAX)
		out[o++] = HS_PC_PYTHON | py->id[k++];
	return o;
}

/*
 * A lazy chain's stack (hs_chain_read_lazy): its native frames, its Python
 * frame, and what is further out read from the thread's stack now
 * (hs_py_held_frames); HS_STACK_TRUNCATED when the Python frame is no
 * longer the same call there (the stack then ends with it).
 */
static uint32_t chain_stack_lazy(const struct hs_chain *c)
{
	uint64_t cur[HS_STACK_DEPTH + 12], out[CHAIN_MAX];
	unsigned n = 0, o;
	int whole = 0;
	/* the thread's stack now, the shim's frames included (hs_py_held_frames finds the
	 * evaluation-loop calls in it): through the learnt distances, as hs_stack_here's */
	if (room_to_unwind())
		n = here_read(cur, HS_STACK_DEPTH + 12);
	unsigned e1 = c->depth - 1;
	if (c->lazy == 2)
		for (e1 = 1; e1 < c->depth - 1 && !hs_py_eval_pc(c->pc[e1]); e1++)
			;
	o = hs_py_held_frames(&hs_seg, c->pc, e1, c->lazy == 2 ? c->pc + e1 + 1 : NULL,
			      c->lazy == 2 && e1 + 1 < c->depth ? c->depth - 2 - e1 : 0, &c->tok, cur, n, out, CHAIN_MAX,
			      &whole);
	return hs_stack_intern(&hs_seg, out, o, HS_STACK_PYTHON | (whole ? 0u : HS_STACK_TRUNCATED));
}

/* c's frames as a stack's pc[] (Python frames interleaved), at most
 * CHAIN_MAX; c read by hs_chain_read (not lazy).  For a caller that keeps
 * a stack without interning it (guarded.c's sampled blocks). */
unsigned hs_chain_pcs(const struct hs_chain *c, uint64_t *out)
{
	unsigned n = c->depth < CHAIN_MAX ? c->depth : CHAIN_MAX;
	if (c->python)
		return chain_interleave(c, out);
	memcpy(out, c->pc, n * sizeof *out);
	return n;
}

uint32_t hs_chain_stack(const struct hs_chain *c)
{
	if (c->lazy)
		return c->depth ? chain_stack_lazy(c) : 0;
	if (c->python) {
		uint64_t out[CHAIN_MAX];
		return hs_stack_intern(&hs_seg, out, chain_interleave(c, out), HS_STACK_PYTHON);
	}
	return c->depth ? hs_stack_intern(&hs_seg, c->pc, c->depth, 0) : 0;
}

void hs_chain_copy(struct hs_chain *dst, const struct hs_chain *src)
{
	unsigned n = src->depth < CHAIN_MAX ? src->depth : CHAIN_MAX;
	dst->site = src->site;
	dst->cfa = src->cfa;
	dst->depth = n;
	dst->gen = src->gen;
	dst->walked = src->walked;
	dst->ended = src->ended;
	dst->python = src->python;
	dst->unchanged = src->unchanged;
	dst->lazy = src->lazy;
	if (src->lazy)
		dst->tok = src->tok;
	memcpy(dst->pc, src->pc, n * sizeof dst->pc[0]);
	if (src->walked)
		memcpy(dst->sp, src->sp, n * sizeof dst->sp[0]);
	if (src->python) {
		dst->py.consumed = src->py.consumed;
		dst->py.n = src->py.n;
		memcpy(dst->py.id, src->py.id, src->py.n * sizeof dst->py.id[0]);
		memcpy(dst->py.at, src->py.at, src->py.n * sizeof dst->py.at[0]);
	}
}

const struct hs_chain *hs_chain_call(uint64_t site, uint64_t cfa)
{
	struct hs_chain *call_chain = call_chain_of();
	if (HS_UNLIKELY(!call_chain))
		return NULL;
	hs_chain_read(call_chain, site, cfa);
	return call_chain;
}

uint32_t hs_stack_call(uint64_t site, uint64_t cfa)
{
	struct hs_chain *call_chain = call_chain_of();
	if (HS_UNLIKELY(!call_chain))
		return hs_stack_site(site); /* no area: the site's stack */
	hs_chain_read(call_chain, site, cfa);
	return hs_chain_stack(call_chain);
}

uint32_t hs_stack_from_signal(void *ucontext)
{
	unw_cursor_t c;
	uint64_t pcs[HS_STACK_DEPTH + PY_ROOM];
	unsigned n = 0, flags = HS_STACK_EXACT_TOP;
	int python, was;
	if (hs_unwind_active() || !hs_unwind_loaded()) {
		/* the signal interrupted heisen's own unwind, which may hold libunwind's
		 * locks, or came before the first (libunwind not loaded yet, and not
		 * loadable in a handler: unwind_load.c): the interrupted instruction
		 * alone, never a second unwind */
		uint64_t pc = (uint64_t)((ucontext_t *)ucontext)->uc_mcontext.gregs[REG_RIP];
		return pc ? hs_stack_intern(&hs_seg, &pc, 1, HS_STACK_EXACT_TOP | HS_STACK_TRUNCATED) : 0;
	}
	if (unw_init_local2(&c, (unw_context_t *)ucontext, UNW_INIT_SIGNAL_FRAME) < 0)
		return 0;
	do {
		unw_word_t ip = 0;
		if (unw_get_reg(&c, UNW_REG_IP, &ip) < 0 || ip == 0)
			break;
		pcs[n++] = ip;
	} while (n < HS_STACK_DEPTH && unw_step(&c) > 0);
	if (n == HS_STACK_DEPTH && unw_step(&c) > 0)
		flags |= HS_STACK_TRUNCATED;
	for (unsigned i = 0; i < n; i++)
		if (!hs_module_known(pcs[i]))
			hs_module_note_pc(pcs[i], 0);
	/* the interrupted thread may be anywhere in the interpreter: read with care */
	was = hs_py_careful;
	hs_py_careful = 1;
	n = hs_py_interleave(&hs_seg, pcs, n, n > PY_ROOM ? n : PY_ROOM, &python);
	hs_py_careful = was;
	if (python)
		flags |= HS_STACK_PYTHON;
	return hs_stack_intern(&hs_seg, pcs, n, flags);
}

/*
 * ---- a new call site's stack through learnt distances (hs_stack_site_at) ----
 *
 * A site's first stack (the heap checker's, once per allocating or freeing
 * call site) was a whole libunwind unwind: ~1,300 instructions a step under
 * Debian's libunwind, 20-30 steps through a Python start's or cc1's stacks
 * (the shim's own seven or eight frames included), with the unwind's two
 * mask changes (unwind_mask.c).  Most of those frames were unwound before:
 * a new site differs from the last one in its innermost frame or two.  So
 * the stack is read as hs_chain_read reads a lock's chain, through the
 * return-address distances (pcoff, above) learnt from real unwinds: from
 * the hook's caller (site at cfa, the hook's own knowledge of its frame),
 * each return address's distance gives the next CFA and the slot below it
 * the next return address.  A return address not learnt yet is unwound by
 * libunwind, which learns it; for the innermost frame (the usual case: the
 * site itself is new) libunwind starts right there, not in heisen's frames
 * (site_unwind_short), and stops at the first return address it reaches
 * whose distance is known and from which the walk gets through to the
 * outermost frame (site_walk_ok: else a frame further out is new too, and
 * the unwind goes on).  Any other doubt -- the thread's first unwind, a
 * (site, cfa) that is not on this thread's stack, a short unwind that
 * gets nowhere in SITE_SHORT_MAX frames -- takes the whole unwind from
 * here, which learns every frame it passes (site_unwind_whole).  The frames are the ones the
 * whole unwind finds (the same distances, checked by the same slot test
 * when learnt); reads stay between the hook's frame and the highest CFA a
 * real unwind of this thread reached, inside the thread's stack bounds.
 * A return address this process has not learnt is first looked up in the
 * distances the session's other processes learnt (pcoff_get_shared,
 * unwind_share.c), and a thread's first walk, before any real unwind of
 * it, is bounded by the top of its stack instead (chain_top_shared).  A
 * doubtful return address (an alloca frame) is walked through its frame
 * pointer where its %rbp rule allows (site_fp_cfa, "frame-pointer
 * frames" above), else it is doubt.
 * docs/design.md "Stacks".
 */
/*
 * ---- frame-pointer frames: a doubtful distance read through %rbp ----
 *
 * A frame whose size changes between calls (alloca, a variable-length
 * array: glibc's _nl_load_locale under every setlocale) has no learnt
 * distance (PCOFF_DOUBT), and a walk that meets one took a whole libunwind
 * unwind each time, in every process of a session (loading libunwind for
 * that alone in as, ls, cc1, a Python start).  Such a function keeps a
 * frame pointer: its CFI says CFA = %rbp + 16 from its prologue on.  So
 * each return address of a stack through a doubtful frame also learns,
 * from the same real unwind, its %rbp rule (16 bits; the DWARF CFA and
 * register rules for %rbp that libunwind applied, read back through
 * unw_get_reg and unw_get_save_loc, never interpreted here):
 *
 *   bits 0-7  where the frame keeps its caller's %rbp: 0 nowhere (the
 *             register still holds it: the frame never wrote %rbp), d in
 *             1..255 at CFA - 8 * d;
 *   bit 8     the frame's CFA is its own %rbp + 16 at that return address;
 *   0xffff    doubt (two different rules seen, a register save, a save
 *             outside the frame).
 *
 * A walk at a doubtful return address whose rule has bit 8 finds the %rbp
 * of that frame from the hook's caller's (which the hook saved at its CFA
 * - 16, heisen's hooks keeping frame pointers) through the rules of every
 * frame in between, and takes CFA = %rbp + 16; the walk then goes on as
 * before (the return address read there must itself be learnt).  Any
 * frame in between without a rule, or a CFA outside the frame's bounds,
 * is doubt: the real unwind, as before.  Rules live in a process table
 * (pcrule, as pcoff) and in the session's .frames next to the distances
 * (unwind_share.c), so a session's later processes walk through the locale
 * frames without libunwind.  The idea is the frame-pointer fallback of
 * profilers' fast unwinders (the CFA rule kinds of a DWARF CFI row),
 * learnt per return address instead of read from .eh_frame.
 */
#define PCRULE_CAP 4096u
#define PCRULE_PROBE 16u
#define PCRULE_FP 0x100u        /* CFA = %rbp + 16 */
#define PCRULE_SAVE_MASK 0xffu  /* the caller's %rbp at CFA - 8 * d; 0: in the register still */
#define PCRULE_DOUBT 0xffffu

/* (pc << 16) | rule; pc a user-space address (< 2^47) */
static uint64_t pcrule[PCRULE_CAP];

/* Learn pc's rule into this process's table (publish: to the session's
 * too, when it is new here or turns to doubt). */
static void pcrule_note(uint64_t pc, unsigned rule, int publish)
{
	uint32_t i = pcoff_home(pc) & (PCRULE_CAP - 1);
	uint64_t want;
	if (pc == 0 || pc >> 47)
		return;
	want = pc << 16 | rule;
	for (unsigned p = 0; p < PCRULE_PROBE; p++, i = (i + 1) & (PCRULE_CAP - 1)) {
		uint64_t w = __atomic_load_n(&pcrule[i], __ATOMIC_RELAXED);
		if (w == 0 && __atomic_compare_exchange_n(&pcrule[i], &w, want, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
			if (publish)
				hs_frames_put_rule(pc, rule);
			return;
		}
		if (w >> 16 == pc) {
			if ((w & 0xffff) != rule && (w & 0xffff) != PCRULE_DOUBT) {
				__atomic_store_n(&pcrule[i], pc << 16 | PCRULE_DOUBT, __ATOMIC_RELAXED);
				hs_frames_put_rule(pc, PCRULE_DOUBT);
			}
			return;
		}
	}
	if (publish)
		hs_frames_put_rule(pc, rule);
}

/* pc's rule, from this process's table or the session's; 0 when unknown
 * or doubtful. */
static int pcrule_get(uint64_t pc, unsigned *rule)
{
	uint32_t i = pcoff_home(pc) & (PCRULE_CAP - 1);
	unsigned r;
	for (unsigned p = 0; p < PCRULE_PROBE; p++, i = (i + 1) & (PCRULE_CAP - 1)) {
		uint64_t w = __atomic_load_n(&pcrule[i], __ATOMIC_RELAXED);
		if (w == 0)
			break;
		if (w >> 16 == pc) {
			*rule = (unsigned)(w & 0xffff);
			return *rule != PCRULE_DOUBT;
		}
	}
	if (!hs_frames_get_rule(pc, &r))
		return 0;
	pcrule_note(pc, r, 0);
	*rule = r;
	return r != PCRULE_DOUBT;
}

/*
 * The rule of frame k of a real unwind: its return address at SP sp, its
 * CFA cfa (the next frame's SP), %rbp in it rbp, and where libunwind found
 * the next frame's %rbp (loc_type an unw_save_loc_type_t, -1 when
 * libunwind could not say; loc its address).
 */
static unsigned pcrule_of(uint64_t sp, uint64_t cfa, uint64_t rbp, int loc_type, uint64_t loc)
{
	unsigned rule;
	if (loc_type != UNW_SLT_MEMORY || cfa <= sp)
		return PCRULE_DOUBT;
	if (loc >= sp && loc < cfa) {
		if ((cfa - loc) & 7 || (cfa - loc) / 8 > PCRULE_SAVE_MASK)
			return PCRULE_DOUBT;
		rule = (unsigned)((cfa - loc) / 8);
	} else {
		rule = 0; /* saved further in (or the unwind's own context): this frame left it alone */
	}
	if (cfa - rbp == 16)
		rule |= PCRULE_FP;
	return rule;
}

/*
 * The CFA of frame j (return address pcs[j] at SP sps[j]) by its
 * frame pointer: %rbp of frame 0 as the hook saved it (sps[0] is the
 * hook's CFA), carried out through the rules of frames 0..j-1, and
 * frame j's rule CFA = %rbp + 16.  0 on any doubt, or when the CFA is not
 * above sps[j], at or below top and below hi.
 */
static __attribute__((noinline)) uint64_t site_fp_cfa(const uint64_t *pcs, const uint64_t *sps, unsigned j,
						      uint64_t top, uint64_t hi)
{
	uint64_t rbp = *(const uint64_t *)(uintptr_t)(sps[0] - 16), cfa;
	unsigned rule, d;
	if (!pcrule_get(pcs[j], &rule) || !(rule & PCRULE_FP) || (rule & PCRULE_SAVE_MASK) != 2)
		return 0;
	for (unsigned k = 0; k < j; k++) {
		if (!pcrule_get(pcs[k], &rule))
			return 0;
		if ((d = rule & PCRULE_SAVE_MASK) != 0) {
			uint64_t at = sps[k + 1] - 8u * d;
			if (at < sps[k] || at + 8 > sps[k + 1])
				return 0;
			rbp = *(const uint64_t *)(uintptr_t)at;
		}
	}
	cfa = rbp + 16;
	if (cfa <= sps[j] || (cfa & 7) || cfa > top || cfa >= hi)
		return 0;
	return cfa;
}

#define SITE_SHORT_MAX 32u /* frames a short unwind goes before it gives up (then the whole unwind) */

/* 1 when the walk from return address pc at CFA sp (frame n of at most cap)
 * gets through learnt distances to the outermost frame or to cap frames,
 * reading no slot above top or at or above hi. */
static int site_walk_ok(uint64_t pc, uint64_t sp, unsigned n, unsigned cap, uint64_t top, uint64_t hi)
{
	unsigned off;
	for (; n < cap; n++) {
		if (!pcoff_get(pc, &off))
			return 0;
		if (off == PCOFF_END)
			return 1;
		sp += off;
		if (sp > top || sp >= hi)
			return 0;
		pc = slot_at(sp);
	}
	return 1;
}

/* %rbp in the cursor's frame into *rbp, and where libunwind found it (the
 * save location's type into *lt, -1 when it cannot say, its address into
 * *loc): the inputs of pcrule_of. */
static inline void unw_rbp_read(unw_cursor_t *cur, uint64_t *rbp, int8_t *lt, uint64_t *loc)
{
	unw_word_t v = 0;
	unw_save_loc_t sl;
	*rbp = unw_get_reg(cur, UNW_X86_64_RBP, &v) < 0 ? 0 : v;
	memset(&sl, 0, sizeof sl);
	if (unw_get_save_loc(cur, UNW_X86_64_RBP, &sl) < 0) {
		*lt = -1;
		*loc = 0;
		return;
	}
	*lt = (int8_t)sl.type;
	*loc = sl.type == UNW_SLT_MEMORY ? sl.u.addr : 0;
}

/* Learn the distances of frames ip[0..n) at sp[0..n) (sig: signal frames),
 * as chain_unwind_steps does: each checked by the next return address
 * sitting just below the next CFA; r the last unw_step's result (0: the
 * outermost frame was reached).  When a frame's distance is doubt, the
 * %rbp rules (pcrule_of: rb, lt, loc per frame, unw_rbp_read's) of every
 * frame up to the outermost doubtful one are learnt too. */
static void site_learn(const uint64_t *ip, const uint64_t *sp, const uint8_t *sig, unsigned n, int r,
		       const uint64_t *rb, const int8_t *lt, const uint64_t *loc)
{
	unsigned doubt = 0, off;
	for (unsigned k = 0; k < n; k++) {
		if (k + 1 < n) {
			int ok = !sig[k] && !sig[k + 1] && sp[k + 1] > sp[k] &&
				 *(const uint64_t *)(uintptr_t)(sp[k + 1] - 8) == ip[k + 1];
			pcoff_learn(ip[k], ok ? sp[k + 1] - sp[k] : PCOFF_DOUBT);
			off = 0;
			if (!sig[k] && !sig[k + 1] && !pcoff_get(ip[k], &off) && off == PCOFF_DOUBT)
				doubt = k + 1;
		} else if (r == 0) {
			pcoff_learn(ip[k], PCOFF_END);
		}
	}
	for (unsigned k = 0; k < doubt; k++)
		if (!sig[k] && !sig[k + 1])
			pcrule_note(ip[k], pcrule_of(sp[k], sp[k + 1], rb[k], lt[k + 1], loc[k + 1]), 1);
	if (n && sp[n - 1] > chain_top)
		chain_top = sp[n - 1];
}

/*
 * The whole unwind from here, learning each frame's distance; up to cap
 * frames into pcs.  from 0: the shim's frames at the top dropped; else the
 * frames below the CFA from dropped (the shim's own kept: hs_stack_here's
 * walk starts in the shim, at its frame whose CFA is from).  Returns the
 * depth.
 */
static __attribute__((noinline)) unsigned site_unwind_steps(uint64_t *pcs, unsigned cap, uint64_t from)
{
	unw_context_t uc;
	unw_cursor_t cur;
	uint64_t ip[HS_STACK_DEPTH + 12 + 16], sp[HS_STACK_DEPTH + 12 + 16], rb[HS_STACK_DEPTH + 12 + 16],
		loc[HS_STACK_DEPTH + 12 + 16];
	uint8_t sig[HS_STACK_DEPTH + 12 + 16];
	int8_t lt[HS_STACK_DEPTH + 12 + 16];
	unsigned n = 0, skip = 0, out;
	int r = 1;
	if (cap > HS_STACK_DEPTH + 12)
		cap = HS_STACK_DEPTH + 12;
	if (unw_getcontext(&uc) < 0 || unw_init_local(&cur, &uc) < 0)
		return 0;
	/* the first step leaves this frame: its caller's return address first, as unw_backtrace */
	while (n - skip < cap && n < sizeof ip / sizeof ip[0] && (r = unw_step(&cur)) > 0) {
		if (unw_frame_read(&cur, &ip[n], &sp[n], &sig[n]) < 0) {
			r = -1;
			break;
		}
		unw_rbp_read(&cur, &rb[n], &lt[n], &loc[n]);
		if (n == skip && (from ? sp[n] < from : ip[n] >= hs_self_lo && ip[n] < hs_self_hi))
			skip++;
		n++;
	}
	site_learn(ip + skip, sp + skip, sig + skip, n - skip, r, rb + skip, lt + skip, loc + skip);
	out = n - skip;
	for (unsigned k = 0; k < out; k++)
		pcs[k] = ip[skip + k];
	for (unsigned k = 0; k < out; k++)
		if (!hs_module_known(pcs[k]))
			hs_module_note_pc(pcs[k], 1);
	return out;
}

static unsigned site_unwind_whole(uint64_t *pcs, unsigned cap, uint64_t from)
{
	int entered = hs_unwind_enter();
	unsigned n = site_unwind_steps(pcs, cap, from);
	hs_unwind_leave(entered);
	return n;
}

/*
 * A real unwind started at the hook's caller: return address site, stack
 * pointer cfa, and its frame pointer as the hook saved it (heisen's hooks
 * keep frame pointers: the caller's %rbp at cfa - 16).  The other
 * callee-saved registers are this frame's, not the caller's: only the
 * CFA rules of the frames stepped read registers (%rsp or %rbp in the
 * compilers' CFI, DRAP frames included), and the unwind is given up at
 * the first return address from which the learnt distances lead on
 * (site_walk_ok, its reads bounded by top as site_read's).  Frames into
 * pcs/sps, up to cap; returns the count, the last one a frame with a known distance
 * (*ended 0) or the outermost (*ended 1); 0 when the unwind did not get
 * there (no CFI, a signal frame, too deep): then the whole unwind.
 */
static __attribute__((noinline)) unsigned site_unwind_short(uint64_t *pcs, uint64_t *sps, unsigned cap, uint64_t site,
							     uint64_t cfa, uint64_t top, int *ended)
{
	unw_context_t uc;
	unw_cursor_t cur;
	uint64_t ip[SITE_SHORT_MAX], sp[SITE_SHORT_MAX], rb[SITE_SHORT_MAX], loc[SITE_SHORT_MAX];
	uint8_t sig[SITE_SHORT_MAX];
	int8_t lt[SITE_SHORT_MAX];
	unsigned n = 0, off;
	int r = 1, known = 0;
	if (unw_getcontext(&uc) < 0)
		return 0;
	uc.uc_mcontext.gregs[REG_RIP] = (greg_t)site;
	uc.uc_mcontext.gregs[REG_RSP] = (greg_t)cfa;
	uc.uc_mcontext.gregs[REG_RBP] = (greg_t) * (const uint64_t *)(uintptr_t)(cfa - 16);
	if (unw_init_local(&cur, &uc) < 0)
		return 0;
	while (n < SITE_SHORT_MAX && n < cap) {
		uint64_t i, s;
		if (unw_frame_read(&cur, &ip[n], &sp[n], &sig[n]) < 0) {
			r = -1;
			break;
		}
		unw_rbp_read(&cur, &rb[n], &lt[n], &loc[n]);
		i = ip[n];
		s = sp[n];
		n++;
		/* walked on from the first frame whose distance is known and from
		   which the walk gets through (else further out is new too: on) */
		if (n > 1 && !sig[n - 1] && pcoff_get(i, &off) && off != PCOFF_END &&
		    site_walk_ok(i, s, n - 1, cap, s > top ? s : top, hs_tls.stack_hi)) {
			known = 1;
			break;
		}
		if ((r = unw_step(&cur)) <= 0)
			break;
	}
	if (n == 0 || ip[0] != site || sp[0] != cfa)
		return 0;
	for (unsigned k = 0; k < n; k++)
		if (sig[k])
			return 0;
	site_learn(ip, sp, sig, n, known ? 1 : r, rb, lt, loc);
	if (!known && r != 0)
		return 0; /* neither a known frame nor the outermost one reached */
	for (unsigned k = 0; k < n; k++) {
		pcs[k] = ip[k];
		sps[k] = sp[k];
	}
	*ended = !known;
	return n;
}

/*
 * The stack from the hook's caller (return address site, its CFA cfa)
 * through the learnt distances, up to cap frames into pcs; 0 on any doubt
 * (the caller then unwinds whole).  A return address on the way whose
 * distance is not known (site itself, or one further out: a new caller of
 * a known function) is unwound by site_unwind_short from the hook's
 * caller, which stops past it at a frame from which the walk gets
 * through; once: a doubt after that is the whole unwind's.  self_ok: site
 * may lie in the shim (hs_stack_here's walk, which starts at its own
 * frame); else a site in the shim is refused.
 */
static unsigned site_read(uint64_t *pcs, unsigned cap, uint64_t site, uint64_t cfa, int self_ok)
{
	uint64_t sps[HS_STACK_DEPTH + 12];
	uint64_t top = chain_top, lo = hs_tls.stack_lo, hi = hs_tls.stack_hi, sp, pc;
	uint64_t here = (uint64_t)(uintptr_t)__builtin_frame_address(0);
	unsigned n = 0, off, unwound;
	int ended = 0, entered, short_done = 0;
	if (cap > HS_STACK_DEPTH + 12)
		cap = HS_STACK_DEPTH + 12;
	/* (site, cfa) on this thread's stack, above this frame and below what the
	   thread's unwinds reached; the hook's caller is not heisen */
	if (!top)
		top = chain_top_shared(cfa); /* the thread's first stack, through the session's distances */
	if (!top || hi <= lo + 1 || here < lo || top >= hi || cfa <= here || cfa > top || (cfa & 7) ||
	    (!self_ok && site >= hs_self_lo && site < hs_self_hi) || slot_at(cfa) != site)
		return 0;
	pcs[0] = site;
	sps[0] = cfa;
	n = 1;
	off = 0;
	if (!pcoff_get(site, &off) && (off != PCOFF_DOUBT || !site_fp_cfa(pcs, sps, 0, top, hi)))
		goto unwind; /* a new return address at the hook's caller: unwound from there */
walk:
	pc = pcs[n - 1];
	sp = sps[n - 1];
	unwound = ended ? n : n - 1; /* frames from libunwind, the one walked on from aside */
	while (!ended && n < cap) {
		off = 0;
		if (pcoff_get(pc, &off)) {
			if (off == PCOFF_END)
				break;
			sp += off;
		} else if (off != PCOFF_DOUBT || (sp = site_fp_cfa(pcs, sps, n - 1, top, hi)) == 0) {
			goto unwind; /* a frame further out not learnt yet, or doubt */
		}
		if (sp > top || sp >= hi)
			goto unwind;
		pc = slot_at(sp);
		pcs[n] = pc;
		sps[n] = sp;
		n++;
	}
	/* a return address with a learnt distance has its object in the module
	   table already (learnt from an unwind here, which noted it, or taken
	   from the session's table, which found it there): only the frames
	   from libunwind and the last one read (its distance not asked) */
	for (unsigned k = 0; k < n; k++)
		if ((k < unwound || k == n - 1) && !hs_module_known(pcs[k]))
			hs_module_note_pc(pcs[k], 1);
	if (!chain_top)
		chain_top = sps[n - 1]; /* the thread's first walk, through the session's distances (chain_read_native) */
	return n;
unwind:
	if (short_done)
		return 0;
	short_done = 1;
	entered = hs_unwind_enter();
	n = site_unwind_short(pcs, sps, cap, site, cfa, top, &ended);
	hs_unwind_leave(entered);
	if (n == 0)
		return 0;
	if (chain_top > top)
		top = chain_top;
	goto walk;
}

/*
 * hs_stack_here's native frames: up to cap return addresses into pcs, from
 * the one into this function's caller on (the shim's frames kept, the
 * caller trims them), the frames hs_backtrace called from the same place
 * would give.  A blocking lock's wait stack, a new lock-order edge's, a
 * heap report's were a whole libunwind unwind each (~1,150 instructions a
 * step, ~28k for a Python thread's 23 frames); now they are walked as a
 * new site's stack is (site_read): through the learnt distances from this
 * frame on, libunwind only at a return address not learnt yet (from this
 * frame when it is the first, else the whole unwind), which learns what
 * it steps, so the next stack through the same frames is walked.  The
 * shim's own frames are learnt like any other (their distances are
 * fixed: heisen has no alloca frames on these paths).  Returns the count,
 * 0 when libunwind found nothing either.
 */
static __attribute__((noinline)) unsigned here_read(uint64_t *pcs, unsigned cap)
{
	uint64_t site = (uint64_t)(uintptr_t)__builtin_return_address(0);
	uint64_t cfa = (uint64_t)(uintptr_t)__builtin_frame_address(0) + 16;
	unsigned n = site_read(pcs, cap, site, cfa, 1);
	if (n == 0)
		n = site_unwind_whole(pcs, cap, cfa);
	return n;
}
