/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_graph.c — the lock-order graph (shim/lockgraph.c) on a
 * private segment: cycles of two and three locks are found once, edges are
 * stored once, lockdep's recursive-read rule drops cycles that cannot
 * deadlock and keeps those that can, generations change on destroy, and a
 * full table is counted, not overrun.  An edge index that runs out — it
 * cannot, unless written over — makes the recorder go quiet (shim/quiet.c),
 * and the invariants' predicates (shim.h) say what they promise.
 */
#include <fcntl.h>
#include "unit.h"

static const struct hs_geometry geo = {16, 4096, 64, 32, 64, 4, 16, 16, 16, 16, 16};

static uint32_t lock(struct hs_seg *s, uint64_t addr, unsigned kind)
{
	return hs_lock_id(s, addr, kind, 0, 0, 1, 1);
}

/* Add from -> to (write modes unless given); returns the finding index + 1 or 0. */
static uint32_t edge(struct hs_seg *s, uint32_t from, unsigned fm, uint32_t to, unsigned tm)
{
	int created;
	uint32_t finding;
	uint32_t e = hs_graph_add(s, from, fm, 0, 0, to, tm, 7, NULL, 42, 1, &created, &finding);
	CHECK(e != 0);
	return finding;
}

static void test_abba(void)
{
	struct hs_seg s;
	uint32_t a, b, f;
	int created;
	uint32_t finding;
	unit_segment(&s, &geo);
	a = lock(&s, 0x1000, HS_LOCK_MUTEX);
	b = lock(&s, 0x2000, HS_LOCK_MUTEX);
	CHECK(a && b && a != b);
	CHECK(lock(&s, 0x1000, HS_LOCK_MUTEX) == a); /* stable identity */
	CHECK(edge(&s, a, HS_MODE_WRITE, b, HS_MODE_WRITE) == 0);
	/* the same edge again: no new edge */
	CHECK(hs_graph_add(&s, a, 0, 0, 0, b, 0, 9, NULL, 42, 2, &created, &finding) == 1 && !created);
	f = edge(&s, b, HS_MODE_WRITE, a, HS_MODE_WRITE);
	CHECK(f == 1);
	CHECK(s.findings[0].kind == HS_FIND_POTENTIAL_DEADLOCK && s.findings[0].n == 2 && s.findings[0].ready == 1);
	CHECK(s.edges[s.findings[0].edges[0]].from == b && s.edges[s.findings[0].edges[0]].to == a);
	CHECK(s.edges[s.findings[0].edges[1]].from == a && s.edges[s.findings[0].edges[1]].to == b);
	CHECK(s.edges[1].flags & HS_EDGE_IN_CYCLE);
	/* the edges are exact: none has its held lock's call site only */
	CHECK(!(s.edges[1].flags & HS_EDGE_FROM_SITE) && s.edges[1].from_site_n == 0);
	/* the same two locks closing again in read mode: folded into the first report */
	CHECK(edge(&s, b, HS_MODE_WRITE, a, HS_MODE_READ) == 0);
	CHECK(s.hdr->tables[HS_T_FINDINGS].count == 1 && s.findings[0].count == 2);
}

static void test_three_cycle_and_consistent_order(void)
{
	struct hs_seg s;
	uint32_t a, b, c, d;
	unit_segment(&s, &geo);
	a = lock(&s, 0x10, HS_LOCK_MUTEX);
	b = lock(&s, 0x20, HS_LOCK_MUTEX);
	c = lock(&s, 0x30, HS_LOCK_MUTEX);
	d = lock(&s, 0x40, HS_LOCK_MUTEX);
	/* a consistent order among a, b, c, d: a DAG, no finding */
	CHECK(edge(&s, a, 0, b, 0) == 0);
	CHECK(edge(&s, a, 0, c, 0) == 0);
	CHECK(edge(&s, b, 0, c, 0) == 0);
	CHECK(edge(&s, c, 0, d, 0) == 0);
	CHECK(s.hdr->tables[HS_T_FINDINGS].count == 0);
	/* d -> a closes a -> b -> c -> d -> a (and a -> c -> d -> a): one report, shortest found first or not, over a cycle */
	CHECK(edge(&s, d, 0, a, 0) == 1);
	CHECK(s.findings[0].n >= 3);
	for (unsigned i = 0; i < s.findings[0].n; i++) {
		const struct hs_edge *x = &s.edges[s.findings[0].edges[i]];
		const struct hs_edge *y = &s.edges[s.findings[0].edges[(i + 1) % s.findings[0].n]];
		CHECK(x->to == y->from); /* a closed walk */
	}
}

static void test_recursive_read_rule(void)
{
	struct hs_seg s;
	uint32_t rw, m, rw2;
	unit_segment(&s, &geo);
	rw = lock(&s, 0x100, HS_LOCK_RWLOCK);
	m = lock(&s, 0x200, HS_LOCK_MUTEX);
	rw2 = lock(&s, 0x300, HS_LOCK_RWLOCK);
	/* T1: rdlock(rw) then lock(m); T2: lock(m) then rdlock(rw) on a reader-preferring rwlock:
	   T2's read cannot queue behind T1's read, so no deadlock */
	CHECK(edge(&s, rw, HS_MODE_READ, m, HS_MODE_WRITE) == 0);
	CHECK(edge(&s, m, HS_MODE_WRITE, rw, HS_MODE_READ_RECURSIVE) == 0);
	CHECK(s.hdr->tables[HS_T_FINDINGS].count == 0);
	/* a writer-preferring read can queue behind a writer: that one is a deadlock */
	CHECK(edge(&s, m, HS_MODE_WRITE, rw, HS_MODE_READ) == 1);
	/* two rwlocks, read-only in both orders: never blocks */
	CHECK(edge(&s, rw2, HS_MODE_READ, rw, HS_MODE_READ_RECURSIVE) == 0);
	CHECK(edge(&s, rw, HS_MODE_READ, rw2, HS_MODE_READ_RECURSIVE) == 0);
	/* wrlock(rw2) while holding rw for reading: the other thread's read of rw
	   still cannot block (rw is only ever held for reading): no deadlock */
	CHECK(edge(&s, rw, HS_MODE_READ, rw2, HS_MODE_WRITE) == 0);
	/* once rw is held for writing while waiting for rw2, the recursive read
	   of rw can block behind it: rw2 -> rw -> rw2 is a deadlock */
	CHECK(edge(&s, rw, HS_MODE_WRITE, rw2, HS_MODE_WRITE) == 2);
}

static void test_generations_and_full_tables(void)
{
	struct hs_seg s;
	uint32_t a, a2, ids[64];
	unsigned n = 0;
	unit_segment(&s, &geo);
	a = lock(&s, 0x5000, HS_LOCK_MUTEX);
	CHECK(s.locks[a].gen == 1);
	hs_lock_forget(&s, 0x5000);
	CHECK(s.locks[a].flags & HS_LOCKF_DEAD);
	a2 = lock(&s, 0x5000, HS_LOCK_MUTEX);
	CHECK(a2 != a && s.locks[a2].gen == 2 && s.locks[a2].addr == 0x5000);
	/* geo.locks == 32: id 0 reserved, two used; the rest fill up and then are refused */
	for (uint64_t addr = 0x9000; n < 64; addr += 16)
		ids[n++] = lock(&s, addr, HS_LOCK_MUTEX);
	CHECK(ids[0] != 0 && ids[28] != 0 && ids[29] == 0 && ids[63] == 0);
	CHECK(s.hdr->tables[HS_T_LOCKS].dropped == 64 - 29);
	CHECK(s.hdr->tables[HS_T_LOCKS].count == 32);
}

static void test_stack_interning(void)
{
	struct hs_seg s;
	uint64_t p1[3] = {1, 2, 3}, p2[3] = {1, 2, 4};
	uint32_t x, y;
	unit_segment(&s, &geo);
	x = hs_stack_intern(&s, p1, 3, 0);
	y = hs_stack_intern(&s, p2, 3, 0);
	CHECK(x && y && x != y);
	CHECK(hs_stack_intern(&s, p1, 3, 0) == x);
	CHECK(hs_stack_intern(&s, p1, 3, HS_STACK_SITE) != x); /* flags are part of identity */
	CHECK(s.stacks[x].depth == 3 && s.stacks[x].pc[2] == 3 && s.stacks[x].ready == 1);
}

/* A ring of 24 locks (longer than HS_CYCLE_MAX): found whole, through the cycle-edge table. */
static void test_long_cycle(void)
{
	struct hs_seg s;
	uint32_t ids[24];
	const struct hs_finding *f;
	unit_segment(&s, &geo);
	for (unsigned i = 0; i < 24; i++)
		ids[i] = lock(&s, 0x100000 + 64 * i, HS_LOCK_MUTEX);
	for (unsigned i = 0; i + 1 < 24; i++)
		CHECK(edge(&s, ids[i], 0, ids[i + 1], 0) == 0);
	CHECK(edge(&s, ids[23], 0, ids[0], 0) == 1);
	f = &s.findings[0];
	CHECK(f->n == 24 && f->offset + 24 <= s.hdr->tables[HS_T_CYCLE_EDGES].count);
	for (unsigned i = 0; i < 24; i++) {
		const uint64_t *ce = (const uint64_t *)((char *)s.hdr + s.hdr->tables[HS_T_CYCLE_EDGES].offset);
		const struct hs_edge *x = &s.edges[ce[f->offset + i]];
		const struct hs_edge *y = &s.edges[ce[f->offset + (i + 1) % 24]];
		CHECK(x->to == y->from);
		if (i < HS_CYCLE_MAX)
			CHECK(f->edges[i] == ce[f->offset + i]);
	}
}

/* A destroyed lock's id is its class's: the next lock first taken at the same stack gets it back. */
static void test_lock_classes_reuse_dead_ids(void)
{
	struct hs_seg s;
	uint32_t first, id;
	unit_segment(&s, &geo);
	first = hs_lock_id(&s, 0x5000, HS_LOCK_MUTEX, 0, 77, 1, 1);
	CHECK(first != 0);
	for (uint64_t i = 0; i < 1000; i++) {
		hs_lock_forget(&s, 0x5000 + 64 * (i % 7));
		id = hs_lock_id(&s, 0x5000 + 64 * ((i + 1) % 7), HS_LOCK_MUTEX, 0, 77, 1, 1);
		CHECK(id == first);
	}
	CHECK(s.hdr->tables[HS_T_LOCKS].count == 2 && s.hdr->tables[HS_T_LOCKS].dropped == 0);
	CHECK(s.hdr->tables[HS_T_LOCK_INDEX].dropped == 0);
	CHECK(!(s.locks[first].flags & HS_LOCKF_DEAD) && s.locks[first].gen > 1);
	/* another stack: another class */
	CHECK(hs_lock_id(&s, 0x7000, HS_LOCK_MUTEX, 0, 78, 1, 1) != first);
	/* two live locks of one class are two locks */
	CHECK(hs_lock_id(&s, 0x8000, HS_LOCK_MUTEX, 0, 77, 1, 1) != first);
}

/* A cycle never passes through one lock twice: G -> X -> G -> Y -> G is G -> Y -> G. */
static void test_cycle_visits_each_lock_once(void)
{
	struct hs_seg s;
	uint32_t g, x, y;
	const struct hs_finding *f;
	unit_segment(&s, &geo);
	g = lock(&s, 0xa000, HS_LOCK_MUTEX);
	x = lock(&s, 0xb000, HS_LOCK_MUTEX);
	y = lock(&s, 0xc000, HS_LOCK_MUTEX);
	CHECK(edge(&s, g, 0, y, 0) == 0);
	CHECK(edge(&s, g, 0, x, 0) == 0);
	CHECK(edge(&s, x, 0, g, 0) == 1); /* g <-> x */
	CHECK(edge(&s, y, 0, g, 0) == 2); /* g <-> y, not through x */
	f = &s.findings[1];
	CHECK(f->n == 2);
	for (unsigned i = 0; i < f->n; i++)
		CHECK(s.edges[f->edges[i]].from != x && s.edges[f->edges[i]].to != x);
}

/* The edge index written over (a stray memset of the program): a probe for a
 * new edge runs out, the recorder goes quiet — the header says suspect,
 * hs_recording is 0, one line on stderr however often it happens — and
 * nothing is overrun. */
static void test_overwritten_edge_index_goes_quiet(void)
{
	struct hs_seg s;
	uint32_t a, b, c, d;
	int pipefd[2], saved;
	char buf[1024];
	ssize_t n;
	unit_segment(&s, &geo);
	hs_recording = 1;
	a = lock(&s, 0x1000, HS_LOCK_MUTEX);
	b = lock(&s, 0x2000, HS_LOCK_MUTEX);
	c = lock(&s, 0x3000, HS_LOCK_MUTEX);
	d = lock(&s, 0x4000, HS_LOCK_MUTEX);
	CHECK(edge(&s, a, 0, b, 0) == 0);
	CHECK(!(s.hdr->flags & HS_HDR_SUSPECT));
	memset(s.edge_index, 0xa5,
	       (size_t)s.hdr->tables[HS_T_EDGE_INDEX].capacity * s.hdr->tables[HS_T_EDGE_INDEX].entry_size);
	CHECK(pipe2(pipefd, O_NONBLOCK) == 0);
	saved = dup(2);
	dup2(pipefd[1], 2);
	CHECK(hs_edge_find(&s, hs_edge_key(c, d, 0, 0)) == 0);
	CHECK(hs_edge_find(&s, hs_edge_key(d, c, 0, 0)) == 0);
	dup2(saved, 2);
	close(saved);
	close(pipefd[1]);
	n = read(pipefd[0], buf, sizeof buf - 1);
	close(pipefd[0]);
	buf[n > 0 ? n : 0] = '\0';
	CHECK(s.hdr->flags & HS_HDR_SUSPECT);
	CHECK(__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) == 0);
	CHECK(strstr(buf, "went quiet") && strstr(buf, "lockgraph.c"));
	CHECK(strchr(buf, '\n') == buf + n - 1); /* one line: said once */
}

/* The predicates the recorder asserts: true of every state a correct shim
 * makes, false of the ones it cannot. */
static void test_invariant_predicates(void)
{
	struct hs_seg s;
	unit_segment(&s, &geo);
	memcpy(s.hdr->magic, HS_MAGIC, HS_MAGIC_LEN); /* as segment.c publishes it */
	s.hdr->abi_version = HS_ABI_VERSION;
	CHECK(hs_header_intact(s.hdr));
	s.hdr->magic[0] ^= 1;
	CHECK(!hs_header_intact(s.hdr));
	s.hdr->magic[0] ^= 1;
	s.hdr->abi_version++;
	CHECK(!hs_header_intact(s.hdr));
	CHECK(!hs_header_intact(NULL));
	CHECK(hs_held_index_ok(1, 0) && hs_held_index_ok(HS_HELD_MAX, HS_HELD_MAX - 1));
	CHECK(!hs_held_index_ok(0, 0) && !hs_held_index_ok(3, 3) && !hs_held_index_ok(3, -1));
	CHECK(!hs_held_index_ok(HS_HELD_MAX + 1, 0));
	/* ring of 16: position 40's slot last held record 24 (seq 25) or was never written */
	CHECK(hs_ring_head_ok(0, 0) && hs_ring_head_ok(25, 40) && hs_ring_head_ok(0, 40));
	CHECK(!hs_ring_head_ok(41, 40)); /* the head went back */
	CHECK(!hs_index_may_fill(hs_index_capacity(100), 100)); /* twice the table */
	CHECK(hs_index_may_fill(hs_index_capacity(100), hs_index_capacity(100)));
}

/* An edge made from a holding taken on the leaf path has its held lock's
 * call site only (HS_EDGE_FROM_SITE, the count kept); the same order seen
 * again with an exact stack rewrites it; a second site-only sighting does
 * not undo that. */
static void test_edge_from_site_then_exact(void)
{
	struct hs_seg s;
	uint32_t a, b, e, finding;
	int created;
	unit_segment(&s, &geo);
	a = lock(&s, 0x1000, HS_LOCK_MUTEX);
	b = lock(&s, 0x2000, HS_LOCK_MUTEX);
	e = hs_graph_add(&s, a, 0, 11, 64, b, 0, 12, NULL, 42, 1, &created, &finding);
	CHECK(e && created);
	CHECK((s.edges[e].flags & HS_EDGE_FROM_SITE) && s.edges[e].from_site_n == 64 && s.edges[e].from_stack == 11);
	/* again from the site only: still marked, the first stack kept */
	CHECK(hs_graph_add(&s, a, 0, 13, 64, b, 0, 12, NULL, 42, 2, &created, &finding) == e && !created);
	CHECK((s.edges[e].flags & HS_EDGE_FROM_SITE) && s.edges[e].from_stack == 11);
	/* exact: rewritten, unmarked */
	CHECK(hs_graph_add(&s, a, 0, 21, 0, b, 0, 12, NULL, 42, 3, &created, &finding) == e && !created);
	CHECK(!(s.edges[e].flags & HS_EDGE_FROM_SITE) && s.edges[e].from_site_n == 0 && s.edges[e].from_stack == 21);
	/* a later site-only sighting leaves the exact stack */
	CHECK(hs_graph_add(&s, a, 0, 13, 64, b, 0, 12, NULL, 42, 4, &created, &finding) == e && !created);
	CHECK(!(s.edges[e].flags & HS_EDGE_FROM_SITE) && s.edges[e].from_stack == 21);
}

/* The free filter (shim.h hs_lock_mem_seen) against the plain answer — is a
 * noted lock address in [lo, hi)? (to the 64-byte granule up to 4 KiB; beyond,
 * to the page, never missing one) — for every block of 1 to 4,200 bytes at
 * every 8-byte start around locks placed at a 64-byte granule's start and
 * end and across a bitmap word's end (4 KiB of granules); then
 * hs_lock_forget_range forgets exactly the locks in the freed range, which
 * the filter's word boundaries must not hide.  First in main: no other
 * test's locks are noted yet. */
static void test_free_filter_granules(void)
{
	struct hs_seg s;
	const uint64_t base = 0x5a300000; /* a bitmap word starts at base (4 KiB aligned) */
	const uint64_t at[] = {base + 0x40, base + 0x78, base + 0xff8, base + 0x1000, base + 0x1f40, base + 0x3008};
	const unsigned n = sizeof at / sizeof at[0];
	uint32_t id[sizeof at / sizeof at[0]];
	unit_segment(&s, &geo);
	for (unsigned i = 0; i < n; i++)
		CHECK((id[i] = lock(&s, at[i], HS_LOCK_MUTEX)) != 0);
	for (uint64_t lo = base - 4096; lo < base + 0x3100; lo += 8)
		for (uint64_t len = 1; len <= 4200; len += len < 130 ? 1 : 61) {
			int want = 0;
			for (unsigned i = 0; i < n; i++)
				want |= at[i] >= lo && at[i] < lo + len;
			/* exact within granules: a lock's granule noted means every range
			   reaching into that granule answers 1 */
			int granule = 0;
			for (unsigned i = 0; i < n; i++)
				granule |= (at[i] >> 6) >= (lo >> 6) && (at[i] >> 6) <= ((lo + len - 1) >> 6);
			/* up to 4 KiB exact to the granule; beyond, to the page: never a miss */
			if (len <= 4096)
				CHECK(hs_lock_mem_seen(lo, lo + len) == granule);
			else
				CHECK(!want || hs_lock_mem_seen(lo, lo + len));
			CHECK(!want || granule);
		}
	/* an empty range asks lo's granule */
	CHECK(hs_lock_mem_seen(base + 0x40, base + 0x40) == 1 && hs_lock_mem_seen(base + 0x80, base + 0x80) == 0);
	/* a 4 KiB block across a bitmap word's end forgets the two locks in it, not its neighbours */
	hs_lock_forget_range(&s, base + 0xf80, base + 0x1f80);
	CHECK(hs_lock_find(&s, at[0]) == id[0] && hs_lock_find(&s, at[1]) == id[1] && hs_lock_find(&s, at[5]) == id[5]);
	CHECK(hs_lock_find(&s, at[2]) == 0 && hs_lock_find(&s, at[3]) == 0 && hs_lock_find(&s, at[4]) == 0);
	/* a block starting mid-granule, its lock at the granule's last 8 bytes */
	hs_lock_forget_range(&s, base + 0x50, base + 0x80);
	CHECK(hs_lock_find(&s, at[0]) == id[0] && hs_lock_find(&s, at[1]) == 0);
	/* a long range (the page bitmap and the table scan) */
	hs_lock_forget_range(&s, base, base + 0x8000);
	CHECK(hs_lock_find(&s, at[0]) == 0 && hs_lock_find(&s, at[5]) == 0);
}

int main(void)
{
	test_free_filter_granules();
	test_edge_from_site_then_exact();
	test_cycle_visits_each_lock_once();
	test_long_cycle();
	test_lock_classes_reuse_dead_ids();
	test_abba();
	test_three_cycle_and_consistent_order();
	test_recursive_read_rule();
	test_generations_and_full_tables();
	test_stack_interning();
	test_invariant_predicates();
	test_overwritten_edge_index_goes_quiet(); /* last: the recorder stays quiet */
	return unit_done("test_graph");
}
