/* SPDX-License-Identifier: MIT */
/*
 * dumper/report_text.c — the human report, in lockdep's fixed shape.
 *
 * Findings first, most serious first, each opened by a banner
 * ("==== heisen: <what> in pid N ===="), then for a lock-order cycle the
 * two-column "unsafe locking scenario", then every stack that proves it;
 * after the findings, per process and per thread context: argv, how it
 * ended, what each thread holds and waits for, and its last events.  Tables
 * that overflowed are said loudly, as lockdep does, because a finding may be
 * missing for that reason.  Design: docs/design.md "Reports".
 */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "report.h"
#include "stall.h"

#define EVENTS_SHOWN 16

/* heisen-dump --all: every process's context and every frame; without it
 * the report leads with the answer (hs_report_text). */
static bool g_all;

/* A frame with neither a symbol nor a Python function: a stripped binary's
 * (Debian's python3.11), shown as module+offset. */
static bool unsymbolized(const struct hs_frame *f)
{
	return !f->python && !f->function && f->module;
}

static void print_frames(FILE *out, struct hs_proc *p, uint32_t stack, const char *indent)
{
	struct hs_frames fr;
	hs_frames_of(p, stack, &fr);
	if (!fr.valid) {
		fprintf(out, "%s(no stack recorded)\n", indent);
		return;
	}
	for (uint32_t i = 0; i < fr.n; i++) {
		const struct hs_frame *f = fr.f[i];
		uint32_t run = 1;
		/* A run of unsymbolized frames of one module is one line without --all:
		 * their offsets say nothing to a reader without that binary's symbols. */
		while (!g_all && unsymbolized(f) && i + run < fr.n && unsymbolized(fr.f[i + run]) &&
		       strcmp(fr.f[i + run]->module, f->module) == 0)
			run++;
		if (run > 1) {
			fprintf(out, "%s#%u-#%u %u frames without symbols in %s (heisen-dump --all shows them)\n",
				indent, i, i + run - 1, run, f->module);
			i += run - 1;
			continue;
		}
		fprintf(out, "%s#%-2u ", indent, i);
		if (f->python) {
			/* "#3  Worker.run (/app/w.py:42) [python]" */
			fprintf(out, "%s", f->function ? f->function : "?");
			if (f->file)
				fprintf(out, " (%s:%d)", f->file, f->line);
			fprintf(out, " [python]\n");
			continue;
		}
		if (f->function)
			fprintf(out, "%s", f->function);
		else
			fprintf(out, "0x%" PRIx64, f->pc);
		if (f->file)
			fprintf(out, " (%s:%d)", f->file, f->line);
		if (f->module && f->function)
			fprintf(out, " [%s]\n", f->module);
		else if (f->module)
			fprintf(out, " [%s+0x%" PRIx64 "]\n", f->module, f->offset);
		else
			fprintf(out, " [?]\n");
	}
	if (fr.truncated)
		fprintf(out, "%s... (deeper frames not recorded)\n", indent);
}

static const char *thread_name(const struct hs_proc *p, int32_t tid)
{
	const struct hs_tsnap *t = hs_proc_thread(p, tid);
	return t && t->name[0] ? t->name : "?";
}

/*
 * "thread T (name)".  A fork child's findings can name a thread of an
 * ancestor (a block allocated or freed before the fork): then "thread T
 * (name, in pid P before the fork)", found up the real-parent chain.
 */
static void who(char *buf, size_t len, const struct hs_proc *p, int32_t tid)
{
	const struct hs_pnode *n = p->info ? p->info->node : NULL;
	if (!tid) {
		snprintf(buf, len, "no thread heisen saw");
		return;
	}
	if (!hs_proc_thread(p, tid) && n && n->via && strcmp(n->via, "fork") == 0)
		for (const struct hs_pnode *a = n->real_parent; a && a != n; a = a->real_parent)
			for (size_t i = 0; i < a->nimages; i++)
				if (hs_proc_thread(a->images[i], tid)) {
					snprintf(buf, len, "thread %d (%s, in pid %d before the fork)", tid,
						 thread_name(a->images[i], tid), a->pid);
					return;
				}
	snprintf(buf, len, "thread %d (%s)", tid, thread_name(p, tid));
}

static void lock_call(char *buf, size_t len, struct hs_proc *p, uint32_t lock, unsigned mode)
{
	struct hs_lockref r;
	const char *fn = "lock";
	hs_lockref(p, lock, 0, &r);
	if (r.kind && strcmp(r.kind, "rwlock") == 0)
		fn = mode == HS_MODE_WRITE ? "write_lock" : "read_lock";
	snprintf(buf, len, "%s(%s);", fn, r.label);
}

/* lockdep's scenario: A takes its first lock, B its first, B its second
 * (blocks), A its second (blocks). */
static void scenario_two(FILE *out, struct hs_fnd *f)
{
	const struct hs_edge *a = &f->edges[0], *b = &f->edges[1];
	char a1[200], a2[200], b1[200], b2[200], ha[64], hb[64];

	lock_call(a1, sizeof a1, f->proc, a->from, a->from_mode);
	lock_call(a2, sizeof a2, f->proc, a->to, a->to_mode);
	lock_call(b1, sizeof b1, f->proc, b->from, b->from_mode);
	lock_call(b2, sizeof b2, f->proc, b->to, b->to_mode);
	snprintf(ha, sizeof ha, "Thread A (tid %d)", a->tid);
	snprintf(hb, sizeof hb, "Thread B (tid %d)", b->tid);
	fprintf(out, "\n Possible unsafe locking scenario:\n\n");
	fprintf(out, "       %-32s %s\n", ha, hb);
	fprintf(out, "       %-32s %s\n", "----", "----");
	fprintf(out, "  %s\n", a1);
	fprintf(out, "  %-37s %s\n", "", b1);
	fprintf(out, "  %-37s %s\n", "", b2);
	fprintf(out, "  %s\n", a2);
	fprintf(out, "\n *** DEADLOCK ***\n");
}

static void scenario_chain(FILE *out, struct hs_fnd *f)
{
	char from[200], to[200];
	fprintf(out, "\n Possible unsafe locking scenario (%u threads, each blocks the next):\n\n", f->nedges);
	for (uint32_t i = 0; i < f->nedges; i++) {
		lock_call(from, sizeof from, f->proc, f->edges[i].from, f->edges[i].from_mode);
		lock_call(to, sizeof to, f->proc, f->edges[i].to, f->edges[i].to_mode);
		fprintf(out, "  Thread %c (tid %d): %s %s\n", 'A' + (int)(i % 26), f->edges[i].tid, from, to);
	}
	fprintf(out, "\n *** DEADLOCK ***\n");
}

static void potential(FILE *out, struct hs_fnd *f)
{
	struct hs_lockref from, to;
	fprintf(out, "Locks are taken in orders that can deadlock (seen %u time%s), even in runs that do not hang.\n",
		f->rec.count, f->rec.count == 1 ? "" : "s");
	if (f->nedges < f->rec.n)
		fprintf(out, "!!! %u of the %u edges of this cycle could not be read\n", f->rec.n - f->nedges,
			f->rec.n);
	if (f->nedges == 2)
		scenario_two(out, f);
	else
		scenario_chain(out, f);
	for (uint32_t i = 0; i < f->nedges; i++) {
		const struct hs_edge *e = &f->edges[i];
		hs_lockref(f->proc, e->from, 0, &from);
		hs_lockref(f->proc, e->to, 0, &to);
		fprintf(out, "\n edge %u of %u: %s -> %s, first by thread %d (%s)\n", i + 1, f->nedges, from.label,
			to.label, e->tid, thread_name(f->proc, e->tid));
		if (!e->from_stack && from.kind && strcmp(from.kind, "gil") == 0) {
			/* the interpreter takes the GIL on paths no hook sees: say so, not "no stack" */
			fprintf(out, "  %s was held: the thread was running Python code (the interpreter took it),\n",
				from.label);
		} else {
			fprintf(out, "  %s (%s, 0x%" PRIx64 ") was acquired (%s) at:\n", from.label,
				from.kind ? from.kind : "?", from.addr, hs_mode_name(e->from_mode));
			if (e->flags & HS_EDGE_FROM_SITE)
				/* the leaf path (docs/design.md "Lock order"): no exact stack was kept */
				fprintf(out,
					"  (call site only: this lock had been taken %u times with nothing nested under "
					"it before, so only its call site's first stack was kept; the frames past the "
					"first may be another caller's. The next time this order is taken, the edge "
					"is recorded with the exact stack.)\n",
					e->from_site_n);
			print_frames(out, f->proc, e->from_stack, "    ");
		}
		fprintf(out, "  then %s (%s, 0x%" PRIx64 ") was acquired (%s) while holding it, at:\n", to.label,
			to.kind ? to.kind : "?", to.addr, hs_mode_name(e->to_mode));
		print_frames(out, f->proc, e->to_stack, "    ");
	}
}

static void crash(FILE *out, struct hs_fnd *f)
{
	fprintf(out, "Thread %d (%s) received %s (si_code %d) at address 0x%" PRIx64 "%s:\n", f->rec.tid,
		thread_name(f->proc, f->rec.tid), hs_signal_name(f->rec.signo), f->rec.si_code, f->rec.addr,
		/* SI_USER, SI_TKILL, SI_QUEUE ...: someone sent it, nothing faulted */
		f->rec.si_code <= 0 ? ", sent by kill/raise, not a fault" : "");
	if (f->heap_abort)
		fprintf(out, "This SIGABRT is heisen's own: it aborts after recording a heap finding (above), as "
			     "AddressSanitizer does; HEISEN_ON_HEAP_ERROR=continue skips the bad free instead.\n");
	print_frames(out, f->proc, f->rec.stack, "    ");
	for (uint32_t i = 0; i < f->nothers; i++) {
		const struct hs_tsnap *t = f->others[i];
		fprintf(out, "\n thread %d (%s) at the crash%s:\n", t->t.tid, t->name,
			hs_holds_gil(f->proc, t, f->since_ns) ? ", holding the GIL" : "");
		print_frames(out, f->proc, t->t.snap_stack, "    ");
	}
}

static void self_deadlock(FILE *out, struct hs_fnd *f)
{
	struct hs_lockref l;
	hs_lockref(f->proc, f->rec.lock, f->rec.addr, &l);
	fprintf(out, "Thread %d (%s) locks %s (%s, 0x%" PRIx64 ") again while holding it: it waits for itself.\n",
		f->rec.tid, thread_name(f->proc, f->rec.tid), l.label, l.kind ? l.kind : "?", l.addr);
	fprintf(out, "\n  relocked at:\n");
	print_frames(out, f->proc, f->rec.stack, "    ");
	fprintf(out, "  first acquired at:\n");
	if (f->rec.offset)
		/* the leaf path (docs/design.md "Lock order"): no exact stack was kept (format.h) */
		fprintf(out,
			"  (call site only: this lock had been taken %u times with nothing nested under it before, "
			"so only its call site's first stack was kept; the frames past the first may be another "
			"caller's)\n",
			f->rec.offset);
	print_frames(out, f->proc, f->rec.stack2, "    ");
}

/*
 * A heap finding, in AddressSanitizer's shape: the one-line message, then
 * the stack of the free that found it, then "freed by thread ... here",
 * then "previously allocated by thread ... here".
 */
static void heap(FILE *out, struct hs_fnd *f)
{
	const struct hs_finding *r = &f->rec;
	char msg[512], w[160];
	hs_heap_message(f, msg, sizeof msg);
	fprintf(out, "%s", msg);
	if (r->count > 1)
		fprintf(out, " (seen %u times)", r->count);
	fprintf(out, "\n\n");
	who(w, sizeof w, f->proc, r->tid);
	fprintf(out, " %s by %s here:\n", f->kind == HS_F_DOUBLE_FREE ? "second free" : "free", w);
	print_frames(out, f->proc, r->stack, "    ");
	if (f->kind == HS_F_DOUBLE_FREE || (f->kind == HS_F_INVALID_FREE && r->size && (r->stack2 || r->tid2))) {
		who(w, sizeof w, f->proc, r->tid2);
		fprintf(out, "\n %s by %s here:\n", f->kind == HS_F_DOUBLE_FREE ? "first freed" : "the block was freed", w);
		print_frames(out, f->proc, r->stack2, "    ");
	}
	if (f->kind != HS_F_INVALID_FREE || (r->size && (r->stack3 || r->tid3))) {
		who(w, sizeof w, f->proc, r->tid3);
		fprintf(out, "\n previously allocated by %s here:\n", w);
		print_frames(out, f->proc, r->stack3, "    ");
	}
	fprintf(out, "\n (%s)\n", hs_heap_stacks_note(f->proc->seg.hdr.heap_stacks));
}

/*
 * A guard finding (a fault in the guard-page pool), in AddressSanitizer's
 * shape: the message, the access, the free (use-after-free), the allocation.
 */
static void guard(FILE *out, struct hs_fnd *f)
{
	const struct hs_finding *r = &f->rec;
	char msg[512], w[160];
	hs_heap_message(f, msg, sizeof msg);
	fprintf(out, "%s", msg);
	if (r->count > 1)
		fprintf(out, " (seen %u times)", r->count);
	fprintf(out, "\n\n");
	who(w, sizeof w, f->proc, r->tid);
	fprintf(out, " %s by %s here:\n", r->access == HS_ACCESS_WRITE ? "WRITE" : r->access == HS_ACCESS_READ ? "READ" : "access", w);
	print_frames(out, f->proc, r->stack, "    ");
	if (r->stack2 || r->tid2) {
		who(w, sizeof w, f->proc, r->tid2);
		fprintf(out, "\n freed by %s here:\n", w);
		print_frames(out, f->proc, r->stack2, "    ");
	}
	who(w, sizeof w, f->proc, r->tid3);
	fprintf(out, "\n previously allocated by %s here:\n", w);
	print_frames(out, f->proc, r->stack3, "    ");
	fprintf(out, "\n (a sampled allocation in a guard page: HEISEN_GUARD_RATE; its stacks are full unwinds)\n");
}

/* ---- file descriptors ---------------------------------------------------- */

/* "thread 123 (name)" */

/* What an event of an fd finding's history is, in the story. */
static const char *history_note(const struct hs_fnd *f, const struct hs_fd_event *e, uint32_t i)
{
	const struct hs_finding *r = &f->rec;
	if (f->kind == HS_F_STALE_CLOSE) {
		if (e->op == HS_FDE_CLOSE && e->gen == r->size && e->tid == r->tid && e->stack == r->stack)
			return "  <-- the stale close";
		if (e->op == HS_FDE_CLOSE_FAILED && e->gen == r->size && i + 1 == f->nhist)
			return r->offset == HS_FD_RULE_OWNER && e->call == HS_FDC_CLOSE_OWNED && e->tid == r->tid
				       ? "  <-- the stale close (refused)"
				       : "  <-- the rightful owner finds its fd gone";
		if (e->op == HS_FDE_CREATE && e->gen == r->size)
			return "  <-- the rightful owner";
	} else if (e->op == HS_FDE_CLOSE_FAILED && i + 1 == f->nhist) {
		return "  <-- the second close";
	}
	return "";
}

/* The whole story of the number: each event with its stack, oldest first. */
static void fd_history(FILE *out, struct hs_fnd *f)
{
	char w[64];
	fprintf(out, "\n history of fd %llu (oldest first):\n", (unsigned long long)f->rec.addr);
	if (f->nhist == 0)
		fprintf(out, "   (not recorded: the history table was full)\n");
	for (uint32_t i = 0; i < f->nhist; i++) {
		const struct hs_fd_event *e = &f->hist[i];
		who(w, sizeof w, f->proc, e->tid);
		fprintf(out, "\n   gen %u %-12s %s", e->gen, hs_fd_op_name(e->op), hs_fd_call_name(e->call));
		if (e->op == HS_FDE_CREATE)
			fprintf(out, " %s%s%s", hs_fd_kind_name(e->kind), e->path[0] ? " " : "", e->path);
		if (e->op == HS_FDE_CLOSE_FAILED)
			fprintf(out, " -> %s", e->err == EBADF ? "EBADF" : "error");
		fprintf(out, " by %s%s:\n", w, history_note(f, e, i));
		print_frames(out, f->proc, e->stack, "      ");
	}
}

static void fd_close_finding(FILE *out, struct hs_fnd *f)
{
	char msg[1024];
	hs_fd_message(f, msg, sizeof msg);
	fprintf(out, "%s", msg);
	if (f->rec.count > 1)
		fprintf(out, " (seen %u times)", f->rec.count);
	fprintf(out, "\n");
	fd_history(out, f);
}

static void fd_leak(FILE *out, struct hs_fnd *f)
{
	char msg[1024], w[64];
	hs_fd_message(f, msg, sizeof msg);
	fprintf(out, "%s\n", msg);
	if (!f->at_hang && f->proc->pstate == HS_P_EXITED)
		fprintf(out, "(at an exit, only sites that left %d or more open and grew with the run are shown: created "
			     "across %d or more of its %d parts, or %d or more fds; a working set made once is open at "
			     "exit, not a leak)\n", HS_FD_LEAK_MIN, HS_FD_LEAK_PHASES, HS_FD_RUN_PHASES, HS_FD_LEAK_MANY);
	else if (!f->at_hang)
		fprintf(out, "(at the end, only sites that left %d or more open are shown: one listening socket or log file "
			     "open at exit is not a leak)\n", HS_FD_LEAK_MIN);
	for (uint32_t i = 0; i < f->ngroups; i++) {
		const struct hs_fd_group *g = &f->groups[i];
		const struct hs_fdsnap *d = g->fds[0];
		who(w, sizeof w, f->proc, d->f.tid);
		fprintf(out, "\n %u x %s (%s)%s%s: fd", g->nfds, hs_fd_kind_name(d->f.kind), hs_fd_call_name(d->f.call),
			d->f.path[0] ? " " : "", d->f.path);
		for (uint32_t k = 0; k < g->nfds; k++)
			fprintf(out, "%s %d", k ? "," : "", g->fds[k]->fd);
		fprintf(out, ", created by %s at:\n", w);
		print_frames(out, f->proc, g->stack, "    ");
	}
}

/* A GIL wait before the writer has a GIL node: name it all the same. */
static void gil_label(struct hs_lockref *r)
{
	r->kind = "gil";
	snprintf(r->name, sizeof r->name, "GIL");
	snprintf(r->label, sizeof r->label, "GIL");
}

static void holders_text(char *buf, size_t len, const struct hs_proc *p, const struct hs_tsnap *t)
{
	const struct hs_tsnap *h[8];
	size_t n = hs_holders(p, t, h, 8), used = 0;
	buf[0] = '\0';
	if (n == 0)
		return;
	hs_appendf(buf, len, &used, ", held by");
	for (size_t i = 0; i < n && i < 8; i++) {
		hs_appendf(buf, len, &used, "%s thread %d", i ? "," : "", h[i]->t.tid);
		if (h[i]->t.wait_kind == HS_WAIT_COND)
			hs_appendf(buf, len, &used, " (itself waiting on condition variable 0x%" PRIx64 ")",
				   h[i]->t.wait_addr);
		else if (h[i]->t.wait_kind == HS_WAIT_NONE)
			hs_appendf(buf, len, &used, " (not waiting: busy, or blocked where heisen does not see)");
	}
}

/* Where the holders of what t waits for took it: the other half of a hang. */
/* A held entry taken on the leaf path (HS_HELDF_SITE) has its call site's
 * stack only: said before its frames. */
static void held_site_only(FILE *out, const struct hs_held *he)
{
	if (he->flags & HS_HELDF_SITE)
		fprintf(out, "  (call site only: this lock had been taken many times with nothing nested under it, "
			     "so only its call site's first stack was kept; the frames past the first may be another "
			     "caller's)\n");
}

static void holder_stacks(FILE *out, struct hs_proc *p, const struct hs_tsnap *t)
{
	const struct hs_tsnap *h[4];
	struct hs_lockref l;
	size_t n = hs_holders(p, t, h, 4);
	for (size_t i = 0; i < n && i < 4; i++) {
		const struct hs_held *he = hs_held_for(h[i], t);
		if (!he)
			continue;
		hs_lockref(p, he->lock, he->addr, &l);
		fprintf(out, "  thread %d (%s) acquired %s at:\n", h[i]->t.tid, h[i]->name, l.label);
		held_site_only(out, he);
		print_frames(out, p, he->stack, "    ");
		if (h[i]->t.wait_kind != HS_WAIT_NONE)
			continue;
		/* a holder that waits for nothing heisen sees: where it is, or why that is unknown */
		if (h[i]->t.snap_ns && h[i]->t.snap_stack) {
			fprintf(out, "  thread %d (%s) is at (its latest snapshot):\n", h[i]->t.tid, h[i]->name);
			print_frames(out, p, h[i]->t.snap_stack, "    ");
		} else {
			const char *why = hs_no_snapshot_reason(p, h[i]);
			fprintf(out, "  thread %d (%s): no snapshot: %s\n", h[i]->t.tid, h[i]->name,
				why ? why : "the thread did not answer the snapshot signal");
		}
	}
}

static void blocked_thread(FILE *out, struct hs_session *s, struct hs_fnd *f, const struct hs_tsnap *t)
{
	struct hs_lockref w, l;
	char holders[512];
	const struct hs_held *rel = hs_relevant_hold(f, t);

	hs_lockref(f->proc, t->t.wait_lock, t->t.wait_kind == HS_WAIT_COND ? 0 : t->t.wait_addr, &w);
	if (t->t.wait_kind == HS_WAIT_GIL)
		gil_label(&w);
	holders_text(holders, sizeof holders, f->proc, t);
	fprintf(out, "\n thread %d (%s)%s:\n", t->t.tid, t->name, t->torn ? " [copy torn: writer busy]" : "");
	if (hs_holds_gil(f->proc, t, f->since_ns))
		fprintf(out, "  holds GIL (gil)\n");
	for (uint32_t i = 0; i < t->t.held_count; i++) {
		hs_lockref(f->proc, t->t.held[i].lock, t->t.held[i].addr, &l);
		fprintf(out, "  holds %s (%s, %s)\n", l.label, l.kind ? l.kind : "?", hs_mode_name(t->t.held[i].mode));
	}
	if (t->t.wait_kind == HS_WAIT_COND)
		fprintf(out, "  waits on condition variable 0x%" PRIx64 " (mutex %s) for %.1f s\n", t->t.wait_addr,
			w.label, hs_wait_seconds(s, f->proc, t));
	else
		fprintf(out, "  waits for %s (%s, %s)%s for %.1f s\n", w.label, w.kind ? w.kind : "?",
			hs_mode_name(t->t.wait_mode), holders, hs_wait_seconds(s, f->proc, t));
	if (rel) {
		hs_lockref(f->proc, rel->lock, rel->addr, &l);
		fprintf(out, "  %s was acquired at:\n", l.label);
		held_site_only(out, rel);
		print_frames(out, f->proc, rel->stack, "    ");
	}
	fprintf(out, "  it waits at:\n");
	print_frames(out, f->proc, t->t.wait_stack, "    ");
	if (hs_snapshot_fresh(f, t)) {
		fprintf(out, "  its snapshot (where it is now):\n");
		print_frames(out, f->proc, t->t.snap_stack, "    ");
	}
	if (f->kind == HS_F_HANG)
		holder_stacks(out, f->proc, t);
}

/* One thread of a process that made no progress: what it waits for, if
 * heisen sees it, and where it is (its snapshot). */
static void stalled_thread(FILE *out, struct hs_session *s, struct hs_fnd *f, const struct hs_tsnap *t)
{
	struct hs_lockref l;
	char holders[512];
	fprintf(out, "\n thread %d (%s)%s%s:\n", t->t.tid, t->name,
		hs_holds_gil(f->proc, t, f->since_ns) ? ", holds the GIL" : "", t->torn ? " [copy torn: writer busy]" : "");
	for (uint32_t i = 0; i < t->t.held_count; i++) {
		hs_lockref(f->proc, t->t.held[i].lock, t->t.held[i].addr, &l);
		fprintf(out, "  holds %s (%s, %s)\n", l.label, l.kind ? l.kind : "?", hs_mode_name(t->t.held[i].mode));
	}
	if (t->t.wait_kind != HS_WAIT_NONE) {
		hs_lockref(f->proc, t->t.wait_lock, t->t.wait_kind == HS_WAIT_COND ? 0 : t->t.wait_addr, &l);
		if (t->t.wait_kind == HS_WAIT_GIL)
			gil_label(&l);
		holders_text(holders, sizeof holders, f->proc, t);
		fprintf(out, "  waits (%s) for %s%s for %.1f s\n", hs_wait_kind_name(t->t.wait_kind), l.label,
			holders, hs_wait_seconds(s, f->proc, t));
	}
	if (!t->t.snap_ns || !t->t.snap_stack) {
		const char *why = hs_no_snapshot_reason(f->proc, t);
		if (why)
			fprintf(out, "  (no snapshot: %s)\n", why);
		else
			fprintf(out, "  (no snapshot: the thread did not answer the snapshot signal)\n");
		if (t->t.wait_kind != HS_WAIT_NONE) {
			fprintf(out, "  it waits at:\n");
			print_frames(out, f->proc, t->t.wait_stack, "    ");
		}
		return;
	}
	if (hs_snapshot_fresh(f, t))
		fprintf(out, "  it is at (snapshot taken %.1f s into the stall):\n",
			(double)(t->t.snap_ns - f->since_ns) / 1e9);
	else
		fprintf(out, "  STALE snapshot, taken %.1f s before the stall began (the thread did not answer now):\n",
			(double)(f->since_ns - t->t.snap_ns) / 1e9);
	print_frames(out, f->proc, t->t.snap_stack, "    ");
}

/* The per-thread rule's verdict on each thread (stall.c hs_judge_still). */
static void judged_threads(FILE *out, struct hs_fnd *f)
{
	static const char *const names[] = {[HS_TV_ACTIVE] = "active", [HS_TV_IDLE] = "idle", [HS_TV_STUCK] = "STUCK",
					    [HS_TV_PEER] = "waits on other processes", [HS_TV_UNKNOWN] = "unknown"};
	const struct hs_stall *st = f->stall;
	fprintf(out, "A thread that stays in one wait only this process can end, for longer than the hang timeout, "
		     "is stuck; the process hangs when its main thread is stuck, or every thread that is not idle "
		     "is. Its threads:\n");
	for (uint32_t i = 0; i < st->nthreads; i++) {
		const struct hs_tjudge *t = &st->threads[i];
		fprintf(out, "  thread %d%s: %s", t->tid, t->tid == f->proc->seg.hdr.pid ? " (main)" : "",
			names[t->verdict]);
		if (t->still_seconds > 0)
			fprintf(out, " for %.1f s", t->still_seconds);
		if (t->busy)
			fprintf(out, " (on the CPU)");
		fprintf(out, ": %s\n", t->what);
	}
}

static void stalled(FILE *out, struct hs_session *s, struct hs_fnd *f)
{
	if (f->stall && f->stall->threads)
		judged_threads(out, f);
	else
		fprintf(out, "The process made no progress for %.1f s (no events recorded, no CPU time); its %u thread%s:\n",
			f->stalled_seconds, f->nthreads, f->nthreads == 1 ? "" : "s");
	if (f->stalled_child)
		fprintf(out, "(Its descendant, pid %d, made no progress either: this one may only be waiting for it; "
			     "see that process's hang.)\n", f->stalled_child);
	for (uint32_t i = 0; i < f->nthreads; i++)
		stalled_thread(out, s, f, f->threads[i]);
}

static void blocked(FILE *out, struct hs_session *s, struct hs_fnd *f)
{
	if (f->kind == HS_F_DEADLOCK)
		fprintf(out, "%u threads wait for each other; none of them can proceed.\n", f->nthreads);
	else
		fprintf(out, "%u thread%s blocked longer than the hang timeout, not in a cycle.\n", f->nthreads,
			f->nthreads == 1 ? "" : "s");
	for (uint32_t i = 0; i < f->nthreads; i++)
		blocked_thread(out, s, f, f->threads[i]);
	if (f->kind == HS_F_HANG && f->nothers)
		fprintf(out, "\nThe process's other thread%s:\n", f->nothers == 1 ? "" : "s");
	for (uint32_t i = 0; f->kind == HS_F_HANG && i < f->nothers; i++)
		stalled_thread(out, s, f, f->others[i]);
}

/* The last events of every thread of f's process (killed, oom-kill). */
/* ---- injected failures (heisen-run --fail, --heap-limit; dumper/faults.h) ---- */

#define FAULTS_SHOWN 4

/* The last injected failures of p, each with its stack: the likeliest cause
 * of what followed them.  Nothing when there were none. */
static void injected_faults(FILE *out, struct hs_proc *p)
{
	struct hs_fault_ev ev[FAULTS_SHOWN];
	size_t total, n = hs_faults_read(p, ev, FAULTS_SHOWN, &total);
	const struct hs_header *h = &p->seg.hdr;
	if (!n)
		return;
	fprintf(out, "  injected failures (heisen-run --fail/--fail-after/--heap-limit): %zu in the rings%s\n", total,
		total > n ? ", the first and the last ones:" : ":");
	for (size_t i = 0; i < n; i++) {
		const struct hs_record *r = &ev[i].r;
		int e = (int)(r->c & 0xffff);
		const char *en = strerrorname_np(e);
		double t = r->ts_ns >= h->start_mono_ns ? (double)(r->ts_ns - h->start_mono_ns) / 1e9 : 0.0;
		if (i == 1 && total > n)
			fprintf(out, "    ... %zu more ...\n", total - n);
		fprintf(out, "  %s+%.6f thread %d: ", i + 1 == n ? ">>> " : "    ", t, ev[i].tid);
		switch (r->a) {
		case HS_FAULT_MALLOC:
			fprintf(out, "malloc(%" PRIu64 ") made to fail with %s", r->b, en ? en : "?");
			break;
		case HS_FAULT_HEAP_LIMIT:
			fprintf(out, "malloc(%" PRIu64 ") refused: past the heap limit (ENOMEM)", r->b);
			break;
		case HS_FAULT_OPEN:
			fprintf(out, "open made to fail with %s", en ? en : "?");
			break;
		case HS_FAULT_CLOSE:
			fprintf(out, "close(%" PRIu64 ") made to report %s (the number was closed)", r->b, en ? en : "?");
			break;
		default:
			fprintf(out, "%s failed", hs_fault_call_name((unsigned)r->a));
		}
		fprintf(out, ", the thread's call #%" PRIu64 "%s\n", r->c >> 16,
			i + 1 == n ? "; the last one before the process ended" : "");
		print_frames(out, p, r->stack, "        ");
	}
}

/* One line on the chaos decisions still in p's rings (heisen-run --chaos). */
static void chaos_line(FILE *out, struct hs_proc *p)
{
	static struct hs_fault_ev ev[4096];
	size_t total, n = hs_ring_type_read(p, HS_REC_CHAOS, ev, sizeof ev / sizeof ev[0], &total), k[4] = {0};
	if (!total)
		return;
	for (size_t i = 0; i < n; i++)
		k[ev[i].r.b < 4 ? ev[i].r.b : 0]++;
	fprintf(out, "  chaos schedule (heisen-run --chaos): %zu perturbations in the rings: %zu yields, %zu sleeps, "
		     "%zu CPU moves\n",
		total, k[HS_CHAOS_YIELD], k[HS_CHAOS_SLEEP], k[HS_CHAOS_MIGRATE]);
}

static void event_text(FILE *out, struct hs_proc *p, const struct hs_record *r);

/* A process that died without running any code: what is known, and the evidence. */
static void death(FILE *out, struct hs_session *s, struct hs_fnd *f)
{
	const struct hs_death *d = &f->death;
	struct hs_proc *p = f->proc;
	const struct hs_pinfo *pi = p->info;
	const struct hs_header *h = &p->seg.hdr;
	char msg[1024], a[32], b[32];
	(void)s;
	hs_death_message(f, msg, sizeof msg);
	fprintf(out, "%s\n", msg);
	if (f->kind == HS_F_OOM_KILL || d->evidence) {
		fprintf(out, "\n evidence:\n");
		if (d->evidence & HS_EV_OOM_COUNTER) {
			fprintf(out, "  - the OOM-kill counter of its memory cgroup %s rose from %" PRIu64 " (at its start) to %" PRIu64,
				pi->env.mem_cgroup, d->oom_before, d->oom_after);
			if (d->oom_after_pid)
				fprintf(out, " (read by pid %d at its %s)\n", d->oom_after_pid, d->oom_after_start ? "start" : "exit");
			else
				fprintf(out, " (read by heisen-dump now)\n");
		}
		if (d->evidence & HS_EV_NEAR_LIMIT)
			fprintf(out, "  - its last memory sample, %s resident, was %.0f%% of the %s memory limit\n",
				hs_fmt_bytes(a, sizeof a, pi->rss), 100.0 * (double)pi->rss / (double)d->limit,
				hs_fmt_bytes(b, sizeof b, d->limit));
		if (d->evidence & HS_EV_CGROUP_PEAK)
			fprintf(out, "  - the cgroup's own peak usage, %s, reached the %s limit\n",
				hs_fmt_bytes(a, sizeof a, d->cgroup_peak), hs_fmt_bytes(b, sizeof b, d->limit));
		if (d->evidence & HS_EV_SIGKILL)
			fprintf(out, "  - heisen-run's waitpid said it was killed by SIGKILL\n");
		if (f->kind == HS_F_KILLED && !(d->evidence & ~HS_EV_SIGKILL))
			fprintf(out, "  - nothing points at the OOM killer: %s\n",
				!pi->env_valid || !pi->cgroup_ok ? "no memory cgroup was found"
				: !(pi->env.flags & HS_ENV_OOM_COUNTER) ? "its cgroup has no OOM-kill counter (kernel < 4.13)"
				: "the OOM-kill counter of its memory cgroup did not rise");
	}
	fprintf(out, "\n memory: ");
	if (pi->rss_samples)
		fprintf(out, "%s resident at the last sample (+%.3f s), peak %s", hs_fmt_bytes(a, sizeof a, pi->rss),
			pi->rss_sample_ns > h->start_mono_ns ? (double)(pi->rss_sample_ns - h->start_mono_ns) / 1e9 : 0.0,
			hs_fmt_bytes(b, sizeof b, pi->rss_peak));
	else
		fprintf(out, "no sample recorded");
	if (hs_seg_flags(&p->seg) & HS_HDR_HEAP)
		fprintf(out, "; heap %s live, peak %s", hs_fmt_bytes(a, sizeof a, h->heap_live_bytes),
			hs_fmt_bytes(b, sizeof b, h->heap_peak_bytes));
	if (d->limit)
		fprintf(out, "; limit %s", hs_fmt_bytes(a, sizeof a, d->limit));
	fprintf(out, "\n");
	if (pi->node && pi->node->parent) {
		char cmd[160];
		hs_proc_cmdline(pi->node->parent->images[0], cmd, sizeof cmd);
		fprintf(out, " parent: pid %d (%s)\n", pi->node->parent->pid, cmd);
	}
	for (uint32_t i = 0; i < f->nthreads; i++) {
		struct hs_record ev[8];
		const struct hs_tsnap *t = f->threads[i];
		size_t n = hs_read_ring(&p->seg, t->slot, ev, 8);
		fprintf(out, "\n thread %d \"%s\" (%s), its last events:\n", t->t.tid, t->name,
			t->t.state == HS_THREAD_LIVE ? "live at the end" : "exited");
		if (!n)
			fprintf(out, "      (none recorded)\n");
		for (size_t k = 0; k < n; k++)
			event_text(out, p, &ev[k]);
	}
}

static void banner(FILE *out, const struct hs_fnd *f)
{
	static const char *const what[HS_F_KINDS] = {
		[HS_F_CRASH] = "crash",
		[HS_F_OOM_KILL] = "OOM kill",
		[HS_F_KILLED] = "killed",
		[HS_F_DEADLOCK] = "deadlock (wait-for cycle)",
		[HS_F_DOUBLE_FREE] = "double free",
		[HS_F_USE_AFTER_FREE] = "use after free",
		[HS_F_HEAP_BUFFER_OVERFLOW] = "heap buffer overflow",
		[HS_F_HEAP_OVERFLOW] = "heap overflow",
		[HS_F_INVALID_FREE] = "invalid free",
		[HS_F_STALE_CLOSE] = "stale close",
		[HS_F_DOUBLE_CLOSE] = "double close",
		[HS_F_SELF_DEADLOCK] = "self-deadlock",
		[HS_F_HANG] = "hang",
		[HS_F_POTENTIAL] = "potential deadlock (lock-order cycle)",
		[HS_F_FD_LEAK] = "fd leak",
		[HS_F_LIMIT] = "limit reached (findings may be missing)",
	};
	fprintf(out, "==== heisen: %s",
		f->kind == HS_F_LIMIT && f->unrecorded ? "limit reached (not recorded after a privilege drop)" : what[f->kind]);
	if (f->kind == HS_F_CRASH)
		fprintf(out, " (%s)", hs_signal_name(f->rec.signo));
	fprintf(out, " in pid %d (%s) ====\n", f->proc->seg.hdr.pid, f->proc->exe);
}

static void finding(FILE *out, struct hs_session *s, struct hs_fnd *f)
{
	banner(out, f);
	switch (f->kind) {
	case HS_F_CRASH: crash(out, f); break;
	case HS_F_DEADLOCK: blocked(out, s, f); break;
	case HS_F_HANG:
		if (f->stalled_seconds > 0)
			stalled(out, s, f);
		else
			blocked(out, s, f);
		break;
	case HS_F_SELF_DEADLOCK: self_deadlock(out, f); break;
	case HS_F_POTENTIAL: potential(out, f); break;
	case HS_F_DOUBLE_FREE:
	case HS_F_HEAP_OVERFLOW:
	case HS_F_INVALID_FREE: heap(out, f); break;
	case HS_F_USE_AFTER_FREE:
	case HS_F_HEAP_BUFFER_OVERFLOW: guard(out, f); break;
	case HS_F_OOM_KILL:
	case HS_F_KILLED: death(out, s, f); break;
	case HS_F_STALE_CLOSE:
	case HS_F_DOUBLE_CLOSE: fd_close_finding(out, f); break;
	case HS_F_FD_LEAK: fd_leak(out, f); break;
	case HS_F_LIMIT:
		if (f->unrecorded)
			fprintf(out, "%s.\nA process of another user cannot write this session directory (mode 0700): "
				     "to record it all, drop privileges before heisen-run (setpriv ... heisen-run -- CMD) "
				     "or run the container as that USER.\n", f->limit);
		else
			fprintf(out, "%s.\nLock orders through what was dropped were not checked: a deadlock may be "
				     "missing from this report.\n", f->limit);
		break;
	default: break;
	}
	fprintf(out, "\n");
}

/* ---- per process context ------------------------------------------------ */

static void state_line(FILE *out, const struct hs_proc *p)
{
	switch (p->pstate) {
	case HS_P_RUNNING: fprintf(out, "running"); break;
	case HS_P_EXITED: fprintf(out, "exited with status %" PRId64, p->value); break;
	case HS_P_CRASHED: fprintf(out, "crashed with %s", hs_signal_name((int)p->value)); break;
	case HS_P_EXECED: fprintf(out, "replaced by exec (image %" PRId64 ")", p->value); break;
	case HS_P_KILLED:
		fprintf(out, "killed by %s", hs_signal_name((int)p->value));
		if (p->info && p->info->term && p->info->term_pid)
			fprintf(out, " sent by pid %d", p->info->term_pid);
		else if (p->info && p->info->term)
			fprintf(out, " (si_code %d)", p->info->term_code);
		break;
	case HS_P_VANISHED:
		fprintf(out, "VANISHED: gone without exiting (SIGKILL or the OOM killer)");
		break;
	default: fprintf(out, "unknown state %" PRId64, p->value); break;
	}
}

static void argv_line(FILE *out, const struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	uint32_t i = 0;
	size_t off = 0;
	fprintf(out, "  argv:");
	while (i < h->argc && off < HS_ARGV_MAX) {
		size_t n = strnlen(h->argv + off, HS_ARGV_MAX - off);
		fputc(' ', out);
		for (size_t k = 0; k < n; k++) {
			unsigned char c = (unsigned char)h->argv[off + k];
			fputc(c < 0x20 || c == 0x7f ? '?' : c, out);
		}
		off += n + 1, i++;
	}
	fprintf(out, "%s\n", h->argv_truncated ? " ..." : "");
}

static void overflow_lines(FILE *out, struct hs_proc *p)
{
	static const enum hs_table_id t[] = {HS_T_MODULES, HS_T_STRINGS, HS_T_STACKS, HS_T_LOCKS,
					     HS_T_EDGES, HS_T_THREADS, HS_T_FINDINGS};
	static const char *const names[] = {"modules", "strings", "stacks", "locks", "edges", "threads", "findings"};
	uint32_t flags = hs_seg_flags(&p->seg);
	uint64_t fd = hs_seg_findings_dropped(&p->seg);
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
		uint32_t d = hs_seg_dropped(&p->seg, t[i]);
		if (d)
			fprintf(out, "  !!! table %s was full: %u insertions dropped; findings may be missing\n", names[i], d);
	}
	if (fd)
		fprintf(out, "  !!! %" PRIu64 " findings were not recorded (table full or writer suspect)\n", fd);
	if (flags & HS_HDR_SUSPECT)
		fprintf(out, "  !!! the recorder found its own state inconsistent and went quiet\n");
	if (flags & HS_HDR_FALLBACK_SMALL)
		fprintf(out, "  !!! the segment was made small: the session directory was short of space\n");
	if (flags & HS_HDR_OUT_OF_SPACE)
		fprintf(out, "  !!! the session directory ran out of space while recording: tables could not grow"
			     " (the dropped counts above); set HEISEN_DIR to a larger volume\n");
	if (p->seg.hdr.fd_beyond)
		fprintf(out, "  !!! %u fds were numbered beyond the fd table (%u numbers, HEISEN_FD_NUMBERS): not tracked\n",
			p->seg.hdr.fd_beyond, p->seg.hdr.tables[HS_T_FDS].capacity);
	if (p->seg.hdr.fd_torn)
		fprintf(out, "  !!! %u fd table updates were given up (a writer held the slot too long)\n", p->seg.hdr.fd_torn);
	if (hs_seg_dropped(&p->seg, HS_T_FD_HISTORY))
		fprintf(out, "  !!! the fd finding history was full: %u findings have no history\n",
			hs_seg_dropped(&p->seg, HS_T_FD_HISTORY));
}

static void event_text(FILE *out, struct hs_proc *p, const struct hs_record *r)
{
	struct hs_lockref l;
	const struct hs_header *h = &p->seg.hdr;
	double t = r->ts_ns >= h->start_mono_ns ? (double)(r->ts_ns - h->start_mono_ns) / 1e9 : 0.0;
	fprintf(out, "      +%.6f %-14s", t, hs_event_name(r->type));
	switch (r->type) {
	case HS_REC_LOCK_ACQUIRED:
		hs_lockref(p, (uint32_t)r->b, r->a, &l);
		fprintf(out, " %s %s%s waited %.3f ms", l.label, hs_mode_name(r->c & 0xff),
			(r->c >> 8) & 0xff ? " (trylock)" : "", (double)(r->c >> 16) / 1e6);
		break;
	case HS_REC_LOCK_BUSY:
	case HS_REC_LOCK_RELEASED:
	case HS_REC_LOCK_DESTROYED:
		hs_lockref(p, (uint32_t)r->b, r->a, &l);
		fprintf(out, " %s", l.label);
		break;
	case HS_REC_LOCK_ERROR:
		hs_lockref(p, (uint32_t)r->b, r->a, &l);
		fprintf(out, " %s errno %" PRIu64, l.label, r->c);
		break;
	case HS_REC_COND_WAIT:
	case HS_REC_COND_WOKE:
		fprintf(out, " cond 0x%" PRIx64 " mutex 0x%" PRIx64, r->a, r->b);
		break;
	case HS_REC_SIGNAL:
		fprintf(out, " %s address 0x%" PRIx64, hs_signal_name((int)r->a), r->b);
		break;
	case HS_REC_MEMORY: {
		char a[32], b[32];
		fprintf(out, " rss %s", hs_fmt_bytes(a, sizeof a, r->a));
		if (hs_seg_flags(&p->seg) & HS_HDR_HEAP)
			fprintf(out, ", heap %s", hs_fmt_bytes(b, sizeof b, r->b));
		fprintf(out, " (%s", hs_mem_why_name((unsigned)(r->c & 0xff)));
		if (r->c >> 8)
			fprintf(out, " of %s", hs_fmt_bytes(a, sizeof a, r->c >> 8));
		fprintf(out, ")");
		break;
	}
	case HS_REC_TERM_SIGNAL:
		fprintf(out, " %s from pid %" PRId64 " (si_code %" PRId64 ")", hs_signal_name((int)r->a), (int64_t)r->b,
			(int64_t)r->c);
		break;
	case HS_REC_UID_CHANGED:
		fprintf(out, " uid %" PRIu64 " (effective %" PRIu64 "): the session directory is no longer writable (%s)",
			r->a, r->b, strerror((int)r->c));
		break;
	case HS_REC_FD_CREATED:
		fprintf(out, " fd %" PRIu64 " gen %" PRIu64 " %s (%s)", r->a, r->b, hs_fd_kind_name(r->c & 0xff),
			hs_fd_call_name((r->c >> 8) & 0xff));
		break;
	case HS_REC_FD_CLOSED:
		fprintf(out, " fd %" PRIu64 " gen %" PRIu64 " (%s)", r->a, r->b, hs_fd_call_name((unsigned)r->c));
		break;
	case HS_REC_FD_CLOSE_FAILED:
		fprintf(out, " fd %" PRIu64 " gen %" PRIu64 " (%s) errno %" PRIu64, r->a, r->b,
			hs_fd_call_name((unsigned)(r->c >> 16)), r->c & 0xffff);
		break;
	case HS_REC_FAULT_INJECTED:
		fprintf(out, " %s (arg %" PRIu64 ") errno %" PRIu64, hs_fault_call_name((unsigned)r->a), r->b,
			r->c & 0xffff);
		break;
	case HS_REC_CHAOS:
		fprintf(out, " %s at %s (%" PRIu64 ")", hs_chaos_action_name((unsigned)r->b),
			hs_chaos_point_name((unsigned)r->a), r->c & 0xffffffffu);
		break;
	case HS_REC_NEW_EDGE:
	case HS_REC_FINDING:
	case HS_REC_FORK:
	case HS_REC_EXIT:
	case HS_REC_THREAD_START:
	case HS_REC_THREAD_EXIT:
		fprintf(out, " %" PRId64, (int64_t)r->a);
		break;
	default:
		break;
	}
	fprintf(out, "\n");
}

static void thread_section(FILE *out, struct hs_session *s, struct hs_proc *p, const struct hs_tsnap *t)
{
	struct hs_record ev[EVENTS_SHOWN];
	struct hs_lockref l;
	size_t n;

	fprintf(out, "  thread %d \"%s\" %s%s\n", t->t.tid, t->name,
		t->t.state == HS_THREAD_LIVE ? "live" : "exited", t->torn ? " [copy torn: writer busy]" : "");
	for (uint32_t i = 0; i < t->t.held_count; i++) {
		hs_lockref(p, t->t.held[i].lock, t->t.held[i].addr, &l);
		fprintf(out, "    holds %s (%s, %s)%s\n", l.label, l.kind ? l.kind : "?",
			hs_mode_name(t->t.held[i].mode), t->t.held[i].trylock ? " by trylock" : "");
	}
	if (t->t.held_overflow)
		fprintf(out, "    !!! and %u more locks not tracked\n", t->t.held_overflow);
	if (t->t.wait_kind != HS_WAIT_NONE) {
		hs_lockref(p, t->t.wait_lock, t->t.wait_kind == HS_WAIT_COND ? 0 : t->t.wait_addr, &l);
		if (t->t.wait_kind == HS_WAIT_GIL)
			gil_label(&l);
		fprintf(out, "    waits (%s) for %s, %.1f s%s\n", hs_wait_kind_name(t->t.wait_kind), l.label,
			hs_wait_seconds(s, p, t), hs_holds_gil(p, t, 0) ? ", holding the GIL" : "");
	}
	if (t->t.snap_ns && t->t.snap_stack) {
		fprintf(out, "    latest snapshot (%s, %.1f s before this report%s):\n", hs_snapshot_why(t),
			s->now_ns > t->t.snap_ns ? (double)(s->now_ns - t->t.snap_ns) / 1e9 : 0.0,
			(t->t.snap_flags & HS_SNAPF_HOLDS_GIL) ? ", holding the GIL" : "");
		print_frames(out, p, t->t.snap_stack, "      ");
	}
	/* A process that ended by itself: its last events say nothing its findings
	 * do not (they are for the crashed, the killed and the still running). */
	if (!g_all && (p->pstate == HS_P_EXITED || p->pstate == HS_P_EXECED))
		return;
	n = hs_read_ring(&p->seg, t->slot, ev, EVENTS_SHOWN);
	if (n)
		fprintf(out, "    last events:\n");
	for (size_t i = 0; i < n; i++)
		event_text(out, p, &ev[i]);
}

/* Worth its threads and events: a finding is about it, it did not end
 * normally, a thread of it holds or waits, or one of its tables overflowed
 * (fd numbers beyond the fd table included). */
static bool interesting(struct hs_proc *p, const struct hs_findings *f)
{
	static const enum hs_table_id t[] = {HS_T_MODULES, HS_T_STRINGS, HS_T_STACKS, HS_T_LOCKS,
					     HS_T_EDGES, HS_T_THREADS, HS_T_FINDINGS};
	if (p->pstate != HS_P_EXITED && p->pstate != HS_P_EXECED)
		return true;
	if (hs_seg_findings_dropped(&p->seg) || (hs_seg_flags(&p->seg) & HS_HDR_SUSPECT))
		return true;
	if ((hs_seg_flags(&p->seg) & HS_HDR_HEAP) && p->seg.hdr.heap_failures)
		return true; /* refused allocations: the heap line says where */
	if (p->seg.hdr.fd_beyond || p->seg.hdr.fd_torn || hs_seg_dropped(&p->seg, HS_T_FD_HISTORY))
		return true; /* fds heisen could not track: said loudly */
	for (size_t i = 0; i < f->n; i++)
		if (f->v[i].proc == p)
			return true;
	struct hs_fault_ev fev;
	size_t faults;
	if (hs_faults_read(p, &fev, 1, &faults))
		return true; /* heisen made calls fail: the process section says which */
	for (size_t i = 0; i < sizeof t / sizeof t[0]; i++)
		if (hs_seg_dropped(&p->seg, t[i]))
			return true;
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (p->threads[i].t.held_count || p->threads[i].t.wait_kind != HS_WAIT_NONE)
			return true;
	return false;
}

static void process_line(FILE *out, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	fprintf(out, "---- process %d (image %u), parent %d: ", h->pid, h->image, h->ppid);
	state_line(out, p);
	fprintf(out, " ----\n");
}

/* "  heap: 1.2 MiB live, peak 3.4 MiB, 5678 allocations, no failures; stacks: site"
 * (from the header copied at load) when the heap checker was on. */
static void heap_line(FILE *out, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	const char *st = hs_heap_stacks_name(h->heap_stacks);
	if (!(hs_seg_flags(&p->seg) & HS_HDR_HEAP))
		return;
	fprintf(out, "  heap: %.1f KiB live, peak %.1f KiB, %" PRIu64 " allocation%s, ", (double)h->heap_live_bytes / 1024,
		(double)h->heap_peak_bytes / 1024, h->heap_allocs, h->heap_allocs == 1 ? "" : "s");
	if (h->heap_failures)
		fprintf(out, "%" PRIu64 " FAILED (the last of %" PRIu64 " bytes)", h->heap_failures,
			h->heap_last_fail_size);
	else
		fprintf(out, "no failures");
	fprintf(out, "; stacks: %s; quarantine %.1f MiB\n", st ? st : "unknown",
		(double)h->heap_quarantine_bytes / (1024 * 1024));
	if (h->heap_failures) {
		fprintf(out, "    the last failed allocation was at:\n");
		print_frames(out, p, h->heap_last_fail_stack, "      ");
	}
}

static void rlimit_text(char *buf, size_t len, uint64_t v)
{
	if (v == HS_UNLIMITED)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%" PRIu64, v);
}

/* "  memory: ..." and "  environment: ...". */
static void memory_lines(FILE *out, const struct hs_proc *p)
{
	const struct hs_pinfo *pi = p->info;
	const struct hs_env *e;
	char a[32], b[32], c[32], d[32];
	if (!pi)
		return;
	if (pi->rss_samples)
		fprintf(out, "  memory: %s resident at the last sample, peak %s; %u descriptors open at the last count (most %u)\n",
			hs_fmt_bytes(a, sizeof a, pi->rss), hs_fmt_bytes(b, sizeof b, pi->rss_peak), pi->fds_open,
			pi->fds_peak);
	if (!pi->env_valid)
		return;
	e = &pi->env;
	fprintf(out, "  environment%s: %u CPUs online, affinity %u", pi->env_inherited ? " (as its parent's)" : "",
		e->cpu_online, e->cpu_affinity);
	if (e->cpu_quota_us)
		fprintf(out, ", CPU quota %.2f (%" PRIu64 "/%" PRIu64 " us)", (double)e->cpu_quota_us / (double)e->cpu_period_us,
			e->cpu_quota_us, e->cpu_period_us);
	else
		fprintf(out, ", no CPU quota");
	fprintf(out, "; memory limit %s of %s RAM", e->mem_limit ? hs_fmt_bytes(a, sizeof a, e->mem_limit) : "none",
		hs_fmt_bytes(b, sizeof b, e->mem_total));
	fprintf(out, "; /dev/shm %s (%s free)\n", hs_fmt_bytes(c, sizeof c, e->shm_size), hs_fmt_bytes(d, sizeof d, e->shm_free));
	rlimit_text(a, sizeof a, e->nofile_soft);
	rlimit_text(b, sizeof b, e->nofile_hard);
	rlimit_text(c, sizeof c, e->as_soft);
	rlimit_text(d, sizeof d, e->core_soft);
	fprintf(out, "    rlimits: open files %s (hard %s), address space %s, core %s; kernel %s, glibc %s",
		a, b, c, d, e->kernel, e->libc);
	if (e->cgroup)
		fprintf(out, "; cgroup v%u %s", e->cgroup, e->mem_cgroup);
	if (e->flags & HS_ENV_OOM_COUNTER)
		fprintf(out, " (OOM kills %" PRIu64 " at start)", e->oom_kills);
	fprintf(out, "\n");
}

/* The innermost frame of a stack, and its innermost Python frame: one line. */
static void frame_brief(char *buf, size_t len, struct hs_proc *p, uint32_t stack)
{
	struct hs_frames fr;
	size_t used = 0;
	const struct hs_frame *py = NULL;
	buf[0] = '\0';
	hs_frames_of(p, stack, &fr);
	if (!fr.valid || fr.n == 0) {
		snprintf(buf, len, "(no stack recorded)");
		return;
	}
	for (uint32_t i = 0; i < fr.n && !py; i++)
		if (fr.f[i]->python)
			py = fr.f[i];
	if (fr.f[0]->function)
		hs_appendf(buf, len, &used, "%s", fr.f[0]->function);
	else
		hs_appendf(buf, len, &used, "0x%" PRIx64, fr.f[0]->pc);
	if (fr.f[0]->file)
		hs_appendf(buf, len, &used, " (%s:%d)", fr.f[0]->file, fr.f[0]->line);
	if (py && py != fr.f[0])
		hs_appendf(buf, len, &used, " from %s (%s:%d) [python]", py->function ? py->function : "?",
			   py->file ? py->file : "?", py->line);
}

/* The fd notes of p's context (README "File descriptors"): what is not a
 * finding but worth a line.  indent before each line. */
static void fd_notes(FILE *out, const struct hs_proc *p, const char *indent)
{
	uint64_t n = p->seg.hdr.fd_double_closes_harmless;
	if (n)
		fprintf(out, "%snote: %" PRIu64 " harmless double close%s (one thread in the process, the same owner "
			"closing again, the number not reused in between): not a finding\n", indent, n, n == 1 ? "" : "s");
	if (p->pstate == HS_P_EXITED && p->info && p->info->fds_open_at_exit)
		fprintf(out, "%sopen at exit: %u fd%s created at sites that made them once (a working set, not a leak: "
			"they did not grow with the run)\n",
			indent, p->info->fds_open_at_exit, p->info->fds_open_at_exit == 1 ? "" : "s");
}

/* "  fds: ..." and one line per open fd, when fds were tracked. */
static void fd_table(FILE *out, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	uint32_t open = 0, inh = 0;
	char w[64], at[512];
	if (!(hs_seg_flags(&p->seg) & HS_HDR_FDS))
		return;
	for (uint32_t i = 0; i < p->nfds; i++)
		if (p->fds[i].f.state == HS_FDS_OPEN) {
			open++;
			inh += (p->fds[i].f.flags & HS_FDF_INHERITED) != 0;
		}
	fprintf(out, "  fds: %u open (%u inherited), %" PRIu64 " created, %" PRIu64 " closed; stacks: %s\n", open, inh,
		h->fd_created, h->fd_closed, h->fd_stacks == HS_HEAP_STACKS_FULL ? "full" : "site");
	fd_notes(out, p, "  ");
	for (uint32_t i = 0; i < p->nfds; i++) {
		const struct hs_fdsnap *d = &p->fds[i];
		if (d->f.state != HS_FDS_OPEN)
			continue;
		fprintf(out, "    fd %-4d %-8s %s%s", d->fd, hs_fd_kind_name(d->f.kind), d->f.path[0] ? d->f.path : "?",
			(d->f.flags & HS_FDF_CLOEXEC) ? " [cloexec]" : "");
		if (p->pstate == HS_P_EXECED)
			fprintf(out, (d->f.flags & HS_FDF_CLOEXEC) ? " (closed by exec)" : " (passed on to the next image)");
		if (d->f.flags & HS_FDF_INHERITED) {
			fprintf(out, " inherited\n");
			continue;
		}
		who(w, sizeof w, p, d->f.tid);
		frame_brief(at, sizeof at, p, d->f.stack);
		fprintf(out, " (%s, gen %u) by %s at %s%s\n", hs_fd_call_name(d->f.call), d->f.gen, w, at,
			d->torn ? " [copy torn]" : "");
	}
}

/*
 * Why a Python process's stacks have no Python frames, one line: its CPython
 * is not one whose frame layout the shim's table (shim/python_frames.c)
 * holds, 3.8 to 3.13, or it is one and the symbols frame reading needs were
 * not found (a stripped or statically built interpreter without them).
 */
static void py_frames_why(FILE *out, const char *version)
{
	unsigned major = 0, minor = 0;
	int known = sscanf(version, "%u.%u", &major, &minor) == 2 && major == 3 && minor >= 8 && minor <= 13;
	if (known)
		fprintf(out, "  python frames: not read (CPython %u.%u's frame-reading symbols were not found)\n",
			major, minor);
	else if (major)
		fprintf(out, "  python frames: not read (CPython %u.%u is not known to this heisen)\n", major, minor);
	else
		fprintf(out, "  python frames: not read (CPython %s is not known to this heisen)\n", version);
}

static void process_section(FILE *out, struct hs_session *s, struct hs_proc *p)
{
	process_line(out, p);
	fprintf(out, "  exe:  %s\n", p->exe);
	argv_line(out, p);
	if (p->seg.hdr.python & HS_PY_SEEN) {
		char v[sizeof p->seg.hdr.python_version + 1];
		snprintf(v, sizeof v, "%.*s", (int)strnlen(p->seg.hdr.python_version, sizeof v - 1),
			 p->seg.hdr.python_version);
		fprintf(out, "  python: CPython %s%s%s\n", hs_clean(v),
			(p->seg.hdr.python & HS_PY_FRAMES) ? ", Python frames in stacks" : ", native frames only",
			(p->seg.hdr.python & HS_PY_GOT_PATCHED) ? ", GIL entry points hooked" : "");
		if (!(p->seg.hdr.python & HS_PY_FRAMES))
			py_frames_why(out, v);
	}
	heap_line(out, p);
	memory_lines(out, p);
	fd_table(out, p);
	fprintf(out, "  segment: %s, %" PRIu64 " events recorded\n", p->seg.name, hs_seg_events(&p->seg));
	overflow_lines(out, p);
	injected_faults(out, p); /* heisen-run --fail, --heap-limit */
	chaos_line(out, p);      /* heisen-run --chaos */
	for (uint32_t i = 0; i < p->nthreads; i++)
		thread_section(out, s, p, &p->threads[i]);
	if (!g_all && p->nthreads && (p->pstate == HS_P_EXITED || p->pstate == HS_P_EXECED))
		fprintf(out, "  (each thread's last events: heisen-dump --all)\n");
	fprintf(out, "\n");
}

/* ---- the process tree and the warnings --------------------------------------- */

static uint64_t session_t0(const struct hs_session *s)
{
	uint64_t t0 = 0;
	for (size_t i = 0; i < s->nprocs; i++)
		if (!t0 || s->procs[i].seg.hdr.start_real_ns < t0)
			t0 = s->procs[i].seg.hdr.start_real_ns;
	return t0;
}

/* The kinds of the findings about the process, for the tree: "oom-kill, potential-deadlock". */
static void node_findings(const struct hs_findings *f, const struct hs_pnode *n, char *buf, size_t len)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < f->n; i++) {
		bool seen = false;
		if (!f->v[i].proc->info || f->v[i].proc->info->node != n)
			continue;
		for (size_t k = 0; k < i && !seen; k++)
			seen = f->v[k].kind == f->v[i].kind && f->v[k].proc->info && f->v[k].proc->info->node == n;
		if (!seen)
			hs_appendf(buf, len, &used, "%s%s", used ? ", " : "", hs_fkind_name(f->v[i].kind));
	}
}

static bool interesting(struct hs_proc *p, const struct hs_findings *f);

/* Shown in the tree without --all: a node one of whose images is worth its
 * context (interesting()), or one on the way to such a node. */
static bool node_shown(const struct hs_findings *f, const struct hs_pnode *n)
{
	if (g_all)
		return true;
	for (size_t i = 0; i < n->nimages; i++)
		if (interesting((struct hs_proc *)n->images[i], f))
			return true;
	for (size_t i = 0; i < n->nchildren; i++)
		if (node_shown(f, n->children[i]))
			return true;
	return false;
}

static void tree_node(FILE *out, const struct hs_session *s, const struct hs_findings *f, const struct hs_pnode *n,
		      char *prefix, size_t plen, bool last, uint64_t t0)
{
	const struct hs_proc *p = n->images[n->nimages - 1], *first = n->images[0];
	const struct hs_pinfo *pi = p->info;
	uint64_t end = hs_seg_end_ns(&p->seg), peak = 0;
	char cmd[120], pk[32], fk[160];
	size_t len = strlen(prefix);
	for (size_t i = 0; i < n->nimages; i++)
		if (n->images[i]->info && n->images[i]->info->rss_peak > peak)
			peak = n->images[i]->info->rss_peak;
	hs_proc_cmdline(first, cmd, sizeof cmd);
	fprintf(out, "  %s%s%d %s", prefix, n->depth ? (last ? "`- " : "|- ") : "", n->pid, cmd);
	for (size_t i = 1; i < n->nimages; i++) {
		char c2[80];
		hs_proc_cmdline(n->images[i], c2, sizeof c2);
		fprintf(out, " => exec %s", c2);
	}
	fprintf(out, "\n  %s%s   [%s", prefix, n->depth ? (last ? "   " : "|  ") : "", n->via);
	if (n->real_parent && n->parent != n->real_parent)
		fprintf(out, " by %d for %d", n->real_parent->pid, n->parent ? n->parent->pid : 0);
	else if (!n->parent)
		fprintf(out, ", parent %d outside the session", n->real_ppid);
	fprintf(out, "] ");
	state_line(out, p);
	fprintf(out, "; +%.3f s", (double)(first->seg.hdr.start_real_ns - t0) / 1e9);
	if (end)
		fprintf(out, " .. +%.3f s", (double)(hs_proc_realtime(p, end) - t0) / 1e9);
	else if (p->pstate != HS_P_RUNNING && pi)
		fprintf(out, " .. last seen +%.3f s", (double)(hs_proc_realtime(p, pi->last_ns) - t0) / 1e9);
	if (peak)
		fprintf(out, "; peak %s", hs_fmt_bytes(pk, sizeof pk, peak));
	node_findings(f, n, fk, sizeof fk);
	if (fk[0])
		fprintf(out, "  <== %s", fk);
	fprintf(out, "\n");
	if (n->depth)
		snprintf(prefix + len, plen - len, "%s", last ? "   " : "|  ");
	size_t shown_last = n->nchildren;
	for (size_t i = 0; i < n->nchildren; i++)
		if (node_shown(f, n->children[i]))
			shown_last = i;
	for (size_t i = 0; i < n->nchildren; i++)
		if (node_shown(f, n->children[i]))
			tree_node(out, s, f, n->children[i], prefix, plen, i == shown_last, t0);
	prefix[len] = '\0';
}

/* Nodes of the tree under n (n included) that node_shown() leaves out. */
static size_t nodes_hidden(const struct hs_findings *f, const struct hs_pnode *n)
{
	size_t k = node_shown(f, n) ? 0 : 1;
	for (size_t i = 0; i < n->nchildren; i++)
		k += nodes_hidden(f, n->children[i]);
	return k;
}

static void tree_text(FILE *out, const struct hs_session *s, const struct hs_findings *f)
{
	char prefix[512] = "";
	uint64_t t0 = session_t0(s);
	if (!s->tree || s->tree->n == 0)
		return;
	size_t hidden = 0;
	for (size_t i = 0; i < s->tree->nroots; i++)
		hidden += nodes_hidden(f, s->tree->roots[i]);
	if (hidden == s->tree->n || (s->tree->n == 1 && !g_all))
		return; /* every process ended cleanly, or one: the first line said how many */
	fprintf(out, "---- process tree: %zu process%s (times from the first start) ----\n", s->tree->n,
		s->tree->n == 1 ? "" : "es");
	for (size_t i = 0; i < s->tree->nroots; i++)
		if (node_shown(f, s->tree->roots[i]))
			tree_node(out, s, f, s->tree->roots[i], prefix, sizeof prefix, true, t0);
	if (hidden)
		fprintf(out, "  (and %zu more that ended cleanly with no finding: heisen-dump --all shows them)\n",
			hidden);
	fprintf(out, "\n");
}

static void warnings_text(FILE *out, struct hs_session *s)
{
	struct hs_warnings w;
	if (hs_warnings_find(s, &w) != 0)
		hs_session_error(s, s->dir, "out of memory while looking for warnings");
	if (w.n)
		fprintf(out, "==== heisen: warnings (the environment itself may be the cause) ====\n");
	for (size_t i = 0; i < w.n; i++) {
		fprintf(out, " %s (pid%s", hs_wkind_name(w.v[i].kind), w.v[i].npids == 1 ? "" : "s");
		for (size_t k = 0; k < w.v[i].npids && k < 16; k++)
			fprintf(out, "%s %d", k ? "," : "", w.v[i].pids[k]);
		fprintf(out, "%s): %s\n", w.v[i].npids > 16 ? ", ..." : "", w.v[i].message);
	}
	if (w.n)
		fprintf(out, "\n");
	hs_warnings_free(&w);
}

/* The first line of msg, cut to fit a summary line. */
static void first_line(char *msg)
{
	char *nl = strchr(msg, '\n');
	if (nl)
		*nl = '\0';
	if (strlen(msg) > 150)
		strcpy(msg + 146, " ...");
}

/* What a finding is about, in a few words, for the summary: the cycle's locks,
 * the signal and where, the heap or fd message's first line. */
static void summary_what(char *buf, size_t len, struct hs_fnd *f)
{
	size_t used = 0;
	struct hs_lockref r;
	char fr[400];
	buf[0] = '\0';
	switch (f->kind) {
	case HS_F_POTENTIAL:
		for (uint32_t i = 0; i < f->nedges; i++) {
			hs_lockref(f->proc, f->edges[i].from, 0, &r);
			hs_appendf(buf, len, &used, "%s -> ", r.label);
		}
		if (f->nedges) {
			hs_lockref(f->proc, f->edges[0].from, 0, &r);
			hs_appendf(buf, len, &used, "%s (%u threads)", r.label, f->nedges);
		}
		break;
	case HS_F_SELF_DEADLOCK:
		hs_lockref(f->proc, f->rec.lock, f->rec.addr, &r);
		hs_appendf(buf, len, &used, "thread %d locks %s again while holding it", f->rec.tid, r.label);
		break;
	case HS_F_CRASH:
		frame_brief(fr, sizeof fr, f->proc, f->rec.stack);
		hs_appendf(buf, len, &used, "%s in thread %d at %s", hs_signal_name(f->rec.signo), f->rec.tid, fr);
		break;
	case HS_F_DEADLOCK:
		hs_appendf(buf, len, &used, "%u threads wait for each other", f->nthreads);
		break;
	case HS_F_HANG:
		if (f->stalled_seconds > 0)
			hs_appendf(buf, len, &used, "no progress for %.0f s", f->stalled_seconds);
		else
			hs_appendf(buf, len, &used, "%u thread%s blocked", f->nthreads, f->nthreads == 1 ? "" : "s");
		break;
	case HS_F_DOUBLE_FREE:
	case HS_F_HEAP_OVERFLOW:
	case HS_F_INVALID_FREE:
	case HS_F_USE_AFTER_FREE:
	case HS_F_HEAP_BUFFER_OVERFLOW: hs_heap_message(f, buf, len); break;
	case HS_F_STALE_CLOSE:
	case HS_F_DOUBLE_CLOSE: hs_fd_message(f, buf, len); break;
	case HS_F_FD_LEAK:
		hs_appendf(buf, len, &used, "%u fd%s left open %s, %u creation site%s", f->nleaked,
			   f->nleaked == 1 ? "" : "s", f->at_hang ? "at the hang" : "at the end", f->ngroups,
			   f->ngroups == 1 ? "" : "s");
		break;
	case HS_F_OOM_KILL:
	case HS_F_KILLED: hs_death_message(f, buf, len); break;
	case HS_F_LIMIT: hs_appendf(buf, len, &used, "%s", f->limit); break;
	default: break;
	}
	first_line(buf);
}

/* A process that ended in a way a clean run does not: crashed, killed,
 * vanished, an unknown state. */
static bool ended_badly(const struct hs_proc *p)
{
	return p->pstate == HS_P_CRASHED || p->pstate == HS_P_KILLED || p->pstate == HS_P_VANISHED ||
	       p->pstate == HS_P_UNKNOWN;
}

/*
 * The answer first (README "Reading a report"): one line per finding and per
 * process that ended badly, so the head of a container log says what
 * happened; the findings in full follow.
 */
static void summary(FILE *out, struct hs_session *s, const struct hs_findings *f)
{
	char what[600];
	size_t bad = 0;
	if (f->n == 0)
		fprintf(out, "heisen: no findings in %s (%zu process%s)\n", s->dir, s->nprocs,
			s->nprocs == 1 ? "" : "es");
	else
		fprintf(out, "==== heisen: %zu finding%s in %s (%zu process%s) ====\n", f->n, f->n == 1 ? "" : "s",
			s->dir, s->nprocs, s->nprocs == 1 ? "" : "es");
	for (size_t i = 0; i < f->n; i++) {
		struct hs_fnd *x = &f->v[i];
		summary_what(what, sizeof what, x);
		fprintf(out, "  %-18s pid %d (%s): %s\n", hs_fkind_name(x->kind), x->proc->seg.hdr.pid,
			x->proc->exe, what);
	}
	for (size_t i = 0; i < s->nprocs; i++)
		if (ended_badly(&s->procs[i])) {
			const struct hs_proc *p = &s->procs[i];
			if (!bad++)
				fprintf(out, "  ended badly:\n");
			fprintf(out, "    pid %d (%s): ", p->seg.hdr.pid, p->exe);
			state_line(out, p);
			fprintf(out, "\n");
		}
	fprintf(out, "\n");
}

void hs_report_text(FILE *out, struct hs_session *s, const struct hs_findings *f, bool all)
{
	size_t quiet = 0;
	g_all = all;
	summary(out, s, f);
	for (size_t i = 0; i < f->n; i++)
		finding(out, s, &f->v[i]);
	warnings_text(out, s);
	tree_text(out, s, f);
	for (size_t i = 0; i < s->nprocs; i++)
		if (interesting(&s->procs[i], f))
			process_section(out, s, &s->procs[i]);
		else
			quiet++;
	if (!all) {
		if (quiet && quiet < s->nprocs)
			fprintf(out, "%zu other process image%s ended cleanly with no finding (heisen-dump --all "
				     "shows their context)\n",
				quiet, quiet == 1 ? "" : "s");
		return;
	}
	/* The others in one line each, after the ones that matter. */
	for (size_t i = 0; i < s->nprocs; i++)
		if (!interesting(&s->procs[i], f)) {
			const struct hs_proc *p = &s->procs[i];
			fprintf(out, "  process %d.%u (%s), parent %d: ", p->seg.hdr.pid, p->seg.hdr.image, p->exe,
				p->seg.hdr.ppid);
			state_line(out, p);
			fprintf(out, "\n");
			fd_notes(out, p, "    ");
		}
}
