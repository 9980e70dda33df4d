/* SPDX-License-Identifier: MIT */
/*
 * shim/faults.c — fault injection, deterministic by seed: make malloc, open
 * or close fail the way a loaded machine would (ENOMEM, EMFILE, EIO), so
 * the error paths that only run in production run here, and record each
 * injected failure with its stack, so the report says which one led to the
 * crash.  Anchors: libfiu (named failure points, probabilities, an errno)
 * and failmalloc (fail the Nth allocation, or beyond a space budget).
 *
 * What heisen-run passes (launcher/shaping.c; docs/interfaces.md "Fault
 * injection and chaos"):
 *
 *   HEISEN_SEED=S                      the run's seed
 *   HEISEN_FAIL=FN:P:ERRNO[:MIN],…     FN malloc|open|close, P in [0,1];
 *                                      MIN (malloc only): smaller
 *                                      allocations never fail
 *   HEISEN_FAIL_AFTER=N                the Nth call of those functions
 *                                      fails; the ones before never do
 *   HEISEN_HEAP_LIMIT=BYTES            an allocation that would take the
 *                                      live heap past BYTES fails (ENOMEM)
 *
 * The decision for one call is a hash of (seed, function, the thread's
 * ordinal, the thread's own count of calls of that function) compared with
 * P: the same seed makes the same decisions in the same thread whatever
 * the other threads do, and a single-threaded program fails at the same
 * calls in every run.  Threads get their ordinal at their first decision,
 * so in a multi-threaded program the ordinals (and with them the choices
 * of threads other than the first) follow the order threads first
 * allocate, which the kernel's scheduling decides.  --fail-after counts
 * calls over the whole process (an atomic counter): exact in a
 * single-threaded program, "about the Nth" otherwise.
 *
 * --heap-limit reads the heap checker's live byte count (the header's
 * heap_live_bytes, exact within 1 MiB per thread, heap_core.c count_flush):
 * without the heap checker (HEISEN_HEAP=0) it cannot, and says so once on
 * stderr.  Memory that does not come from malloc (CPython's small-object
 * arenas, which are mmap'd; numpy's huge pages) is not counted: the limit
 * is on malloc's heap, not on the process (heisen-run --mem-limit is).
 *
 * Never on the shim's own allocations (inside a hook) and never before
 * recording starts; the cost when off is HS_FAULT_*'s one branch.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "inject.h"
#include "shim.h"

int hs_faults_on;
int hs_inject_on;

struct rule {
	int on;
	uint64_t threshold;  /* fail when hash < threshold; UINT64_MAX with always */
	int always;          /* P == 1 */
	int err;
	uint64_t min_size;   /* malloc: smaller allocations are never eligible */
};

static struct rule rules[HS_FAULT_HEAP_LIMIT]; /* indexed by enum hs_fault_call - 1 */
static uint64_t seed;
static uint64_t fail_after;       /* 0 = not given */
static uint64_t calls;            /* [atomic] eligible calls so far, for fail_after */
static uint64_t heap_limit;       /* 0 = none */
static uint32_t next_ordinal;     /* [atomic] */

struct fault_tls {
	uint32_t ordinal;            /* 1 + the order of this thread's first decision; 0 = none yet */
	uint64_t n[HS_FAULT_HEAP_LIMIT];
};
static __thread struct fault_tls ftls __attribute__((tls_model("initial-exec")));

static uint64_t env_u64(const char *name)
{
	const char *v = getenv(name);
	return v && *v ? strtoull(v, NULL, 10) : 0;
}

/* Parse HEISEN_FAIL (see the top); malformed items are skipped with a line
 * on stderr (heisen-run checked them already). */
static void parse_fail(const char *v)
{
	while (v && *v) {
		const char *end = strchr(v, ',');
		size_t len = end ? (size_t)(end - v) : strlen(v);
		char item[96];
		if (len < sizeof item) {
			memcpy(item, v, len);
			item[len] = '\0';
			char *c1 = strchr(item, ':');
			unsigned call = 0;
			if (c1)
				*c1 = '\0';
			if (!strcmp(item, "malloc"))
				call = HS_FAULT_MALLOC;
			else if (!strcmp(item, "open"))
				call = HS_FAULT_OPEN;
			else if (!strcmp(item, "close"))
				call = HS_FAULT_CLOSE;
			if (call && c1) {
				char *rest;
				double p = strtod(c1 + 1, &rest);
				struct rule *r = &rules[call - 1];
				r->on = 1;
				r->err = call == HS_FAULT_MALLOC ? ENOMEM : call == HS_FAULT_OPEN ? EMFILE : EIO;
				if (*rest == ':') {
					r->err = (int)strtol(rest + 1, &rest, 10);
					if (*rest == ':')
						r->min_size = strtoull(rest + 1, &rest, 10);
				}
				r->always = p >= 1.0;
				r->threshold = p <= 0 ? 0 : r->always ? UINT64_MAX : (uint64_t)(p * 18446744073709551616.0);
			} else {
				hs_write_err("heisen: HEISEN_FAIL: an item that is not FN:P[:ERRNO[:MIN]] was skipped\n");
			}
		}
		v = end ? end + 1 : NULL;
	}
}

void hs_faults_init(void)
{
	seed = env_u64("HEISEN_SEED");
	parse_fail(getenv("HEISEN_FAIL"));
	fail_after = env_u64("HEISEN_FAIL_AFTER");
	heap_limit = env_u64("HEISEN_HEAP_LIMIT");
	if (fail_after && !rules[HS_FAULT_MALLOC - 1].on && !rules[HS_FAULT_OPEN - 1].on &&
	    !rules[HS_FAULT_CLOSE - 1].on) {
		rules[HS_FAULT_MALLOC - 1].on = 1;
		rules[HS_FAULT_MALLOC - 1].err = ENOMEM;
	}
	if (heap_limit && !(hs_seg.hdr && (hs_seg.hdr->flags & HS_HDR_HEAP))) {
		hs_write_err("heisen: HEISEN_HEAP_LIMIT needs the heap checker (HEISEN_HEAP=0 turned it off): "
			     "no heap limit in this process\n");
		heap_limit = 0;
	}
	hs_faults_on = rules[0].on || rules[1].on || rules[2].on || heap_limit;
	if (hs_faults_on)
		hs_inject_on |= HS_INJECT_FAULTS;
}

int hs_inject_alloc(size_t n)
{
	if (hs_chaos_on)
		hs_chaos_point(HS_CHAOS_MALLOC);
	return hs_faults_on ? hs_fault_alloc(n) : 0;
}

int hs_inject_close(int fd)
{
	if (hs_chaos_on)
		hs_chaos_point(HS_CHAOS_CLOSE);
	return hs_faults_on ? hs_fault_close(fd) : 0;
}

/* Record the injected failure in the calling thread's ring, with its stack. */
static void record(unsigned call, uint64_t arg, int err, uint64_t nth)
{
	struct hs_tls *t = hs_enter();
	if (!t)
		return;
	uint32_t stack = hs_stack_here();
	hs_rec(t, hs_now(), HS_REC_FAULT_INJECTED, stack, call, arg, (uint64_t)err | (nth << 16));
	hs_leave(t);
}

/* May the calling thread be made to fail at all?  Not inside the shim, not
 * before recording, not while exiting. */
static inline int eligible(void)
{
	struct hs_tls *t = &hs_tls;
	return __atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) && !t->in_hook && !t->dead && t->vfork_pid == 0;
}

/* The rule's decision for this call (see the top).  *nth gets the thread's
 * count of calls of that function, this one included. */
static int decide(unsigned call, uint64_t *nth)
{
	struct rule *r = &rules[call - 1];
	struct fault_tls *f = &ftls;
	if (!f->ordinal)
		f->ordinal = __atomic_add_fetch(&next_ordinal, 1, __ATOMIC_RELAXED);
	*nth = ++f->n[call - 1];
	if (fail_after) {
		/* relaxed: a count, ordered with nothing */
		uint64_t n = __atomic_add_fetch(&calls, 1, __ATOMIC_RELAXED);
		if (n < fail_after)
			return 0;
		if (n == fail_after)
			return 1;
	}
	if (r->always)
		return 1;
	if (!r->threshold)
		return 0;
	uint64_t h = hs_mix64(seed ^ hs_mix64(((uint64_t)call << 56) ^ ((uint64_t)f->ordinal << 40) ^ *nth));
	return h < r->threshold;
}

int hs_fault_alloc(size_t n)
{
	if (!eligible())
		return 0;
	int e = errno;
	int fail = 0;
	uint64_t nth = 0;
	if (heap_limit && hs_seg.hdr) {
		/* relaxed: a counter; the limit is as exact as it (see the top) */
		int64_t live = (int64_t)__atomic_load_n(&hs_seg.hdr->heap_live_bytes, __ATOMIC_RELAXED);
		if (live > 0 && (uint64_t)live + n > heap_limit) {
			record(HS_FAULT_HEAP_LIMIT, n, ENOMEM, ++ftls.n[HS_FAULT_HEAP_LIMIT - 1]);
			errno = e;
			return 1;
		}
	}
	struct rule *r = &rules[HS_FAULT_MALLOC - 1];
	if (r->on && n >= r->min_size && decide(HS_FAULT_MALLOC, &nth)) {
		record(HS_FAULT_MALLOC, n, r->err, nth);
		fail = 1;
	}
	errno = e;
	return fail;
}

int hs_fault_open(void)
{
	struct rule *r = &rules[HS_FAULT_OPEN - 1];
	uint64_t nth;
	if (!r->on || !eligible() || !decide(HS_FAULT_OPEN, &nth))
		return 0;
	int e = errno;
	record(HS_FAULT_OPEN, 0, r->err, nth);
	errno = e;
	return r->err;
}

int hs_fault_close(int fd)
{
	struct rule *r = &rules[HS_FAULT_CLOSE - 1];
	uint64_t nth;
	if (!r->on || fd < 0 || !eligible() || !decide(HS_FAULT_CLOSE, &nth))
		return 0;
	int e = errno;
	record(HS_FAULT_CLOSE, (uint64_t)fd, r->err, nth);
	errno = e;
	return r->err;
}
