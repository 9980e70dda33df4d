/* SPDX-License-Identifier: MIT */
/*
 * dumper/faults.c — reading injected failures out of the rings (see
 * faults.h).  A failure heisen injected is the likeliest cause of what
 * followed it, so the reports show the last ones with their stacks.
 */
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "snapshot.h"

const char *hs_fault_call_name(unsigned call)
{
	switch (call) {
	case HS_FAULT_MALLOC: return "malloc";
	case HS_FAULT_OPEN: return "open";
	case HS_FAULT_CLOSE: return "close";
	case HS_FAULT_HEAP_LIMIT: return "heap-limit";
	default: return "unknown";
	}
}

const char *hs_chaos_point_name(unsigned point)
{
	static const char *const names[] = {
		[HS_CHAOS_LOCK] = "lock",     [HS_CHAOS_UNLOCK] = "unlock", [HS_CHAOS_GIL_TAKE] = "gil-take",
		[HS_CHAOS_GIL_DROP] = "gil-drop", [HS_CHAOS_THREAD] = "thread-start", [HS_CHAOS_MALLOC] = "malloc",
		[HS_CHAOS_FREE] = "free",     [HS_CHAOS_CLOSE] = "close",
	};
	return point < sizeof names / sizeof names[0] && names[point] ? names[point] : "unknown";
}

const char *hs_chaos_action_name(unsigned action)
{
	switch (action) {
	case HS_CHAOS_YIELD: return "yield";
	case HS_CHAOS_SLEEP: return "sleep";
	case HS_CHAOS_MIGRATE: return "migrate";
	default: return "unknown";
	}
}

static int by_time(const void *a, const void *b)
{
	const struct hs_fault_ev *x = a, *y = b;
	return x->r.ts_ns < y->r.ts_ns ? -1 : x->r.ts_ns > y->r.ts_ns;
}

size_t hs_faults_read(struct hs_proc *p, struct hs_fault_ev *out, size_t max, size_t *total)
{
	return hs_ring_type_read(p, HS_REC_FAULT_INJECTED, out, max, total);
}

size_t hs_ring_type_read(struct hs_proc *p, uint32_t type, struct hs_fault_ev *out, size_t max, size_t *total)
{
	/* twice: a folded release reads as two records (hs_read_ring) */
	size_t nrec = 2 * (size_t)p->seg.hdr.ring_records, n = 0, all = 0;
	struct hs_record *buf = nrec ? malloc(nrec * sizeof *buf) : NULL;
	struct hs_fault_ev *evs = NULL;
	*total = 0;
	if (!buf)
		return 0;
	for (uint32_t i = 0; i < p->nthreads; i++) {
		size_t k = hs_read_ring(&p->seg, p->threads[i].slot, buf, nrec);
		for (size_t j = 0; j < k; j++) {
			if (buf[j].type != type)
				continue;
			struct hs_fault_ev *v = realloc(evs, (all + 1) * sizeof *v);
			if (!v)
				break;
			evs = v;
			evs[all].tid = p->threads[i].t.tid;
			evs[all++].r = buf[j];
		}
	}
	free(buf);
	if (all)
		qsort(evs, all, sizeof *evs, by_time);
	n = all < max ? all : max;
	if (n && all > max) {
		/* the first: the cause of a cascade (a limit refuses every later call too) */
		out[0] = evs[0];
		memcpy(out + 1, evs + (all - (n - 1)), (n - 1) * sizeof *out);
	} else if (n) {
		memcpy(out, evs, n * sizeof *out);
	}
	free(evs);
	*total = all;
	return n;
}
