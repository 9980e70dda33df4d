/* SPDX-License-Identifier: MIT */
/*
 * dumper/analyze.c — findings: recorded ones, and deadlocks and hangs
 * computed from the wait-for graph.
 *
 * The wait-for graph of a process has one node per thread slot copied at
 * load time that waits for a lock, and an edge T -> U when U holds that
 * lock in a mode that blocks T (two readers do not block each other; a
 * reader of a writer-preferring rwlock also queues behind a waiting writer).
 * A thread is blocked when it has waited longer than the hang timeout in a
 * live process, or waits at all in a process that is gone (its last state
 * is final).  Strongly connected components of two or more threads with at
 * least one blocked member are deadlocks (Tarjan): the cycle is judged as a
 * whole, so a cycle whose members started waiting a moment apart is one
 * deadlock from the first look, never first a hang and then a deadlock
 * (heisen-run dedupes by signature).  Blocked threads of a live process
 * outside those cycles are one hang finding per process.  Waits on
 * condition variables alone are not hangs (see is_blocked).
 *
 * The GIL is a lock of that graph too: a thread waiting for it (wait kind
 * HS_WAIT_GIL) is blocked by whoever holds it, known from that thread's
 * wait word (HS_WAITF_HOLDS_GIL), its held stack, or a snapshot it took
 * after the waiter began to wait.  A process that made no progress at all
 * (--stalled, judged outside: ring records and CPU time) is a hang of every
 * thread, whatever they block in (read, poll, a futex inside a library).
 *
 * fd-leak is computed here from the fd table copied at load:
 * the fds a process created itself (not inherited, not the standard
 * streams) that are still open, grouped by creation stack.  At a hang (or
 * a deadlock) every such fd is shown: the hang may be waiting for one of
 * them to close (seed 001) — but only those the kernel still has
 * (/proc/PID/fd, the same kind of object): a library that closes with
 * syscall(SYS_close) closes behind heisen's back.  At the end of a process
 * only the sites that left HS_FD_LEAK_MIN or more open count: one
 * listening socket or log file open at exit is how programs end.  At a
 * normal end (exit) the site must also have grown with the run, as a heap
 * leak checker asks of a leak: its open fds created across
 * HS_FD_LEAK_PHASES or more of the run's HS_FD_RUN_PHASES parts (a leak in
 * a loop), or HS_FD_LEAK_MANY or more of them; a working set made once
 * (daemon threads inside `with open()`, a process pool's sentinel pipes)
 * is "open at exit", in the context (README "File descriptors").
 * Design: docs/design.md "Hangs"; docs/interfaces.md "heisen-dump" and "Python
 * and the GIL".
 */
#include "analyze.h"
#include "report.h"

#include <errno.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const kind_names[HS_F_KINDS] = {
	[HS_F_CRASH] = "crash",
	[HS_F_OOM_KILL] = "oom-kill",
	[HS_F_KILLED] = "killed",
	[HS_F_DEADLOCK] = "deadlock",
	[HS_F_DOUBLE_FREE] = "double-free",
	[HS_F_USE_AFTER_FREE] = "use-after-free",
	[HS_F_HEAP_BUFFER_OVERFLOW] = "heap-buffer-overflow",
	[HS_F_HEAP_OVERFLOW] = "heap-overflow",
	[HS_F_INVALID_FREE] = "invalid-free",
	[HS_F_STALE_CLOSE] = "stale-close",
	[HS_F_DOUBLE_CLOSE] = "double-close",
	[HS_F_SELF_DEADLOCK] = "self-deadlock",
	[HS_F_HANG] = "hang",
	[HS_F_POTENTIAL] = "potential-deadlock",
	[HS_F_FD_LEAK] = "fd-leak",
	[HS_F_LIMIT] = "limit",
};

const char *hs_fkind_name(enum hs_fkind k)
{
	return (unsigned)k < HS_F_KINDS ? kind_names[k] : "unknown";
}

static struct hs_fnd *add_finding(struct hs_findings *out, enum hs_fkind kind, struct hs_proc *p)
{
	struct hs_fnd *v = realloc(out->v, (out->n + 1) * sizeof *v);
	if (!v)
		return NULL;
	out->v = v;
	v = &v[out->n++];
	memset(v, 0, sizeof *v);
	v->kind = kind;
	v->proc = p;
	return v;
}

struct hs_fnd *hs_finding_new(struct hs_findings *out, enum hs_fkind kind, struct hs_proc *p)
{
	return add_finding(out, kind, p);
}

/* ---- wait-for graph ----------------------------------------------------- */

static bool waits_for_lock(const struct hs_tsnap *t)
{
	return t->t.state == HS_THREAD_LIVE &&
	       (t->t.wait_kind == HS_WAIT_LOCK || t->t.wait_kind == HS_WAIT_GIL);
}

static bool same_lock(const struct hs_tsnap *w, uint64_t addr, uint32_t lock)
{
	if (w->t.wait_addr)
		return addr == w->t.wait_addr;
	return w->t.wait_lock && lock == w->t.wait_lock;
}

bool hs_holds_gil(const struct hs_proc *p, const struct hs_tsnap *t, uint64_t since)
{
	uint64_t gil = p->seg.hdr.gil_lock;
	if (t->t.state != HS_THREAD_LIVE)
		return false;
	if ((t->t.wait_kind == HS_WAIT_LOCK || t->t.wait_kind == HS_WAIT_COND) &&
	    (t->t.wait_flags & HS_WAITF_HOLDS_GIL))
		return true;
	for (uint32_t i = 0; gil && i < t->t.held_count; i++)
		if (t->t.held[i].lock == gil)
			return true;
	return t->t.snap_ns && t->t.snap_ns >= since && (t->t.snap_flags & HS_SNAPF_HOLDS_GIL);
}

bool hs_snapshot_fresh(const struct hs_fnd *f, const struct hs_tsnap *t)
{
	return t->t.snap_ns && t->t.snap_stack && t->t.snap_ns >= f->since_ns;
}

const char *hs_snapshot_why(const struct hs_tsnap *t)
{
	if (t->t.snap_flags & HS_SNAPF_CRASH)
		return "crash";
	if (t->t.snap_flags & HS_SNAPF_REQUESTED)
		return "hang";
	return "snapshot";
}

/* Does u block w?  Either u holds the lock w waits for in a conflicting
 * mode, or w is a queueing reader and u waits to write the same lock, or w
 * waits for the GIL and u holds it. */
static bool blocks(const struct hs_proc *p, const struct hs_tsnap *w, const struct hs_tsnap *u)
{
	if (u == w || u->t.state != HS_THREAD_LIVE || !waits_for_lock(w))
		return false;
	if (w->t.wait_kind == HS_WAIT_GIL && hs_holds_gil(p, u, w->t.wait_since_ns ? w->t.wait_since_ns : 1))
		return true;
	for (uint32_t i = 0; i < u->t.held_count; i++) {
		const struct hs_held *h = &u->t.held[i];
		if (same_lock(w, h->addr, h->lock) &&
		    (w->t.wait_mode == HS_MODE_WRITE || h->mode == HS_MODE_WRITE))
			return true;
	}
	return w->t.wait_mode == HS_MODE_READ && waits_for_lock(u) && u->t.wait_mode == HS_MODE_WRITE &&
	       same_lock(w, u->t.wait_addr, u->t.wait_lock);
}

size_t hs_holders(const struct hs_proc *p, const struct hs_tsnap *t, const struct hs_tsnap **out,
		  size_t max)
{
	size_t n = 0;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (blocks(p, t, &p->threads[i])) {
			if (n < max)
				out[n] = &p->threads[i];
			n++;
		}
	return n;
}

static uint64_t reference_ns(const struct hs_session *s, const struct hs_proc *p)
{
	uint64_t end;
	if (hs_proc_alive(p))
		return s->now_ns;
	end = hs_seg_end_ns((struct hs_seg *)&p->seg);
	return end ? end : s->now_ns;
}

double hs_wait_seconds(const struct hs_session *s, const struct hs_proc *p, const struct hs_tsnap *t)
{
	uint64_t ref = reference_ns(s, p);
	if (t->t.wait_kind == HS_WAIT_NONE || t->t.wait_since_ns == 0 || t->t.wait_since_ns > ref)
		return 0.0;
	return (double)(ref - t->t.wait_since_ns) / 1e9;
}

/*
 * Only lock and GIL waits block.  A condition-variable wait is how an idle
 * thread sleeps (thread pools, OpenBLAS workers): counting it would call
 * every quiet service hung, and heisen-run may kill on a hang.  A thread
 * stuck behind a cond waiter still shows: it waits for a lock, and the
 * report says its holder waits on a condition variable.
 */
static bool is_blocked(const struct hs_session *s, const struct hs_proc *p, const struct hs_tsnap *t,
		       double timeout)
{
	if (!waits_for_lock(t))
		return false;
	return !hs_proc_alive(p) || hs_wait_seconds(s, p, t) >= timeout;
}

/* Tarjan's strongly connected components over the blocked threads. */
struct scc {
	const struct hs_proc *p;
	const bool *waiting;
	int *index, *low, *stack, *comp;
	bool *on_stack;
	int next_index, sp, ncomp;
};

static void strongconnect(struct scc *g, uint32_t v)
{
	g->index[v] = g->low[v] = g->next_index++;
	g->stack[g->sp++] = (int)v;
	g->on_stack[v] = true;
	for (uint32_t w = 0; w < g->p->nthreads; w++) {
		if (!g->waiting[w] || !blocks(g->p, &g->p->threads[v], &g->p->threads[w]))
			continue;
		if (g->index[w] < 0) {
			strongconnect(g, w);
			if (g->low[w] < g->low[v])
				g->low[v] = g->low[w];
		} else if (g->on_stack[w] && g->index[w] < g->low[v]) {
			g->low[v] = g->index[w];
		}
	}
	if (g->low[v] != g->index[v])
		return;
	int w;
	do {
		w = g->stack[--g->sp];
		g->on_stack[w] = false;
		g->comp[w] = g->ncomp;
	} while (w != (int)v);
	g->ncomp++;
}

static int by_tid(const void *a, const void *b)
{
	const struct hs_tsnap *x = *(const struct hs_tsnap *const *)a, *y = *(const struct hs_tsnap *const *)b;
	return (x->t.tid > y->t.tid) - (x->t.tid < y->t.tid);
}

/* Add one finding holding the threads i with sel[i] == key. */
static int add_thread_finding(struct hs_findings *out, enum hs_fkind kind, struct hs_proc *p,
			      const int *sel, int key)
{
	struct hs_fnd *f;
	uint32_t n = 0;
	for (uint32_t i = 0; i < p->nthreads; i++)
		n += sel[i] == key;
	if (!(f = add_finding(out, kind, p)) || !(f->threads = calloc(n, sizeof *f->threads)))
		return -1;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (sel[i] == key)
			f->threads[f->nthreads++] = &p->threads[i];
	qsort(f->threads, f->nthreads, sizeof *f->threads, by_tid);
	return 0;
}

/* Components of two or more threads with a blocked member are deadlocks;
 * sel marks their members with the component, everyone else with -1. */
static int report_cycles(struct hs_findings *out, struct hs_proc *p, struct scc *g, const bool *blocked,
			 int *sel)
{
	int *size = calloc((size_t)g->ncomp + 1, sizeof *size);
	bool *old = calloc((size_t)g->ncomp + 1, sizeof *old);
	int rc = 0;
	if (!size || !old) {
		free(size), free(old);
		return -1;
	}
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (g->comp[i] >= 0) {
			size[g->comp[i]]++;
			old[g->comp[i]] |= blocked[i];
		}
	for (uint32_t i = 0; i < p->nthreads; i++)
		sel[i] = (g->comp[i] >= 0 && size[g->comp[i]] > 1 && old[g->comp[i]]) ? g->comp[i] : -1;
	for (int c = 0; c < g->ncomp && rc == 0; c++)
		if (size[c] > 1 && old[c])
			rc = add_thread_finding(out, HS_F_DEADLOCK, p, sel, c);
	free(size), free(old);
	return rc;
}

static int analyze_waits(const struct hs_session *s, struct hs_proc *p, double timeout,
			 struct hs_findings *out)
{
	uint32_t n = p->nthreads, nblocked = 0;
	struct scc g = {.p = p};
	bool *waiting = calloc(2 * (size_t)n + 1, sizeof *waiting), *blocked = waiting + n;
	int *ints = malloc((4 * (size_t)n + 1) * sizeof *ints);
	int *sel = malloc(((size_t)n + 1) * sizeof *sel);
	bool *on_stack = calloc(n + 1, sizeof *on_stack);
	int rc = -1;

	if (!waiting || !ints || !sel || !on_stack)
		goto done;
	g.waiting = waiting, g.on_stack = on_stack;
	g.index = ints, g.low = ints + n, g.stack = ints + 2 * n, g.comp = ints + 3 * n;
	for (uint32_t i = 0; i < n; i++) {
		waiting[i] = waits_for_lock(&p->threads[i]);
		blocked[i] = is_blocked(s, p, &p->threads[i], timeout);
		nblocked += blocked[i];
		g.index[i] = g.comp[i] = -1;
	}
	rc = 0;
	if (nblocked == 0)
		goto done;
	for (uint32_t i = 0; i < n; i++)
		if (waiting[i] && g.index[i] < 0)
			strongconnect(&g, i);
	if ((rc = report_cycles(out, p, &g, blocked, sel)) != 0 || !hs_proc_alive(p))
		goto done;
	/* The rest of the blocked threads of a live process hang. */
	for (uint32_t i = 0; i < n; i++)
		sel[i] = (blocked[i] && sel[i] < 0) ? 0 : -1;
	for (uint32_t i = 0; i < n; i++)
		if (sel[i] == 0) {
			rc = add_thread_finding(out, HS_F_HANG, p, sel, 0);
			break;
		}
done:
	free(waiting), free(ints), free(sel), free(on_stack);
	return rc;
}

/* ---- recorded findings -------------------------------------------------- */

/* The writer stores a cycle from the edge that closed it; it reads more
 * naturally from the edge that was made first.  Rotation keeps the chain. */
static int rotate_oldest_first(struct hs_fnd *f)
{
	uint32_t first = 0, n = f->nedges;
	struct hs_edge *e = malloc(n * sizeof *e);
	uint32_t *id = malloc(n * sizeof *id);
	if (!e || !id) {
		free(e), free(id);
		return -1;
	}
	for (uint32_t j = 1; j < n; j++)
		if (f->edges[j].ts_ns < f->edges[first].ts_ns)
			first = j;
	for (uint32_t j = 0; j < n; j++) {
		e[j] = f->edges[(first + j) % n];
		id[j] = f->edge_ids[(first + j) % n];
	}
	free(f->edges), free(f->edge_ids);
	f->edges = e, f->edge_ids = id;
	return 0;
}

static int copy_cycle(struct hs_fnd *f)
{
	struct hs_seg *seg = &f->proc->seg;
	if (f->rec.n == 0)
		return 0;
	f->edges = calloc(f->rec.n, sizeof *f->edges);
	f->edge_ids = calloc(f->rec.n, sizeof *f->edge_ids);
	if (!f->edges || !f->edge_ids)
		return -1;
	for (uint32_t j = 0; j < f->rec.n; j++) {
		uint32_t id = hs_read_cycle_edge(seg, &f->rec, j);
		if (hs_read_edge(seg, id, &f->edges[f->nedges]) != 0) {
			hs_seg_complain(seg, "finding %u: edge %u (id %u) is not a valid edge", f->index, j, id);
			continue;
		}
		f->edge_ids[f->nedges++] = id;
	}
	for (uint32_t j = 0; j + 1 < f->nedges; j++)
		if (f->edges[j].to != f->edges[j + 1].from)
			hs_seg_complain(seg, "finding %u: edges do not form a chain at %u", f->index, j);
	if (f->nedges == f->rec.n)
		return rotate_oldest_first(f);
	return 0;
}

/* f->others: the threads of p that other(p, f, t) picks, by tid. */
static int collect_others(struct hs_proc *p, struct hs_fnd *f,
			  bool (*other)(const struct hs_proc *, const struct hs_fnd *, const struct hs_tsnap *))
{
	for (uint32_t i = 0; i < p->nthreads; i++) {
		const struct hs_tsnap *t = &p->threads[i];
		if (!other(p, f, t))
			continue;
		if (!f->others && !(f->others = calloc(p->nthreads, sizeof *f->others)))
			return -1;
		f->others[f->nothers++] = t;
	}
	if (f->nothers)
		qsort(f->others, f->nothers, sizeof *f->others, by_tid);
	return 0;
}

/* A crash's other threads: those whose snapshot this crash asked for. */
static bool crash_other(const struct hs_proc *p, const struct hs_fnd *f, const struct hs_tsnap *t)
{
	(void)p;
	return t->t.tid != f->rec.tid && (t->t.snap_flags & HS_SNAPF_CRASH) && hs_snapshot_fresh(f, t);
}

static int crash_others(struct hs_proc *p, struct hs_fnd *f)
{
	f->since_ns = f->rec.ts_ns;
	return collect_others(p, f, crash_other);
}

/* A recorded finding's three stack ids (stack, stack2, stack3, named by
 * what[]), checked once here so that the reports can trust them: an id
 * beyond the stacks table is complained about and zeroed (the report then
 * says "no stack recorded"). */
static void check_stack_ids(struct hs_fnd *f, const char *const what[3])
{
	struct hs_seg *seg = &f->proc->seg;
	uint32_t cap = seg->hdr.tables[HS_T_STACKS].capacity;
	uint32_t *ids[] = {&f->rec.stack, &f->rec.stack2, &f->rec.stack3};
	for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
		if (*ids[i] >= cap) {
			hs_seg_complain(seg, "finding %u: %s stack id %u out of range (capacity %u)", f->index, what[i],
					*ids[i], cap);
			*ids[i] = 0;
		}
}

/*
 * A heap finding's ids: the stacks, and an invalid free's offset into its
 * block (offset), which must lie inside the block, its canary included,
 * and below the address, or the block is not named.
 */
static void check_heap(struct hs_fnd *f)
{
	static const char *const what[] = {"free", "first free", "allocation"};
	struct hs_seg *seg = &f->proc->seg;
	check_stack_ids(f, what);
	if (hs_fkind_guard(f->kind)) {
		/* the block starts at addr - offset (offset a signed 32-bit number, format.h) */
		f->in_block = true;
		f->block = f->rec.addr - (uint64_t)(int64_t)(int32_t)f->rec.offset;
		if (f->rec.access > HS_ACCESS_WRITE) {
			hs_seg_complain(seg, "finding %u: unknown access %u", f->index, f->rec.access);
			f->rec.access = HS_ACCESS_UNKNOWN;
		}
		return;
	}
	if (f->kind != HS_F_INVALID_FREE || f->rec.size == 0 || f->rec.offset == 0)
		return;
	/* the canary is at most 23 bytes; allow 32 */
	if ((uint64_t)f->rec.offset > f->rec.addr || (uint64_t)f->rec.offset >= f->rec.size + 32) {
		hs_seg_complain(seg, "finding %u: offset %u is outside the %llu-byte block", f->index, f->rec.offset,
				(unsigned long long)f->rec.size);
		return;
	}
	f->in_block = true;
	f->block = f->rec.addr - f->rec.offset;
}

/* An fd finding's stacks and its history (format.h "fd findings"), copied:
 * events that are not published are left out, bad ones complained. */
static void check_fd(struct hs_fnd *f)
{
	static const char *const what[] = {"close", "earlier", "creation"};
	struct hs_seg *seg = &f->proc->seg;
	uint32_t n = f->rec.n;
	check_stack_ids(f, what);
	if (n > HS_FD_FINDING_EVENTS) {
		hs_seg_complain(seg, "finding %u: %u history events > %u, clamped", f->index, n, HS_FD_FINDING_EVENTS);
		n = HS_FD_FINDING_EVENTS;
	}
	for (uint32_t i = 0; i < n; i++) {
		struct hs_fd_event *e = &f->hist[f->nhist];
		if (hs_read_fd_history(seg, f->rec.lock + i, e) != 0)
			continue;
		if (e->stack >= seg->hdr.tables[HS_T_STACKS].capacity) {
			hs_seg_complain(seg, "finding %u: history event %u stack id %u out of range", f->index, i, e->stack);
			e->stack = 0;
		}
		f->nhist++;
	}
	if (f->rec.offset < HS_FD_RULE_EBADF || f->rec.offset > HS_FD_RULE_SAME_SITES) {
		hs_seg_complain(seg, "finding %u: unknown fd rule %u", f->index, f->rec.offset);
		f->rec.offset = 0;
	}
}

/* Crash findings that are heisen's own abort after a heap finding of the
 * same process (HEISEN_ON_HEAP_ERROR=abort): a SIGABRT sent by the process
 * itself (si_code <= 0: abort() raises it) at or after a heap finding of the
 * same thread.  A finding seen more than once may have been made by another
 * thread first: the shim records one finding per signature and counts the
 * repeats, so a second thread that met the same double free aborts with the
 * first thread's tid on the finding. */
static void mark_heap_aborts(struct hs_findings *out, size_t first)
{
	for (size_t i = first; i < out->n; i++) {
		struct hs_fnd *c = &out->v[i];
		if (c->kind != HS_F_CRASH || c->rec.signo != SIGABRT || c->rec.si_code > 0)
			continue;
		for (size_t k = first; k < out->n; k++)
			if (hs_fkind_heap(out->v[k].kind) && out->v[k].rec.ts_ns <= c->rec.ts_ns &&
			    (c->rec.tid == out->v[k].rec.tid || out->v[k].rec.count > 1))
				c->heap_abort = true;
	}
}

static int recorded(struct hs_proc *p, struct hs_findings *out)
{
	static const enum hs_fkind kinds[] = {
		[HS_FIND_POTENTIAL_DEADLOCK] = HS_F_POTENTIAL,
		[HS_FIND_SELF_DEADLOCK] = HS_F_SELF_DEADLOCK,
		[HS_FIND_CRASH] = HS_F_CRASH,
		[HS_FIND_DOUBLE_FREE] = HS_F_DOUBLE_FREE,
		[HS_FIND_INVALID_FREE] = HS_F_INVALID_FREE,
		[HS_FIND_HEAP_OVERFLOW] = HS_F_HEAP_OVERFLOW,
		[HS_FIND_DOUBLE_CLOSE] = HS_F_DOUBLE_CLOSE,
		[HS_FIND_STALE_CLOSE] = HS_F_STALE_CLOSE,
		[HS_FIND_USE_AFTER_FREE] = HS_F_USE_AFTER_FREE,
		[HS_FIND_HEAP_BUFFER_OVERFLOW] = HS_F_HEAP_BUFFER_OVERFLOW,
	};
	size_t first = out->n;
	uint32_t n = hs_seg_count(&p->seg, HS_T_FINDINGS);
	for (uint32_t i = 0; i < n; i++) {
		struct hs_finding rec;
		struct hs_fnd *f;
		if (hs_read_finding(&p->seg, i, &rec) != 0)
			continue;
		if (!(f = add_finding(out, kinds[rec.kind], p)))
			return -1;
		f->index = i;
		f->rec = rec;
		if (f->kind == HS_F_CRASH && crash_others(p, f) != 0)
			return -1;
		if (hs_fkind_heap(f->kind))
			check_heap(f);
		if (hs_fkind_fd(f->kind))
			check_fd(f);
		if (f->kind != HS_F_POTENTIAL)
			continue;
		if (copy_cycle(f) != 0)
			return -1;
		if (f->nedges == 0) {
			hs_seg_complain(&p->seg, "finding %u: potential deadlock without a valid edge, skipped", i);
			out->n--;
		}
	}
	mark_heap_aborts(out, first);
	return 0;
}

static int by_severity(const void *a, const void *b)
{
	const struct hs_fnd *x = a, *y = b;
	if (x->kind != y->kind)
		return x->kind < y->kind ? -1 : 1;
	if (x->proc != y->proc)
		return x->proc < y->proc ? -1 : 1; /* procs are sorted by pid */
	return (x->index > y->index) - (x->index < y->index);
}

/* The segment of pid that a stall is about: the live image, else the last. */
static struct hs_proc *stalled_proc(struct hs_session *s, int32_t pid)
{
	struct hs_proc *best = NULL;
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		if (p->seg.hdr.pid != pid)
			continue;
		if (hs_proc_alive(p))
			return p;
		best = p; /* sorted by image: the last one wins */
	}
	return best;
}

/* A lock-wait hang's other threads: the live threads of p it names neither
 * blocked nor, through them, holding: the report still shows each of them
 * and where it is, or why that is unknown — a hang report loses no thread. */
static bool lock_wait_other(const struct hs_proc *p, const struct hs_fnd *f, const struct hs_tsnap *t)
{
	if (t->t.state != HS_THREAD_LIVE)
		return false;
	for (uint32_t k = 0; k < f->nthreads; k++) {
		const struct hs_tsnap *h[4];
		size_t nh = hs_holders(p, f->threads[k], h, 4);
		if (f->threads[k] == t)
			return false;
		for (size_t j = 0; j < nh && j < 4; j++)
			if (h[j] == t)
				return false; /* shown as a holder already */
	}
	return true;
}

/* The stall of p: a hang of every live thread, instead of its lock-wait
 * hang; nothing when a deadlock already explains it. */
static int add_stall(struct hs_session *s, struct hs_proc *p, const struct hs_stall *st, struct hs_findings *out)
{
	double seconds = st->seconds;
	uint64_t since = st->since_ns;
	struct hs_fnd *f;
	uint64_t span = seconds > 0 ? (uint64_t)(seconds * 1e9) : 0;
	uint64_t ref = reference_ns(s, p);
	uint32_t n = 0;
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i].proc == p && out->v[i].kind == HS_F_DEADLOCK)
			return 0;
	/* judged per thread, with a thread blocked on a lock past the timeout:
	 * the lock-wait hang says more (who holds the lock, where) */
	for (size_t i = 0; st->threads && i < out->n; i++)
		if (out->v[i].proc == p && out->v[i].kind == HS_F_HANG && out->v[i].stalled_seconds <= 0)
			return collect_others(p, &out->v[i], lock_wait_other);
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i].proc == p && out->v[i].kind == HS_F_HANG) {
			free(out->v[i].threads);
			free(out->v[i].others);
			memmove(&out->v[i], &out->v[i + 1], (out->n - i - 1) * sizeof out->v[0]);
			out->n--, i--;
		}
	for (uint32_t i = 0; i < p->nthreads; i++)
		n += p->threads[i].t.state == HS_THREAD_LIVE;
	if (!(f = add_finding(out, HS_F_HANG, p)) || !(f->threads = calloc(n + 1, sizeof *f->threads)))
		return -1;
	f->stalled_seconds = seconds > 0 ? seconds : 1e-9;
	f->stall = st;
	f->since_ns = since ? since : ref > span ? ref - span : 0;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (p->threads[i].t.state == HS_THREAD_LIVE)
			f->threads[f->nthreads++] = &p->threads[i];
	qsort(f->threads, f->nthreads, sizeof *f->threads, by_tid);
	return 0;
}

/* Is a below b in the process tree? */
static bool below(const struct hs_pnode *a, const struct hs_pnode *b)
{
	for (unsigned hops = 0; a && hops < 4096; hops++, a = a->parent)
		if (a->parent == b)
			return true;
	return false;
}

/* The nearest descendant of f's process that has a stalled hang too, 0 if none. */
static int32_t stalled_descendant(const struct hs_findings *out, const struct hs_fnd *f)
{
	const struct hs_pnode *me = f->proc->info ? f->proc->info->node : NULL;
	const struct hs_pnode *best = NULL;
	for (size_t i = 0; me && i < out->n; i++) {
		const struct hs_pnode *n = out->v[i].proc->info ? out->v[i].proc->info->node : NULL;
		if (out->v[i].kind != HS_F_HANG || out->v[i].stalled_seconds <= 0 || !n || !below(n, me))
			continue;
		if (!best || n->depth < best->depth)
			best = n;
	}
	return best ? best->pid : 0;
}

/* ---- fd-leak -------------------------------------------------------------- */

/* Created by this image and still open; not a standard stream. */
static bool leak_candidate(const struct hs_fdsnap *d)
{
	return d->f.state == HS_FDS_OPEN && d->fd > 2 && !(d->f.flags & (HS_FDF_INHERITED | HS_FDF_UNSEEN));
}

static int by_group_size(const void *a, const void *b)
{
	const struct hs_fd_group *x = a, *y = b;
	if (x->nfds != y->nfds)
		return x->nfds > y->nfds ? -1 : 1;
	return x->fds[0]->fd - y->fds[0]->fd;
}

static void free_groups(struct hs_fd_group *g, uint32_t n)
{
	for (uint32_t i = 0; i < n; i++)
		free(g[i].fds);
	free(g);
}

/*
 * At a hang, the process is alive: does the kernel still have fd d as the
 * object heisen recorded?  Its /proc/PID/fd link gone (closed behind
 * heisen's back), or of another kind (closed, and the number reused
 * unseen): no.  A link that cannot be read for another reason: yes.
 */
static bool still_open(const struct hs_proc *p, const struct hs_fdsnap *d)
{
	char path[64], link[256];
	ssize_t n;
	unsigned kind;
	snprintf(path, sizeof path, "/proc/%d/fd/%d", (int)p->seg.hdr.pid, (int)d->fd);
	if ((n = readlink(path, link, sizeof link - 1)) < 0)
		return errno != ENOENT;
	link[n] = '\0';
	if (!strncmp(link, "socket:", 7))
		kind = HS_FDK_SOCKET;
	else if (!strncmp(link, "pipe:", 5))
		kind = HS_FDK_PIPE;
	else if (link[0] == '/')
		kind = HS_FDK_FILE;
	else
		return true; /* anon_inode: eventfd, epoll ... not told apart here */
	switch (d->f.kind) {
	case HS_FDK_SOCKET:
	case HS_FDK_PIPE:
		return kind == d->f.kind;
	case HS_FDK_FILE:
	case HS_FDK_DIR:
	case HS_FDK_MEMFD:
		return kind == HS_FDK_FILE;
	default:
		return true; /* received, unknown: any */
	}
}

/* In how many of the run's HS_FD_RUN_PHASES parts group g's fds were created. */
static unsigned phases(const struct hs_proc *p, const struct hs_fd_group *g)
{
	uint64_t start = p->seg.hdr.start_mono_ns, end = p->info ? p->info->last_ns : 0, seen = 0;
	unsigned n = 0;
	for (uint32_t i = 0; i < g->nfds; i++)
		if (g->fds[i]->f.ts_ns > end)
			end = g->fds[i]->f.ts_ns;
	if (end <= start)
		return 1;
	for (uint32_t i = 0; i < g->nfds; i++) {
		uint64_t ts = g->fds[i]->f.ts_ns < start ? start : g->fds[i]->f.ts_ns;
		unsigned k = (unsigned)((ts - start) * (unsigned __int128)HS_FD_RUN_PHASES / (end - start + 1));
		seen |= 1ull << (k < HS_FD_RUN_PHASES ? k : HS_FD_RUN_PHASES - 1);
	}
	for (; seen; seen &= seen - 1)
		n++;
	return n;
}

/* p's fd-leak finding, if it has one: see the top comment. */
static int add_fd_leak(struct hs_findings *out, struct hs_proc *p, bool at_hang)
{
	bool exited = p->pstate == HS_P_EXITED;
	struct hs_fd_group *g = calloc(p->nfds + 1, sizeof *g);
	uint32_t ng = 0, kept = 0, total = 0;
	struct hs_fnd *f;
	if (!g)
		return -1;
	for (uint32_t i = 0; i < p->nfds; i++) {
		const struct hs_fdsnap *d = &p->fds[i];
		uint32_t k = 0;
		if (!leak_candidate(d) || (at_hang && hs_proc_alive(p) && !still_open(p, d)))
			continue;
		while (k < ng && g[k].stack != d->f.stack)
			k++;
		if (k == ng) {
			g[ng].stack = d->f.stack;
			if (!(g[ng++].fds = calloc(p->nfds, sizeof *g[k].fds))) {
				free_groups(g, ng);
				return -1;
			}
		}
		g[k].fds[g[k].nfds++] = d;
	}
	for (uint32_t k = 0; k < ng; k++) {
		if (!at_hang && g[k].nfds < HS_FD_LEAK_MIN) {
			free(g[k].fds);
			continue;
		}
		if (!at_hang && exited && g[k].nfds < HS_FD_LEAK_MANY && phases(p, &g[k]) < HS_FD_LEAK_PHASES) {
			if (p->info)
				p->info->fds_open_at_exit += g[k].nfds; /* a working set made once */
			free(g[k].fds);
			continue;
		}
		total += g[k].nfds;
		g[kept++] = g[k];
	}
	if (kept == 0) {
		free(g);
		return 0;
	}
	qsort(g, kept, sizeof *g, by_group_size);
	if (!(f = add_finding(out, HS_F_FD_LEAK, p))) {
		free_groups(g, kept);
		return -1;
	}
	f->groups = g;
	f->ngroups = kept;
	f->nleaked = total;
	f->at_hang = at_hang;
	return 0;
}

/* fd-leak findings: every hung (or deadlocked) process, every ended one. */
static int fd_leaks(struct hs_session *s, struct hs_findings *out)
{
	size_t n = out->n;
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		bool hung = false;
		for (size_t k = 0; k < n; k++)
			hung |= out->v[k].proc == p && (out->v[k].kind == HS_F_HANG || out->v[k].kind == HS_F_DEADLOCK);
		if (!(hs_seg_flags(&p->seg) & HS_HDR_FDS))
			continue;
		if (hung || (!hs_proc_alive(p) && p->pstate != HS_P_EXECED))
			if (add_fd_leak(out, p, hung) != 0)
				return -1;
	}
	return 0;
}

/*
 * A process that changed its uid to one that cannot write the session
 * directory (HS_HDR_UID_CHANGED, shim/proc.c): what it did after an exec,
 * its fork children after the drop and, unless it ended in this image by
 * itself, how it ended are not recorded.  That is a `limit` finding (loud,
 * exit status 1), never "killed without running any code" and never
 * nothing — unless the same image ended by itself (an exit, crash or
 * terminating signal the shim recorded) and forked nothing after the drop.
 */
static int unrecorded_after_uid_change(struct hs_session *s, struct hs_findings *out)
{
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		uint64_t nrec = p->seg.hdr.ring_records, drop_ns = 0, ruid = 0, euid = 0, err = 0;
		unsigned forks = 0;
		char kids[96] = "";
		size_t kused = 0;
		bool ended = false, known = false;
		struct hs_record *ev;
		struct hs_fnd *f;
		unsigned st = HS_STATE_OF(p->state_word);
		if (!(hs_seg_flags(&p->seg) & HS_HDR_UID_CHANGED))
			continue;
		nrec *= 2; /* a folded release reads as two records (hs_read_ring) */
		ev = nrec ? calloc(nrec, sizeof *ev) : NULL;
		for (uint32_t k = 0; ev && k < p->nthreads; k++) {
			size_t n = hs_read_ring(&p->seg, p->threads[k].slot, ev, nrec);
			for (size_t r = 0; r < n; r++) {
				if (ev[r].type == HS_REC_UID_CHANGED && (!known || ev[r].ts_ns < drop_ns)) {
					known = true;
					drop_ns = ev[r].ts_ns;
					ruid = ev[r].a;
					euid = ev[r].b;
					err = ev[r].c;
				}
				ended |= ev[r].type == HS_REC_EXIT;
			}
		}
		for (uint32_t k = 0; ev && known && k < p->nthreads; k++) {
			size_t n = hs_read_ring(&p->seg, p->threads[k].slot, ev, nrec);
			for (size_t r = 0; r < n; r++)
				if (ev[r].type == HS_REC_FORK && ev[r].ts_ns >= drop_ns) {
					if (forks < 8)
						hs_appendf(kids, sizeof kids, &kused, "%s%llu", forks ? ", " : " (pid ",
							   (unsigned long long)ev[r].a);
					else if (forks == 8)
						hs_appendf(kids, sizeof kids, &kused, ", ...");
					forks++;
				}
		}
		free(ev);
		ended |= st == HS_STATE_CRASHED || st == HS_STATE_SIGNALED;
		if ((ended && !forks) || (hs_proc_alive(p) && !forks))
			continue;
		if (!(f = add_finding(out, HS_F_LIMIT, p)))
			return -1;
		f->rec.tid = p->seg.hdr.pid;
		f->rec.count = 1;
		f->unrecorded = true;
		if (known)
			snprintf(f->limit, sizeof f->limit,
				 "pid %d changed its uid to %llu (effective %llu) at +%.3f s, and then could not write the "
				 "session directory (%s): %s%s%s%snot recorded after that",
				 (int)p->seg.hdr.pid, (unsigned long long)ruid, (unsigned long long)euid,
				 drop_ns > p->seg.hdr.start_mono_ns ? (double)(drop_ns - p->seg.hdr.start_mono_ns) / 1e9 : 0.0,
				 strerror((int)err), ended ? "" : "what it ran after an exec and how it ended are ",
				 forks ? (ended ? "its fork children" : "and its fork children") : "", kids,
				 forks ? (kused ? ") are " : " are ") : "");
		else
			snprintf(f->limit, sizeof f->limit,
				 "pid %d changed its uid and then could not write the session directory: what it ran "
				 "after an exec, its fork children and how it ended are not recorded",
				 (int)p->seg.hdr.pid);
	}
	return 0;
}

/*
 * limit findings: a table of the lock-order graph (locks, their index,
 * edges, their index, long cycles) or of stacks that was full in a process,
 * findings that could not be recorded, or a recorder that went quiet
 * (HS_HDR_SUSPECT).  A full table hides lock orders
 * (a cycle through a lock or an edge never stored is never found), so it is
 * a finding of its own and changes the exit status: never "no findings".
 */
static int limits(struct hs_session *s, struct hs_findings *out)
{
	static const enum hs_table_id t[] = {HS_T_LOCKS, HS_T_LOCK_INDEX, HS_T_EDGES, HS_T_EDGE_INDEX,
					     HS_T_CYCLE_EDGES, HS_T_STACKS, HS_T_STACK_INDEX};
	static const char *const names[] = {"locks", "lock index", "edges", "edge index", "cycle edges",
					    "stacks", "stack index"};
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		char buf[sizeof out->v[0].limit] = "";
		size_t used = 0;
		uint64_t lost = hs_seg_findings_dropped(&p->seg);
		struct hs_fnd *f;
		/* the recorder stopped in a state it cannot be in (shim/quiet.c): all after is missing */
		if (hs_seg_flags(&p->seg) & HS_HDR_SUSPECT)
			hs_appendf(buf, sizeof buf, &used, "the recorder found its own state inconsistent and went "
				   "quiet: what the process did after that is not recorded");
		for (size_t k = 0; k < sizeof t / sizeof t[0]; k++) {
			uint32_t d = hs_seg_dropped(&p->seg, t[k]);
			if (d)
				hs_appendf(buf, sizeof buf, &used, "%stable %s full (capacity %u): %u insertion%s dropped",
					   used ? "; " : "", names[k], p->seg.hdr.tables[t[k]].capacity, d,
					   d == 1 ? "" : "s");
		}
		if (lost)
			hs_appendf(buf, sizeof buf, &used, "%s%llu findings not recorded", used ? "; " : "",
				   (unsigned long long)lost);
		if (!used)
			continue;
		if (!(f = add_finding(out, HS_F_LIMIT, p)))
			return -1;
		f->rec.tid = p->seg.hdr.pid;
		f->rec.count = 1;
		snprintf(f->limit, sizeof f->limit, "%s", buf);
	}
	return 0;
}

int hs_analyze_stalled(struct hs_session *s, double hang_timeout, bool with_recorded,
		       const struct hs_stall *stalls, size_t nstalls, struct hs_findings *out)
{
	int rc = 0;
	memset(out, 0, sizeof *out);
	for (size_t i = 0; i < s->nprocs && rc == 0; i++) {
		if (with_recorded)
			rc = recorded(&s->procs[i], out);
		if (rc == 0)
			rc = analyze_waits(s, &s->procs[i], hang_timeout, out);
	}
	for (size_t i = 0; i < nstalls && rc == 0; i++) {
		struct hs_proc *p = stalled_proc(s, stalls[i].pid);
		if (p)
			rc = add_stall(s, p, &stalls[i], out);
	}
	/* a stalled process whose descendant is stalled too may only be waiting for it */
	for (size_t i = 0; i < out->n && rc == 0; i++)
		if (out->v[i].kind == HS_F_HANG && out->v[i].stalled_seconds > 0)
			out->v[i].stalled_child = stalled_descendant(out, &out->v[i]);
	/* processes that died without running any code, after the hangs that may explain them */
	if (with_recorded && rc == 0)
		rc = hs_proc_findings(s, out);
	if (rc == 0 && with_recorded)
		rc = fd_leaks(s, out);
	if (rc == 0 && with_recorded)
		rc = limits(s, out);
	if (rc == 0 && with_recorded)
		rc = unrecorded_after_uid_change(s, out);
	if (out->n)
		qsort(out->v, out->n, sizeof *out->v, by_severity);
	return rc;
}

int hs_analyze(struct hs_session *s, double hang_timeout, bool with_recorded, struct hs_findings *out)
{
	return hs_analyze_stalled(s, hang_timeout, with_recorded, NULL, 0, out);
}

void hs_findings_free(struct hs_findings *f)
{
	for (size_t i = 0; i < f->n; i++) {
		free(f->v[i].threads);
		free(f->v[i].others);
		free_groups(f->v[i].groups, f->v[i].ngroups);
		free(f->v[i].edges);
		free(f->v[i].edge_ids);
	}
	free(f->v);
	memset(f, 0, sizeof *f);
}

static int by_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return (x > y) - (x < y);
}

void hs_signature(const struct hs_fnd *f, char *buf, size_t len)
{
	uint64_t addrs[HS_CYCLE_MAX * 8];
	size_t n = 0, used;

	used = (size_t)snprintf(buf, len, "%s %d ", hs_fkind_name(f->kind), f->proc->seg.hdr.pid);
	if (f->stall && f->stall->threads && f->stalled_seconds > 0) {
		/* per-thread rule: the stuck threads; stable while the hang lasts */
		int first = 1;
		for (uint32_t i = 0; i < f->stall->nthreads && used < len; i++)
			if (f->stall->threads[i].verdict == HS_TV_STUCK) {
				used += (size_t)snprintf(buf + used, len - used, "%s%d", first ? "" : ",",
							 f->stall->threads[i].tid);
				first = 0;
			}
		if (used < len)
			snprintf(buf + used, len - used, " stuck");
		return;
	}
	for (uint32_t i = 0; i < f->nthreads && used < len; i++)
		used += (size_t)snprintf(buf + used, len - used, "%s%d", i ? "," : "", f->threads[i]->t.tid);
	for (uint32_t i = 0; i < f->nthreads && n < sizeof addrs / sizeof addrs[0]; i++)
		addrs[n++] = f->threads[i]->t.wait_addr;
	qsort(addrs, n, sizeof *addrs, by_u64);
	for (size_t i = 0; i < n && used < len; i++) {
		if (i && addrs[i] == addrs[i - 1])
			continue;
		used += (size_t)snprintf(buf + used, len - used, "%s0x%llx", i ? "," : " ",
					 (unsigned long long)addrs[i]);
	}
}
