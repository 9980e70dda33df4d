/* SPDX-License-Identifier: MIT */
/*
 * dumper/session.c — open every segment of a session directory once.
 *
 * Files are found by name (internal/seg_dir.h: "<pid>.<image>.seg"; any other
 * "*.seg" is an error naming it; anything else is ignored), opened with
 * O_NOFOLLOW and validated by segment.c; one that cannot be read (empty,
 * zero magic, never finished, damaged) becomes an error naming the file and
 * the reason — never skipped silently — and the rest go on.  The
 * thread slots of each process are copied here, once, so that the wait-for
 * analysis and every report see the same moment.  Design:
 * docs/interfaces.md "Session directory" and "heisen-dump".
 */
#include "session.h"

#include <dirent.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "symbolize.h"
#include "internal/seg_dir.h"

void hs_session_error(struct hs_session *s, const char *file, const char *fmt, ...)
{
	struct hs_error *e = realloc(s->errors, (s->nerrors + 1) * sizeof *e);
	va_list ap;
	if (!e)
		return;
	s->errors = e;
	e = &e[s->nerrors++];
	snprintf(e->file, sizeof e->file, "%s", file);
	va_start(ap, fmt);
	vsnprintf(e->msg, sizeof e->msg, fmt, ap);
	va_end(ap);
}

/* Far above any real HEISEN_THREADS; bounds the analysis (its recursion
 * depth and its quadratic wait-for edges) on a crafted segment. */
#define THREADS_READ_MAX 16384u

static void load_threads(struct hs_proc *p)
{
	uint32_t cap = p->seg.hdr.tables[HS_T_THREADS].capacity;
	if (cap > THREADS_READ_MAX) {
		hs_seg_complain(&p->seg, "threads table capacity %u > %u: only the first %u slots are read", cap,
				THREADS_READ_MAX, THREADS_READ_MAX);
		cap = THREADS_READ_MAX;
	}
	p->threads = calloc(cap ? cap : 1, sizeof *p->threads);
	if (!p->threads)
		return;
	for (uint32_t i = 0; i < cap; i++)
		if (hs_read_thread(&p->seg, i, &p->threads[p->nthreads]) == 1)
			p->nthreads++;
}

/* Far above any real HEISEN_FD_NUMBERS: bounds the copy on a crafted segment. */
#define FDS_READ_MAX (1u << 20)

/* Copy the fd table: the numbers ever seen, at one moment. */
static void load_fds(struct hs_proc *p)
{
	uint32_t cap = p->seg.hdr.tables[HS_T_FDS].capacity, n = 0;
	struct hs_fdsnap tmp;
	if (cap > FDS_READ_MAX) {
		hs_seg_complain(&p->seg, "fd table capacity %u > %u: only the first %u numbers are read", cap,
				FDS_READ_MAX, FDS_READ_MAX);
		cap = FDS_READ_MAX;
	}
	for (uint32_t i = 0; i < cap; i++)
		n += hs_read_fd(&p->seg, i, &tmp);
	if (n == 0 || !(p->fds = calloc(n, sizeof *p->fds)))
		return;
	for (uint32_t i = 0; i < cap && p->nfds < n; i++)
		if (hs_read_fd(&p->seg, i, &p->fds[p->nfds]) == 1)
			p->nfds++;
}

/* Open one segment into s->procs; errors go to s->errors. */
static void load_one(struct hs_session *s, const char *name, bool symbols, size_t cap)
{
	struct hs_proc *p = &s->procs[s->nprocs];
	char path[4096], err[HS_MSG_MAX];
	enum hs_seg_result r;

	if (s->nprocs == cap)
		return;
	snprintf(path, sizeof path, "%s/%s", s->dir, name);
	memset(p, 0, sizeof *p);
	r = hs_seg_open(&p->seg, path, err, sizeof err);
	if (r != HS_SEG_OK) {
		hs_session_error(s, name, "%s", err);
		return;
	}
	p->state_word = hs_seg_state(&p->seg);
	p->pstate = hs_liveness(p->state_word, p->seg.hdr.pid, p->seg.hdr.start_ticks, &p->value);
	memcpy(p->exe, p->seg.hdr.exe, HS_EXE_MAX);
	p->exe[HS_EXE_MAX] = '\0';
	hs_clean(p->exe);
	p->symbols = symbols;
	load_threads(p);
	load_fds(p);
	s->nprocs++;
}

static int by_pid_image(const void *a, const void *b)
{
	const struct hs_header *x = &((const struct hs_proc *)a)->seg.hdr;
	const struct hs_header *y = &((const struct hs_proc *)b)->seg.hdr;
	if (x->pid != y->pid)
		return x->pid < y->pid ? -1 : 1;
	return x->image < y->image ? -1 : x->image > y->image;
}

static int by_name(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The segment names of d (internal/seg_dir.h: "<pid>.<image>.seg"),
 * sorted; a misnamed "*.seg" becomes an error naming it.  NULL with
 * *n == 0 on a directory without segments. */
static char **list_segments(struct hs_session *s, DIR *d, size_t *n)
{
	char **names = NULL, **tmp;
	struct hs_seg_dirent e;
	size_t cap = 0;

	*n = 0;
	while (hs_seg_dir_next(d, &e)) {
		if (e.kind == HS_NAME_MISNAMED)
			hs_session_error(s, e.name, "%s", HS_SEG_MISNAMED_MSG);
		if (e.kind != HS_NAME_SEGMENT)
			continue;
		if (*n == cap) {
			cap = cap ? 2 * cap : 16;
			if (!(tmp = realloc(names, cap * sizeof *names)))
				break;
			names = tmp;
		}
		if ((names[*n] = strdup(e.name)))
			(*n)++;
	}
	if (*n)
		qsort(names, *n, sizeof *names, by_name);
	return names;
}

int hs_session_load(struct hs_session *s, const char *dir, bool symbols)
{
	struct timespec ts;
	char **names;
	size_t n;
	DIR *d;

	memset(s, 0, sizeof *s);
	s->dir = dir;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	s->now_ns = (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
	if (!(d = opendir(dir))) {
		hs_session_error(s, dir, "cannot read session directory: %s", strerror(errno));
		return -1;
	}
	names = list_segments(s, d, &n);
	closedir(d);
	s->procs = calloc(n ? n : 1, sizeof *s->procs);
	for (size_t i = 0; i < n; i++) {
		if (s->procs)
			load_one(s, names[i], symbols, n);
		free(names[i]);
	}
	free(names);
	if (s->nprocs)
		qsort(s->procs, s->nprocs, sizeof *s->procs, by_pid_image);
	if (s->procs && hs_procs_load(s) != 0)
		hs_session_error(s, dir, "out of memory while building the process tree");
	return 0;
}

void hs_session_collect_errors(struct hs_session *s)
{
	for (size_t i = 0; i < s->nprocs; i++) {
		struct hs_proc *p = &s->procs[i];
		for (; p->collected < p->seg.ncomplaints; p->collected++)
			hs_session_error(s, p->seg.name, "%s", p->seg.complaints[p->collected]);
		if (p->seg.complaints_lost && !p->lost_reported) {
			hs_session_error(s, p->seg.name, "%u more problems not shown", p->seg.complaints_lost);
			p->lost_reported = true;
		}
	}
}

void hs_session_free(struct hs_session *s)
{
	hs_procs_free(s);
	for (size_t i = 0; i < s->nprocs; i++) {
		hs_sym_free(s->procs[i].sym);
		free(s->procs[i].threads);
		free(s->procs[i].fds);
		hs_seg_close(&s->procs[i].seg);
	}
	free(s->procs);
	free(s->errors);
	memset(s, 0, sizeof *s);
}

struct hs_sym *hs_proc_sym(struct hs_proc *p)
{
	if (!p->sym)
		p->sym = hs_sym_new(&p->seg, p->exe, p->symbols);
	return p->sym;
}

bool hs_proc_alive(const struct hs_proc *p)
{
	return p->pstate == HS_P_RUNNING;
}

uint64_t hs_proc_realtime(const struct hs_proc *p, uint64_t mono_ns)
{
	const struct hs_header *h = &p->seg.hdr;
	if (mono_ns == 0)
		return 0;
	return h->start_real_ns + (mono_ns - h->start_mono_ns);
}

const struct hs_tsnap *hs_proc_thread(const struct hs_proc *p, int32_t tid)
{
	for (uint32_t i = 0; i < p->nthreads; i++)
		if (p->threads[i].t.tid == tid)
			return &p->threads[i];
	return NULL;
}
