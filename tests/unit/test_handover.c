/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_handover.c — the hand-over order of the GIL rule
 * (shim/handover.c, the _by functions with explicit thread slots and seen
 * entries): a lock released by T1, then another object released by T1 and
 * acquired by T2, is handed over to T2; through the same object with other
 * threads between them too (a pool's lock taken by T3 in between); not
 * when T1's other release came before its release of the lock, not
 * through the lock's own record, not through a chain of two objects (T1 ->
 * X -> T3, T3 -> Y -> T2: a join then a start), not when the object's
 * two records were overwritten by another object in the same table
 * entries and way; still when the other object shares one record only, or
 * took only way 0 of the hand-over object's records or of the lock's (its
 * ways keep their releases); and
 * not after the lock was forgotten (destroyed and made again).
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

/* The two table entries of addr's records, as handover.c places them (order_rec_of,
 * order_rec2_of: the top 13 bits and bits 32-44 of the address times the golden ratio). */
static uint64_t entry_of(uint64_t addr)
{
	return ((addr * 0x9e3779b97f4a7c15ull) | 1) >> 51;
}

static uint64_t entry2_of(uint64_t addr)
{
	return (((addr * 0x9e3779b97f4a7c15ull) | 1) >> 32) & 8191;
}

/* b: an address above base whose first record is base's (both = 0), or both (both = 1). */
static void colliding_in(uint64_t base, uint64_t *a, uint64_t *b, int both)
{
	*a = base;
	for (uint64_t x = base + 64;; x += 64)
		if (entry_of(x) == entry_of(base) && entry_of(x) != entry2_of(base) &&
		    (both ? entry2_of(x) == entry2_of(base) : entry2_of(x) != entry2_of(base))) {
			*b = x;
			return;
		}
}

static void colliding(uint64_t base, uint64_t *a, uint64_t *b)
{
	colliding_in(base, a, b, 1);
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

	/* the hand-over object's record overwritten by another object in its entry, in way 0
	 * and in T1's way (by slot T1 + 7: the same way): ordering lost */
	reset();
	{
		uint64_t a, b;
		colliding(0x50000, &a, &b);
		hs_order_release_by(T1, lock + 8);
		hs_order_release_by(T1, a);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(!hs_order_handed_over_by(T2, seen2, lock + 8));
		/* b's record is b's: slot T1 + 7's release of another lock before b's orders T2 after it */
		hs_order_release_by(T1 + 7, lock + 0x808);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, b);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x808));
	}

	/* another object shares one of the hand-over object's two records, its way 0 and
	 * T1's way: the other record keeps T1's release */
	reset();
	{
		uint64_t a, b;
		colliding_in(0x58000, &a, &b, 0);
		hs_order_release_by(T1, lock + 0x1808);
		hs_order_release_by(T1, a);
		hs_order_release_by(T1 + 7, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x1808));
	}

	/* another object took only way 0 of the hand-over object's record (released by T3,
	 * another way): T1's way still holds its release of a, and T2 learns it */
	reset();
	{
		uint64_t a, b;
		colliding(0x60000, &a, &b);
		hs_order_release_by(T1, lock + 0x1008);
		hs_order_release_by(T1, a);
		hs_order_release_by(T3, b);
		hs_order_acquire_by(T2, seen2, a);
		CHECK(hs_order_handed_over_by(T2, seen2, lock + 0x1008));
	}

	/* another object took way 0 of the lock's own record: its last release is T1's way,
	 * known when T1 (its last acquirer) is named; unknown otherwise (shared) */
	reset();
	{
		uint64_t l, b;
		colliding(0x70000, &l, &b);
		hs_order_release_by(T1, l);
		hs_order_release_by(T3, b);
		hs_order_release_by(T1, pool + 0x100);
		hs_order_acquire_by(T2, seen2, pool + 0x100);
		CHECK(hs_order_handed_over_from(T2, seen2, l, T1));
		CHECK(!hs_order_handed_over_by(T2, seen2, l));
		CHECK(!hs_order_handed_over_from(T2, seen2, l, T3)); /* T3 never released l */
		/* T1's way taken too (a release of b by a slot of T1's way): unknown */
		hs_order_release_by(T1 + 7, b);
		CHECK(!hs_order_handed_over_from(T2, seen2, l, T1));
	}

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

	return unit_done("test_handover");
}
