/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_handover.c — the hand-over order of the GIL rule
 * (shim/handover.c, the _by functions with explicit thread slots and seen
 * entries): a lock released by T1, then another object released by T1 and
 * acquired by T2, is handed over to T2; through the same object with other
 * threads between them too (a pool's lock taken by T3 in between); not
 * when T1's other release came before its release of the lock, not
 * through the lock's own record, not through a chain of two objects (T1 ->
 * X -> T3, T3 -> Y -> T2: a join then a start); records taken in order
 * from the pool and the last one given back taken first (the pages
 * written follow the objects in use); another object in the same index
 * buckets keeps its own record (the ordering kept); a record given back
 * emptied, the epoch of the threads' cached records moved on; an object whose two
 * buckets are full has none (its orderings lost: shared) until one
 * empties; once the pool is used up, records placed by the key and shared:
 * an ordering lost when another object took way 0 and the slot's way of
 * the hand-over object, kept when it shares its record but took way 0
 * only (its ways keep their releases), a lock's last release read from
 * its last acquirer's way; and not after the lock was forgotten
 * (destroyed and made again).
 */
#include "unit.h"
#include "../../shim/handover.h"

enum { T1 = 3, T2 = 5, T3 = 9 };

static uint64_t seen1[HS_ORDER_SEEN], seen2[HS_ORDER_SEEN], seen3[HS_ORDER_SEEN];

static void reset(void)
{
	memset(seen1, 0, sizeof seen1);
	memset(seen2, 0, sizeof seen2);
	memset(seen3, 0, sizeof seen3);
}

static uint64_t key_of(uint64_t addr)
{
	return (addr * 0x9e3779b97f4a7c15ull) | 1;
}

/* addr's index buckets, as handover.c places them (order_bucket: bits 53..63 and 23..33 of the key) */
static unsigned bucket_of(uint64_t addr, int k)
{
	return k ? (unsigned)(key_of(addr) >> 23) & (ORDER_IDX_BUCKETS - 1) : (unsigned)(key_of(addr) >> 53);
}

/* addr's index entry (handover.c order_find), 0 when it has none */
static uint32_t entry_of(uint64_t addr)
{
	uint32_t tag = (uint32_t)(key_of(addr) >> 21) & ORDER_ENTRY_TAG;
	for (int k = 0; k < 2; k++)
		for (unsigned i = 0; i < ORDER_IDX_WAYS; i++) {
			uint32_t e = hs_order_idx[bucket_of(addr, k)][i];
			if (e && (e & ORDER_ENTRY_TAG) == tag)
				return e;
		}
	return 0;
}

/* the record a key is placed at once the pool is used up (handover.c order_claim) */
static uint32_t fixed_of(uint64_t addr)
{
	uint32_t r = (uint32_t)(key_of(addr) >> 52);
	return r ? r : 1;
}

static int bucket_full(unsigned b)
{
	for (unsigned i = 0; i < ORDER_IDX_WAYS; i++)
		if (!hs_order_idx[b][i])
			return 0;
	return 1;
}

/* An address above base (by 64s, not base) whose placement f(x) is f(base)'s. */
static uint64_t same_as(uint64_t base, uint64_t (*f)(uint64_t))
{
	for (uint64_t x = base + 64;; x += 64)
		if (f(x) == f(base))
			return x;
}

static uint64_t first_bucket(uint64_t a)
{
	return bucket_of(a, 0);
}

static uint64_t fixed_rec(uint64_t a)
{
	return fixed_of(a);
}

int main(void)
{
	uint64_t lock = 0x10000, pool = 0x20000, x = 0x30000, y = 0x40000;

	/* the pool's hand-over: T1 releases the connection's lock, then the pool's; T2 takes the pool's */
	reset();
	hs_order_release_by(T1, lock);
	hs_order_release_by(T1, pool);
	hs_order_acquire_by(T2, seen2, pool);
	CHECK(hs_order_handed_over_by(T2, seen2, lock));

	/* T1's other release came first: not ordered after the lock's release */
	reset();
	lock += 8, pool += 8;
	hs_order_release_by(T1, pool);
	hs_order_acquire_by(T2, seen2, pool);
	hs_order_release_by(T1, lock);
	CHECK(!hs_order_handed_over_by(T2, seen2, lock));

	/* the lock's own record orders nothing: learnt only after the check */
	reset();
	lock += 8;
	hs_order_release_by(T1, lock);
	hs_order_acquire_by(T2, seen2, lock);
	hs_order_release_by(T2, lock);
	hs_order_acquire_by(T1, seen1, lock);
	/* T2 released it last and T1 learnt that release from the lock itself: equal, not after */
	CHECK(!hs_order_handed_over_by(T1, seen1, lock));

	/* through one object, another thread between them: still a hand-over */
	reset();
	lock += 8, pool += 8;
	hs_order_release_by(T1, lock);
	hs_order_release_by(T1, pool);
	hs_order_acquire_by(T3, seen3, pool);
	hs_order_release_by(T3, pool);
	hs_order_acquire_by(T2, seen2, pool);
	CHECK(hs_order_handed_over_by(T2, seen2, lock));

	/* through two objects (T1 -> x -> T3 -> y -> T2): not a hand-over */
	reset();
	lock += 8;
	hs_order_release_by(T1, lock);
	hs_order_release_by(T1, x);
	hs_order_acquire_by(T3, seen3, x);
	hs_order_release_by(T3, y);
	hs_order_acquire_by(T2, seen2, y);
	CHECK(!hs_order_handed_over_by(T2, seen2, lock));

	/* a forgotten lock (destroyed, made again at the same address) has no record: shared */
	reset();
	lock += 16, pool += 8;
	hs_order_release_by(T1, lock);
	hs_order_release_by(T1, pool);
	hs_order_acquire_by(T2, seen2, pool);
	hs_order_forget(lock);
	CHECK(!hs_order_handed_over_by(T2, seen2, lock));

	/* a slot's count goes on across the threads that reuse it: a new thread in T1's slot
	 * releasing the pool after T1's lock release still orders (T1 ended before it came) */
	reset();
	lock += 8, pool += 8;
	hs_order_release_by(T1, lock);
	hs_order_release_by(T1, pool); /* ... T1 ends, another thread takes slot T1 */
	hs_order_release_by(T1, x + 8);
	hs_order_acquire_by(T2, seen2, x + 8);
	CHECK(hs_order_handed_over_by(T2, seen2, lock));

	/* records are taken from the start of the pool, in order, and the last one given back
	 * is the next one taken: the pages written follow the objects in use */
	reset();
	{
		const struct order_rec *r0 = hs_order_rec_of(lock), *r1, *r2;
		CHECK(r0 != NULL && r0 - hs_order_tab < 32); /* a few objects so far: the pool's first page */
		hs_order_release_by(T1, 0x90000);
		r1 = hs_order_rec_of(0x90000);
		hs_order_forget(0x90000);
		CHECK(hs_order_rec_of(0x90000) == NULL);
		hs_order_release_by(T1, 0x98000);
		r2 = hs_order_rec_of(0x98000);
		CHECK(r1 != NULL && r2 == r1);
		hs_order_forget(0x98000);
	}

	/* an object that ends gives its record back emptied whole, and the epoch moves on (the
	 * threads' records cached through its address are not used again); one that had no
	 * record changes nothing */
	reset();
	{
		uint32_t e0 = hs_order_epoch.n;
		const struct order_rec *r;
		int empty = 1;
		hs_order_release_by(T1, 0xb0000);
		r = hs_order_rec_of(0xb0000);
		hs_order_forget(0xb0008);
		CHECK(hs_order_epoch.n == e0);
		hs_order_forget(0xb0000);
		CHECK(hs_order_epoch.n == e0 + 1);
		for (unsigned w = 0; w <= ORDER_WAYS; w++)
			empty &= !r->w[w].chk && !r->w[w].val;
		CHECK(r != NULL && empty);
	}

	/* another object in the hand-over object's index bucket, released by a slot of T1's way,
	 * has its own record: the ordering is kept */
	reset();
	{
		uint64_t a = 0x50000, b = same_as(a, first_bucket);
		hs_order_release_by(T1, lock + 0x808);
		hs_order_release_by(T1, a);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(hs_order_rec_of(a) && hs_order_rec_of(b) && hs_order_rec_of(a) != hs_order_rec_of(b));
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x808));
	}

	/* both of an object's buckets full of objects in use: it has no record, its ordering is
	 * lost (shared); once one of them ends, its next releases have a record again */
	reset();
	{
		uint64_t a = 0xa0000, fill[2 * ORDER_IDX_WAYS];
		unsigned n = 0;
		for (int k = 0; k < 2; k++)
			for (uint64_t x = 0x1000000; !bucket_full(bucket_of(a, k)); x += 64)
				if (bucket_of(x, 0) == bucket_of(a, k) && n < 2 * ORDER_IDX_WAYS) {
					hs_order_release_by(T3, x);
					fill[n++] = x;
				}
		hs_order_release_by(T1, lock + 0x1808);
		hs_order_release_by(T1, a);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(entry_of(a) == 0);
		CHECK(!hs_order_handed_over_by(T2, seen2, lock + 0x1808));
		hs_order_forget(fill[0]);
		hs_order_release_by(T1, lock + 0x2808);
		hs_order_release_by(T1, a);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(entry_of(a) != 0);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x2808));
		for (unsigned i = 1; i < n; i++)
			hs_order_forget(fill[i]);
		hs_order_forget(a);
	}

	/* the pool used up (ORDER_RECS - 1 objects in use): the next objects' records are
	 * placed by their keys and shared, as in a direct-mapped table */
	{
		uint64_t x = 0x40000000;
		do
			hs_order_release_by(T3, x += 64);
		while (!(entry_of(x) & ORDER_ENTRY_FIXED));
		CHECK((entry_of(x) & ORDER_ENTRY_REC) == fixed_of(x));
	}

	/* a shared record: another object took way 0 and T1's way (by slot T1 + 7: the same
	 * way): the ordering is lost */
	reset();
	{
		uint64_t a = 0x50000000, b = same_as(a, fixed_rec);
		hs_order_release_by(T1, lock + 0x3808);
		hs_order_release_by(T1, a);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(entry_of(a) & ORDER_ENTRY_FIXED);
		CHECK(!hs_order_handed_over_by(T2, seen2, lock + 0x3808));
		/* b's words are b's: slot T1 + 7's release of another lock before b's orders T2 after it */
		hs_order_release_by(T1 + 7, lock + 0x4808);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, b);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x4808));
	}

	/* another object took only way 0 of the hand-over object's shared record (released by
	 * T3, another way): T1's way still holds its release of a, and T2 learns it */
	reset();
	{
		uint64_t a = 0x60000000, b = same_as(a, fixed_rec);
		hs_order_release_by(T1, lock + 0x5808);
		hs_order_release_by(T1, a);
		hs_order_release_by(T3, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x5808));
	}

	/* another object took way 0 of the lock's own shared record: its last release is T1's
	 * way, known when T1 (its last acquirer) is named; unknown otherwise (shared) */
	reset();
	{
		uint64_t l = 0x70000000, b = same_as(l, fixed_rec), p = 0x70001000;
		while (fixed_of(p) == fixed_of(l))
			p += 64;
		hs_order_release_by(T1, l);
		hs_order_release_by(T3, b);
		hs_order_release_by(T1, p);
		hs_order_acquire_by(T2, seen2, p);
		CHECK(hs_order_handed_over_from(T2, seen2, l, T1));
		CHECK(!hs_order_handed_over_by(T2, seen2, l));
		CHECK(!hs_order_handed_over_from(T2, seen2, l, T3)); /* T3 never released l */
		/* T1's way taken too (a release of b by a slot of T1's way): unknown */
		hs_order_release_by(T1 + 7, b);
		CHECK(!hs_order_handed_over_from(T2, seen2, l, T1));
	}

	return unit_done("test_handover");
}
