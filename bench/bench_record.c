/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_record.c — what the pieces of a hook cost, in isolation:
 * hs_rec() (shim/shim.h, inline) appending to a private ring the way the
 * hooks do, with and without the hs_now() timestamp every hook takes;
 * hs_now() alone and two cheaper clocks for comparison; and the three
 * lock-free lookups an uncontended acquisition makes (call site -> stack id,
 * address -> lock id, edge key -> edge id), on a private segment of the
 * default geometry, every key already known (the steady state).  No hooks:
 * each piece alone.  Prints one line per case, "name ns_per_op", the median
 * of several repetitions.  How to run it and the results: bench/README.md.
 * Design: docs/design.md "Cost".
 *
 * Usage: bench_record [N_RECORDS] [RING_RECORDS]
 *   N_RECORDS     records per repetition (default 20000000)
 *   RING_RECORDS  ring size, a power of two (default 256, HEISEN_RING's default)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_RDTSC 1
#endif

#include "../shim/shim.h"
#include "bench.h"

#define REPS 5
#define KEYS 16 /* distinct locks / sites / edges the lookups cycle through */


/* The shape of the hooks' LOCK_ACQUIRED record, with a caller-supplied clock. */
__attribute__((noinline)) static void run_rec(struct hs_tls *t, uint64_t n, int stamp)
{
	for (uint64_t i = 0; i < n; i++) {
		uint64_t now = stamp ? hs_now() : i;
		hs_rec(t, now, HS_REC_LOCK_ACQUIRED, 7, 0x7f0000001000ull + (i & 0xff0), 3, (uint64_t)HS_MODE_WRITE);
	}
}

__attribute__((noinline)) static uint64_t run_clock(uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += hs_now();
	return sum;
}

__attribute__((noinline)) static uint64_t run_coarse(uint64_t n)
{
	struct timespec ts;
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++) {
		clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
		sum += (uint64_t)ts.tv_nsec;
	}
	return sum;
}

#ifdef HAVE_RDTSC
__attribute__((noinline)) static uint64_t run_rdtsc(uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += __rdtsc();
	return sum;
}
#endif

/* The segment the lookups run on: hs_seg, as in the shim (hs_stack_site uses it). */
static int segment_setup(void)
{
	struct hs_geometry g = HS_GEOMETRY_DEFAULT;
	struct hs_header probe, *h;
	hs_layout(&probe, &g);
	h = mmap(NULL, probe.segment_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED)
		return -1;
	hs_layout(h, &g);
	/* entry 0 of these tables means "none" */
	h->tables[HS_T_STRINGS].count = 1;
	h->tables[HS_T_STACKS].count = 1;
	h->tables[HS_T_LOCKS].count = 1;
	h->tables[HS_T_EDGES].count = 1;
	return hs_seg_bind(&hs_seg, h, probe.segment_size);
}

static uint64_t lock_addr[KEYS], site_pc[KEYS], edge_key[KEYS];

__attribute__((noinline)) static uint64_t run_lock_id(uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += hs_lock_id(&hs_seg, lock_addr[i % KEYS], HS_LOCK_MUTEX, 0, 1, 1, 0);
	return sum;
}

__attribute__((noinline)) static uint64_t run_site(uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += hs_stack_site(site_pc[i % KEYS]);
	return sum;
}

__attribute__((noinline)) static uint64_t run_edge(uint64_t n)
{
	uint64_t sum = 0;
	for (uint64_t i = 0; i < n; i++)
		sum += hs_edge_find(&hs_seg, edge_key[i % KEYS]);
	return sum;
}

/* Make every key known, so the timed loops measure the lookup that hits. */
static int lookups_setup(void)
{
	uint32_t ids[KEYS];
	if (segment_setup() != 0)
		return -1;
	for (int k = 0; k < KEYS; k++) {
		lock_addr[k] = 0x7f0000001000ull + 64u * (uint64_t)k;
		site_pc[k] = 0x400000ull + 0x40u * (uint64_t)k;
		ids[k] = hs_lock_id(&hs_seg, lock_addr[k], HS_LOCK_MUTEX, 0, 1, 1, 0);
		if (!ids[k] || !hs_stack_site(site_pc[k]))
			return -1;
	}
	for (int k = 0; k < KEYS; k++) {
		int created;
		uint32_t finding, to = ids[(k + 1) % KEYS];
		if (!hs_graph_add(&hs_seg, ids[k], HS_MODE_WRITE, 1, 0, to, HS_MODE_WRITE, 1, NULL, 1, 0, &created,
				  &finding))
			return -1;
		edge_key[k] = hs_edge_key(ids[k], to, HS_MODE_WRITE, HS_MODE_WRITE);
	}
	for (int k = 0; k < KEYS; k++)
		if (hs_lock_id(&hs_seg, lock_addr[k], HS_LOCK_MUTEX, 0, 1, 1, 0) != ids[k] ||
		    !hs_edge_find(&hs_seg, edge_key[k]))
			return -1;
	return 0;
}

static double time_one(uint64_t (*fn)(uint64_t), uint64_t n, volatile uint64_t *sink)
{
	double t0 = bench_now_s();
	*sink += fn(n);
	return (bench_now_s() - t0) * 1e9 / (double)n;
}

int main(int argc, char **argv)
{
	uint64_t n = argc > 1 ? strtoull(argv[1], NULL, 0) : 20000000ull;
	uint64_t ring_records = argc > 2 ? strtoull(argv[2], NULL, 0) : 256;
	struct hs_ring_header *ring;
	struct hs_tls t;
	enum { C_REC, C_REC_NOW, C_NOW, C_COARSE, C_RDTSC, C_SITE, C_LOCK, C_EDGE, NCASES };
	static const char *const names[NCASES] = {"hs_rec", "hs_rec+hs_now", "hs_now", "clock_coarse", "rdtsc",
						  "site_lookup", "lock_id_lookup", "edge_lookup"};
	double res[NCASES][REPS];
	int have[NCASES] = {1, 1, 1, 1, 0, 1, 1, 1};
	volatile uint64_t sink = 0;

	if (n == 0 || ring_records == 0 || (ring_records & (ring_records - 1))) {
		fprintf(stderr, "usage: bench_record [N_RECORDS] [RING_RECORDS (power of two)]\n");
		return 2;
	}
	ring = calloc(1, sizeof *ring + ring_records * sizeof(struct hs_record));
	if (!ring) {
		perror("calloc");
		return 2;
	}
	memset(&t, 0, sizeof t);
	t.ring = ring;
	t.recs = (struct hs_record *)(ring + 1);
	t.ring_mask = ring_records - 1;

#ifdef HAVE_RDTSC
	have[C_RDTSC] = 1;
#endif
	if (lookups_setup() != 0) {
		fprintf(stderr, "bench_record: could not set up the lookups' segment\n");
		return 2;
	}
	run_rec(&t, n / 10, 1); /* warm up: fault the ring in, settle the clock */
	for (int r = 0; r < REPS; r++) {
		double t0 = bench_now_s();
		run_rec(&t, n, 0);
		double t1 = bench_now_s();
		run_rec(&t, n, 1);
		double t2 = bench_now_s();
		res[C_REC][r] = (t1 - t0) * 1e9 / (double)n;
		res[C_REC_NOW][r] = (t2 - t1) * 1e9 / (double)n;
		res[C_NOW][r] = time_one(run_clock, n, &sink);
		res[C_COARSE][r] = time_one(run_coarse, n, &sink);
#ifdef HAVE_RDTSC
		res[C_RDTSC][r] = time_one(run_rdtsc, n, &sink);
#endif
		res[C_SITE][r] = time_one(run_site, n, &sink);
		res[C_LOCK][r] = time_one(run_lock_id, n, &sink);
		res[C_EDGE][r] = time_one(run_edge, n, &sink);
	}
	/* every record was written: the head counts them all */
	if (__atomic_load_n(&ring->head, __ATOMIC_RELAXED) != n / 10 + 2ull * REPS * n) {
		fprintf(stderr, "bench_record: ring head is wrong\n");
		return 1;
	}
	printf("# bench_record: %llu ops x %d reps, ring of %llu records (%zu bytes each), lookups over %d known "
	       "keys; median ns per op\n",
	       (unsigned long long)n, REPS, (unsigned long long)ring_records, sizeof(struct hs_record), KEYS);
	for (int c = 0; c < NCASES; c++) {
		if (!have[c])
			continue;
		qsort(res[c], REPS, sizeof res[c][0], bench_cmp_double);
		printf("%-16s %8.2f\n", names[c], res[c][REPS / 2]);
	}
	(void)sink;
	free(ring);
	return 0;
}
