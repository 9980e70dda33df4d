/* SPDX-License-Identifier: MIT */
/*
 * dumper/diff.c — `heisen-dump diff A B` (see diff.h for what is compared
 * and why).  Each session is loaded and analyzed as for a report, reduced
 * to sorted lists of (key, value) strings, and the lists are merged.
 * Strings only: every value is compared as the report prints it.
 */
#include "diff.h"

#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "analyze.h"
#include "json.h"
#include "report.h"
#include "session.h"

#define PEAK_RATIO 1.25              /* peaks differ when one is 25% above the other */
#define PEAK_MIN_BYTES (16ull << 20) /* ... and by more than this */
#define LABEL_MAX 1024

/* A (key, value) pair; lists are sorted by key, then value. */
struct kv {
	char *key, *val;
	uint64_t num;                    /* peaks */
};

struct list {
	struct kv *v;
	size_t n;
};

struct side {
	const char *dir;
	struct hs_session s;
	struct hs_findings f;
	bool loaded;
	struct list env, modules, tree, findings, peaks, warnings;
	char **labels;                   /* path label of each tree node, by hs_pnode.index */
};

static int add(struct list *l, const char *key, const char *val, uint64_t num)
{
	struct kv *v = realloc(l->v, (l->n + 1) * sizeof *v);
	if (!v)
		return -1;
	l->v = v;
	v[l->n].key = strdup(key);
	v[l->n].val = strdup(val ? val : "");
	v[l->n].num = num;
	if (!v[l->n].key || !v[l->n].val)
		return -1;
	l->n++;
	return 0;
}

static int by_kv(const void *a, const void *b)
{
	const struct kv *x = a, *y = b;
	int c = strcmp(x->key, y->key);
	return c ? c : strcmp(x->val, y->val);
}

/* Sort, then drop exact duplicates. */
static void settle(struct list *l, bool dedupe)
{
	size_t k = 0;
	if (l->n)
		qsort(l->v, l->n, sizeof *l->v, by_kv);
	if (!dedupe)
		return;
	for (size_t i = 0; i < l->n; i++) {
		if (k && strcmp(l->v[k - 1].key, l->v[i].key) == 0 && strcmp(l->v[k - 1].val, l->v[i].val) == 0) {
			free(l->v[i].key);
			free(l->v[i].val);
			continue;
		}
		l->v[k++] = l->v[i];
	}
	l->n = k;
}

static void list_free(struct list *l)
{
	for (size_t i = 0; i < l->n; i++) {
		free(l->v[i].key);
		free(l->v[i].val);
	}
	free(l->v);
	memset(l, 0, sizeof *l);
}

/* ---- labels --------------------------------------------------------------------- */

/* Replace every occurrence of from (non-empty) in buf by to, within cap. */
static void replace_all(char *buf, size_t cap, const char *from, const char *to)
{
	size_t fl = strlen(from), tl = strlen(to);
	char *p = buf;
	if (!fl)
		return;
	while ((p = strstr(p, from))) {
		size_t rest = strlen(p + fl);
		if ((size_t)(p - buf) + tl + rest + 1 > cap)
			return;
		memmove(p + tl, p + fl, rest + 1);
		memcpy(p, to, tl);
		p += tl;
	}
}

/* Whole decimal words equal to a pid of the session become "<pid>". */
static void mask_pids(const struct hs_session *s, char *buf, size_t cap)
{
	char out[LABEL_MAX];
	size_t o = 0;
	for (const char *p = buf; *p && o + 1 < sizeof out;) {
		if (*p >= '0' && *p <= '9' && (p == buf || !(p[-1] >= '0' && p[-1] <= '9'))) {
			char *end;
			long v = strtol(p, &end, 10);
			bool pid = false;
			for (size_t i = 0; i < s->nprocs && !pid; i++)
				pid = s->procs[i].seg.hdr.pid == v;
			if (pid && !(*end >= '0' && *end <= '9') && o + 6 < sizeof out) {
				memcpy(out + o, "<pid>", 5);
				o += 5;
				p = end;
				continue;
			}
		}
		out[o++] = *p++;
	}
	out[o] = '\0';
	snprintf(buf, cap, "%s", out);
}

static void node_label(const struct hs_session *s, const struct hs_pnode *n, char *buf, size_t cap)
{
	size_t used = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < n->nimages; i++) {
		char cmd[512];
		hs_proc_cmdline(n->images[i], cmd, sizeof cmd);
		hs_appendf(buf, cap, &used, "%s%s", i ? " => exec " : "", cmd);
	}
	if (n->depth)
		hs_appendf(buf, cap, &used, " [%s]", n->via);
	replace_all(buf, cap, s->dir, "<session>");
	mask_pids(s, buf, cap);
}

static int make_labels(struct side *d)
{
	struct hs_ptree *t = d->s.tree;
	struct hs_pnode **by_index;
	if (!t)
		return 0;
	if (!(d->labels = calloc(t->n ? t->n : 1, sizeof *d->labels)) ||
	    !(by_index = calloc(t->n ? t->n : 1, sizeof *by_index)))
		return -1;
	for (size_t k = 0; k < t->n; k++)
		if (t->nodes[k].index < t->n)
			by_index[t->nodes[k].index] = &t->nodes[k];
	/* nodes are indexed in start order: parents first */
	for (size_t i = 0; i < t->n; i++) {
		struct hs_pnode *n = by_index[i];
		char own[LABEL_MAX], full[LABEL_MAX];
		if (!n)
			continue;
		node_label(&d->s, n, own, sizeof own);
		if (n->parent && d->labels[n->parent->index])
			snprintf(full, sizeof full, "%s / %s", d->labels[n->parent->index], own);
		else
			snprintf(full, sizeof full, "%s", own);
		if (!(d->labels[i] = strdup(full))) {
			free(by_index);
			return -1;
		}
	}
	free(by_index);
	return 0;
}

static const char *proc_label(const struct side *d, const struct hs_proc *p)
{
	const struct hs_pnode *n = p->info ? p->info->node : NULL;
	return n && d->labels && d->labels[n->index] ? d->labels[n->index] : "?";
}

/* ---- what each side says ------------------------------------------------------- */

static void u64s(char *buf, size_t len, uint64_t v)
{
	if (v == HS_UNLIMITED)
		snprintf(buf, len, "unlimited");
	else
		snprintf(buf, len, "%" PRIu64, v);
}

static int env_list(struct side *d)
{
	for (size_t i = 0; i < d->s.nprocs; i++) {
		const struct hs_proc *p = &d->s.procs[i];
		const struct hs_pinfo *pi = p->info;
		const struct hs_env *e;
		char v[HS_CGROUP_PATH_MAX + 64];
		int rc = 0;
		if (p->seg.hdr.python & HS_PY_SEEN) {
			snprintf(v, sizeof v, "%.*s", (int)strnlen(p->seg.hdr.python_version, sizeof p->seg.hdr.python_version),
				 p->seg.hdr.python_version);
			rc |= add(&d->env, "python", hs_clean(v), 0);
		}
		if (!pi || !pi->env_valid)
			continue;
		e = &pi->env;
#define ENV_NUM(name, value)                          \
	do {                                          \
		u64s(v, sizeof v, (uint64_t)(value)); \
		rc |= add(&d->env, name, v, 0);       \
	} while (0)
		ENV_NUM("cpu_online", e->cpu_online);
		ENV_NUM("cpu_affinity", e->cpu_affinity);
		if (e->cpu_quota_us)
			snprintf(v, sizeof v, "%" PRIu64 "/%" PRIu64 " us", e->cpu_quota_us, e->cpu_period_us);
		else
			snprintf(v, sizeof v, "none");
		rc |= add(&d->env, "cpu_quota", v, 0);
		if (e->mem_limit)
			ENV_NUM("memory_limit_bytes", e->mem_limit);
		else
			rc |= add(&d->env, "memory_limit_bytes", "none", 0);
		ENV_NUM("memory_total_bytes", e->mem_total);
		ENV_NUM("shm_bytes", e->shm_size);
		ENV_NUM("rlimit_nofile", e->nofile_soft);
		ENV_NUM("rlimit_nofile_hard", e->nofile_hard);
		ENV_NUM("rlimit_as", e->as_soft);
		ENV_NUM("rlimit_core", e->core_soft);
		ENV_NUM("cgroup_version", e->cgroup);
		rc |= add(&d->env, "kernel", e->kernel, 0);
		rc |= add(&d->env, "libc", e->libc, 0);
#undef ENV_NUM
		if (rc)
			return -1;
	}
	settle(&d->env, true);
	return 0;
}

static int module_list(struct side *d)
{
	for (size_t i = 0; i < d->s.nprocs; i++) {
		struct hs_proc *p = &d->s.procs[i];
		uint32_t n = hs_seg_count(&p->seg, HS_T_MODULES);
		for (uint32_t k = 0; k < n; k++) {
			struct hs_module m;
			char path[1024], id[2 * HS_BUILD_ID_MAX + 1] = "";
			if (hs_read_module(&p->seg, k, &m) != 0 || hs_seg_string(&p->seg, m.path, path, sizeof path) != 0)
				continue;
			for (unsigned b = 0; b < m.build_id_len && b < HS_BUILD_ID_MAX; b++)
				snprintf(id + 2 * b, 3, "%02x", m.build_id[b]);
			replace_all(path, sizeof path, d->dir, "<session>");
			if (add(&d->modules, path, id[0] ? id : "(no build-id)", 0) != 0)
				return -1;
		}
	}
	settle(&d->modules, true);
	return 0;
}

static void end_state(const struct hs_proc *p, char *buf, size_t len)
{
	switch (p->pstate) {
	case HS_P_EXITED: snprintf(buf, len, "exited %" PRId64, p->value); break;
	case HS_P_CRASHED:
	case HS_P_KILLED: snprintf(buf, len, "%s %s", hs_pstate_name(p->pstate), hs_signal_name((int)p->value)); break;
	default: snprintf(buf, len, "%s", hs_pstate_name(p->pstate)); break;
	}
}

static int tree_list(struct side *d)
{
	struct hs_ptree *t = d->s.tree;
	for (size_t i = 0; t && i < t->n; i++) {
		const struct hs_pnode *n = &t->nodes[i];
		const struct hs_proc *last = n->images[n->nimages - 1];
		char st[64];
		uint64_t peak = 0;
		end_state(last, st, sizeof st);
		for (size_t k = 0; k < n->nimages; k++)
			if (n->images[k]->info && n->images[k]->info->rss_peak > peak)
				peak = n->images[k]->info->rss_peak;
		if (add(&d->tree, d->labels[n->index], st, 0) != 0 || add(&d->peaks, d->labels[n->index], "", peak) != 0)
			return -1;
	}
	settle(&d->tree, false);
	settle(&d->peaks, false);
	return 0;
}

/* The innermost named frame of a stack: "function" or "function (file:line)" for Python. */
static void site(struct hs_proc *p, uint32_t stack, char *buf, size_t len)
{
	struct hs_frames fr;
	buf[0] = '\0';
	hs_frames_of(p, stack, &fr);
	for (uint32_t i = 0; i < fr.n; i++)
		if (fr.f[i]->function) {
			if (fr.f[i]->python && fr.f[i]->file)
				snprintf(buf, len, "%s (%s:%d)", fr.f[i]->function, fr.f[i]->file, fr.f[i]->line);
			else
				snprintf(buf, len, "%s", fr.f[i]->function);
			return;
		}
	snprintf(buf, len, "?");
}

static int by_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A lock as the key of a finding: its name, else where it was first taken. */
static void lock_key(struct hs_proc *p, uint32_t id, char *buf, size_t len)
{
	struct hs_lockref r;
	struct hs_lock l;
	hs_lockref(p, id, 0, &r);
	if (r.name[0]) {
		snprintf(buf, len, "%s", r.name);
		return;
	}
	if (hs_read_lock(&p->seg, id, &l) == 0) {
		char s[256];
		site(p, l.first_stack, s, sizeof s);
		snprintf(buf, len, "lock first taken in %s", s);
		return;
	}
	snprintf(buf, len, "?");
}

static int finding_list(struct side *d)
{
	for (size_t i = 0; i < d->f.n; i++) {
		struct hs_fnd *f = &d->f.v[i];
		char *parts[2 * HS_CYCLE_MAX + 64], key[LABEL_MAX], val[LABEL_MAX];
		size_t np = 0, used = 0;
		switch (f->kind) {
		case HS_F_POTENTIAL:
			for (uint32_t k = 0; k < f->nedges && np + 2 < sizeof parts / sizeof parts[0]; k++) {
				char b[300];
				lock_key(f->proc, f->edges[k].from, b, sizeof b);
				parts[np++] = strdup(b);
			}
			break;
		case HS_F_DEADLOCK:
		case HS_F_HANG:
			for (uint32_t k = 0; k < f->nthreads && np < sizeof parts / sizeof parts[0]; k++) {
				char b[300];
				site(f->proc, f->threads[k]->t.wait_stack ? f->threads[k]->t.wait_stack : f->threads[k]->t.snap_stack,
				     b, sizeof b);
				parts[np++] = strdup(b);
			}
			break;
		case HS_F_KILLED:
		case HS_F_OOM_KILL:
			break;
		case HS_F_CRASH: {
			char b[300];
			site(f->proc, f->rec.stack, b, sizeof b);
			parts[np++] = strdup(b);
			parts[np++] = strdup(hs_signal_name(f->rec.signo));
			break;
		}
		default: {
			char b[300];
			site(f->proc, f->rec.stack, b, sizeof b);
			parts[np++] = strdup(b);
			break;
		}
		}
		for (size_t k = 0; k < np; k++)
			if (!parts[k])
				return -1;
		qsort(parts, np, sizeof *parts, by_str);
		for (size_t k = 0; k < np; k++) {
			hs_appendf(val, sizeof val, &used, "%s%s", k ? ", " : "", parts[k]);
			free(parts[k]);
		}
		if (!np)
			val[0] = '\0';
		snprintf(key, sizeof key, "%s in %s", hs_fkind_name(f->kind), proc_label(d, f->proc));
		if (add(&d->findings, key, val, 0) != 0)
			return -1;
	}
	settle(&d->findings, false);
	return 0;
}

static int warning_list(struct side *d)
{
	struct hs_warnings w;
	int rc = hs_warnings_find(&d->s, &w);
	for (size_t i = 0; i < w.n && rc == 0; i++)
		rc = add(&d->warnings, hs_wkind_name(w.v[i].kind), w.v[i].message, 0);
	hs_warnings_free(&w);
	settle(&d->warnings, false);
	return rc;
}

static int load_side(struct side *d, bool symbols)
{
	if (hs_session_load(&d->s, d->dir, symbols) != 0)
		return -1;
	d->loaded = true;
	if (hs_analyze(&d->s, 30.0, true, &d->f) != 0 || make_labels(d) != 0 || env_list(d) != 0 ||
	    module_list(d) != 0 || tree_list(d) != 0 || finding_list(d) != 0 || warning_list(d) != 0) {
		hs_session_error(&d->s, d->dir, "out of memory while comparing");
		return -1;
	}
	return 0;
}

static void side_free(struct side *d)
{
	list_free(&d->env);
	list_free(&d->modules);
	list_free(&d->tree);
	list_free(&d->findings);
	list_free(&d->peaks);
	list_free(&d->warnings);
	if (d->labels && d->s.tree)
		for (size_t i = 0; i < d->s.tree->n; i++)
			free(d->labels[i]);
	free(d->labels);
	if (d->loaded) {
		hs_findings_free(&d->f);
		hs_session_free(&d->s);
	}
}

/* ---- comparing ------------------------------------------------------------------ */

/* The values of key in l (from index *i on, which advances past them), joined. */
static void values(const struct list *l, size_t *i, const char *key, char *buf, size_t len, size_t *count)
{
	size_t used = 0;
	buf[0] = '\0';
	*count = 0;
	for (; *i < l->n && strcmp(l->v[*i].key, key) == 0; (*i)++, (*count)++) {
		size_t same = 1;
		while (*i + same < l->n && strcmp(l->v[*i + same].key, key) == 0 &&
		       strcmp(l->v[*i + same].val, l->v[*i].val) == 0)
			same++;
		if (same > 1)
			hs_appendf(buf, len, &used, "%s%zu x %s", used ? ", " : "", same, l->v[*i].val);
		else
			hs_appendf(buf, len, &used, "%s%s", used ? ", " : "", l->v[*i].val);
		*i += same - 1;
		*count += same - 1;
	}
}

/* One difference: key, what A says (NULL: nothing), what B says. */
struct delta {
	char key[LABEL_MAX];
	char a[LABEL_MAX], b[LABEL_MAX];
	bool has_a, has_b;
	size_t na, nb;
	uint64_t num_a, num_b;
};

struct deltas {
	struct delta *v;
	size_t n;
};

static int push(struct deltas *ds, const struct delta *d)
{
	struct delta *v = realloc(ds->v, (ds->n + 1) * sizeof *v);
	if (!v)
		return -1;
	ds->v = v;
	v[ds->n++] = *d;
	return 0;
}

/* Merge two sorted lists by key; a key whose joined values differ is a delta. */
static int compare(const struct list *a, const struct list *b, struct deltas *out)
{
	size_t i = 0, k = 0;
	while (i < a->n || k < b->n) {
		struct delta d;
		int c = i >= a->n ? 1 : k >= b->n ? -1 : strcmp(a->v[i].key, b->v[k].key);
		memset(&d, 0, sizeof d);
		snprintf(d.key, sizeof d.key, "%s", c <= 0 ? a->v[i].key : b->v[k].key);
		if (c <= 0) {
			values(a, &i, d.key, d.a, sizeof d.a, &d.na);
			d.has_a = true;
		}
		if (c >= 0) {
			values(b, &k, d.key, d.b, sizeof d.b, &d.nb);
			d.has_b = true;
		}
		if (d.has_a != d.has_b || strcmp(d.a, d.b) != 0)
			if (push(out, &d) != 0)
				return -1;
	}
	return 0;
}

/* Peaks: the largest per path on each side; a delta when they moved by enough. */
static int compare_peaks(const struct list *a, const struct list *b, struct deltas *out)
{
	for (size_t i = 0; i < a->n; i++) {
		uint64_t pa = 0, pb = 0, lo, hi;
		bool inb = false;
		if (i + 1 < a->n && strcmp(a->v[i + 1].key, a->v[i].key) == 0)
			continue; /* the last of a run has the key once */
		for (size_t k = 0; k < a->n; k++)
			if (strcmp(a->v[k].key, a->v[i].key) == 0 && a->v[k].num > pa)
				pa = a->v[k].num;
		for (size_t k = 0; k < b->n; k++)
			if (strcmp(b->v[k].key, a->v[i].key) == 0) {
				inb = true;
				if (b->v[k].num > pb)
					pb = b->v[k].num;
			}
		if (!inb || !pa || !pb)
			continue; /* a process only one side has is a tree difference */
		lo = pa < pb ? pa : pb;
		hi = pa < pb ? pb : pa;
		if ((double)hi > PEAK_RATIO * (double)lo && hi - lo > PEAK_MIN_BYTES) {
			struct delta d;
			memset(&d, 0, sizeof d);
			snprintf(d.key, sizeof d.key, "%s", a->v[i].key);
			hs_fmt_bytes(d.a, sizeof d.a, pa);
			hs_fmt_bytes(d.b, sizeof d.b, pb);
			d.has_a = d.has_b = true;
			d.num_a = pa;
			d.num_b = pb;
			if (push(out, &d) != 0)
				return -1;
		}
	}
	return 0;
}

/* ---- output ----------------------------------------------------------------------- */

enum part { P_ENV, P_MODULES, P_TREE, P_FINDINGS, P_PEAKS, P_WARNINGS, P_COUNT };
static const char *const part_names[P_COUNT] = {"environment", "modules", "tree", "findings", "peaks", "warnings"};
static const char *const part_titles[P_COUNT] = {"environment", "modules and versions", "process tree (by command line)",
						 "findings (by kind, process and site)", "peak memory (per process)",
						 "warnings"};

static void text(const struct side *a, const struct side *b, struct deltas *ds)
{
	size_t na = a->s.tree ? a->s.tree->n : 0, nb = b->s.tree ? b->s.tree->n : 0;
	printf("heisen diff\n  A: %s (%zu process%s)\n  B: %s (%zu process%s)\n", a->dir, na, na == 1 ? "" : "es",
	       b->dir, nb, nb == 1 ? "" : "es");
	for (int p = 0; p < P_COUNT; p++) {
		printf("\n%s: ", part_titles[p]);
		if (!ds[p].n) {
			printf("same\n");
			continue;
		}
		printf("%zu difference%s\n", ds[p].n, ds[p].n == 1 ? "" : "s");
		for (size_t i = 0; i < ds[p].n; i++) {
			const struct delta *d = &ds[p].v[i];
			printf("  %s\n", d->key);
			if (p == P_TREE) {
				printf("    A: %s\n    B: %s\n", d->has_a ? d->a : "(none)", d->has_b ? d->b : "(none)");
				continue;
			}
			printf("    A: %s\n    B: %s\n", d->has_a ? (d->a[0] ? d->a : "(yes)") : "(none)",
			       d->has_b ? (d->b[0] ? d->b : "(yes)") : "(none)");
		}
	}
}

static void json_side(struct hs_json *j, const char *key, const struct delta *d, bool has, const char *val, size_t n,
		      enum part p, uint64_t num)
{
	if (!has) {
		hs_json_null(j, key);
		return;
	}
	if (p == P_PEAKS) {
		hs_json_uint(j, key, num);
		return;
	}
	if (p == P_TREE || p == P_FINDINGS) {
		hs_json_object(j, key);
		hs_json_uint(j, "count", n);
		hs_json_str(j, "values", val);
		hs_json_end_object(j);
		return;
	}
	(void)d;
	hs_json_str(j, key, val);
}

static void json(const struct side *a, const struct side *b, struct deltas *ds)
{
	struct hs_json j;
	size_t total = 0;
	for (int p = 0; p < P_COUNT; p++)
		total += ds[p].n;
	hs_json_init(&j, stdout);
	hs_json_object(&j, NULL);
	hs_json_object(&j, "heisen");
	hs_json_uint(&j, "abi", HS_ABI_VERSION);
	hs_json_end_object(&j);
	hs_json_str(&j, "a", a->dir);
	hs_json_str(&j, "b", b->dir);
	hs_json_bool(&j, "same", total == 0);
	for (int p = 0; p < P_COUNT; p++) {
		hs_json_array(&j, part_names[p]);
		for (size_t i = 0; i < ds[p].n; i++) {
			const struct delta *d = &ds[p].v[i];
			hs_json_object(&j, NULL);
			hs_json_str(&j, p == P_ENV ? "field" : p == P_MODULES ? "path" : p == P_WARNINGS ? "kind" : "key",
				    d->key);
			json_side(&j, "a", d, d->has_a, d->a, d->na, (enum part)p, d->num_a);
			json_side(&j, "b", d, d->has_b, d->b, d->nb, (enum part)p, d->num_b);
			hs_json_end_object(&j);
		}
		hs_json_end_array(&j);
	}
	hs_json_array(&j, "errors");
	for (const struct side *sd = a; sd; sd = sd == a ? b : NULL)
		for (size_t i = 0; i < sd->s.nerrors; i++) {
			hs_json_object(&j, NULL);
			hs_json_str(&j, "session", sd->dir);
			hs_json_str(&j, "file", sd->s.errors[i].file);
			hs_json_str(&j, "message", sd->s.errors[i].msg);
			hs_json_end_object(&j);
		}
	hs_json_end_array(&j);
	hs_json_end_object(&j);
	fputc('\n', stdout);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: heisen-dump diff [--json] [--no-symbols] SESSION_A SESSION_B\n");
}

int hs_diff_main(int argc, char **argv)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},
		{"no-symbols", no_argument, NULL, 'n'},
		{"help", no_argument, NULL, 'h'},
		{NULL, 0, NULL, 0},
	};
	struct side a = {0}, b = {0};
	struct deltas ds[P_COUNT];
	bool as_json = false, symbols = true;
	size_t total = 0;
	int c, rc = 0;

	optind = 1;
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': as_json = true; break;
		case 'n': symbols = false; break;
		case 'h': usage(stdout); return 0;
		default: usage(stderr); return 2;
		}
	}
	if (optind != argc - 2) {
		usage(stderr);
		return 2;
	}
	a.dir = argv[optind];
	b.dir = argv[optind + 1];
	memset(ds, 0, sizeof ds);
	if (load_side(&a, symbols) != 0 || load_side(&b, symbols) != 0) {
		for (struct side *sd = &a; sd; sd = sd == &a ? &b : NULL)
			if (!sd->loaded)
				fprintf(stderr, "heisen-dump diff: %s: cannot read the session directory\n", sd->dir);
		rc = 2;
	}
	if (rc == 0 &&
	    (compare(&a.env, &b.env, &ds[P_ENV]) || compare(&a.modules, &b.modules, &ds[P_MODULES]) ||
	     compare(&a.tree, &b.tree, &ds[P_TREE]) || compare(&a.findings, &b.findings, &ds[P_FINDINGS]) ||
	     compare_peaks(&a.peaks, &b.peaks, &ds[P_PEAKS]) || compare(&a.warnings, &b.warnings, &ds[P_WARNINGS]))) {
		fprintf(stderr, "heisen-dump diff: out of memory\n");
		rc = 2;
	}
	for (struct side *sd = &a; sd; sd = sd == &a ? &b : NULL)
		if (sd->loaded)
			hs_session_collect_errors(&sd->s);
	if (rc == 0) {
		/* warnings are compared by kind: their messages carry pids */
		for (size_t i = 0; i < ds[P_WARNINGS].n; i++) {
			struct delta *d = &ds[P_WARNINGS].v[i];
			if (d->has_a && d->has_b && d->na == d->nb) {
				memmove(d, d + 1, (ds[P_WARNINGS].n - i - 1) * sizeof *d);
				ds[P_WARNINGS].n--, i--;
			}
		}
		if (as_json)
			json(&a, &b, ds);
		else
			text(&a, &b, ds);
	}
	for (int p = 0; p < P_COUNT; p++) {
		total += ds[p].n;
		free(ds[p].v);
	}
	for (struct side *sd = &a; sd; sd = sd == &a ? &b : NULL) {
		if (sd->loaded) {
			for (size_t i = 0; i < sd->s.nerrors; i++)
				fprintf(stderr, "heisen-dump: %s: %s: %s\n", sd->dir, sd->s.errors[i].file, sd->s.errors[i].msg);
			if (sd->s.nerrors)
				rc = 2;
		}
	}
	side_free(&a);
	side_free(&b);
	return rc ? rc : total ? 1 : 0;
}
