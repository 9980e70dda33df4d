/* SPDX-License-Identifier: MIT */
/*
 * dumper/report_dot.c — the lock-order graph for Graphviz (--dot).
 *
 * One cluster per process image; a node per lock that has an edge, an edge
 * per stored lock-order edge labelled with the thread that first made it.
 * Edges of a reported potential-deadlock cycle are red and bold, so the
 * cycle stands out of a graph that may have thousands of edges.
 */
#include <stdlib.h>
#include <string.h>

#include "report.h"

static void dot_string(FILE *out, const char *s)
{
	fputc('"', out);
	for (; *s; s++) {
		if (*s == '"' || *s == '\\')
			fputc('\\', out);
		if ((unsigned char)*s >= 0x20)
			fputc(*s, out);
	}
	fputc('"', out);
}

static bool in_reported_cycle(const struct hs_findings *f, const struct hs_proc *p, uint32_t id,
			      const struct hs_edge *e)
{
	if (e->flags & HS_EDGE_IN_CYCLE)
		return true;
	for (size_t i = 0; i < f->n; i++) {
		if (f->v[i].proc != p || f->v[i].kind != HS_F_POTENTIAL)
			continue;
		for (uint32_t k = 0; k < f->v[i].nedges; k++)
			if (f->v[i].edge_ids[k] == id)
				return true;
	}
	return false;
}

static void node(FILE *out, struct hs_proc *p, uint32_t lock, bool *seen)
{
	struct hs_lockref r;
	char text[256];
	if (seen[lock])
		return;
	seen[lock] = true;
	hs_lockref(p, lock, 0, &r);
	snprintf(text, sizeof text, "%s\\n%s 0x%llx", r.label, r.kind ? r.kind : "?", (unsigned long long)r.addr);
	fprintf(out, "    \"p%d.%u.l%u\" [label=", p->seg.hdr.pid, p->seg.hdr.image, lock);
	/* text already carries a \n escape for Graphviz: print it as is */
	fputc('"', out);
	for (const char *s = text; *s; s++)
		if (*s != '"' && (unsigned char)*s >= 0x20)
			fputc(*s, out);
	fputs("\"];\n", out);
}

static void process_graph(FILE *out, struct hs_proc *p, const struct hs_findings *f)
{
	uint32_t nedges = hs_seg_count(&p->seg, HS_T_EDGES);
	uint32_t nlocks = p->seg.hdr.tables[HS_T_LOCKS].capacity;
	bool *seen = calloc((size_t)nlocks + 1, sizeof *seen);
	char title[400];

	if (!seen || nedges <= 1) {
		free(seen);
		return;
	}
	fprintf(out, "  subgraph \"cluster_%d_%u\" {\n    label=", p->seg.hdr.pid, p->seg.hdr.image);
	snprintf(title, sizeof title, "pid %d (%s)", p->seg.hdr.pid, p->exe);
	dot_string(out, title);
	fprintf(out, ";\n");
	for (uint32_t id = 1; id < nedges; id++) {
		struct hs_edge e;
		if (hs_read_edge(&p->seg, id, &e) != 0 || e.from >= nlocks || e.to >= nlocks || !e.from || !e.to)
			continue;
		node(out, p, e.from, seen);
		node(out, p, e.to, seen);
		fprintf(out, "    \"p%d.%u.l%u\" -> \"p%d.%u.l%u\" [label=\"tid %d%s\"%s];\n", p->seg.hdr.pid,
			p->seg.hdr.image, e.from, p->seg.hdr.pid, p->seg.hdr.image, e.to, e.tid,
			e.to_mode == HS_MODE_WRITE ? "" : " (read)",
			in_reported_cycle(f, p, id, &e) ? ", color=red, fontcolor=red, style=bold, penwidth=2" : "");
	}
	fprintf(out, "  }\n");
	free(seen);
}

void hs_report_dot(FILE *out, struct hs_session *s, const struct hs_findings *f)
{
	fprintf(out, "digraph heisen {\n  node [shape=box, fontname=\"monospace\"];\n  label=");
	dot_string(out, s->dir);
	fprintf(out, ";\n");
	for (size_t i = 0; i < s->nprocs; i++)
		process_graph(out, &s->procs[i], f);
	fprintf(out, "}\n");
}
