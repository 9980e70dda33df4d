/* SPDX-License-Identifier: MIT */
/*
 * shim/chaos.c — chaos schedules, deterministic by seed: at the points
 * heisen already intercepts (a lock just taken — held longer — or just
 * released, the GIL taken or
 * dropped, a thread's start, malloc, free, close) a thread is sometimes made
 * to sleep (milliseconds when it is a victim), to yield, or to move to
 * another CPU, so that the
 * interleavings a loaded production machine makes — and an idle developer
 * machine never does — happen here.  Anchors: rr's chaos mode (random
 * priorities and pauses so that rare schedules appear) and ClickHouse's
 * ThreadFuzzer (yields, sleeps and CPU migrations around mutex lock and
 * unlock, with probabilities per point).
 *
 * HEISEN_CHAOS=1 turns it on (heisen-run --chaos SEED, which also sets
 * HEISEN_SEED).  A decision is a hash of (seed, the thread's ordinal, the
 * thread's own count of chaos points): the same seed makes the same
 * decisions at the same points of the same thread in every run.  What it
 * cannot fix is the rest of the schedule — the kernel still chooses who
 * runs when a thread sleeps, and threads get their ordinals in the order
 * they first reach a chaos point — so a seed replays heisen's decisions,
 * not the whole interleaving (rr records one; heisen does not).
 *
 * Two layers of decisions, both hashes of (seed, ordinal, count):
 *
 *  - Victim threads, after rr's chaos mode, where a new thread gets a
 *    random priority and low-priority threads are starved for long
 *    stretches: a thread's points come in epochs of 64, and in each epoch
 *    the thread is a victim with probability 1/4 (rr makes 1 thread in 10
 *    low-priority, but starves it for a fifth of wall time; heisen acts
 *    only at its points, so it picks victims more often).  At each lock,
 *    unlock, GIL and thread-start point a victim sleeps 256 µs to 16 ms,
 *    log-uniform — the magnitude of ThreadFuzzer's sleeps at
 *    pthread_mutex_lock/unlock (up to 10 ms) — long enough that another
 *    thread's whole critical step fits into the pause.  This is what
 *    widens a race window: the window is open while the victim sleeps
 *    inside it (a lock just taken is held through the sleep).
 *  - Everyone else, at those points, acts 1 time in 8, and at malloc, free
 *    and close 1 time in 64 (frequent: a long sleep there would stop a
 *    program): a sched_yield (1/2), a nanosleep of 1 µs to 512 µs,
 *    log-uniform (3/8), or a move to one CPU of the process's original
 *    affinity mask (1/8), ThreadFuzzer's three actions.
 *
 * A sleep budget bounds the cost: a thread sleeps at most 50 ms plus 20 µs
 * per chaos point in all (the budget is counted from the decisions alone,
 * so it is deterministic too); a sleep longer than what is left is cut to
 * it, and skipped — nothing is done, not even a yield — when what is left
 * is less than its least length (1 ms for a victim, 1 µs otherwise).  So
 * a victim whose budget is spent sleeps again only every 50 points or so,
 * and what a lock-heavy thread loses is the slept time (20 µs per point
 * at most) plus one wake-up per action, which a loaded machine makes long.
 * Each action is an HS_REC_CHAOS record in the thread's ring.
 *
 * Never inside the shim's own malloc/free/close, never in a vfork child or
 * an exiting thread.  Cost when off: HS_CHAOS's one branch.
 */
#include <errno.h>
#include <sched.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "inject.h"
#include "shim.h"

int hs_chaos_on;

static uint64_t seed;
static cpu_set_t cpus;            /* the affinity mask at start-up */
static int ncpus;
static uint32_t next_ordinal;     /* [atomic] */

struct chaos_tls {
	uint32_t ordinal;         /* 1 + the order of this thread's first chaos point; 0 = none yet */
	uint32_t count;           /* chaos points this thread reached */
	uint64_t slept_ns;        /* the sleeps chosen so far (the budget's debit) */
	int busy;                 /* inside hs_chaos_point: no nesting */
};
static __thread struct chaos_tls ctls __attribute__((tls_model("initial-exec")));

void hs_chaos_init(void)
{
	const char *v = getenv("HEISEN_CHAOS");
	if (!v || strcmp(v, "1") != 0)
		return;
	v = getenv("HEISEN_SEED");
	seed = v ? strtoull(v, NULL, 10) : 0;
	CPU_ZERO(&cpus);
	if (sched_getaffinity(0, sizeof cpus, &cpus) == 0)
		ncpus = CPU_COUNT(&cpus);
	hs_chaos_on = 1;
	hs_inject_on |= HS_INJECT_CHAOS;
}

/* The index-th CPU of the start-up mask. */
static int nth_cpu(unsigned index)
{
	for (int c = 0, k = 0; c < CPU_SETSIZE; c++)
		if (CPU_ISSET(c, &cpus) && (unsigned)k++ == index)
			return c;
	return -1;
}

static void record(unsigned point, unsigned action, uint64_t value, uint32_t count)
{
	struct hs_tls *t = &hs_tls;
	uint64_t c = value | ((uint64_t)count << 32);
	if (t->in_hook) {
		/* a lock or GIL point: inside an entered hook, the thread's ring is attached */
		if (t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE))
			hs_rec(t, hs_now(), HS_REC_CHAOS, 0, point, action, c);
		return;
	}
	if ((t = hs_enter()) != NULL) {
		hs_rec(t, hs_now(), HS_REC_CHAOS, 0, point, action, c);
		hs_leave(t);
	}
}

void hs_chaos_point(unsigned point)
{
	struct hs_tls *t = &hs_tls;
	struct chaos_tls *ct = &ctls;
	if (ct->busy || t->dead || t->vfork_pid != 0 || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	/* malloc, free, close: the program's calls only, not the shim's own */
	if (point >= HS_CHAOS_MALLOC && t->in_hook)
		return;
	int e = errno;
	ct->busy = 1;
	if (!ct->ordinal)
		ct->ordinal = __atomic_add_fetch(&next_ordinal, 1, __ATOMIC_RELAXED);
	uint32_t count = ++ct->count;
	uint64_t h = hs_mix64(seed ^ hs_mix64(((uint64_t)ct->ordinal << 40) ^ count));
	int frequent = point >= HS_CHAOS_MALLOC;
	/* a victim in this epoch of 64 points: another hash, of the epoch */
	int victim = !frequent &&
		     hs_mix64(seed ^ hs_mix64(((uint64_t)ct->ordinal << 40) ^ (count >> 6) ^ (1ull << 39))) % 4 == 0;
	if (victim || h % (frequent ? 64 : 8) == 0) {
		unsigned pick = (unsigned)(h >> 8) & 7, action;
		uint64_t value = 0, want = 0, least = 1000;
		if (victim) {
			want = 1000000ull << ((h >> 16) % 5); /* 1 ms .. 16 ms, log-uniform */
			least = 1000000;
		} else if (pick >= 4 && (pick < 7 || ncpus < 2)) {
			want = 1000ull << ((h >> 16) % 10); /* 1 µs .. 512 µs, log-uniform */
		}
		if (want) {
			/* the budget: 50 ms + 20 µs per point reached, less what was slept;
			 * a sleep is cut to what is left, and skipped below its least length */
			uint64_t allow = 50000000ull + 20000ull * count;
			uint64_t left = allow > ct->slept_ns ? allow - ct->slept_ns : 0;
			if (want > left) {
				if (left < least)
					goto out; /* spent: nothing at all, not even a yield */
				want = left;
			}
			struct timespec ts = {(time_t)(want / 1000000000u), (long)(want % 1000000000u)};
			action = HS_CHAOS_SLEEP;
			value = want;
			ct->slept_ns += want;
			nanosleep(&ts, NULL);
		} else if (pick < 7 || ncpus < 2) {
			action = HS_CHAOS_YIELD;
			sched_yield();
		} else {
			int cpu = nth_cpu((unsigned)((h >> 24) % (unsigned)ncpus));
			cpu_set_t one;
			CPU_ZERO(&one);
			if (cpu >= 0)
				CPU_SET(cpu, &one);
			action = HS_CHAOS_MIGRATE;
			value = (uint64_t)cpu;
			if (cpu >= 0)
				(void)sched_setaffinity(0, sizeof one, &one);
		}
		record(point, action, value, count);
	}
out:
	ct->busy = 0;
	errno = e;
}
