/* SPDX-License-Identifier: MIT */
/*
 * shim/guarded.c — sampled guard-page allocations: GWP-ASan's technique
 * (Chromium's and LLVM's GWP-ASan; Scudo, tcmalloc and Android ship it,
 * run in production at well under 1% CPU).  About one allocation in
 * HEISEN_GUARD_RATE (default 5000) of at most a page gets a page of its own
 * in a pool reserved once, with an inaccessible page on each side:
 *
 *   [ guard ][ slot 0 ][ guard ][ slot 1 ][ guard ] ... [ slot n-1 ][ guard ]
 *
 * The block is placed against the end of its page (an overflow walks into
 * the next guard page) or at its start (an underflow walks into the one
 * before), alternately; malloc's 16-byte alignment (or the one asked for)
 * is kept, so a block whose size is not a multiple of it has up to 15 bytes
 * of slack after it where an overflow does not fault (GWP-ASan's default
 * too).  Those bytes, and up to SLACK_CHECK after a block at the start of
 * its page, are filled with a pattern at the allocation and checked at the
 * free, as the heap checker's canary would have been: a short overflow of
 * a sampled block is a heap-overflow finding at its free (allocation and
 * free stacks), never a miss the unsampled block would not have had.
 * When the block is freed its page becomes inaccessible (mprotect; the page
 * stays resident, at most HEISEN_GUARD_SLOTS pages in all) and the slot
 * waits at the tail of a FIFO of free slots, so it is reused as late as
 * possible: a read or write through a dangling pointer faults.  signals.c's
 * crash handler asks hs_guard_fault() first: a fault inside the pool
 * becomes a use-after-free or heap-buffer-overflow finding with the
 * access, free and allocation stacks (format.h "guard findings"); then
 * the process dies of the signal as it would have (HEISEN_ON_HEAP_ERROR=
 * abort, the default) or the page is made accessible and the program goes
 * on (=continue).  A second free of a
 * sampled block is a double-free finding with the three stacks.
 *
 * Cost (docs/design.md "Guard pages", measured in bench/README.md).  The
 * decision is a thread-local countdown (no atomics, no shared line)
 * decremented by every allocation; only when it reaches zero does the slow
 * path run, and a free or realloc asks hs_guard_owns(), one range check.
 * A sample is two mprotect calls (open at the allocation, close at the
 * free) and two unwinds; the two system calls are nearly all of it (the
 * unwinds are a few thousand instructions), and each slot's page is a
 * mapping of its own (own_vma_mark) so that they stay cheap.  Slots and
 * metadata live in private mappings, never in malloc'd memory.
 *
 * Limits (README.md "Guard pages"): only sampled allocations are checked,
 * so a given bug is caught with probability about 1/rate per run (rate 1:
 * every allocation that fits, while slots last); a write into the slack is
 * seen at the free, not when it happens; a read of it, or an access that
 * jumps over the guard page into another slot, is not seen;
 * when every slot is taken, sampled allocations go to the normal allocator
 * until one is freed; a slot reused after a long FIFO turns a very late
 * use-after-free into silence.  The metadata a fault reads is not locked
 * against a concurrent reuse of that slot.
 */
#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <ucontext.h>
#include <unistd.h>

#include "shim.h"
#include "unwind_mask.h"

#define GUARD_RATE_DEFAULT 5000u
#define GUARD_SLOTS_DEFAULT 64u
#define GUARD_SLOTS_MAX 16384u
/* Slots kept as mappings of their own (own_vma_mark) only up to this many:
 * each costs the process two entries in its memory map for good (the page
 * and the guard after it), and vm.max_map_count (65530 by default) is the
 * program's to use, not ours. */
#define OWN_VMA_SLOTS_MAX 1024u

enum { SLOT_UNUSED = 0, SLOT_LIVE = 1, SLOT_FREED = 2 };
enum { GUARD_UNKNOWN = 0, GUARD_INIT = 1, GUARD_OFF = 2, GUARD_ON = 3 };

/*
 * A stack kept with its slot, interned into the segment's stack table only
 * when a finding needs it (GWP-ASan keeps its traces per slot the same
 * way): with HEISEN_GUARD_RATE=1 every allocation is sampled, and interning
 * each one would fill the shared table with stacks nobody asks for.  The
 * PCs are hs_stack_intern's: native frames and HS_PC_PYTHON | pyframe id.
 */
struct gstack {
	uint16_t depth;
	uint16_t flags;         /* HS_STACK_* */
	uint32_t pad;
	uint64_t pc[HS_STACK_DEPTH];
};

/* One slot's metadata (in a private mapping: never the program's heap). */
struct gslot {
	uint64_t user;          /* the block's start */
	uint64_t size;          /* as requested */
	uint32_t state;         /* [atomic] SLOT_*; LIVE published with release after the fields */
	int32_t alloc_tid;
	int32_t free_tid;
	uint32_t own_vma;       /* 1: the slot's page is a mapping of its own (own_vma_mark) */
	struct gstack alloc;    /* full unwind at the allocation, Python frames included */
	struct gstack free;     /* and at the free */
};

HS_HIDDEN __thread int32_t hs_guard_countdown __attribute__((tls_model("initial-exec")));
static __thread uint64_t rng __attribute__((tls_model("initial-exec")));

HS_HIDDEN uintptr_t hs_guard_lo;   /* [atomic] the pool: [lo, lo + len); 0 until reserved */
HS_HIDDEN uintptr_t hs_guard_len;  /* [atomic] */

static int guard_mode;             /* [atomic] GUARD_* */
static int rate_default;           /* HEISEN_GUARD_RATE unset: the sample budget applies (budget_take) */
static uint64_t budget_tat;        /* [atomic] the budget's next conforming time, ns (hs_now) */
static uint32_t rate = GUARD_RATE_DEFAULT;
static uint32_t nslots = GUARD_SLOTS_DEFAULT;
static int on_error_continue;      /* HEISEN_ON_HEAP_ERROR=continue */
static size_t page = 4096;
static struct gslot *slots;        /* nslots entries */
static uint8_t *guard_open;        /* per pool page: 1 = made accessible by "continue" */
static int reserve_lock;           /* [atomic] spin lock: reserving the pool */

/* The FIFO of free slots: a ring of slot indices under a spin lock. */
static int fifo_lock;              /* [atomic] */
static uint32_t *fifo;             /* nslots entries */
static uint32_t fifo_head, fifo_count;
static uint32_t placement;         /* allocations placed so far: even = right-aligned */
static uint64_t exhausted;         /* [atomic] sampled allocations that found no free slot */

static inline uintptr_t slot_page(uint32_t i)
{
	return hs_guard_lo + (2u * (uintptr_t)i + 1u) * page;
}

/*
 * The default rate's budget (budget_take) also pays for what a sample's
 * system calls took: each mprotect's duration times GUARD_BUDGET_SHARE,
 * less the half of a sample's interval budget_take already charged, moves
 * the budget's next conforming time on.  So the samples' mprotect calls
 * take at most about 1/GUARD_BUDGET_SHARE of the process's time besides
 * the count's bound.  An uncontended mprotect (2-5 us) charges nothing
 * more; one that waited for the address-space lock while the program's
 * threads fault their growing heaps in, with the close's TLB shootdown
 * to the other processors (about 50 us on a 4-thread C++ churn's first
 * 0.2 s, bench/README.md "The heap checker's misses; the guard
 * pages' burst"), holds the next sample back by 10-50 ms.
 */
#define GUARD_BUDGET_SHARE 500u
static void budget_charge(uint64_t took_ns);

static int sys_mprotect(uintptr_t addr, size_t len, int prot)
{
	uint64_t t0;
	int rc;
	if (!rate_default)
		return hs_sys.mprotect((void *)addr, len, prot);
	t0 = hs_now();
	rc = hs_sys.mprotect((void *)addr, len, prot);
	budget_charge(hs_now() - t0);
	return rc;
}

/*
 * Make slot s's page (at base, just opened) a mapping of its own for good,
 * once per slot: MADV_NOHUGEPAGE (meaningless for a lone 4 KiB page) gives
 * it flags its guard pages do not have, so the kernel never merges it with
 * them.  Without it every close merged the page into its guards' mapping
 * and the next open split it out again: two changes to the process's
 * memory map under its write lock, about two thirds of a sample's cost
 * (docs/design.md "Guard pages"; bench/README.md).  A kernel without
 * transparent huge pages refuses it, and pools of more than
 * OWN_VMA_SLOTS_MAX slots skip it: their slots then work as before.
 */
static void own_vma_mark(struct gslot *s, uintptr_t base)
{
	if (HS_LIKELY(s->own_vma) || nslots > OWN_VMA_SLOTS_MAX)
		return;
	(void)hs_sys.madvise((void *)base, page, MADV_NOHUGEPAGE);
	s->own_vma = 1; /* tried: a refusal is not asked again */
}

/* ---- configuration ------------------------------------------------------------ */

HS_FORK_TEXT HS_HIDDEN void hs_guard_after_fork_child(void)
{
	/* one thread: a lock another thread held at the fork is free again (stored
	   only when held: a page written is a copy-on-write fault in every child) */
	if (__atomic_load_n(&fifo_lock, __ATOMIC_RELAXED))
		__atomic_store_n(&fifo_lock, 0, __ATOMIC_RELEASE);
	if (__atomic_load_n(&reserve_lock, __ATOMIC_RELAXED))
		__atomic_store_n(&reserve_lock, 0, __ATOMIC_RELEASE);
	/* stack ids are the parent's: valid in the child only when its tables were inherited */
	if (!hs_seg_inherited && slots)
		for (uint32_t i = 0; i < nslots; i++)
			slots[i].alloc.depth = slots[i].free.depth = 0;
}

HS_HIDDEN void hs_guard_init(void)
{
	static const char *const on_heap_error_words[] = {"abort", "continue"};
	int expect = GUARD_UNKNOWN, rate_set = 0;
	struct hs_tls *t = &hs_tls;
	int was = t->in_hook;
	if (!__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	if (!__atomic_compare_exchange_n(&guard_mode, &expect, GUARD_INIT, 0, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED))
		return;
	t->in_hook = 1;
	page = (size_t)sysconf(_SC_PAGESIZE);
	rate = (uint32_t)hs_getenv_num("HEISEN_GUARD_RATE", GUARD_RATE_DEFAULT, 0, UINT32_MAX, &rate_set);
	rate_default = !rate_set;
	nslots = (uint32_t)hs_getenv_num("HEISEN_GUARD_SLOTS", GUARD_SLOTS_DEFAULT, 1, GUARD_SLOTS_MAX, NULL);
	on_error_continue = hs_getenv_enum("HEISEN_ON_HEAP_ERROR", on_heap_error_words, 2, 0) == 1;
	/* the guard pages are part of heap checking: HEISEN_HEAP=0 turns them off
	   too, unless a rate is asked for explicitly */
	if (!hs_getenv_bool("HEISEN_HEAP", 1) && !rate_set)
		rate = 0;
	if (rate == 0) {
		__atomic_store_n(&guard_mode, GUARD_OFF, __ATOMIC_RELEASE);
		t->in_hook = was;
		return;
	}
	pthread_atfork(NULL, NULL, hs_guard_after_fork_child);
	/* release: the settings are visible to every thread that sees GUARD_ON */
	__atomic_store_n(&guard_mode, GUARD_ON, __ATOMIC_RELEASE);
	t->in_hook = was;
}

/* Reserve the pool and its metadata (first sampled allocation).  0 or -1. */
static int pool_reserve(void)
{
	size_t len = (2u * (size_t)nslots + 1u) * page;
	size_t meta = nslots * sizeof *slots + nslots * sizeof *fifo + (2u * nslots + 1u);
	void *p, *m;
	int rc = 0;
	hs_spin_lock(&reserve_lock);
	if (__atomic_load_n(&hs_guard_lo, __ATOMIC_ACQUIRE))
		goto out;
	m = hs_sys.mmap(NULL, meta, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (m == MAP_FAILED) {
		rc = -1;
		goto out;
	}
	p = hs_sys.mmap(NULL, len, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (p == MAP_FAILED) {
		hs_sys.munmap(m, meta);
		rc = -1;
		goto out;
	}
	slots = m;
	fifo = (uint32_t *)(slots + nslots);
	guard_open = (uint8_t *)(fifo + nslots);
	for (uint32_t i = 0; i < nslots; i++)
		fifo[i] = i;
	fifo_head = 0;
	fifo_count = nslots;
	__atomic_store_n(&hs_guard_len, len, __ATOMIC_RELEASE);
	/* release: the metadata is in place before anyone sees the pool */
	__atomic_store_n(&hs_guard_lo, (uintptr_t)p, __ATOMIC_RELEASE);
out:
	if (rc)
		__atomic_store_n(&guard_mode, GUARD_OFF, __ATOMIC_RELEASE);
	hs_spin_unlock(&reserve_lock);
	return rc;
}

/* ---- stacks ------------------------------------------------------------------- */

static __attribute__((noinline)) void capture_unwind(struct gstack *g);

/* The calling thread's stack into g: libheisen's own frames dropped from
 * the top, Python frames interleaved (stacks.c's hs_stack_here, kept here
 * instead of interned).  With less than HS_UNWIND_ROOM of the thread's
 * stack left (a PTHREAD_STACK_MIN thread deep in calls) no unwind at all:
 * libunwind's cursor and the buffers below would overflow the program's
 * stack, so g is left empty and marked truncated (the finding then says
 * its stack was not recorded), as stacks.c does for its own unwinds. */
static void capture(struct gstack *g);

/*
 * This call's stack into g, from the chain of return addresses above the
 * guard's entry (site: its return address, cfa: its caller's stack pointer
 * there; stacks.c hs_chain_call): the frame distances learnt once per
 * return address and shared by all threads, Python frames included, at
 * most HS_CHAIN_MAX entries.  site and cfa are the exported hook's
 * (shim.h HS_GUARD_SITE): a return address inside the shim is never
 * learnt, so a walk that started there would unwind every time.  A sample's two unwinds were most of its
 * cost in user space: libunwind reads DWARF that is cold again by the next
 * sample (bench/README.md "Guard pages: the sample's stacks from the
 * learnt chain").  The unwinder (capture) when the thread has no area or
 * the chain is empty.  The shim's own frames are dropped from the top.
 */
static __attribute__((noinline)) void capture_call(struct gstack *g, uint64_t site, uint64_t cfa)
{
	const struct hs_chain *c = hs_chain_call(site, cfa);
	uint64_t pcs[HS_CHAIN_MAX];
	unsigned n, skip = 0, i;
	if (!c || c->lazy || !c->depth) {
		capture(g);
		return;
	}
	n = hs_chain_pcs(c, pcs);
	while (skip < n && !(pcs[skip] & HS_PC_PYTHON) && pcs[skip] >= hs_self_lo && pcs[skip] < hs_self_hi)
		skip++;
	for (i = skip; i < n; i++)
		if (!(pcs[i] & HS_PC_PYTHON) && !hs_module_known(pcs[i]))
			hs_module_note_pc(pcs[i], 1); /* loaded by dlopen since: record it while it is here */
	memcpy(g->pc, pcs + skip, (n - skip) * sizeof *pcs);
	g->flags = (uint16_t)((c->python ? HS_STACK_PYTHON : 0u) | (c->ended ? 0u : HS_STACK_TRUNCATED));
	g->depth = (uint16_t)(n - skip);
}

static void capture(struct gstack *g)
{
	if (HS_UNLIKELY(hs_stack_room((uintptr_t)__builtin_frame_address(0)) < HS_UNWIND_ROOM)) {
		g->depth = 0;
		g->flags = HS_STACK_TRUNCATED;
		return;
	}
	capture_unwind(g);
}

static __attribute__((noinline)) void capture_unwind(struct gstack *g)
{
	void *buf[HS_STACK_DEPTH + 12];
	uint64_t pcs[2 * HS_STACK_DEPTH + 13];
	int entered = hs_unwind_enter(), n = hs_backtrace(buf, (int)(sizeof buf / sizeof buf[0])), python = 0;
	hs_unwind_leave(entered);
	unsigned depth = 0, skip = 0, flags = 0;
	while (skip < (unsigned)(n > 0 ? n : 0) && (uint64_t)(uintptr_t)buf[skip] >= hs_self_lo &&
	       (uint64_t)(uintptr_t)buf[skip] < hs_self_hi)
		skip++;
	for (int i = (int)skip; i < n; i++) {
		pcs[depth] = (uint64_t)(uintptr_t)buf[i];
		if (!hs_module_known(pcs[depth]))
			hs_module_note_pc(pcs[depth], 1); /* loaded by dlopen since: record it while it is here */
		depth++;
	}
	if ((size_t)n == sizeof buf / sizeof buf[0] && depth >= HS_STACK_DEPTH)
		flags |= HS_STACK_TRUNCATED;
	depth = hs_py_interleave(&hs_seg, pcs, depth, depth > HS_STACK_DEPTH + 1 ? depth : HS_STACK_DEPTH + 1, &python);
	if (python)
		flags |= HS_STACK_PYTHON;
	if (depth > HS_STACK_DEPTH) {
		depth = HS_STACK_DEPTH;
		flags |= HS_STACK_TRUNCATED;
	}
	memcpy(g->pc, pcs, depth * sizeof *pcs);
	g->flags = (uint16_t)flags;
	g->depth = (uint16_t)depth;
}

/* g's id in the stack table, interned now; 0 when none.  Async-signal-safe. */
static uint32_t intern(const struct gstack *g)
{
	unsigned depth = g->depth < HS_STACK_DEPTH ? g->depth : HS_STACK_DEPTH;
	if (!depth || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return 0;
	return hs_stack_intern(&hs_seg, g->pc, depth, g->flags);
}

/* ---- the heap checker's counters ---------------------------------------------- */

/* A sampled block is an allocation like any other in hs_header.heap_*
 * (when the heap checker keeps them: HS_HDR_HEAP).  Relaxed: counters. */
static void count(int64_t n, int alloc)
{
	struct hs_header *h = __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) ? hs_seg.hdr : NULL;
	uint64_t live, peak;
	if (!h || !(__atomic_load_n(&h->flags, __ATOMIC_RELAXED) & HS_HDR_HEAP))
		return;
	if (alloc)
		__atomic_add_fetch(&h->heap_allocs, 1, __ATOMIC_RELAXED);
	live = __atomic_add_fetch(&h->heap_live_bytes, (uint64_t)n, __ATOMIC_RELAXED);
	peak = __atomic_load_n(&h->heap_peak_bytes, __ATOMIC_RELAXED);
	while (n > 0 && live > peak &&
	       !__atomic_compare_exchange_n(&h->heap_peak_bytes, &peak, live, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
		;
}

/* ---- sampling ----------------------------------------------------------------- */

static inline uint64_t next_rand(void)
{
	uint64_t x = rng;
	if (HS_UNLIKELY(x == 0))
		x = hs_mix64((uint64_t)(uintptr_t)&hs_tls ^ hs_now()) | 1;
	x ^= x << 13;
	x ^= x >> 7;
	x ^= x << 17;
	rng = x;
	return x;
}

/*
 * The default rate's sample budget: at most GUARD_BUDGET_PER_S samples a
 * second in the process after a first GUARD_BUDGET_BURST (the generic cell
 * rate algorithm: a sample conforms when the budget's next conforming time
 * is at most BURST sample intervals ahead of now).  What a sample costs is
 * the kernel's (the close's TLB shootdown to the other processors running
 * the process, the open's and close's memory-map lock), so the cost at the
 * default rate grew with the allocation rate: 1,600 samples a second on a
 * 4-thread C++ churn, 1.7-1.9% of its CPU (bench/README.md "Guard pages:
 * the sample's stacks from the learnt chain; a sample budget").  With the
 * budget it is bounded by what 250 samples a second cost (~0.3% of one
 * processor at ~10 us each); a program allocating less (py_workload: about
 * 200 samples a second) is sampled as before.  An explicit
 * HEISEN_GUARD_RATE (tests: 1) is exact: no budget.  Called only when a
 * countdown ends (one allocation in `rate`): one clock read there.  The
 * burst is small (8; it was 64) because a process's first samples are its
 * dearest: they come while its threads grow their heaps, and each
 * sample's mprotect waits for the address-space lock those page faults
 * hold, and takes its slot's first page fault (bench/README.md "The heap
 * checker's misses; the guard pages' burst").
 */
#define GUARD_BUDGET_PER_S 250u
#define GUARD_BUDGET_BURST 8u
static int budget_take(void)
{
	const uint64_t t = 1000000000ull / GUARD_BUDGET_PER_S, tau = t * GUARD_BUDGET_BURST;
	uint64_t now = hs_now(), tat = __atomic_load_n(&budget_tat, __ATOMIC_RELAXED), base;
	do {
		base = tat > now ? tat : now;
		if (base - now > tau)
			return 0;
		/* relaxed: a counter of time, ordered with nothing else */
	} while (!__atomic_compare_exchange_n(&budget_tat, &tat, base + t, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
	return 1;
}

static void budget_charge(uint64_t took_ns)
{
	const uint64_t half = 1000000000ull / GUARD_BUDGET_PER_S / 2;
	uint64_t extra, now, tat, base;
	if (took_ns > 1000000000ull) /* a clock step, or a stop of the process: not the call's */
		return;
	extra = took_ns * GUARD_BUDGET_SHARE;
	if (extra <= half)
		return;
	extra -= half;
	now = hs_now();
	tat = __atomic_load_n(&budget_tat, __ATOMIC_RELAXED);
	do
		base = tat > now ? tat : now;
	/* relaxed: a counter of time, ordered with nothing else */
	while (!__atomic_compare_exchange_n(&budget_tat, &tat, base + extra, 1, __ATOMIC_RELAXED, __ATOMIC_RELAXED));
}

HS_HIDDEN int hs_guard_sample_slow(size_t n)
{
	int m = __atomic_load_n(&guard_mode, __ATOMIC_ACQUIRE);
	if (HS_UNLIKELY(m != GUARD_ON)) {
		/* off for good: come back in a billion allocations; not yet set up: next time */
		hs_guard_countdown = m == GUARD_OFF ? INT32_MAX : 1;
		return 0;
	}
	/* a new thread's countdown starts at 0 and reaches here at -1: its first
	   allocation is not a draw (else every thread's first block would be
	   sampled, and a pool of 64 slots gone to thread start-up) */
	int fresh = hs_guard_countdown < 0 && rate > 1;
	/* a countdown drawn from [1, 2 * rate - 1]: one in `rate` on average, never in lockstep with the program */
	hs_guard_countdown = rate <= 1 ? 1 : (int32_t)(1 + next_rand() % (2ull * rate - 1));
	return !fresh && n != 0 && n <= page && !hs_tls.in_hook && !hs_tls.dead && (!rate_default || budget_take());
}

/* Re-protect a guard page that "continue" opened. */
static void guard_close(size_t pg)
{
	if (guard_open[pg]) {
		sys_mprotect(hs_guard_lo + pg * page, page, PROT_NONE);
		guard_open[pg] = 0;
	}
}

/* Bytes checked after a block placed at the start of its page (the
 * 16-byte slack and this many more), and the byte they hold. */
#define SLACK_CHECK 32u
#define SLACK_BYTE 0xbdu

/* The end of the checked bytes after the n-byte block at u in the page at
 * base: the page's end for a block against it, else SLACK_CHECK past the
 * 16-byte-rounded size (never past the page). */
static inline uintptr_t slack_end(uintptr_t base, uintptr_t u, size_t n)
{
	uintptr_t e = u + ((n + 15) & ~(size_t)15) + SLACK_CHECK;
	return e < base + page ? e : base + page;
}

HS_HIDDEN void *hs_guard_malloc(size_t n, size_t align, int zero, uint64_t site, uint64_t cfa)
{
	struct hs_tls *t;
	struct gslot *s;
	uintptr_t base, u;
	uint32_t i;
	int e = errno;

	if (align < 16)
		align = 16;
	if (n == 0 || n > page || align > page || (align & (align - 1)))
		return NULL;
	if (!__atomic_load_n(&hs_guard_lo, __ATOMIC_ACQUIRE) && pool_reserve() != 0)
		return NULL;
	t = hs_enter();
	if (!t)
		return NULL;
	hs_spin_lock(&fifo_lock);
	if (fifo_count == 0) {
		hs_spin_unlock(&fifo_lock);
		__atomic_add_fetch(&exhausted, 1, __ATOMIC_RELAXED);
		hs_leave(t);
		return NULL;
	}
	i = fifo[fifo_head];
	fifo_head = (fifo_head + 1) % nslots;
	fifo_count--;
	placement++;
	base = slot_page(i);
	if (placement & 1)
		u = (base + page - n) & ~(uintptr_t)(align - 1); /* against the next guard page */
	else
		u = base;                                         /* against the previous one */
	guard_close(2u * i);
	guard_close(2u * i + 2u);
	hs_spin_unlock(&fifo_lock);
	if (sys_mprotect(base, page, PROT_READ | PROT_WRITE) != 0) {
		/* cannot open it: give the slot back, the caller allocates normally */
		hs_spin_lock(&fifo_lock);
		fifo[(fifo_head + fifo_count) % nslots] = i;
		fifo_count++;
		hs_spin_unlock(&fifo_lock);
		hs_leave(t);
		errno = e;
		return NULL;
	}
	s = &slots[i];
	own_vma_mark(s, base);
	if (zero)
		memset((void *)u, 0, n); /* the slot's page keeps its last block's bytes */
	memset((void *)(u + n), SLACK_BYTE, slack_end(base, u, n) - (u + n));
	s->user = u;
	s->size = n;
	capture_call(&s->alloc, site, cfa);
	s->alloc_tid = t->tid;
	s->free.depth = 0;
	s->free_tid = 0;
	/* release: a fault handler that sees LIVE sees the fields */
	__atomic_store_n(&s->state, SLOT_LIVE, __ATOMIC_RELEASE);
	count((int64_t)n, 1);
	hs_leave(t);
	errno = e;
	return (void *)u;
}

/* The slot whose page holds p, or -1 when p is in a guard page. */
static long slot_of(uintptr_t p)
{
	size_t pg = (p - hs_guard_lo) / page;
	return (pg & 1) ? (long)(pg / 2) : -1;
}

/* ---- findings --------------------------------------------------------------------- */

static const char *kind_name(unsigned kind)
{
	switch (kind) {
	case HS_FIND_USE_AFTER_FREE:
		return "use-after-free";
	case HS_FIND_HEAP_BUFFER_OVERFLOW:
		return "heap-buffer-overflow";
	case HS_FIND_DOUBLE_FREE:
		return "double-free";
	case HS_FIND_HEAP_OVERFLOW:
		return "heap-overflow";
	default:
		return "invalid-free";
	}
}

/* Publish f, note it in the ring when t may write it, say it on stderr.
 * Async-signal-safe. */
static void publish(struct hs_tls *t, struct hs_finding *f, const char *what)
{
	uint32_t idx = 0;
	char buf[24];
	if (__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		idx = hs_finding_add(&hs_seg, f);
	if (idx && t)
		hs_rec(t, f->ts_ns, HS_REC_FINDING, f->stack, idx - 1, f->addr, f->kind);
	if (!hs_quiet) {
		hs_write_err("heisen: ");
		hs_write_err(kind_name(f->kind));
		if (what) {
			hs_write_err(" ");
			hs_write_err(what);
		}
		hs_write_err(" at ");
		hs_fmt_hex(buf, f->addr);
		hs_write_err(buf);
		hs_write_err(on_error_continue ? " (going on; heisen-dump has the stacks)\n"
					       : " (heisen-dump has the stacks)\n");
	}
}

/* A bad free of p in slot i (double, or not the block's start). */
static void bad_free(struct hs_tls *t, struct gslot *s, void *p, uint32_t state)
{
	struct hs_finding f;
	memset(&f, 0, sizeof f);
	f.kind = (s && p == (void *)s->user && state == SLOT_FREED) ? HS_FIND_DOUBLE_FREE : HS_FIND_INVALID_FREE;
	f.tid = t ? t->tid : (int32_t)hs_sys.gettid();
	f.ts_ns = hs_now();
	f.addr = (uint64_t)(uintptr_t)p;
	f.stack = t ? hs_stack_here() : 0;
	f.size = s ? s->size : 0;
	if (s && state != SLOT_UNUSED) {
		f.stack3 = intern(&s->alloc);
		f.tid3 = s->alloc_tid;
		if (f.kind == HS_FIND_INVALID_FREE)
			f.offset = (uint32_t)((uintptr_t)p - s->user);
	}
	if (s && state == SLOT_FREED) {
		f.stack2 = intern(&s->free);
		f.tid2 = s->free_tid;
	}
	publish(t, &f, NULL);
	if (!on_error_continue) {
		if (t)
			t->in_hook = 0;
		abort();
	}
}

/* The slack after the block in slot s was written (found at its free,
 * before the page goes): a heap-overflow finding as the heap
 * checker makes for a broken canary (format.h HS_FIND_HEAP_OVERFLOW: the
 * free's stack, the allocation's as stack3), then abort unless "continue". */
static void slack_overflow(struct hs_tls *t, struct gslot *s)
{
	struct hs_finding f;
	memset(&f, 0, sizeof f);
	f.kind = HS_FIND_HEAP_OVERFLOW;
	f.tid = t->tid;
	f.ts_ns = hs_now();
	f.addr = s->user;
	f.size = s->size;
	f.stack = intern(&s->free);
	f.stack3 = intern(&s->alloc);
	f.tid3 = s->alloc_tid;
	/* offset 0: found at the block's own free (format.h) */
	publish(t, &f, "(past a sampled block, found at its free)");
	if (!on_error_continue) {
		t->in_hook = 0;
		abort();
	}
}

HS_HIDDEN void hs_guard_free(void *p, uint64_t site, uint64_t cfa)
{
	struct hs_tls *t = &hs_tls;
	uintptr_t u = (uintptr_t)p;
	long i = slot_of(u);
	struct gslot *s = i >= 0 ? &slots[i] : NULL;
	uint32_t st = s ? __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) : SLOT_UNUSED;
	int e = errno, quiet = t->in_hook;

	if (!quiet)
		t = hs_enter();
	if (s && st == SLOT_LIVE && u == s->user &&
	    __atomic_compare_exchange_n(&s->state, &st, SLOT_FREED, 0, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
		uintptr_t base = slot_page((uint32_t)i), end = slack_end(base, u, s->size), b;
		count(-(int64_t)s->size, 0);
		if (!quiet && t)
			capture_call(&s->free, site, cfa);
		else
			s->free.depth = 0;
		s->free_tid = (!quiet && t) ? t->tid : (int32_t)hs_sys.gettid();
		for (b = u + s->size; b < end && *(const unsigned char *)b == SLACK_BYTE; b++)
			;
		if (b < end && !quiet && t)
			slack_overflow(t, s);
		/* one system call takes the access away; the page stays resident, so the
		   slot's next block costs no page fault, no zeroing and no freed page
		   (GWP-ASan maps a fresh PROT_NONE page over it instead: docs/design.md
		   "Guard pages").  If the kernel cannot (ENOMEM: too many mappings), a
		   fresh mapping in place */
		if (sys_mprotect(base, page, PROT_NONE) != 0) {
			hs_sys.mmap((void *)base, page, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED,
				    -1, 0);
			s->own_vma = 0; /* a new mapping: its flags are gone */
		}
		hs_spin_lock(&fifo_lock);
		fifo[(fifo_head + fifo_count) % nslots] = (uint32_t)i;
		fifo_count++;
		hs_spin_unlock(&fifo_lock);
	} else if (!quiet) {
		/* the reentrancy guard stays taken while the finding is made */
		if (!t) {
			hs_tls.in_hook = 1;
			bad_free(NULL, s, p, st);
			hs_tls.in_hook = 0;
		} else {
			bad_free(t, s, p, st);
		}
	}
	if (!quiet && t)
		hs_leave(t);
	errno = e;
}

HS_HIDDEN size_t hs_guard_usable_size(const void *p)
{
	long i = slot_of((uintptr_t)p);
	if (i < 0 || __atomic_load_n(&slots[i].state, __ATOMIC_ACQUIRE) != SLOT_LIVE)
		return 0;
	return slots[i].size - ((uintptr_t)p - slots[i].user);
}

HS_HIDDEN void *hs_guard_realloc(void *p, size_t n, uint64_t site, uint64_t cfa)
{
	long i = slot_of((uintptr_t)p);
	struct gslot *s = i >= 0 ? &slots[i] : NULL;
	void *q;
	if (!s || __atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_LIVE || (uintptr_t)p != s->user) {
		hs_guard_free(p, site, cfa); /* reports it; with "continue", realloc fails */
		errno = EINVAL;
		return NULL;
	}
	if (n == 0) {
		hs_guard_free(p, site, cfa);
		return NULL;
	}
	q = malloc(n); /* the exported hook: it may be sampled again */
	if (!q)
		return NULL;
	memcpy(q, p, s->size < n ? s->size : n);
	hs_guard_free(p, site, cfa);
	return q;
}

/* ---- the fault ---------------------------------------------------------------------- */

HS_HIDDEN int hs_guard_fault(int sig, siginfo_t *si, void *uc, int was)
{
	uintptr_t a = (uintptr_t)si->si_addr, lo = __atomic_load_n(&hs_guard_lo, __ATOMIC_ACQUIRE);
	struct hs_tls *t = &hs_tls;
	struct gslot *s = NULL;
	struct hs_finding f;
	size_t pg;
	long i;
	char what[32];
	const ucontext_t *ctx = uc;

	if (!lo || a - lo >= __atomic_load_n(&hs_guard_len, __ATOMIC_ACQUIRE) || si->si_code <= 0)
		return 0;
	pg = (a - lo) / page;
	i = slot_of(a);
	memset(&f, 0, sizeof f);
	if (i >= 0) {
		s = &slots[i];
		if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) != SLOT_FREED)
			return 0; /* never used, or live: not a fault of ours */
		f.kind = HS_FIND_USE_AFTER_FREE;
	} else {
		/* a guard page: the nearer of the blocks on either side that were ever placed */
		struct gslot *l = pg >= 2 ? &slots[pg / 2 - 1] : NULL;
		struct gslot *r = pg / 2 < nslots ? &slots[pg / 2] : NULL;
		uint64_t dl = UINT64_MAX, dr = UINT64_MAX;
		if (l && __atomic_load_n(&l->state, __ATOMIC_ACQUIRE) != SLOT_UNUSED)
			dl = a - (l->user + l->size);
		if (r && __atomic_load_n(&r->state, __ATOMIC_ACQUIRE) != SLOT_UNUSED)
			dr = r->user - a;
		if (dl == UINT64_MAX && dr == UINT64_MAX)
			return 0;
		s = dl <= dr ? l : r;
		f.kind = HS_FIND_HEAP_BUFFER_OVERFLOW;
	}
	f.tid = (int32_t)hs_sys.gettid();
	f.ts_ns = hs_now();
	f.addr = a;
	f.size = s->size;
	f.offset = (uint32_t)(int32_t)(int64_t)(a - s->user);
	f.signo = sig;
	f.si_code = si->si_code;
#if defined(__x86_64__)
	/* the page-fault error code: bit 1 set = the access was a write */
	f.access = (ctx->uc_mcontext.gregs[REG_ERR] & 2) ? HS_ACCESS_WRITE : HS_ACCESS_READ;
#else
	(void)ctx;
	f.access = HS_ACCESS_UNKNOWN;
#endif
	f.stack = __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) ? hs_stack_from_signal(uc) : 0;
	f.stack3 = intern(&s->alloc);
	f.tid3 = s->alloc_tid;
	if (__atomic_load_n(&s->state, __ATOMIC_ACQUIRE) == SLOT_FREED) {
		f.stack2 = intern(&s->free);
		f.tid2 = s->free_tid;
	}
	strcpy(what, f.access == HS_ACCESS_WRITE ? "write" : "read");
	publish(t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE) && !was ? t : NULL,
		&f, what);
	if (!on_error_continue)
		return 0;
	/* continue: open the page so the access goes through; a guard page is closed again when a
	   neighbouring slot is next allocated */
	if (i < 0)
		guard_open[pg] = 1;
	sys_mprotect(lo + pg * page, page, PROT_READ | PROT_WRITE);
	return 1;
}
