/* SPDX-License-Identifier: MIT */
/*
 * dumper/procs.c — the session as processes: tree, environment, memory,
 * deaths and warnings (see procs.h).
 *
 * The tree.  A process is one (pid, start time): its segments are the
 * images that pid went through by exec.  Its real parent is the pid its
 * first image saw as parent at start, when a process of the session with
 * that pid had started by then and not yet ended.  multiprocessing's
 * forkserver forks the workers of whoever asked it, so a child of a
 * forkserver (its command line names multiprocessing.forkserver) gets the
 * forkserver's own parent as its logical parent, and both are shown.
 *
 * Deaths.  A process whose segment still says running while its pid is
 * gone (vanished), or that heisen-run's waitpid saw die of SIGKILL, ran no
 * code at its end: a `killed` finding with what is known — its last events,
 * memory at the last sample and peak, how long it ran.  It is an `oom-kill`
 * when the evidence says so.  The direct evidence is the memory cgroup's
 * OOM-kill counter (the kernel counts its kills there, since 4.13): the
 * value the process read at start, against a later one — read now by
 * heisen-dump, or by another process of the same cgroup at its exit or
 * start, so the evidence outlives the cgroup.  When more processes of one
 * cgroup vanished than the counter rose, the largest (last sample) are the
 * victims: the OOM killer picks by size.  Only where the counter cannot be
 * read does memory near the limit (the last sample, or the cgroup's own
 * peak usage) decide alone.  The kernel log is not used: containers cannot
 * read it.
 */
#include "procs.h"

#include <dirent.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze.h"
#include "report.h"
#include "session.h"

#define NEAR_LIMIT 0.75      /* last memory sample / limit: near the limit */
#define CGROUP_PEAK 0.95     /* the cgroup's peak / limit: it reached the limit */
#define MEM_WARN 0.90        /* peak / limit: the limit is at or below what was used */
#define FDS_WARN 0.80        /* descriptors / RLIMIT_NOFILE */
#define CPU_WARN 2.0         /* CPUs online / CPUs allowed */

/* ---- formatting ----------------------------------------------------------- */

char *hs_fmt_bytes(char *buf, size_t len, uint64_t b)
{
	static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB"};
	double v = (double)b;
	int u = -1;
	if (b < 1024) {
		snprintf(buf, len, "%" PRIu64 " B", b);
		return buf;
	}
	while (v >= 1024 && u < 3)
		v /= 1024, u++;
	snprintf(buf, len, "%.1f %s", v, unit[u]);
	return buf;
}

void hs_proc_cmdline(const struct hs_proc *p, char *buf, size_t len)
{
	const struct hs_header *h = &p->seg.hdr;
	size_t off = 0, used = 0;
	buf[0] = '\0';
	for (uint32_t i = 0; i < h->argc && off < HS_ARGV_MAX && used + 1 < len; i++) {
		size_t n = strnlen(h->argv + off, HS_ARGV_MAX - off);
		if (i && used + 1 < len)
			buf[used++] = ' ';
		for (size_t k = 0; k < n && used + 1 < len; k++) {
			unsigned char c = (unsigned char)h->argv[off + k];
			buf[used++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
		}
		off += n + 1;
	}
	buf[used] = '\0';
	if (!buf[0])
		snprintf(buf, len, "%s", p->exe);
}

double hs_env_cpu_allowed(const struct hs_env *e)
{
	double allowed = e->cpu_affinity ? (double)e->cpu_affinity : (double)e->cpu_online;
	if (e->cpu_quota_us && e->cpu_period_us) {
		double q = (double)e->cpu_quota_us / (double)e->cpu_period_us;
		if (!allowed || q < allowed)
			allowed = q;
	}
	return allowed;
}

uint64_t hs_proc_limit(const struct hs_proc *p)
{
	return p->info && p->info->env_valid ? p->info->env.mem_limit : 0;
}

/* ---- reading what the segment says ------------------------------------------ */

/* Terminate and clean a string array from the segment; complain when it had no NUL. */
static void fix_string(struct hs_proc *p, char *s, size_t cap, const char *what)
{
	if (strnlen(s, cap) == cap) {
		hs_seg_complain(&p->seg, "environment: %s is not terminated", what);
		s[cap - 1] = '\0';
	}
	hs_clean(s);
}

/*
 * A memory cgroup directory heisen-dump may read files in: under
 * /sys/fs/cgroup, no "." or ".." components, no empty ones.  (The path
 * comes from shared memory: never let it send the dumper elsewhere.)
 */
static bool cgroup_path_ok(const char *path)
{
	static const char base[] = "/sys/fs/cgroup";
	const char *p = path + sizeof base - 1;
	if (strncmp(path, base, sizeof base - 1) != 0 || (*p && *p != '/'))
		return false;
	while (*p) {
		const char *c = p + 1, *e = strchr(c, '/');
		size_t n = e ? (size_t)(e - c) : strlen(c);
		if (n == 0 || (n == 1 && c[0] == '.') || (n == 2 && c[0] == '.' && c[1] == '.'))
			return false;
		p = c + n;
	}
	return true;
}

static void read_env(struct hs_proc *p, struct hs_pinfo *pi)
{
	struct hs_env *e = &pi->env;
	uint32_t flags = hs_seg_flags(&p->seg);
	if (!(flags & HS_HDR_ENV))
		return;
	*e = p->seg.hdr.env;
	pi->env_valid = true;
	pi->env_inherited = (flags & HS_HDR_ENV_INHERITED) != 0;
	fix_string(p, e->kernel, sizeof e->kernel, "kernel release");
	fix_string(p, e->libc, sizeof e->libc, "libc version");
	fix_string(p, e->mem_cgroup, sizeof e->mem_cgroup, "memory cgroup path");
	if (e->cgroup > 2) {
		hs_seg_complain(&p->seg, "environment: cgroup version %u", e->cgroup);
		e->cgroup = 0;
	}
	if (e->cgroup && e->mem_cgroup_root > strlen(e->mem_cgroup)) {
		hs_seg_complain(&p->seg, "environment: cgroup mount point length %u beyond the path",
				e->mem_cgroup_root);
		e->cgroup = 0;
	}
	if (e->cgroup && !cgroup_path_ok(e->mem_cgroup)) {
		hs_seg_complain(&p->seg, "environment: memory cgroup \"%.100s\" is not a directory under /sys/fs/cgroup",
				e->mem_cgroup);
		e->cgroup = 0;
	}
	if (e->cpu_quota_us && !e->cpu_period_us) {
		hs_seg_complain(&p->seg, "environment: a CPU quota with a zero period");
		e->cpu_quota_us = 0;
	}
	pi->cgroup_ok = e->cgroup != 0 && e->mem_cgroup[0];
}

#define LOAD64(p, field) hs_seg_load64(&(p)->seg, offsetof(struct hs_header, field))
#define LOAD32(p, field) hs_seg_load32(&(p)->seg, offsetof(struct hs_header, field))

static uint32_t count_fd_dir(int32_t pid, bool *ok)
{
	char path[64];
	struct dirent *de;
	uint32_t n = 0;
	DIR *d;
	snprintf(path, sizeof path, "/proc/%d/fd", (int)pid);
	*ok = false;
	if (!(d = opendir(path)))
		return 0;
	while ((de = readdir(d)))
		n += de->d_name[0] != '.';
	closedir(d);
	*ok = true;
	return n;
}

bool hs_proc_fds_now(struct hs_proc *p, uint32_t *n)
{
	struct hs_pinfo *pi = p->info;
	if (!pi || p->pstate != HS_P_RUNNING)
		return false;
	if (!pi->fds_now_asked) {
		pi->fds_now_asked = true;
		pi->fds_now = count_fd_dir(p->seg.hdr.pid, &pi->fds_now_known);
	}
	*n = pi->fds_now;
	return pi->fds_now_known;
}

static void read_live(struct hs_proc *p, struct hs_pinfo *pi)
{
	const struct hs_header *h = &p->seg.hdr;
	uint64_t end = hs_seg_end_ns(&p->seg);
	pi->rss = LOAD64(p, rss_bytes);
	pi->rss_peak = LOAD64(p, rss_peak_bytes);
	pi->rss_sample_ns = LOAD64(p, rss_sample_ns);
	pi->rss_samples = LOAD64(p, rss_samples);
	pi->oom_end_ns = LOAD64(p, oom_kills_end_ns);
	pi->oom_end = pi->oom_end_ns ? LOAD64(p, oom_kills_end) : 0;
	pi->fds_open = LOAD32(p, fds_open);
	pi->fds_peak = LOAD32(p, fds_peak);
	if (pi->rss > pi->rss_peak)
		pi->rss_peak = pi->rss;
	if (HS_STATE_OF(p->state_word) == HS_STATE_SIGNALED) {
		/* published by the state word's CAS, which we read (acquire) before */
		pi->term = true;
		pi->term_signal = (int32_t)LOAD32(p, term_signal);
		pi->term_code = (int32_t)LOAD32(p, term_code);
		pi->term_pid = (int32_t)LOAD32(p, term_pid);
		pi->term_uid = LOAD32(p, term_uid);
	}
	/* the last sign of life */
	pi->last_ns = h->start_mono_ns;
	if (end > pi->last_ns)
		pi->last_ns = end;
	if (pi->rss_sample_ns > pi->last_ns)
		pi->last_ns = pi->rss_sample_ns;
	for (uint32_t i = 0; i < p->nthreads; i++) {
		const struct hs_tsnap *t = &p->threads[i];
		struct hs_record r;
		uint64_t ts[] = {t->t.start_ns, t->t.end_ns, t->t.snap_ns};
		for (size_t k = 0; k < sizeof ts / sizeof ts[0]; k++)
			if (ts[k] > pi->last_ns)
				pi->last_ns = ts[k];
		if (hs_read_ring(&p->seg, t->slot, &r, 1) == 1 && r.ts_ns > pi->last_ns)
			pi->last_ns = r.ts_ns;
	}
}

/* ---- the tree --------------------------------------------------------------- */

static uint64_t node_start(const struct hs_pnode *n)
{
	return n->images[0]->seg.hdr.start_mono_ns;
}

/* When the process ended (its last image's end), 0 while running or unknown. */
static uint64_t node_end(const struct hs_pnode *n)
{
	const struct hs_proc *last = n->images[n->nimages - 1];
	return last->pstate == HS_P_RUNNING ? 0 : hs_seg_end_ns(&last->seg);
}

static bool argv_has(const struct hs_proc *p, const char *needle)
{
	const struct hs_header *h = &p->seg.hdr;
	size_t off = 0;
	for (uint32_t i = 0; i < h->argc && off < HS_ARGV_MAX; i++) {
		size_t n = strnlen(h->argv + off, HS_ARGV_MAX - off);
		if (memmem(h->argv + off, n, needle, strlen(needle)))
			return true;
		off += n + 1;
	}
	return false;
}

static int by_start(const void *a, const void *b)
{
	const struct hs_pnode *x = *(const struct hs_pnode *const *)a, *y = *(const struct hs_pnode *const *)b;
	uint64_t sx = node_start(x), sy = node_start(y);
	if (sx != sy)
		return sx < sy ? -1 : 1;
	return (x->pid > y->pid) - (x->pid < y->pid);
}

/* The process with pid that was alive when `at` (writer's clock) came. */
static struct hs_pnode *alive_at(struct hs_ptree *t, int32_t pid, uint64_t at, const struct hs_pnode *self)
{
	struct hs_pnode *best = NULL;
	for (size_t i = 0; i < t->n; i++) {
		struct hs_pnode *c = &t->nodes[i];
		uint64_t end = node_end(c);
		if (c == self || c->pid != pid || node_start(c) > at || (end && end < at))
			continue;
		if (!best || node_start(c) > node_start(best))
			best = c;
	}
	return best;
}

static int add_child(struct hs_pnode *parent, struct hs_pnode *child)
{
	struct hs_pnode **v = realloc(parent->children, (parent->nchildren + 1) * sizeof *v);
	if (!v)
		return -1;
	parent->children = v;
	v[parent->nchildren++] = child;
	return 0;
}

static void set_depth(struct hs_pnode *n, unsigned depth)
{
	n->depth = depth;
	if (depth > 4096)
		return; /* cannot happen: parents start first; bound it all the same */
	for (size_t i = 0; i < n->nchildren; i++)
		set_depth(n->children[i], depth + 1);
}

static int build_tree(struct hs_session *s, struct hs_ptree *t)
{
	struct hs_pnode **order;
	size_t n = 0;
	if (!(t->nodes = calloc(s->nprocs ? s->nprocs : 1, sizeof *t->nodes)))
		return -1;
	/* procs are sorted by pid, then image: one node per run of (pid, start ticks) */
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		struct hs_pnode *c = n ? &t->nodes[n - 1] : NULL;
		struct hs_proc **v;
		if (!c || c->pid != p->seg.hdr.pid || c->start_ticks != p->seg.hdr.start_ticks) {
			c = &t->nodes[n++];
			c->pid = p->seg.hdr.pid;
			c->start_ticks = p->seg.hdr.start_ticks;
			c->real_ppid = p->seg.hdr.ppid;
			c->via = (hs_seg_flags(&p->seg) & HS_HDR_ENV_INHERITED) ? "fork" : "exec";
		}
		if (!(v = realloc(c->images, (c->nimages + 1) * sizeof *v)))
			return -1;
		c->images = v;
		v[c->nimages++] = p;
		p->info->node = c;
	}
	t->n = n;
	/* start order, then parents (which start first) */
	if (!(order = calloc(n ? n : 1, sizeof *order)))
		return -1;
	for (size_t i = 0; i < n; i++)
		order[i] = &t->nodes[i];
	qsort(order, n, sizeof *order, by_start);
	for (size_t i = 0; i < n; i++) {
		struct hs_pnode *c = order[i];
		c->index = i;
		c->real_parent = alive_at(t, c->real_ppid, node_start(c), c);
		c->parent = c->real_parent;
		if (c->real_parent && argv_has(c->real_parent->images[0], "multiprocessing.forkserver")) {
			c->via = "forkserver";
			if (c->real_parent->parent)
				c->parent = c->real_parent->parent;
		}
	}
	for (size_t i = 0; i < n; i++) {
		struct hs_pnode *c = order[i];
		if (c->parent ? add_child(c->parent, c) != 0 : 0) {
			free(order);
			return -1;
		}
		if (!c->parent) {
			struct hs_pnode **r = realloc(t->roots, (t->nroots + 1) * sizeof *r);
			if (!r) {
				free(order);
				return -1;
			}
			t->roots = r;
			r[t->nroots++] = c;
		}
	}
	free(order);
	for (size_t i = 0; i < t->nroots; i++)
		set_depth(t->roots[i], 0);
	return 0;
}

int hs_procs_load(struct hs_session *s)
{
	s->info_store = calloc(s->nprocs ? s->nprocs : 1, sizeof *s->info_store);
	s->tree = calloc(1, sizeof *s->tree);
	if (!s->info_store || !s->tree)
		return -1;
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		p->info = &s->info_store[i];
		read_env(p, p->info);
		read_live(p, p->info);
	}
	return build_tree(s, s->tree);
}

void hs_procs_free(struct hs_session *s)
{
	if (s->tree) {
		for (size_t i = 0; i < s->tree->n; i++) {
			free(s->tree->nodes[i].images);
			free(s->tree->nodes[i].children);
		}
		free(s->tree->nodes);
		free(s->tree->roots);
		free(s->tree);
	}
	free(s->info_store);
	s->tree = NULL;
	s->info_store = NULL;
}

/* ---- cgroup files, read now ----------------------------------------------------- */

/* A number from a cgroup file ("max" reads as 0). */
static bool read_number(const char *dir, const char *file, uint64_t *out)
{
	char path[HS_CGROUP_PATH_MAX + 64], buf[64];
	FILE *f;
	bool ok;
	snprintf(path, sizeof path, "%s/%s", dir, file);
	if (!(f = fopen(path, "re")))
		return false;
	ok = fgets(buf, sizeof buf, f) != NULL;
	fclose(f);
	if (!ok)
		return false;
	*out = buf[0] >= '0' && buf[0] <= '9' ? strtoull(buf, NULL, 10) : 0;
	return true;
}

/*
 * May heisen-dump read e's cgroup files now?  Only in the writer's cgroup
 * namespace: from another one (the host, reading a container's session)
 * the same path names another cgroup.  (Like liveness, this assumes the
 * session is read on the machine that wrote it.)
 */
static bool same_cgroup_ns(const struct hs_env *e)
{
	static uint32_t mine;
	static bool known;
	if (!known) {
		char buf[64];
		ssize_t n = readlink("/proc/self/ns/cgroup", buf, sizeof buf - 1);
		const char *p = n > 0 ? memchr(buf, '[', (size_t)n) : NULL;
		if (p) {
			buf[n] = '\0';
			mine = (uint32_t)strtoul(p + 1, NULL, 10);
		}
		known = true;
	}
	return !e->cgroup_ns || !mine || e->cgroup_ns == mine;
}

/* The OOM-kill counter of e's memory cgroup now. */
static bool oom_kills_now(const struct hs_env *e, uint64_t *out)
{
	char path[HS_CGROUP_PATH_MAX + 64], line[128];
	bool found = false;
	FILE *f;
	if (!same_cgroup_ns(e))
		return false;
	snprintf(path, sizeof path, "%s/%s", e->mem_cgroup, e->cgroup == 2 ? "memory.events" : "memory.oom_control");
	if (!(f = fopen(path, "re")))
		return false;
	while (!found && fgets(line, sizeof line, f))
		if (strncmp(line, "oom_kill ", 9) == 0) {
			*out = strtoull(line + 9, NULL, 10);
			found = true;
		}
	fclose(f);
	return found;
}

/* The peak usage of the cgroup on e's path whose limit is e->mem_limit, now. */
static uint64_t cgroup_peak_now(const struct hs_env *e)
{
	char dir[HS_CGROUP_PATH_MAX];
	size_t n = strlen(e->mem_cgroup);
	if (!same_cgroup_ns(e))
		return 0;
	memcpy(dir, e->mem_cgroup, n + 1);
	while (n >= e->mem_cgroup_root) {
		uint64_t lim, peak;
		if (read_number(dir, e->cgroup == 2 ? "memory.max" : "memory.limit_in_bytes", &lim) &&
		    lim == e->mem_limit)
			return read_number(dir, e->cgroup == 2 ? "memory.peak" : "memory.max_usage_in_bytes", &peak)
				       ? peak : 0;
		while (n > e->mem_cgroup_root && dir[n - 1] != '/')
			n--;
		if (n <= e->mem_cgroup_root)
			break;
		dir[--n] = '\0';
	}
	return 0;
}

/* ---- deaths --------------------------------------------------------------------- */

static bool same_cgroup(const struct hs_pinfo *a, const struct hs_pinfo *b)
{
	return a->cgroup_ok && b->cgroup_ok && a->env.cgroup == b->env.cgroup &&
	       strcmp(a->env.mem_cgroup, b->env.mem_cgroup) == 0;
}

/*
 * The newest reading of p's cgroup counter that came after p started: now
 * (heisen-dump), another process's exit, or another process's start.
 */
static bool counter_after(struct hs_session *s, struct hs_proc *p, struct hs_death *d)
{
	const struct hs_pinfo *pi = p->info;
	uint64_t v, start = p->info->node ? node_start(p->info->node) : p->seg.hdr.start_mono_ns;
	bool found = false;
	if (oom_kills_now(&pi->env, &v)) {
		d->oom_after = v;
		d->oom_after_pid = 0;
		found = true;
	}
	for (size_t i = 0; i < s->nprocs; i++) {
		const struct hs_proc *q = &s->procs[i];
		const struct hs_pinfo *qi = q->info;
		if (q == p || !same_cgroup(pi, qi))
			continue;
		if (qi->oom_end_ns && qi->oom_end_ns > start && (!found || qi->oom_end > d->oom_after)) {
			d->oom_after = qi->oom_end;
			d->oom_after_pid = q->seg.hdr.pid;
			d->oom_after_start = false;
			found = true;
		}
		if ((qi->env.flags & HS_ENV_OOM_COUNTER) && q->seg.hdr.start_mono_ns > start &&
		    (!found || qi->env.oom_kills > d->oom_after)) {
			d->oom_after = qi->env.oom_kills;
			d->oom_after_pid = q->seg.hdr.pid;
			d->oom_after_start = true;
			found = true;
		}
	}
	return found;
}

/* Did p die without running any code?  (*sig: 9 when heisen-run saw it) */
static bool died_silently(const struct hs_proc *p, int *sig)
{
	*sig = 0;
	/* after a privilege drop its end may not be recorded: a limit finding says so (analyze.c) */
	if (hs_seg_flags(&p->seg) & HS_HDR_UID_CHANGED)
		return false;
	if (p->pstate == HS_P_VANISHED)
		return true;
	if (p->pstate == HS_P_KILLED && HS_STATE_OF(p->state_word) == HS_STATE_KILLED && p->value == 9) {
		*sig = 9;
		return true;
	}
	return false;
}

static bool explained_by_hang(const struct hs_findings *out, const struct hs_proc *p)
{
	for (size_t i = 0; i < out->n; i++)
		if (out->v[i].proc == p && (out->v[i].kind == HS_F_DEADLOCK || out->v[i].kind == HS_F_HANG ||
					    out->v[i].kind == HS_F_SELF_DEADLOCK))
			return true;
	return false;
}

static int by_tid_ptr(const void *a, const void *b)
{
	const struct hs_tsnap *x = *(const struct hs_tsnap *const *)a, *y = *(const struct hs_tsnap *const *)b;
	return (x->t.tid > y->t.tid) - (x->t.tid < y->t.tid);
}

struct cand {
	struct hs_proc *p;
	struct hs_death d;
	bool counter_known;      /* before and after both read */
};

static int by_rss_desc(const void *a, const void *b)
{
	const struct cand *x = *(const struct cand *const *)a, *y = *(const struct cand *const *)b;
	return (x->p->info->rss < y->p->info->rss) - (x->p->info->rss > y->p->info->rss);
}

/*
 * More vanished processes of one cgroup with counter evidence than the
 * counter rose: the largest are the victims (the OOM killer picks by size);
 * the others lose that evidence.
 */
static void attribute(struct cand *c, size_t n)
{
	struct cand **grp = calloc(n ? n : 1, sizeof *grp);
	if (!grp)
		return;
	for (size_t i = 0; i < n; i++) {
		size_t k = 0;
		uint64_t lo = UINT64_MAX, hi = 0;
		bool first = true;
		if (!(c[i].d.evidence & HS_EV_OOM_COUNTER))
			continue;
		for (size_t j = 0; j < n; j++) {
			if (!(c[j].d.evidence & HS_EV_OOM_COUNTER) || !same_cgroup(c[i].p->info, c[j].p->info))
				continue;
			first &= j >= i;
			grp[k++] = &c[j];
			lo = c[j].d.oom_before < lo ? c[j].d.oom_before : lo;
			hi = c[j].d.oom_after > hi ? c[j].d.oom_after : hi;
		}
		if (!first || k <= hi - lo)
			continue; /* each group once, from its first member */
		qsort(grp, k, sizeof *grp, by_rss_desc);
		for (size_t j = (size_t)(hi - lo); j < k; j++)
			grp[j]->d.evidence &= ~HS_EV_OOM_COUNTER;
	}
	free(grp);
}

static int add_death(struct hs_findings *out, struct cand *c, bool oom)
{
	struct hs_proc *p = c->p;
	struct hs_fnd *f = hs_finding_new(out, oom ? HS_F_OOM_KILL : HS_F_KILLED, p);
	if (!f)
		return -1;
	f->death = c->d;
	f->rec.tid = p->seg.hdr.pid;
	f->rec.count = 1;
	f->rec.ts_ns = p->info->last_ns;
	if (p->nthreads && !(f->threads = calloc(p->nthreads, sizeof *f->threads)))
		return -1;
	for (uint32_t i = 0; i < p->nthreads; i++)
		f->threads[f->nthreads++] = &p->threads[i];
	if (f->nthreads)
		qsort(f->threads, f->nthreads, sizeof *f->threads, by_tid_ptr);
	return 0;
}

int hs_proc_findings(struct hs_session *s, struct hs_findings *out)
{
	struct cand *c = calloc(s->nprocs ? s->nprocs : 1, sizeof *c);
	size_t n = 0;
	int rc = 0;
	if (!c)
		return -1;
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		struct hs_pinfo *pi = p->info;
		struct hs_death *d = &c[n].d;
		const struct hs_proc *first;
		uint64_t end;
		int sig;
		if (!pi || !died_silently(p, &sig))
			continue;
		memset(&c[n], 0, sizeof c[n]);
		c[n].p = p;
		d->signal = sig;
		if (sig)
			d->evidence |= HS_EV_SIGKILL;
		first = pi->node ? pi->node->images[0] : p;
		end = hs_seg_end_ns(&p->seg);
		d->ran_at_least = end == 0;
		end = end ? end : pi->last_ns;
		d->ran_seconds = end > first->seg.hdr.start_mono_ns
					 ? (double)(end - first->seg.hdr.start_mono_ns) / 1e9 : 0.0;
		if (pi->env_valid) {
			d->limit = pi->env.mem_limit;
			if (pi->cgroup_ok && (pi->env.flags & HS_ENV_OOM_COUNTER) && counter_after(s, p, d)) {
				d->oom_before = pi->env.oom_kills;
				c[n].counter_known = true;
				if (d->oom_after > d->oom_before)
					d->evidence |= HS_EV_OOM_COUNTER;
			}
			if (d->limit && (double)pi->rss >= NEAR_LIMIT * (double)d->limit)
				d->evidence |= HS_EV_NEAR_LIMIT;
			if (d->limit && pi->cgroup_ok && (d->cgroup_peak = cgroup_peak_now(&pi->env)) &&
			    (double)d->cgroup_peak >= CGROUP_PEAK * (double)d->limit)
				d->evidence |= HS_EV_CGROUP_PEAK;
		}
		n++;
	}
	attribute(c, n);
	for (size_t i = 0; i < n && rc == 0; i++) {
		const struct hs_death *d = &c[i].d;
		/* the counter decides when it can be read; else memory near the limit at the last sample.
		   The cgroup's peak only supports: it is the cgroup's, since it was made */
		bool oom = c[i].counter_known ? (d->evidence & HS_EV_OOM_COUNTER) != 0
					      : (d->evidence & HS_EV_NEAR_LIMIT) != 0;
		if (!oom)
			c[i].d.evidence &= ~HS_EV_CGROUP_PEAK;
		if (!oom && explained_by_hang(out, c[i].p))
			continue;
		rc = add_death(out, &c[i], oom);
	}
	free(c);
	return rc;
}

void hs_death_message(const struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_proc *p = f->proc;
	const struct hs_pinfo *pi = p->info;
	const struct hs_death *d = &f->death;
	char cmd[160], rss[32], peak[32], lim[32];
	size_t used = 0;
	hs_proc_cmdline(p, cmd, sizeof cmd);
	hs_fmt_bytes(rss, sizeof rss, pi->rss);
	hs_fmt_bytes(peak, sizeof peak, pi->rss_peak);
	hs_appendf(msg, len, &used, "pid %d (%.100s) was %s", p->seg.hdr.pid, cmd,
		   f->kind == HS_F_OOM_KILL ? "killed by the OOM killer" : "killed without running any code");
	if (f->kind == HS_F_KILLED)
		hs_appendf(msg, len, &used, " (%s)", d->signal ? "SIGKILL, said waitpid" : "SIGKILL or the OOM killer");
	if (pi->rss_samples)
		hs_appendf(msg, len, &used, " at %s resident (peak %s)", rss, peak);
	if (d->limit)
		hs_appendf(msg, len, &used, " of its %s memory limit", hs_fmt_bytes(lim, sizeof lim, d->limit));
	hs_appendf(msg, len, &used, " after %s%.2f s", d->ran_at_least ? "at least " : "", d->ran_seconds);
	if (d->evidence & HS_EV_OOM_COUNTER)
		hs_appendf(msg, len, &used, "; the OOM-kill counter of its memory cgroup rose %" PRIu64 " -> %" PRIu64,
			   d->oom_before, d->oom_after);
	if (d->evidence & HS_EV_NEAR_LIMIT)
		hs_appendf(msg, len, &used, "; its last sample was %.0f%% of the limit",
			   100.0 * (double)pi->rss / (double)d->limit);
	if (d->evidence & HS_EV_CGROUP_PEAK)
		hs_appendf(msg, len, &used, "; the cgroup's peak usage reached %.0f%% of the limit",
			   100.0 * (double)d->cgroup_peak / (double)d->limit);
}

/* ---- warnings --------------------------------------------------------------------- */

const char *hs_wkind_name(enum hs_wkind k)
{
	static const char *const names[HS_W_KINDS] = {
		[HS_W_CPU_OVERSUBSCRIBED] = "cpu-oversubscription",
		[HS_W_MEMORY_LIMIT] = "memory-limit",
		[HS_W_OPEN_FILES] = "open-files",
	};
	return (unsigned)k < HS_W_KINDS ? names[k] : "unknown";
}

static struct hs_warning *add_warning(struct hs_warnings *w, enum hs_wkind kind)
{
	struct hs_warning *v = realloc(w->v, (w->n + 1) * sizeof *v);
	if (!v)
		return NULL;
	w->v = v;
	v = &v[w->n++];
	memset(v, 0, sizeof *v);
	v->kind = kind;
	return v;
}

static int add_pid(struct hs_warning *x, int32_t pid)
{
	int32_t *v;
	for (size_t i = 0; i < x->npids; i++)
		if (x->pids[i] == pid)
			return 0;
	if (!(v = realloc(x->pids, (x->npids + 1) * sizeof *v)))
		return -1;
	x->pids = v;
	v[x->npids++] = pid;
	return 0;
}

static bool same_cpu_env(const struct hs_env *a, const struct hs_env *b)
{
	return a->cpu_online == b->cpu_online && a->cpu_affinity == b->cpu_affinity &&
	       a->cpu_quota_us == b->cpu_quota_us && a->cpu_period_us == b->cpu_period_us;
}

static int cpu_warnings(struct hs_session *s, struct hs_warnings *w)
{
	size_t first = w->n;
	for (size_t i = 0; i < s->nprocs; i++) {
		const struct hs_pinfo *pi = s->procs[i].info;
		struct hs_warning *x = NULL;
		double allowed;
		if (!pi || !pi->env_valid || !pi->env.cpu_online)
			continue;
		allowed = hs_env_cpu_allowed(&pi->env);
		if (allowed <= 0 || (double)pi->env.cpu_online < CPU_WARN * allowed)
			continue;
		for (size_t k = first; k < w->n && !x; k++)
			if (w->v[k].kind == HS_W_CPU_OVERSUBSCRIBED && same_cpu_env(&w->v[k].cpu_env, &pi->env))
				x = &w->v[k];
		if (!x) {
			char quota[96] = "no CPU quota";
			size_t used = 0;
			if (!(x = add_warning(w, HS_W_CPU_OVERSUBSCRIBED)))
				return -1;
			x->cpu_env = pi->env;
			x->cpu_online = pi->env.cpu_online;
			x->cpu_affinity = pi->env.cpu_affinity;
			x->cpu_allowed = allowed;
			if (pi->env.cpu_quota_us)
				snprintf(quota, sizeof quota, "a CPU quota of %.2f CPUs (%" PRIu64 " us per %" PRIu64 " us)",
					 (double)pi->env.cpu_quota_us / (double)pi->env.cpu_period_us,
					 pi->env.cpu_quota_us, pi->env.cpu_period_us);
			hs_appendf(x->message, sizeof x->message, &used,
				   "%u CPUs online is what os.cpu_count() and sysconf(_SC_NPROCESSORS_ONLN) say, but the "
				   "process may use only %.2g (affinity %u CPU%s, %s): pools sized by the CPU count run "
				   "%.1fx oversubscribed",
				   pi->env.cpu_online, allowed, pi->env.cpu_affinity, pi->env.cpu_affinity == 1 ? "" : "s",
				   quota, (double)pi->env.cpu_online / allowed);
		}
		if (add_pid(x, s->procs[i].seg.hdr.pid) != 0)
			return -1;
	}
	return 0;
}

static int memory_warnings(struct hs_session *s, struct hs_warnings *w)
{
	for (size_t i = 0; i < s->nprocs; i++) {
		const struct hs_pinfo *pi = s->procs[i].info;
		struct hs_warning *x;
		uint64_t peak = 0;
		int32_t who = 0;
		bool seen = false;
		char lim[32], pk[32];
		size_t used = 0;
		if (!pi || !pi->env_valid || !pi->env.mem_limit)
			continue;
		/* once per (cgroup, limit): from its first process */
		for (size_t k = 0; k < i && !seen; k++) {
			const struct hs_pinfo *qi = s->procs[k].info;
			seen = qi && qi->env_valid && qi->env.mem_limit == pi->env.mem_limit &&
			       strcmp(qi->env.mem_cgroup, pi->env.mem_cgroup) == 0;
		}
		if (seen)
			continue;
		for (size_t k = i; k < s->nprocs; k++) {
			const struct hs_pinfo *qi = s->procs[k].info;
			if (qi && qi->env_valid && qi->env.mem_limit == pi->env.mem_limit &&
			    strcmp(qi->env.mem_cgroup, pi->env.mem_cgroup) == 0 && qi->rss_peak > peak) {
				peak = qi->rss_peak;
				who = s->procs[k].seg.hdr.pid;
			}
		}
		/* the processes' own peaks: the cgroup's peak is since the cgroup was made, not this session */
		if ((double)peak < MEM_WARN * (double)pi->env.mem_limit)
			continue;
		if (!(x = add_warning(w, HS_W_MEMORY_LIMIT)))
			return -1;
		x->limit = pi->env.mem_limit;
		x->peak = peak;
		x->peak_pid = who;
		hs_fmt_bytes(lim, sizeof lim, x->limit);
		hs_fmt_bytes(pk, sizeof pk, x->peak);
		hs_appendf(x->message, sizeof x->message, &used, "the memory limit of %s (%s) is at or below the observed peak: ",
			   lim, pi->env.mem_cgroup[0] ? pi->env.mem_cgroup : "cgroup");
		hs_appendf(x->message, sizeof x->message, &used, "pid %d reached %s resident", x->peak_pid, pk);
		hs_appendf(x->message, sizeof x->message, &used, " (%.0f%%)", 100.0 * (double)x->peak / (double)x->limit);
		for (size_t k = i; k < s->nprocs; k++) {
			const struct hs_pinfo *qi = s->procs[k].info;
			if (qi && qi->env_valid && qi->env.mem_limit == pi->env.mem_limit &&
			    strcmp(qi->env.mem_cgroup, pi->env.mem_cgroup) == 0 && add_pid(x, s->procs[k].seg.hdr.pid))
				return -1;
		}
	}
	return 0;
}

static int fd_warnings(struct hs_session *s, struct hs_warnings *w)
{
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		const struct hs_pinfo *pi = p->info;
		struct hs_warning *x;
		uint64_t fds, lim;
		uint32_t now = 0;
		size_t used = 0;
		if (!pi || !pi->env_valid)
			continue;
		lim = pi->env.nofile_soft;
		hs_proc_fds_now(p, &now);
		fds = pi->fds_peak > now ? pi->fds_peak : now;
		if (!lim || lim == HS_UNLIMITED || (double)fds < FDS_WARN * (double)lim)
			continue;
		if (!(x = add_warning(w, HS_W_OPEN_FILES)))
			return -1;
		x->fds = fds;
		x->nofile = lim;
		/* the count is what the segment has; the fd table in the context says which */
		hs_appendf(x->message, sizeof x->message, &used,
			   "pid %d had %" PRIu64 " descriptors open of its open-files limit of %" PRIu64
			   " (RLIMIT_NOFILE soft; hard %s): the next open() may fail with EMFILE",
			   p->seg.hdr.pid, fds, lim, pi->env.nofile_hard == HS_UNLIMITED ? "unlimited" : "set");
		if (add_pid(x, p->seg.hdr.pid) != 0)
			return -1;
	}
	return 0;
}

int hs_warnings_find(struct hs_session *s, struct hs_warnings *out)
{
	memset(out, 0, sizeof *out);
	if (cpu_warnings(s, out) != 0 || memory_warnings(s, out) != 0 || fd_warnings(s, out) != 0)
		return -1;
	return 0;
}

void hs_warnings_free(struct hs_warnings *w)
{
	for (size_t i = 0; i < w->n; i++)
		free(w->v[i].pids);
	free(w->v);
	memset(w, 0, sizeof *w);
}
