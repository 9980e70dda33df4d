/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_reader.c — the dumper's reader against synthesized segments.
 *
 * Segments are laid out with hs_layout() from format.h, filled by hand and
 * written to a temporary session directory: one valid segment (two locks, a
 * two-edge cycle finding, threads holding one lock and waiting for the
 * other, a few ring records), then corrupt variants, each of which must be
 * rejected or clamped with its precise message and never read out of
 * bounds (run under valgrind or ASan by hand; see dumper/meson.build).  The
 * wait-for analysis must find a two-thread deadlock in a cyclic segment,
 * and a hang but no deadlock in a non-cyclic one.  The symbolizer is checked
 * against this very binary.
 */
#include <dirent.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "analyze.h"
#include "liveness.h"
#include "report.h"
#include "segment.h"
#include "session.h"
#include "snapshot.h"
#include "stall.h"
#include "symbolize.h"
#include <internal/proc_stat.h>
#include <internal/seg_dir.h>
#include <internal/seg_rings.h>
#include <internal/seg_verdict.h>

static int failures, checks;

#define CHECK(cond)                                                                   \
	do {                                                                          \
		checks++;                                                             \
		if (!(cond)) {                                                        \
			failures++;                                                   \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                     \
	} while (0)

#define CHECK_STR(a, b)                                                               \
	do {                                                                          \
		const char *a_ = (a), *b_ = (b);                                      \
		checks++;                                                             \
		if (!a_ || !b_ || strcmp(a_, b_) != 0) {                              \
			failures++;                                                   \
			fprintf(stderr, "%s:%d: \"%s\" != \"%s\"\n", __FILE__, __LINE__, \
				a_ ? a_ : "(null)", b_ ? b_ : "(null)");              \
		}                                                                     \
	} while (0)

#define LOCK_A 0x1000u
#define LOCK_B 0x2000u

/* ---- building segments -------------------------------------------------- */

struct synth {
	unsigned char *buf;
	size_t size;
	struct hs_header *h;
};

static void *entry(struct synth *s, int t, uint32_t i)
{
	return s->buf + s->h->tables[t].offset + (uint64_t)i * s->h->tables[t].entry_size;
}

static uint64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/*
 * How long the synthesized threads have waited, and the hang timeout that
 * age exceeds.  100 s normally; on a machine booted less than 100 s ago
 * (a fresh CI machine) CLOCK_MONOTONIC is smaller than that, so the age is
 * what the clock allows and the timeout a third of it.  Set in main().
 */
static uint64_t g_wait_age_ns = 100ull * 1000000000u;
static double g_timeout = 30.0;

static uint32_t add_string(struct synth *s, const char *str)
{
	uint32_t off = s->h->tables[HS_T_STRINGS].count;
	memcpy(entry(s, HS_T_STRINGS, off), str, strlen(str) + 1);
	s->h->tables[HS_T_STRINGS].count += (uint32_t)strlen(str) + 1;
	return off;
}

static void add_lock(struct synth *s, uint32_t id, uint64_t addr)
{
	struct hs_lock *l = entry(s, HS_T_LOCKS, id);
	l->addr = addr;
	l->gen = 1;
	l->kind = HS_LOCK_MUTEX;
	l->first_stack = 1;
	s->h->tables[HS_T_LOCKS].count = id + 1;
}

static void add_edge(struct synth *s, uint32_t id, uint32_t from, uint32_t to, int tid)
{
	struct hs_edge *e = entry(s, HS_T_EDGES, id);
	e->from = from, e->to = to, e->tid = tid;
	e->from_stack = 1, e->to_stack = 2;
	s->h->tables[HS_T_EDGES].count = id + 1;
}

/* Thread in slot: holds `holds` (0 = nothing), waits for `waits` (0 = nothing). */
static struct hs_thread *add_thread(struct synth *s, uint32_t slot, int tid, uint64_t holds, uint32_t hold_id,
				    uint64_t waits, uint32_t wait_id, uint64_t since)
{
	struct hs_thread *t = entry(s, HS_T_THREADS, slot);
	t->state = HS_THREAD_LIVE;
	t->tid = tid;
	snprintf(t->name, sizeof t->name, "worker-%d", tid);
	if (holds) {
		t->held_count = 1;
		t->held[0] = (struct hs_held){.addr = holds, .lock = hold_id, .stack = 1, .since_ns = since};
	}
	if (waits) {
		t->wait_kind = HS_WAIT_LOCK;
		t->wait_addr = waits;
		t->wait_lock = wait_id;
		t->wait_stack = 2;
		t->wait_since_ns = since;
	}
	return t;
}

static void add_records(struct synth *s, uint32_t slot, unsigned n)
{
	struct hs_ring_header *rh = entry(s, HS_T_RINGS, slot);
	struct hs_record *r = (struct hs_record *)(rh + 1);
	for (unsigned pos = 0; pos < n; pos++) {
		struct hs_record *x = &r[pos & (s->h->ring_records - 1)];
		x->seq = pos + 1;
		x->ts_ns = s->h->start_mono_ns + pos;
		x->type = pos == 0 ? HS_REC_THREAD_START : HS_REC_LOCK_ACQUIRED;
		x->a = LOCK_A;
		x->b = 1;
	}
	rh->head = n;
}

static uint64_t my_start_ticks(void)
{
	uint64_t t = 0;
	hs_proc_start_ticks(getpid(), &t);
	return t;
}

/*
 * The monotonic time `secs` seconds ago, or, on a machine booted less than
 * that long ago (a fresh CI machine), the same fraction of its uptime for
 * every caller (secs / 256), so synthesized starts keep their order and
 * never underflow below boot.
 */
static uint64_t mono_ago(unsigned secs)
{
	uint64_t now = mono_now(), want = (uint64_t)secs * 1000000000u;
	return want < now ? now - want : now - now / 256 * secs;
}

/*
 * The base valid segment: this process (alive), locks 1 (A) and 2 (B), two
 * stacks, a 2-edge potential-deadlock finding, thread 100 holding A and
 * waiting for B since g_wait_age_ns, thread 101 holding B and waiting for A
 * (cyclic) or not waiting (not cyclic), four ring records for slot 0.
 */
static void synth_make(struct synth *s, bool cyclic)
{
	struct hs_geometry g = HS_GEOMETRY_SMALL;
	struct hs_header h = {0};
	uint64_t now = mono_now(), since = now - g_wait_age_ns;
	struct hs_stack *st;
	struct hs_finding *f;

	hs_layout(&h, &g);
	s->size = h.segment_size;
	s->buf = calloc(1, s->size);
	s->h = (struct hs_header *)s->buf;
	*s->h = h;
	memcpy(s->h->magic, HS_MAGIC, HS_MAGIC_LEN);
	s->h->abi_version = HS_ABI_VERSION;
	s->h->endian_tag = HS_ENDIAN_TAG;
	s->h->word_size = sizeof(void *);
	s->h->header_size = sizeof(struct hs_header);
	s->h->pid = getpid();
	s->h->ppid = getppid();
	s->h->start_ticks = my_start_ticks();
	s->h->start_mono_ns = mono_ago(200);
	s->h->start_real_ns = 1700000000ull * 1000000000u;
	s->h->state = HS_STATE_PACK(HS_STATE_RUNNING, 0);
	snprintf(s->h->exe, sizeof s->h->exe, "/usr/bin/synthetic");
	s->h->argc = 2;
	memcpy(s->h->argv, "synthetic\0--flag", 17);

	add_string(s, "");  /* offset 0 = "none" */
	add_lock(s, 1, LOCK_A);
	add_lock(s, 2, LOCK_B);
	for (uint32_t id = 1; id <= 2; id++) {
		st = entry(s, HS_T_STACKS, id);
		st->hash = id;
		st->depth = 2;
		st->pc[0] = 0x400000 + id, st->pc[1] = 0x500000 + id;
		st->ready = 1;
	}
	s->h->tables[HS_T_STACKS].count = 3;
	add_edge(s, 1, 1, 2, 100);
	add_edge(s, 2, 2, 1, 101);
	f = entry(s, HS_T_FINDINGS, 0);
	f->kind = HS_FIND_POTENTIAL_DEADLOCK;
	f->n = 2;
	f->edges[0] = 1, f->edges[1] = 2;
	f->count = 1;
	f->tid = 101;
	f->ready = 1;
	s->h->tables[HS_T_FINDINGS].count = 1;
	add_thread(s, 0, 100, LOCK_A, 1, LOCK_B, 2, since);
	add_thread(s, 1, 101, LOCK_B, 2, cyclic ? LOCK_A : 0, cyclic ? 1 : 0, since);
	add_records(s, 0, 4);
}

static void synth_free(struct synth *s)
{
	free(s->buf);
	memset(s, 0, sizeof *s);
}

/* ---- files and sessions ------------------------------------------------- */

static char tmpdir[64];

static void clear_dir(void)
{
	DIR *d = opendir(tmpdir);
	struct dirent *de;
	char path[512];
	while (d && (de = readdir(d)))
		if (de->d_name[0] != '.') {
			snprintf(path, sizeof path, "%s/%s", tmpdir, de->d_name);
			unlink(path);
		}
	if (d)
		closedir(d);
}

static void write_file(const char *name, const void *buf, size_t n)
{
	char path[512];
	int fd;
	snprintf(path, sizeof path, "%s/%s", tmpdir, name);
	fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && write(fd, buf, n) == (ssize_t)n);
	close(fd);
}

/* Open buf (n bytes) as a file; returns the result, err filled. */
static enum hs_seg_result open_bytes(const void *buf, size_t n, struct hs_seg *seg, char *err, size_t errlen)
{
	char path[256];
	clear_dir();
	write_file("1.0.seg", buf, n);
	snprintf(path, sizeof path, "%s/1.0.seg", tmpdir);
	return hs_seg_open(seg, path, err, errlen);
}

static void expect_bad(struct synth *s, size_t n, const char *what)
{
	struct hs_seg seg;
	char err[HS_MSG_MAX];
	enum hs_seg_result r = open_bytes(s->buf, n, &seg, err, sizeof err);
	CHECK(r == HS_SEG_BAD);
	CHECK_STR(err, what);
	hs_seg_close(&seg);
}

/* Run every report on the session in tmpdir (output discarded): they must
 * survive whatever the segment holds.  Returns the session's error count. */
static size_t report_all(struct hs_session *s, struct hs_findings *f)
{
	FILE *null = fopen("/dev/null", "w");
	hs_report_text(null, s, f, false);
	hs_report_text(null, s, f, true);
	hs_report_json(null, s, f);
	hs_report_dot(null, s, f);
	fclose(null);
	hs_session_collect_errors(s);
	return s->nerrors;
}

static bool has_error(const struct hs_session *s, const char *msg)
{
	for (size_t i = 0; i < s->nerrors; i++)
		if (strcmp(s->errors[i].msg, msg) == 0)
			return true;
	fprintf(stderr, "missing error \"%s\"; have:\n", msg);
	for (size_t i = 0; i < s->nerrors; i++)
		fprintf(stderr, "  %s: %s\n", s->errors[i].file, s->errors[i].msg);
	return false;
}

static size_t count_kind(const struct hs_findings *f, enum hs_fkind k)
{
	size_t n = 0;
	for (size_t i = 0; i < f->n; i++)
		n += f->v[i].kind == k;
	return n;
}

/* Load the synthesized segment as a session; analyze with timeout. */
static void load(struct synth *s, struct hs_session *ss, struct hs_findings *f, double timeout)
{
	char name[64];
	clear_dir();
	snprintf(name, sizeof name, "%d.0.seg", (int)getpid());
	write_file(name, s->buf, s->size);
	CHECK(hs_session_load(ss, tmpdir, false) == 0);
	CHECK(hs_analyze(ss, timeout, true, f) == 0);
}

/* ---- tests --------------------------------------------------------------- */

static void test_valid(void)
{
	struct synth s;
	struct hs_seg seg;
	struct hs_tsnap t;
	struct hs_record rec[16];
	struct hs_stack st;
	char err[HS_MSG_MAX], str[64];

	synth_make(&s, true);
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_seg_count(&seg, HS_T_LOCKS) == 3);
	CHECK(hs_seg_entry(&seg, HS_T_LOCKS, seg.hdr.tables[HS_T_LOCKS].capacity) == NULL);
	CHECK(hs_seg_entry(&seg, HS_T_LOCKS, 1) != NULL);
	CHECK(hs_seg_string(&seg, 0, str, sizeof str) == 0 && str[0] == '\0');
	CHECK(hs_seg_string(&seg, 1u << 30, str, sizeof str) == -1);
	CHECK(hs_read_thread(&seg, 0, &t) == 1 && t.t.tid == 100 && t.t.held_count == 1 && !t.torn);
	CHECK_STR(t.name, "worker-100");
	CHECK(hs_read_thread(&seg, 5, &t) == 0);        /* free slot */
	CHECK(hs_read_thread(&seg, 1u << 20, &t) == 0); /* beyond the table */
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 4 && rec[0].type == HS_REC_THREAD_START && rec[3].seq == 4);
	CHECK(hs_read_ring(&seg, 0, rec, 2) == 2 && rec[1].seq == 4 && rec[0].seq == 3);
	CHECK(hs_read_ring(&seg, 1, rec, 16) == 0);
	CHECK(hs_read_stack(&seg, 1, &st) == 0 && st.depth == 2);
	CHECK(hs_read_stack(&seg, 0, &st) == -1);
	CHECK(hs_read_stack(&seg, 3, &st) == -1);        /* not ready */
	CHECK(seg.ncomplaints == 0);
	hs_seg_close(&seg);
	synth_free(&s);
}

static void test_torn_ring_record(void)
{
	struct synth s;
	struct hs_seg seg;
	struct hs_record rec[16];
	char err[HS_MSG_MAX];
	struct hs_ring_header *rh;

	synth_make(&s, true);
	rh = entry(&s, HS_T_RINGS, 0);
	((struct hs_record *)(rh + 1))[2].seq = 0; /* writer killed mid-record */
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 3 && rec[2].seq == 4 && rec[1].seq == 2);
	hs_seg_close(&seg);
	/* A lap later: positions 0..3 were overwritten, head says 4 + ring size. */
	rh->head = 4 + s.h->ring_records;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 0);
	hs_seg_close(&seg);
	synth_free(&s);
}

/* A release folded into its acquisition's record (format.h HS_REC_FOLD_SHIFT)
 * reads as the acquisition and the release, each at its time; a plain
 * acquisition (b's high half 0: every segment written before the fold) reads
 * as one record, and the release is never made up for it. */
static void test_folded_release_reads_as_two_events(void)
{
	struct synth s;
	struct hs_seg seg;
	struct hs_record rec[16];
	char err[HS_MSG_MAX];
	struct hs_record *r;

	synth_make(&s, true); /* positions 0..3: a thread start, three plain acquisitions of lock 1 */
	r = (struct hs_record *)((struct hs_ring_header *)entry(&s, HS_T_RINGS, 0) + 1);
	/* position 2: released 5,000 ns after it was taken */
	r[2].b = 1 | (5000ull + 1) << HS_REC_FOLD_SHIFT;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 5);
	CHECK(rec[2].type == HS_REC_LOCK_ACQUIRED && rec[2].b == 1 && rec[2].a == LOCK_A &&
	      rec[2].ts_ns == s.h->start_mono_ns + 2);
	CHECK(rec[3].type == HS_REC_LOCK_RELEASED && rec[3].b == 1 && rec[3].a == LOCK_A &&
	      rec[3].ts_ns == s.h->start_mono_ns + 2 + 5000 && rec[3].c == HS_REC_RELEASE_FOLDED &&
	      rec[3].stack == 0);
	/* the plain ones around it stay one record each */
	CHECK(rec[1].type == HS_REC_LOCK_ACQUIRED && rec[1].b == 1 && rec[4].type == HS_REC_LOCK_ACQUIRED &&
	      rec[4].b == 1 && rec[4].seq == 4);
	/* the newest first when max cuts: the release, then its acquisition */
	CHECK(hs_read_ring(&seg, 0, rec, 2) == 2 && rec[0].type == HS_REC_LOCK_RELEASED &&
	      rec[1].type == HS_REC_LOCK_ACQUIRED && rec[1].seq == 4);
	CHECK(hs_read_ring(&seg, 0, rec, 3) == 3 && rec[0].type == HS_REC_LOCK_ACQUIRED && rec[0].seq == 3 &&
	      rec[1].type == HS_REC_LOCK_RELEASED && rec[1].seq == 3);
	/* a release at the acquisition's own tick (the coarse clock did not move): the same time */
	hs_seg_close(&seg);
	r[2].b = 1 | 1ull << HS_REC_FOLD_SHIFT;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 5 && rec[3].type == HS_REC_LOCK_RELEASED &&
	      rec[3].ts_ns == rec[2].ts_ns);
	CHECK(seg.ncomplaints == 0);
	hs_seg_close(&seg);
	synth_free(&s);
}

/* A close folded into its fd creation's record (format.h HS_REC_FD_FOLD_*)
 * reads as the creation and the close, each with its own time, call and
 * stack; a plain creation whose c's high bits are set (a fold caught
 * half-way, b not yet stored) reads as the plain creation alone. */
static void test_folded_fd_close_reads_as_two_events(void)
{
	struct synth s;
	struct hs_seg seg;
	struct hs_record rec[16];
	char err[HS_MSG_MAX];
	struct hs_record *r;

	synth_make(&s, true); /* positions 0..3: a thread start, three records */
	r = (struct hs_record *)((struct hs_ring_header *)entry(&s, HS_T_RINGS, 0) + 1);
	/* position 2: fd 7's generation 3, opened by open() with stack 1, closed by
	   close() with stack 2, 4,000 ns later */
	r[2].type = HS_REC_FD_CREATED;
	r[2].stack = 1;
	r[2].a = 7;
	r[2].b = 3 | (4000ull + 1) << HS_REC_FOLD_SHIFT;
	r[2].c = HS_FDK_FILE | HS_FDC_OPEN << 8 | (uint64_t)HS_FDC_CLOSE << HS_REC_FD_FOLD_CALL_SHIFT |
		 2ull << HS_REC_FD_FOLD_STACK_SHIFT;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 5);
	CHECK(rec[2].type == HS_REC_FD_CREATED && rec[2].a == 7 && rec[2].b == 3 && rec[2].stack == 1 &&
	      rec[2].c == (HS_FDK_FILE | HS_FDC_OPEN << 8) && rec[2].ts_ns == s.h->start_mono_ns + 2);
	CHECK(rec[3].type == HS_REC_FD_CLOSED && rec[3].a == 7 && rec[3].b == 3 && rec[3].stack == 2 &&
	      rec[3].c == HS_FDC_CLOSE && rec[3].ts_ns == s.h->start_mono_ns + 2 + 4000);
	CHECK(rec[4].type == HS_REC_LOCK_ACQUIRED && rec[4].seq == 4);
	/* the newest first when max cuts: the close, then its creation */
	CHECK(hs_read_ring(&seg, 0, rec, 2) == 2 && rec[0].type == HS_REC_FD_CLOSED && rec[1].seq == 4);
	hs_seg_close(&seg);
	/* c stored, b not yet: the plain creation, no close made up */
	r[2].b = 3;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_read_ring(&seg, 0, rec, 16) == 4 && rec[2].type == HS_REC_FD_CREATED && rec[2].b == 3 &&
	      rec[2].c == (HS_FDK_FILE | HS_FDC_OPEN << 8) && rec[3].type == HS_REC_LOCK_ACQUIRED);
	CHECK(seg.ncomplaints == 0);
	hs_seg_close(&seg);
	synth_free(&s);
}

static void test_deadlock_found(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	char sig[256], want[256];

	synth_make(&s, true);
	load(&s, &ss, &f, g_timeout);
	CHECK(ss.nprocs == 1 && ss.procs[0].pstate == HS_P_RUNNING);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 1);
	CHECK(count_kind(&f, HS_F_HANG) == 0);
	CHECK(count_kind(&f, HS_F_POTENTIAL) == 1);
	CHECK(f.n >= 1 && f.v[0].kind == HS_F_DEADLOCK && f.v[0].nthreads == 2);
	if (f.n >= 1 && f.v[0].kind == HS_F_DEADLOCK) {
		hs_signature(&f.v[0], sig, sizeof sig);
		snprintf(want, sizeof want, "deadlock %d 100,101 0x1000,0x2000", (int)getpid());
		CHECK_STR(sig, want);
	}
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* One member waits for long, the other just started: the cycle is one
	 * deadlock at once, never first a hang (signatures must be stable). */
	((struct hs_thread *)entry(&s, HS_T_THREADS, 1))->wait_since_ns = mono_now() - 1000000u;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 1 && count_kind(&f, HS_F_HANG) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* Younger than the timeout in a live process: not blocked yet. */
	load(&s, &ss, &f, 1000.0);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 0 && count_kind(&f, HS_F_HANG) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* A process that is gone died deadlocked, whatever the timeout. */
	s.h->state = HS_STATE_PACK(HS_STATE_KILLED, 9);
	load(&s, &ss, &f, 1000.0);
	CHECK(ss.nprocs == 1 && ss.procs[0].pstate == HS_P_KILLED);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 1);
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

static void test_no_cycle(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;

	synth_make(&s, false);
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 0);
	CHECK(count_kind(&f, HS_F_HANG) == 1);
	CHECK(f.n >= 1 && f.v[0].kind == HS_F_HANG && f.v[0].nthreads == 1 && f.v[0].threads[0]->t.tid == 100);
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* An idle thread sleeping on a condition variable is not a hang. */
	((struct hs_thread *)entry(&s, HS_T_THREADS, 0))->wait_kind = HS_WAIT_COND;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_HANG) == 0 && count_kind(&f, HS_F_DEADLOCK) == 0);
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);
	((struct hs_thread *)entry(&s, HS_T_THREADS, 0))->wait_kind = HS_WAIT_LOCK;

	/* Gone: a cycle-free last state is neither a deadlock nor a hang. */
	s.h->state = HS_STATE_PACK(HS_STATE_EXITED, 0);
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 0 && count_kind(&f, HS_F_HANG) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

static void test_rwlock_readers(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_thread *t0, *t1;

	/* Both hold their lock for reading and wait to read the other's:
	 * readers do not block readers, so no deadlock. */
	synth_make(&s, true);
	t0 = entry(&s, HS_T_THREADS, 0), t1 = entry(&s, HS_T_THREADS, 1);
	t0->held[0].mode = t1->held[0].mode = HS_MODE_READ_RECURSIVE;
	t0->wait_mode = t1->wait_mode = HS_MODE_READ_RECURSIVE;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);
	/* A writer waiting on a read-held lock is blocked. */
	t0->wait_mode = HS_MODE_WRITE, t1->wait_mode = HS_MODE_WRITE;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 1);
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

static void test_header_corruption(void)
{
	struct synth s;
	struct hs_seg seg;
	char err[HS_MSG_MAX], want[HS_MSG_MAX];
	struct hs_header keep;

	synth_make(&s, true);
	keep = *s.h;

	snprintf(want, sizeof want, "truncated: 4096 of %zu bytes", s.size);
	expect_bad(&s, 4096, want);
	snprintf(want, sizeof want, "truncated: 100 of %zu bytes", s.size);
	expect_bad(&s, 100, want);
	expect_bad(&s, 5, "bad magic: not a heisen segment");

	memcpy(s.h->magic, "HEISENXX", 8);
	expect_bad(&s, s.size, "bad magic: not a heisen segment");
	*s.h = keep;

	s.h->endian_tag = __builtin_bswap32(HS_ENDIAN_TAG);
	expect_bad(&s, s.size, "written with the other byte order");
	*s.h = keep;

	s.h->abi_version = HS_ABI_VERSION + 1;
	snprintf(want, sizeof want, "ABI version %u, this heisen-dump reads %u", HS_ABI_VERSION + 1, HS_ABI_VERSION);
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->word_size = 4;
	expect_bad(&s, s.size, "word size 4, this heisen-dump reads 8");
	*s.h = keep;

	s.h->header_size = 64;
	snprintf(want, sizeof want, "header size 64 is smaller than %zu", sizeof(struct hs_header));
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->segment_size = s.size * 2;
	snprintf(want, sizeof want, "truncated: %zu of %zu bytes", s.size, s.size * 2);
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->tables[HS_T_EDGES].offset = s.size + 64;
	snprintf(want, sizeof want, "table edges: offset %zu outside [%zu, %zu]", s.size + 64,
		 sizeof(struct hs_header), s.size);
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->tables[HS_T_LOCKS].capacity = 0xffffffffu;
	snprintf(want, sizeof want, "table locks: 4294967295 entries of %u bytes at offset %llu overrun the segment (%zu bytes)",
		 keep.tables[HS_T_LOCKS].entry_size, (unsigned long long)keep.tables[HS_T_LOCKS].offset, s.size);
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->tables[HS_T_THREADS].entry_size = 8;
	snprintf(want, sizeof want, "table threads: entry size 8, need at least %zu", sizeof(struct hs_thread));
	expect_bad(&s, s.size, want);
	*s.h = keep;

	s.h->ring_records = 48;
	expect_bad(&s, s.size, "ring records 48 is not a power of two");
	*s.h = keep;

	s.h->tables[HS_T_STACKS].offset += 4;
	snprintf(want, sizeof want, "table stacks: offset %llu or entry size %u not 8-byte aligned",
		 (unsigned long long)keep.tables[HS_T_STACKS].offset + 4, keep.tables[HS_T_STACKS].entry_size);
	expect_bad(&s, s.size, want);
	*s.h = keep;

	/* A named segment is fully formed: empty, zero magic, INIT or an unknown
	 * state word is damage, an error with its reason, never skipped. */
	CHECK(open_bytes(s.buf, 0, &seg, err, sizeof err) == HS_SEG_BAD);
	CHECK(strstr(err, "empty") != NULL);
	s.h->state = HS_STATE_PACK(HS_STATE_INIT, 0);
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_BAD);
	CHECK(strstr(err, "INIT") != NULL);
	s.h->state = HS_STATE_PACK(0x77, 0);
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_BAD);
	CHECK(strstr(err, "not a known state") != NULL);
	*s.h = keep;
	memset(s.h->magic, 0, HS_MAGIC_LEN);
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_BAD);
	CHECK(strstr(err, "zero magic") != NULL);
	memcpy(s.h->magic, "HEISEX", 6);
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_BAD);
	CHECK(strstr(err, "bad magic") != NULL);
	*s.h = keep;
	synth_free(&s);
}

/* The session goes on around a bad segment: its error names the file, the
 * good segment next to it is still analyzed. */
static void test_session_with_bad_segment(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	char name[64], want[HS_MSG_MAX];

	synth_make(&s, true);
	clear_dir();
	snprintf(name, sizeof name, "%d.0.seg", (int)getpid());
	write_file(name, s.buf, s.size);
	write_file("4711.0.seg", s.buf, 4096);
	write_file("notes.txt", "hello", 5);
	CHECK(hs_session_load(&ss, tmpdir, false) == 0);
	CHECK(hs_analyze(&ss, g_timeout, true, &f) == 0);
	CHECK(ss.nprocs == 1 && ss.nerrors == 1);
	snprintf(want, sizeof want, "truncated: 4096 of %zu bytes", s.size);
	if (ss.nerrors == 1) {
		CHECK_STR(ss.errors[0].file, "4711.0.seg");
		CHECK_STR(ss.errors[0].msg, want);
	}
	CHECK(count_kind(&f, HS_F_DEADLOCK) == 1);
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);

	CHECK(hs_session_load(&ss, "/nonexistent/heisen", false) == -1 && ss.nerrors == 1);
	hs_session_free(&ss);
}

static void test_entry_corruption(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_thread *t0;
	struct hs_finding *fd;
	struct hs_lock *l;
	struct hs_stack *st;
	uint32_t scap, ecap, strcap;
	char want[HS_MSG_MAX];

	synth_make(&s, true);
	scap = s.h->tables[HS_T_STACKS].capacity;
	ecap = s.h->tables[HS_T_EDGES].capacity;
	strcap = s.h->tables[HS_T_STRINGS].capacity;
	t0 = entry(&s, HS_T_THREADS, 0);
	t0->held[0].stack = 999999;             /* stack id out of range */
	t0->held_count = 1000;                  /* beyond HS_HELD_MAX */
	fd = entry(&s, HS_T_FINDINGS, 0);
	fd->edges[1] = 77777;                   /* edge id out of range */
	st = entry(&s, HS_T_STACKS, 2);
	st->depth = 5000;                       /* deeper than HS_STACK_DEPTH */
	/* A lock name that runs to the end of the strings table without a NUL. */
	l = entry(&s, HS_T_LOCKS, 2);
	l->name = strcap - 8;
	memset(entry(&s, HS_T_STRINGS, strcap - 8), 'x', 8);
	s.h->tables[HS_T_STRINGS].count = strcap;

	load(&s, &ss, &f, g_timeout);
	CHECK(ss.nprocs == 1);
	if (ss.nprocs == 1) {
		struct hs_lockref r;
		CHECK(ss.procs[0].threads[0].t.held_count == HS_HELD_MAX);
		hs_lockref(&ss.procs[0], 2, 0, &r);
		CHECK(r.name[0] == '\0' && r.addr == LOCK_B);
		CHECK_STR(r.label, "0x2000");
	}
	/* The cycle lost an edge but is still reported with the valid one. */
	CHECK(count_kind(&f, HS_F_POTENTIAL) == 1);
	report_all(&ss, &f);
	CHECK(has_error(&ss, "thread slot 0 (tid 100): held_count 1000 > 32, clamped"));
	snprintf(want, sizeof want, "stack id 999999 out of range (capacity %u)", scap);
	CHECK(has_error(&ss, want));
	snprintf(want, sizeof want, "edge id 77777 out of range (capacity %u)", ecap);
	CHECK(has_error(&ss, want));
	CHECK(has_error(&ss, "finding 0: edge 1 (id 77777) is not a valid edge"));
	snprintf(want, sizeof want, "stack 2: depth 5000 > %d, clamped", HS_STACK_DEPTH);
	CHECK(has_error(&ss, want));
	for (size_t i = 0; i < ss.nerrors; i++)
		CHECK_STR(ss.errors[i].file, ss.procs[0].seg.name);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* A finding whose every edge is bad is dropped, with a message. */
	fd->edges[0] = 0xfffffff0u;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_POTENTIAL) == 0);
	hs_session_collect_errors(&ss);
	CHECK(has_error(&ss, "finding 0: potential deadlock without a valid edge, skipped"));
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* Counts beyond capacity are clamped; unknown kinds complained about. */
	s.h->tables[HS_T_FINDINGS].count = 0xffffffffu;
	fd->kind = 99;
	fd->n = 500;
	load(&s, &ss, &f, g_timeout);
	report_all(&ss, &f);
	CHECK(has_error(&ss, "finding 0: unknown kind 99"));
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

/* ---- heap findings (ABI 3) ----------------------------------------------- */

static struct hs_finding *add_heap_finding(struct synth *s, uint32_t i, unsigned kind, uint64_t addr, uint64_t size)
{
	struct hs_finding *f = entry(s, HS_T_FINDINGS, i);
	memset(f, 0, sizeof *f);
	f->kind = (uint16_t)kind;
	f->addr = addr;
	f->size = size;
	f->count = 1;
	f->tid = 100;
	f->stack = 1;
	f->ts_ns = s->h->start_mono_ns + 10 + i;
	f->ready = 1;
	if (s->h->tables[HS_T_FINDINGS].count < i + 1)
		s->h->tables[HS_T_FINDINGS].count = i + 1;
	return f;
}

/* The whole JSON report of ss, in a malloc'd string. */
static char *json_of(struct hs_session *ss, struct hs_findings *f)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	hs_report_json(m, ss, f);
	fclose(m);
	return buf;
}

static char *text_of(struct hs_session *ss, struct hs_findings *f)
{
	char *buf = NULL;
	size_t n = 0;
	FILE *m = open_memstream(&buf, &n);
	hs_report_text(m, ss, f, false);
	fclose(m);
	return buf;
}

#define CHECK_HAS(hay, needle)                                                        \
	do {                                                                          \
		checks++;                                                             \
		if (!(hay) || !strstr((hay), (needle))) {                             \
			failures++;                                                   \
			fprintf(stderr, "%s:%d: missing \"%s\"\n", __FILE__, __LINE__, (needle)); \
		}                                                                     \
	} while (0)

/*
 * Double free, heap overflow, invalid free inside a block and of an unknown
 * pointer, heisen's own SIGABRT after them, the per-process heap block; then
 * a double free whose first-free stack id is beyond the stacks table and an
 * invalid free whose offset lies outside its block: complained, never read.
 */
static void test_heap_findings(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_finding *d;
	char want[HS_MSG_MAX], *js, *tx;
	uint32_t scap;

	synth_make(&s, false);
	scap = s.h->tables[HS_T_STACKS].capacity;
	s.h->flags |= HS_HDR_HEAP;
	s.h->heap_live_bytes = 4096;
	s.h->heap_peak_bytes = 1 << 20;
	s.h->heap_allocs = 321;
	s.h->heap_failures = 2;
	s.h->heap_last_fail_size = 1ull << 40;
	s.h->heap_last_fail_stack = 2;
	s.h->heap_stacks = HS_HEAP_STACKS_SITE;
	s.h->heap_quarantine_bytes = 64u << 20;
	d = add_heap_finding(&s, 1, HS_FIND_DOUBLE_FREE, 0x7000, 64);
	d->tid = 102, d->stack = 1, d->tid2 = 101, d->stack2 = 2, d->tid3 = 100, d->stack3 = 1;
	d = add_heap_finding(&s, 2, HS_FIND_HEAP_OVERFLOW, 0x9000, 10);
	d->stack3 = 2, d->tid3 = 101;
	d = add_heap_finding(&s, 3, HS_FIND_INVALID_FREE, 0x8010, 64);
	d->offset = 16, d->stack3 = 2, d->tid3 = 101;
	add_heap_finding(&s, 4, HS_FIND_INVALID_FREE, 0x7ffc1234, 0);
	d = add_heap_finding(&s, 5, HS_FIND_CRASH, 0, 0);
	d->signo = 6, d->si_code = -6, d->tid = 102, d->ts_ns = s.h->start_mono_ns + 100;

	load(&s, &ss, &f, 1000.0);
	CHECK(f.n == 6);
	if (f.n == 6) {
		/* severity: crash, double-free, heap-overflow, invalid-free, potential-deadlock */
		CHECK(f.v[0].kind == HS_F_CRASH && f.v[0].heap_abort);
		CHECK(f.v[1].kind == HS_F_DOUBLE_FREE);
		CHECK(f.v[2].kind == HS_F_HEAP_OVERFLOW);
		CHECK(f.v[3].kind == HS_F_INVALID_FREE && f.v[3].in_block && f.v[3].block == 0x8000);
		CHECK(f.v[4].kind == HS_F_INVALID_FREE && !f.v[4].in_block);
		CHECK(f.v[5].kind == HS_F_POTENTIAL);
	}
	CHECK_STR(hs_fkind_name(HS_F_DOUBLE_FREE), "double-free");
	CHECK_STR(hs_fkind_name(HS_F_INVALID_FREE), "invalid-free");
	CHECK_STR(hs_fkind_name(HS_F_HEAP_OVERFLOW), "heap-overflow");
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"kind\":\"double-free\"");
	CHECK_HAS(js, "\"tids\":[102,101,100]");
	CHECK_HAS(js, "\"address\":\"0x7000\",\"size\":64");
	CHECK_HAS(js, "\"role\":\"second free\",\"tid\":102");
	CHECK_HAS(js, "\"role\":\"first free\",\"tid\":101");
	CHECK_HAS(js, "\"role\":\"allocation\",\"tid\":100");
	CHECK_HAS(js, "double free of 0x7000 (64 bytes) in thread 102: first freed by thread 101, allocated by thread 100");
	CHECK_HAS(js, "middle of a 64-byte block at 0x8000 (offset 16)");
	CHECK_HAS(js, "\"block\":{\"address\":\"0x8000\",\"size\":64,\"offset\":16}");
	CHECK_HAS(js, "unknown pointer");
	CHECK_HAS(js, "\"kind\":\"heap-overflow\"");
	CHECK_HAS(js, "\"heap_abort\":true");
	CHECK_HAS(js, "\"heap\":{\"live_bytes\":4096,\"peak_bytes\":1048576,\"allocs\":321,\"failures\":2,"
		      "\"last_failure\":{\"size\":1099511627776,\"stack\":{\"role\":\"allocation failure\",\"tid\":null");
	CHECK_HAS(js, "\"stacks\":\"site\",\"quarantine_bytes\":67108864}");
	tx = text_of(&ss, &f);
	CHECK_HAS(tx, "==== heisen: double free in pid");
	CHECK_HAS(tx, " first freed by thread 101 (worker-101) here:");
	CHECK_HAS(tx, " previously allocated by thread 100 (worker-100) here:");
	CHECK_HAS(tx, "This SIGABRT is heisen's own");
	CHECK_HAS(tx, "  heap: 4.0 KiB live, peak 1024.0 KiB, 321 allocations, 2 FAILED");
	free(js), free(tx);
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* The SIGABRT of a thread that made no heap finding is not heisen's,
	 * unless the finding was seen more than once: a second thread that met
	 * the same double free folds into the first thread's finding, then aborts. */
	d = entry(&s, HS_T_FINDINGS, 5);
	d->tid = 103;
	load(&s, &ss, &f, 1000.0);
	CHECK(f.n == 6 && f.v[0].kind == HS_F_CRASH && !f.v[0].heap_abort);
	hs_findings_free(&f);
	hs_session_free(&ss);
	d = entry(&s, HS_T_FINDINGS, 1);
	d->count = 2;
	load(&s, &ss, &f, 1000.0);
	CHECK(f.n == 6 && f.v[0].kind == HS_F_CRASH && f.v[0].heap_abort);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* Heap checking off: "heap": null. */
	s.h->flags &= ~HS_HDR_HEAP;
	load(&s, &ss, &f, 1000.0);
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"heap\":null");
	free(js);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* Corrupt: a first-free stack id beyond the table, an offset outside the block. */
	d = entry(&s, HS_T_FINDINGS, 1);
	d->stack2 = 999999;
	d = entry(&s, HS_T_FINDINGS, 3);
	d->offset = 5000;
	load(&s, &ss, &f, 1000.0);
	CHECK(count_kind(&f, HS_F_DOUBLE_FREE) == 1 && count_kind(&f, HS_F_INVALID_FREE) == 2);
	for (size_t i = 0; i < f.n; i++) {
		if (f.v[i].kind == HS_F_DOUBLE_FREE)
			CHECK(f.v[i].rec.stack2 == 0 && f.v[i].rec.stack == 1);
		if (f.v[i].kind == HS_F_INVALID_FREE)
			CHECK(!f.v[i].in_block);
	}
	tx = text_of(&ss, &f);
	CHECK_HAS(tx, " first freed by thread 101 (worker-101) here:\n    (no stack recorded)");
	free(tx);
	report_all(&ss, &f);
	snprintf(want, sizeof want, "finding 1: first free stack id 999999 out of range (capacity %u)", scap);
	CHECK(has_error(&ss, want));
	CHECK(has_error(&ss, "finding 3: offset 5000 is outside the 64-byte block"));
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

/*
 * Guard findings (format.h "guard findings"): a use-after-free read inside a
 * freed block, an overflow write past a live one, an underflow read before
 * one; ranked right after double-free; the signed offset, the access, the
 * roles of the stacks; an unknown access value is complained and dropped.
 */
static void test_guard_findings(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_finding *d;
	char *js, *tx;

	synth_make(&s, false);
	d = add_heap_finding(&s, 1, HS_FIND_USE_AFTER_FREE, 0x7008, 40);
	d->offset = 8, d->access = HS_ACCESS_READ, d->signo = 11, d->si_code = 2;
	d->tid = 102, d->stack = 1, d->tid2 = 101, d->stack2 = 2, d->tid3 = 100, d->stack3 = 1;
	d = add_heap_finding(&s, 2, HS_FIND_HEAP_BUFFER_OVERFLOW, 0x9000, 32);
	d->offset = 32, d->access = HS_ACCESS_WRITE, d->signo = 11, d->tid3 = 101, d->stack3 = 2;
	d = add_heap_finding(&s, 3, HS_FIND_HEAP_BUFFER_OVERFLOW, 0xaff8, 32);
	d->offset = (uint32_t)-8, d->access = 7, d->signo = 11, d->tid3 = 101, d->stack3 = 2;
	d = add_heap_finding(&s, 4, HS_FIND_DOUBLE_FREE, 0x5000, 64);
	d->tid2 = 101, d->stack2 = 2, d->tid3 = 100, d->stack3 = 1;

	load(&s, &ss, &f, 1000.0);
	CHECK(f.n == 5);
	if (f.n == 5) {
		CHECK(f.v[0].kind == HS_F_DOUBLE_FREE);
		CHECK(f.v[1].kind == HS_F_USE_AFTER_FREE && f.v[1].block == 0x7000);
		CHECK(f.v[2].kind == HS_F_HEAP_BUFFER_OVERFLOW && f.v[2].block == 0x8fe0);
		CHECK(f.v[3].kind == HS_F_HEAP_BUFFER_OVERFLOW && f.v[3].block == 0xb000 &&
		      f.v[3].rec.access == HS_ACCESS_UNKNOWN);
	}
	CHECK_STR(hs_fkind_name(HS_F_USE_AFTER_FREE), "use-after-free");
	CHECK_STR(hs_fkind_name(HS_F_HEAP_BUFFER_OVERFLOW), "heap-buffer-overflow");
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"kind\":\"use-after-free\"");
	CHECK_HAS(js, "\"tids\":[102,101,100]");
	CHECK_HAS(js, "\"address\":\"0x7008\",\"size\":40,\"offset\":8,\"access\":\"read\",\"where\":\"inside\"");
	CHECK_HAS(js, "\"block\":{\"address\":\"0x7000\",\"size\":40}");
	CHECK_HAS(js, "use-after-free READ of size ? at 0x7008 in thread 102: 8 bytes inside a 40-byte block at 0x7000, "
		      "freed by thread 101, allocated by thread 100");
	CHECK_HAS(js, "\"role\":\"access\",\"tid\":102");
	CHECK_HAS(js, "\"offset\":32,\"access\":\"write\",\"where\":\"after\"");
	CHECK_HAS(js, "0 bytes after a 32-byte block at 0x8fe0");
	CHECK_HAS(js, "\"offset\":-8,\"access\":null,\"where\":\"before\"");
	CHECK_HAS(js, "8 bytes before a 32-byte block at 0xb000");
	tx = text_of(&ss, &f);
	CHECK_HAS(tx, "==== heisen: use after free in pid");
	CHECK_HAS(tx, " READ by thread 102");
	CHECK_HAS(tx, " freed by thread 101 (worker-101) here:");
	CHECK_HAS(tx, "==== heisen: heap buffer overflow in pid");
	CHECK_HAS(tx, " WRITE by thread 100 (worker-100) here:");
	free(js), free(tx);
	report_all(&ss, &f);
	CHECK(has_error(&ss, "finding 3: unknown access 7"));
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

/* ---- processes and environment (ABI 4) -------------------------------------- */

/* A pid that is gone: a child that exited and was reaped. */
static pid_t dead_pid(void)
{
	pid_t pid = fork();
	if (pid == 0)
		_exit(0);
	waitpid(pid, NULL, 0);
	return pid;
}

#define MIB (1ull << 20)
#define SYNTH_CG "/sys/fs/cgroup/memory/heisen-test-reader-no-such-cgroup"

/* s as process pid (parent ppid), started `ago` seconds before now, with an environment. */
static void as_process(struct synth *s, pid_t pid, pid_t ppid, unsigned ago, const char *argv, size_t argv_len)
{
	struct hs_env *e = &s->h->env;
	s->h->pid = pid;
	s->h->ppid = ppid;
	s->h->start_ticks = pid == getpid() ? my_start_ticks() : 0;
	s->h->start_mono_ns = mono_ago(ago);
	memset(s->h->argv, 0, sizeof s->h->argv);
	memcpy(s->h->argv, argv, argv_len);
	s->h->argc = 0;
	for (size_t i = 0; i < argv_len; i++)
		s->h->argc += argv[i] == '\0';
	s->h->flags |= HS_HDR_ENV;
	memset(e, 0, sizeof *e);
	e->cpu_online = 24, e->cpu_affinity = 24;
	e->cpu_quota_us = 400000, e->cpu_period_us = 100000;
	e->mem_limit = 1024 * MIB, e->mem_total = 64ull << 30;
	e->nofile_soft = 64, e->nofile_hard = HS_UNLIMITED, e->as_soft = HS_UNLIMITED, e->core_soft = 0;
	e->cgroup = 1, e->flags = HS_ENV_OOM_COUNTER, e->oom_kills = 3;
	snprintf(e->mem_cgroup, sizeof e->mem_cgroup, "%s", SYNTH_CG);
	e->mem_cgroup_root = (uint32_t)strlen("/sys/fs/cgroup/memory");
	snprintf(e->kernel, sizeof e->kernel, "6.1.0-synthetic");
	snprintf(e->libc, sizeof e->libc, "2.36");
}

static void write_synth(struct synth *s)
{
	char name[64];
	snprintf(name, sizeof name, "%d.%u.seg", (int)s->h->pid, s->h->image);
	write_file(name, s->buf, s->size);
}

static void add_memory_record(struct synth *s, uint32_t slot, uint64_t pos, uint64_t rss)
{
	struct hs_ring_header *rh = entry(s, HS_T_RINGS, slot);
	struct hs_record *x = &((struct hs_record *)(rh + 1))[pos & (s->h->ring_records - 1)];
	x->seq = pos + 1;
	x->ts_ns = s->h->start_mono_ns + 1000 + pos;
	x->type = HS_REC_MEMORY;
	x->a = rss;
	x->c = HS_MEMW_ALLOC | (8ull * MIB) << 8;
	rh->head = pos + 1;
}

/*
 * A session of four: main (this process, alive), its forkserver, and two
 * workers of that forkserver that vanished in the same memory cgroup, whose
 * OOM-kill counter main read as 4 at its exit (after 3 at their start): the
 * bigger worker is the `oom-kill` (the counter rose by one), the smaller is
 * `killed`.  The environment gives every warning.  Then corrupt values.
 */
static void test_processes_and_environment(void)
{
	struct synth m, fs, w1, w2;
	struct hs_session ss;
	struct hs_findings f;
	char *js, *tx, want[256];
	pid_t me = getpid(), fsp = dead_pid(), p1 = dead_pid(), p2 = dead_pid();
	static const char fs_argv[] = "python3\0-c\0from multiprocessing.forkserver import main; main()";

	synth_make(&m, false);
	as_process(&m, me, getppid(), 100, "app.py\0serve", 13);
	m.h->rss_bytes = 50 * MIB, m.h->rss_peak_bytes = 60 * MIB, m.h->rss_samples = 5;
	m.h->fds_open = 60, m.h->fds_peak = 61;
	m.h->oom_kills_end = 4, m.h->oom_kills_end_ns = mono_now();
	synth_make(&fs, false);
	as_process(&fs, fsp, me, 90, fs_argv, sizeof fs_argv);
	fs.h->state = HS_STATE_PACK(HS_STATE_EXITED, 0);
	fs.h->end_mono_ns = mono_now();
	synth_make(&w1, false);
	as_process(&w1, p1, fsp, 80, "python3\0-c\0worker", 19);
	w1.h->flags |= HS_HDR_ENV_INHERITED;
	w1.h->rss_bytes = 1000 * MIB, w1.h->rss_peak_bytes = 1000 * MIB, w1.h->rss_samples = 40;
	w1.h->rss_sample_ns = w1.h->start_mono_ns + 5000000000ull;
	add_memory_record(&w1, 0, 4, 990 * MIB);
	add_memory_record(&w1, 0, 5, 1000 * MIB);
	synth_make(&w2, false);
	as_process(&w2, p2, fsp, 85, "python3\0-c\0worker", 19);
	w2.h->flags |= HS_HDR_ENV_INHERITED;
	w2.h->rss_bytes = 20 * MIB, w2.h->rss_peak_bytes = 20 * MIB, w2.h->rss_samples = 4;

	clear_dir();
	write_synth(&m), write_synth(&fs), write_synth(&w1), write_synth(&w2);
	CHECK(hs_session_load(&ss, tmpdir, false) == 0);
	CHECK(hs_analyze(&ss, 1000.0, true, &f) == 0);
	CHECK(count_kind(&f, HS_F_OOM_KILL) == 1 && count_kind(&f, HS_F_KILLED) == 1);
	for (size_t i = 0; i < f.n; i++) {
		if (f.v[i].kind == HS_F_OOM_KILL) {
			CHECK(f.v[i].proc->seg.hdr.pid == p1);
			CHECK(f.v[i].death.evidence == (HS_EV_OOM_COUNTER | HS_EV_NEAR_LIMIT));
			CHECK(f.v[i].death.oom_before == 3 && f.v[i].death.oom_after == 4);
			CHECK(f.v[i].death.oom_after_pid == me && !f.v[i].death.oom_after_start);
			CHECK(f.v[i].death.ran_at_least && f.v[i].death.ran_seconds > 4.9 && f.v[i].death.ran_seconds < 5.1);
		}
		if (f.v[i].kind == HS_F_KILLED)
			CHECK(f.v[i].proc->seg.hdr.pid == p2 && f.v[i].death.evidence == 0);
	}
	/* killed and oom-kill come right after crashes, before the potential deadlocks */
	CHECK(f.n >= 2 && f.v[0].kind == HS_F_OOM_KILL && f.v[1].kind == HS_F_KILLED);
	/* the tree: the forkserver's workers belong to main */
	CHECK(ss.tree && ss.tree->n == 4 && ss.tree->nroots == 1);
	for (size_t i = 0; ss.tree && i < ss.tree->n; i++) {
		const struct hs_pnode *n = &ss.tree->nodes[i];
		if (n->pid == p1 || n->pid == p2)
			CHECK(n->parent && n->parent->pid == me && n->real_parent && n->real_parent->pid == fsp &&
			      strcmp(n->via, "forkserver") == 0 && n->depth == 1);
		if (n->pid == fsp)
			CHECK(n->parent && n->parent->pid == me && strcmp(n->via, "exec") == 0);
	}
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"kind\":\"oom-kill\"");
	snprintf(want, sizeof want, "{\"kind\":\"oom-kill-counter\",\"cgroup\":\"%s\",\"before\":3,\"after\":4,"
		 "\"read_by\":\"exit\",\"read_by_pid\":%d}", SYNTH_CG, (int)me);
	CHECK_HAS(js, want);
	CHECK_HAS(js, "{\"kind\":\"near-limit\",\"rss_bytes\":1048576000,\"limit_bytes\":1073741824");
	CHECK_HAS(js, "\"type\":\"memory\",\"rss_bytes\":1038090240,\"heap_live_bytes\":null,\"why\":\"allocation\","
		      "\"alloc_bytes\":8388608");
	snprintf(want, sizeof want, "\"parent\":%d,\"real_parent\":%d,\"via\":\"forkserver\"", (int)me, (int)fsp);
	CHECK_HAS(js, want);
	CHECK_HAS(js, "\"cpu_online\":24,\"cpu_affinity\":24,\"cpu_quota_us\":400000,\"cpu_period_us\":100000,"
		      "\"cpu_allowed\":4");
	CHECK_HAS(js, "\"rlimits\":{\"nofile\":64,\"nofile_hard\":null,\"as\":null,\"core\":0}");
	CHECK_HAS(js, "\"kind\":\"cpu-oversubscription\"");
	CHECK_HAS(js, "pools sized by the CPU count run 6.0x oversubscribed");
	CHECK_HAS(js, "\"kind\":\"memory-limit\"");
	CHECK_HAS(js, "\"kind\":\"open-files\"");
	CHECK_HAS(js, "\"tree\":[\n{\"pid\":");
	tx = text_of(&ss, &f);
	snprintf(want, sizeof want, "==== heisen: OOM kill in pid %d", (int)p1);
	CHECK_HAS(tx, want);
	CHECK_HAS(tx, "the OOM-kill counter of its memory cgroup " SYNTH_CG " rose from 3 (at its start) to 4");
	snprintf(want, sizeof want, "[forkserver by %d for %d]", (int)fsp, (int)me);
	CHECK_HAS(tx, want);
	CHECK_HAS(tx, "==== heisen: warnings");
	free(js), free(tx);
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* No counter reading after their start: memory near the limit decides alone. */
	m.h->oom_kills_end_ns = 0;
	write_synth(&m);
	CHECK(hs_session_load(&ss, tmpdir, false) == 0);
	CHECK(hs_analyze(&ss, 1000.0, true, &f) == 0);
	CHECK(count_kind(&f, HS_F_OOM_KILL) == 1 && count_kind(&f, HS_F_KILLED) == 1);
	for (size_t i = 0; i < f.n; i++)
		if (f.v[i].kind == HS_F_OOM_KILL)
			CHECK(f.v[i].proc->seg.hdr.pid == p1 && f.v[i].death.evidence == HS_EV_NEAR_LIMIT);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* Corrupt: strings without a NUL, a cgroup path outside /sys/fs/cgroup, a
	 * version that does not exist, a quota without a period: complained, not used. */
	memset(w1.h->env.kernel, 'k', sizeof w1.h->env.kernel);
	snprintf(w1.h->env.mem_cgroup, sizeof w1.h->env.mem_cgroup, "/sys/fs/cgroup/memory/../../../etc");
	w2.h->env.cgroup = 7;
	m.h->env.cpu_period_us = 0;
	memset(fs.h->env.mem_cgroup, 'x', sizeof fs.h->env.mem_cgroup);
	clear_dir();
	write_synth(&m), write_synth(&fs), write_synth(&w1), write_synth(&w2);
	CHECK(hs_session_load(&ss, tmpdir, false) == 0);
	CHECK(hs_analyze(&ss, 1000.0, true, &f) == 0);
	/* without a usable cgroup the counter is unknown; w1 is still near its limit */
	CHECK(count_kind(&f, HS_F_OOM_KILL) == 1 && count_kind(&f, HS_F_KILLED) == 1);
	report_all(&ss, &f);
	CHECK(has_error(&ss, "environment: kernel release is not terminated"));
	CHECK(has_error(&ss, "environment: memory cgroup \"/sys/fs/cgroup/memory/../../../etc\" is not a directory under "
			     "/sys/fs/cgroup"));
	CHECK(has_error(&ss, "environment: cgroup version 7"));
	CHECK(has_error(&ss, "environment: a CPU quota with a zero period"));
	CHECK(has_error(&ss, "environment: memory cgroup path is not terminated"));
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&m), synth_free(&fs), synth_free(&w1), synth_free(&w2);
}

static void test_string_accessor(void)
{
	struct synth s;
	struct hs_seg seg;
	char err[HS_MSG_MAX], out[8];
	uint32_t off;

	synth_make(&s, true);
	off = add_string(&s, "lock_a_is_long");
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);
	CHECK(hs_seg_string(&seg, off, out, sizeof out) == 0);
	CHECK_STR(out, "lock_a_");     /* cut, terminated */
	CHECK(hs_seg_string(&seg, off + 100, out, sizeof out) == -1 && out[0] == '\0');
	hs_seg_close(&seg);
	synth_free(&s);
}

/* ---- symbolization of this binary ----------------------------------------- */

pthread_mutex_t test_global_lock = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) uint64_t symbol_target(void)
{
	return (uint64_t)(uintptr_t)__builtin_return_address(0);
}

struct main_mod {
	uint64_t base, lo, hi;
	bool found;
};

static int find_main(struct dl_phdr_info *info, size_t size, void *arg)
{
	struct main_mod *m = arg;
	(void)size;
	if (m->found)
		return 1;
	m->lo = UINT64_MAX;
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *p = &info->dlpi_phdr[i];
		if (p->p_type != PT_LOAD)
			continue;
		if (info->dlpi_addr + p->p_vaddr < m->lo)
			m->lo = info->dlpi_addr + p->p_vaddr;
		if (info->dlpi_addr + p->p_vaddr + p->p_memsz > m->hi)
			m->hi = info->dlpi_addr + p->p_vaddr + p->p_memsz;
	}
	m->base = info->dlpi_addr;
	m->found = true;
	return 1;
}

static void test_symbolize(void)
{
	struct synth s;
	struct hs_seg seg;
	struct hs_module *mod;
	struct main_mod mm = {0};
	char err[HS_MSG_MAX], exe[1024];
	struct hs_sym *sym;
	const struct hs_frame *fr;
	ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
	uint64_t ret = symbol_target();

	CHECK(n > 0);
	exe[n > 0 ? n : 0] = '\0';
	dl_iterate_phdr(find_main, &mm);
	synth_make(&s, true);
	mod = entry(&s, HS_T_MODULES, 0);
	mod->base = mm.base, mod->lo = mm.lo, mod->hi = mm.hi;
	mod->path = add_string(&s, exe);
	mod->flags = HS_MOD_MAIN;
	s.h->tables[HS_T_MODULES].count = 1;
	CHECK(open_bytes(s.buf, s.size, &seg, err, sizeof err) == HS_SEG_OK);

	sym = hs_sym_new(&seg, exe, true);
	fr = hs_sym_pc(sym, (uint64_t)(uintptr_t)&symbol_target, false);
	CHECK(fr && fr->function && strcmp(fr->function, "symbol_target") == 0);
	CHECK(fr && fr->file && strcmp(fr->file, "test_reader.c") == 0 && fr->line > 0);
	CHECK(fr && fr->module && strcmp(fr->module, exe) == 0 && !fr->hook);
	fr = hs_sym_pc(sym, ret, true); /* the return address lands in this function */
	CHECK(fr && fr->function && strcmp(fr->function, "test_symbolize") == 0);
	CHECK(hs_sym_pc(sym, ret, true) == fr); /* cached */
	CHECK_STR(hs_sym_data(sym, (uint64_t)(uintptr_t)&test_global_lock), "test_global_lock");
	CHECK_STR(hs_sym_data(sym, (uint64_t)(uintptr_t)&test_global_lock + 8), "test_global_lock+0x8");
	fr = hs_sym_pc(sym, 0x10, true); /* in no module */
	CHECK(fr && !fr->module && !fr->function && fr->offset == 0x10);
	hs_sym_free(sym);

	/* --no-symbols: module and offset only. */
	sym = hs_sym_new(&seg, exe, false);
	fr = hs_sym_pc(sym, (uint64_t)(uintptr_t)&symbol_target, false);
	CHECK(fr && !fr->function && fr->module && fr->offset == (uint64_t)(uintptr_t)&symbol_target - mm.base);
	CHECK(hs_sym_data(sym, (uint64_t)(uintptr_t)&test_global_lock) == NULL);
	hs_sym_free(sym);
	hs_seg_close(&seg);
	synth_free(&s);
}

/* ---- fd findings and the fd table (ABI 4) --------------------------------- */

static void add_fd(struct synth *s, uint32_t fd, uint32_t gen, unsigned state, unsigned kind, uint32_t flags,
		   const char *path, int tid)
{
	struct hs_fd *d = entry(s, HS_T_FDS, fd);
	memset(d, 0, sizeof *d);
	d->gen = gen;
	d->state = (uint8_t)state;
	d->kind = (uint8_t)kind;
	d->call = flags & HS_FDF_INHERITED ? HS_FDC_INHERITED : HS_FDC_OPEN;
	d->flags = flags;
	d->tid = tid;
	d->stack = tid ? 1 : 0;
	d->ts_ns = s->h->start_mono_ns + 5;
	snprintf(d->path, sizeof d->path, "%s", path);
}

static void add_fd_event(struct synth *s, uint32_t i, uint32_t gen, unsigned op, unsigned call, int tid,
			 uint32_t stack, const char *path)
{
	struct hs_fd_event *e = entry(s, HS_T_FD_HISTORY, i);
	memset(e, 0, sizeof *e);
	e->fd = 5;
	e->gen = gen;
	e->op = (uint8_t)op;
	e->call = (uint8_t)call;
	e->kind = HS_FDK_FILE;
	e->tid = tid;
	e->stack = stack;
	e->err = op == HS_FDE_CLOSE_FAILED ? 9 : 0;
	e->ts_ns = s->h->start_mono_ns + 20 + i;
	snprintf(e->path, sizeof e->path, "%s", path);
	e->seq = 1;
}

/*
 * A stale close confirmed by the owner's EBADF (five history events), a
 * double close, and the fd table of a process that exited with three fds
 * from one site open (an fd-leak at its end) and one inherited; then
 * corrupt variants: a history event with an unknown op, a history index
 * beyond the table, too many events, an unknown rule, a slot of an unknown
 * kind, and an fd event ring whose capacity is not a power of two.
 */
static void test_fd_findings(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_finding *d;
	char *js, *tx;

	synth_make(&s, false);
	s.h->state = HS_STATE_PACK(HS_STATE_EXITED, 0);
	s.h->flags |= HS_HDR_FDS;
	s.h->fd_created = 12, s.h->fd_closed = 8, s.h->fd_max = 7;
	add_fd(&s, 0, 1, HS_FDS_OPEN, HS_FDK_FILE, HS_FDF_INHERITED, "/dev/null", 0);
	add_fd(&s, 5, 3, HS_FDS_OPEN, HS_FDK_SOCKET, HS_FDF_CLOEXEC, "peer 127.0.0.1:80", 100);
	add_fd(&s, 6, 1, HS_FDS_OPEN, HS_FDK_SOCKET, 0, "peer 127.0.0.1:81", 100);
	add_fd(&s, 7, 1, HS_FDS_OPEN, HS_FDK_SOCKET, 0, "peer 127.0.0.1:82", 100);
	add_fd(&s, 8, 4, HS_FDS_CLOSED, HS_FDK_PIPE, 0, "pipe read end", 101);
	/* the three sockets were left over the whole run: a site that grew (a leak at exit) */
	((struct hs_fd *)entry(&s, HS_T_FDS, 6))->ts_ns = s.h->start_mono_ns + 80ull * 1000000000u;
	((struct hs_fd *)entry(&s, HS_T_FDS, 7))->ts_ns = s.h->start_mono_ns + 160ull * 1000000000u;
	s.h->fd_double_closes_harmless = 4;
	add_fd_event(&s, 0, 1, HS_FDE_CREATE, HS_FDC_OPEN, 100, 1, "/ckpt/state");
	add_fd_event(&s, 1, 1, HS_FDE_CLOSE, HS_FDC_CLOSE, 100, 2, "");
	add_fd_event(&s, 2, 2, HS_FDE_CREATE, HS_FDC_OPEN, 101, 1, "/ckpt/state.tmp");
	add_fd_event(&s, 3, 2, HS_FDE_CLOSE, HS_FDC_CLOSE, 100, 2, "");
	add_fd_event(&s, 4, 2, HS_FDE_CLOSE_FAILED, HS_FDC_CLOSE, 101, 1, "");
	add_fd_event(&s, 8, 1, HS_FDE_CREATE, HS_FDC_OPEN, 102, 1, "/data");
	add_fd_event(&s, 9, 1, HS_FDE_CLOSE, HS_FDC_CLOSE, 102, 2, "");
	add_fd_event(&s, 10, 1, HS_FDE_CLOSE_FAILED, HS_FDC_CLOSE, 102, 1, "");
	s.h->tables[HS_T_FD_HISTORY].count = 16;
	d = add_heap_finding(&s, 1, HS_FIND_STALE_CLOSE, 5, 2);
	d->tid = 100, d->stack = 2, d->tid2 = 100, d->stack2 = 1, d->tid3 = 101, d->stack3 = 1;
	d->lock = 0, d->n = 5, d->offset = HS_FD_RULE_CONFIRMED, d->signo = 9;
	d = add_heap_finding(&s, 2, HS_FIND_DOUBLE_CLOSE, 5, 1);
	d->tid = 102, d->stack = 1, d->tid2 = 102, d->stack2 = 2, d->tid3 = 102, d->stack3 = 1;
	d->lock = 8, d->n = 3, d->offset = HS_FD_RULE_EBADF, d->signo = 9;

	load(&s, &ss, &f, 1000.0);
	CHECK(ss.nprocs == 1 && ss.procs[0].nfds == 5);
	CHECK(f.n == 4);
	if (f.n == 4) {
		/* severity: stale-close, double-close, potential-deadlock, fd-leak */
		CHECK(f.v[0].kind == HS_F_STALE_CLOSE && f.v[0].nhist == 5);
		CHECK(f.v[1].kind == HS_F_DOUBLE_CLOSE && f.v[1].nhist == 3);
		CHECK(f.v[2].kind == HS_F_POTENTIAL);
		CHECK(f.v[3].kind == HS_F_FD_LEAK && !f.v[3].at_hang && f.v[3].ngroups == 1 && f.v[3].nleaked == 3);
	}
	CHECK_STR(hs_fkind_name(HS_F_STALE_CLOSE), "stale-close");
	CHECK_STR(hs_fkind_name(HS_F_DOUBLE_CLOSE), "double-close");
	CHECK_STR(hs_fkind_name(HS_F_FD_LEAK), "fd-leak");
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"kind\":\"stale-close\"");
	CHECK_HAS(js, "\"tids\":[100,101]");
	CHECK_HAS(js, "\"fd\":5,\"generation\":2,\"rule\":\"confirmed\",\"errno\":9");
	CHECK_HAS(js, "\"role\":\"stale close\",\"tid\":100");
	CHECK_HAS(js, "\"role\":\"rightful owner's creation\",\"tid\":101");
	CHECK_HAS(js, "\"role\":\"rightful owner's failed close\",\"tid\":101");
	CHECK_HAS(js, "\"generation\":2,\"op\":\"close-failed\",\"call\":\"close\",\"kind\":\"file\",\"path\":null,\"tid\":101,\"errno\":9");
	CHECK_HAS(js, "\"generation\":2,\"op\":\"open\",\"call\":\"open\",\"kind\":\"file\",\"path\":\"/ckpt/state.tmp\"");
	CHECK_HAS(js, "stale close of fd 5 by thread 100: generation 2 (file /ckpt/state.tmp) belonged to thread 101");
	CHECK_HAS(js, "\"kind\":\"double-close\"");
	CHECK_HAS(js, "\"tids\":[102,102,102]");
	CHECK_HAS(js, "double close of fd 5 (generation 1, file /data) in thread 102");
	CHECK_HAS(js, "\"kind\":\"fd-leak\"");
	CHECK_HAS(js, "\"at\":\"end\",\"open\":3");
	CHECK_HAS(js, "\"fds\":{\"numbers\":256,\"created\":12,\"closed\":8");
	CHECK_HAS(js, "{\"fd\":0,\"generation\":1,\"kind\":\"file\",\"call\":\"inherited\",\"path\":\"/dev/null\","
		      "\"cloexec\":false,\"inherited\":true");
	tx = text_of(&ss, &f);
	CHECK_HAS(tx, "==== heisen: stale close in pid");
	CHECK_HAS(tx, "<-- the stale close");
	CHECK_HAS(tx, "<-- the rightful owner finds its fd gone");
	CHECK_HAS(tx, "==== heisen: double close in pid");
	CHECK_HAS(tx, "==== heisen: fd leak in pid");
	CHECK_HAS(tx, " 3 x socket (open) peer 127.0.0.1:80: fd 5, 6, 7, created by thread 100");
	CHECK_HAS(tx, "  fds: 4 open (1 inherited), 12 created, 8 closed; stacks: site");
	CHECK_HAS(tx, "  note: 4 harmless double closes (one thread in the process");
	CHECK_HAS(js, "\"double_closes_harmless\":4,\"open_at_exit\":0");
	CHECK_HAS(tx, "grew with the run");
	free(js), free(tx);
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* fd tracking off: "fds": null, no fd-leak. */
	s.h->flags &= ~HS_HDR_FDS;
	load(&s, &ss, &f, 1000.0);
	js = json_of(&ss, &f);
	CHECK_HAS(js, "\"fds\":null");
	CHECK(count_kind(&f, HS_F_FD_LEAK) == 0);
	free(js);
	hs_findings_free(&f);
	hs_session_free(&ss);
	s.h->flags |= HS_HDR_FDS;

	/* Corrupt: an unknown op in the history, an index beyond the history
	 * table, too many events, an unknown rule, a slot of an unknown kind. */
	((struct hs_fd_event *)entry(&s, HS_T_FD_HISTORY, 2))->op = 9;
	d = entry(&s, HS_T_FINDINGS, 2);
	d->lock = s.h->tables[HS_T_FD_HISTORY].capacity - 1;
	d = entry(&s, HS_T_FINDINGS, 1);
	d->n = 50;
	d->offset = 77;
	((struct hs_fd *)entry(&s, HS_T_FDS, 6))->kind = 200;
	load(&s, &ss, &f, 1000.0);
	CHECK(count_kind(&f, HS_F_STALE_CLOSE) == 1 && count_kind(&f, HS_F_DOUBLE_CLOSE) == 1);
	CHECK(report_all(&ss, &f) > 0);
	CHECK(has_error(&ss, "fd history entry 2: unknown op 9, kind 1 or call 1"));
	CHECK(has_error(&ss, "finding 1: 50 history events > 8, clamped"));
	CHECK(has_error(&ss, "finding 1: unknown fd rule 77"));
	CHECK(has_error(&ss, "fd 6: unknown kind 200"));
	{
		char want[HS_MSG_MAX];
		snprintf(want, sizeof want, "fd history entry %u out of range (capacity %u)",
			 s.h->tables[HS_T_FD_HISTORY].capacity, s.h->tables[HS_T_FD_HISTORY].capacity);
		CHECK(has_error(&ss, want));
	}
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* An fd event ring whose capacity is not a power of two: the segment is refused. */
	s.h->tables[HS_T_FD_EVENTS].capacity -= 1;
	expect_bad(&s, s.size, "table fd events: capacity 255 is not a power of two");
	synth_free(&s);
}

/* ---- long cycles and limits (ABI 5) ------------------------------------------ */

/* A 20-lock cycle lives in HS_T_CYCLE_EDGES: read whole, in order; one that
 * points beyond the table is clamped and complained; a full lock table is a
 * limit finding. */
static void test_long_cycle_and_limits(void)
{
	struct synth s;
	struct hs_session ss;
	struct hs_findings f;
	struct hs_finding *fd;
	uint64_t *ce;
	synth_make(&s, false);
	for (uint32_t id = 3; id <= 20; id++)
		add_lock(&s, id, LOCK_B + 0x100 * id);
	/* edges 1..20: lock i -> lock i % 20 + 1 */
	for (uint32_t i = 1; i <= 20; i++)
		add_edge(&s, i, i, i % 20 + 1, 100 + (int)i);
	fd = entry(&s, HS_T_FINDINGS, 0);
	fd->n = 20;
	fd->offset = 3;
	ce = entry(&s, HS_T_CYCLE_EDGES, 0);
	for (uint32_t i = 0; i < 20; i++) {
		ce[3 + i] = i + 1;
		if (i < HS_CYCLE_MAX)
			fd->edges[i] = i + 1;
	}
	s.h->tables[HS_T_CYCLE_EDGES].count = 23;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_POTENTIAL) == 1 && count_kind(&f, HS_F_LIMIT) == 0);
	for (size_t i = 0; i < f.n; i++)
		if (f.v[i].kind == HS_F_POTENTIAL) {
			CHECK(f.v[i].nedges == 20);
			for (uint32_t k = 0; k < f.v[i].nedges; k++)
				CHECK(f.v[i].edges[k].to == f.v[i].edges[(k + 1) % 20].from);
		}
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* beyond the table: clamped to the inline edges, which do not close */
	s.h->tables[HS_T_CYCLE_EDGES].count = 10;
	load(&s, &ss, &f, g_timeout);
	for (size_t i = 0; i < f.n; i++)
		if (f.v[i].kind == HS_F_POTENTIAL)
			CHECK(f.v[i].nedges == HS_CYCLE_MAX);
	hs_findings_free(&f);
	hs_session_free(&ss);

	/* a full lock table and a cut search: one limit finding naming both */
	s.h->tables[HS_T_CYCLE_EDGES].count = 23;
	s.h->tables[HS_T_LOCKS].dropped = 5;
	s.h->tables[HS_T_CYCLE_EDGES].dropped = 1;
	load(&s, &ss, &f, g_timeout);
	CHECK(count_kind(&f, HS_F_LIMIT) == 1);
	for (size_t i = 0; i < f.n; i++)
		if (f.v[i].kind == HS_F_LIMIT)
			CHECK(strstr(f.v[i].limit, "table locks full") && strstr(f.v[i].limit, "5 insertions dropped") &&
			      strstr(f.v[i].limit, "table cycle edges full"));
	CHECK(report_all(&ss, &f) == 0);
	hs_findings_free(&f);
	hs_session_free(&ss);
	synth_free(&s);
}

/* ---- heisen-run's quick verdict (internal/seg_verdict.h) ------------------- */

/* Write s as "<pid>.0.seg" in tmpdir, only its pages that hold something
 * (the rest stays a hole, as in a sparse segment). */
static void write_sparse(struct synth *s, pid_t pid)
{
	char path[512];
	snprintf(path, sizeof path, "%s/%d.0.seg", tmpdir, (int)pid);
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0 && ftruncate(fd, (off_t)s->size) == 0);
	for (size_t off = 0; fd >= 0 && off < s->size; off += 4096) {
		size_t n = s->size - off < 4096 ? s->size - off : 4096;
		bool zero = true;
		for (size_t i = 0; i < n && zero; i++)
			zero = s->buf[off + i] == 0;
		if (!zero)
			CHECK(pwrite(fd, s->buf + off, n, (off_t)off) == (ssize_t)n);
	}
	close(fd);
}

/* The quick verdict on tmpdir (its reason into why), and what the full
 * reading finds there, as heisen-dump's main does it: findings and errors. */
static enum hs_quick quick_and_full(size_t *nfindings, size_t *nerrors, char *why, size_t whylen)
{
	struct hs_session ss;
	struct hs_findings f;
	struct hs_stall *stalls = NULL;
	size_t nstalls = 0, nsegs = 0;
	int dfd = open(tmpdir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	enum hs_quick v = hs_session_quick(dfd, &nsegs, why, whylen);
	close(dfd);
	CHECK(hs_session_load(&ss, tmpdir, false) == 0);
	CHECK(hs_stalls_noted(&ss, &stalls, &nstalls) == 0);
	CHECK(hs_analyze_stalled(&ss, g_timeout, true, stalls, nstalls, &f) == 0);
	*nfindings = f.n;
	*nerrors = report_all(&ss, &f);
	hs_findings_free(&f);
	hs_session_free(&ss);
	free(stalls);
	return v;
}

/* A process that ended by itself with nothing to report: exited 3, one
 * exited thread, fds tracked with two left open at one site (below the
 * fd-leak rule's 3) and one inherited. */
static void synth_clean(struct synth *s, pid_t pid)
{
	synth_make(s, false);
	as_process(s, pid, getpid(), 100, "worker\0", 7);
	s->h->state = HS_STATE_PACK(HS_STATE_EXITED, 3);
	s->h->end_mono_ns = mono_ago(1);
	s->h->tables[HS_T_FINDINGS].count = 0;
	memset(entry(s, HS_T_THREADS, 1), 0, sizeof(struct hs_thread));
	((struct hs_thread *)entry(s, HS_T_THREADS, 0))->wait_kind = HS_WAIT_NONE;
	((struct hs_thread *)entry(s, HS_T_THREADS, 0))->state = HS_THREAD_EXITED;
	s->h->flags |= HS_HDR_FDS;
	s->h->fd_max = 9;
	add_fd(s, 0, 1, HS_FDS_OPEN, HS_FDK_FILE, HS_FDF_INHERITED, "/dev/null", 0);
	add_fd(s, 5, 1, HS_FDS_OPEN, HS_FDK_SOCKET, 0, "peer 127.0.0.1:80", 100);
	add_fd(s, 9, 1, HS_FDS_OPEN, HS_FDK_SOCKET, 0, "peer 127.0.0.1:81", 100);
	add_fd(s, 7, 2, HS_FDS_CLOSED, HS_FDK_PIPE, 0, "pipe", 100);
}

/*
 * The verdict heisen-run takes at the end of a run instead of a full
 * reading is one-sided: clean only where heisen-dump finds nothing and
 * reports no error.  A clean session of 200 processes is clean; one
 * process among them with anything heisen-dump reports (a finding in its
 * table, a crash, SIGKILL, a vanished process, a deadlock at its end, an
 * fd leak, a full table, a privilege drop, an fd slot it complains about)
 * or a damaged segment makes the verdict LOOK or BAD, naming that file.
 */
static void test_quick_verdict(void)
{
	struct synth s, odd;
	size_t nf, ne;
	char why[512], name[128];
	pid_t gone = dead_pid();
	const pid_t first = 3000000, odd_pid = first + 137; /* above any pid_max: never live */

	clear_dir();
	synth_clean(&s, first);
	for (pid_t p = first; p < first + 200; p++) {
		s.h->pid = p;
		write_sparse(&s, p);
	}
	CHECK(quick_and_full(&nf, &ne, why, sizeof why) == HS_QUICK_CLEAN);
	CHECK(nf == 0 && ne == 0);

	/* each variant replaces one segment among the 200 */
	for (int variant = 0; variant < 13; variant++) {
		enum hs_quick want = HS_QUICK_LOOK, got;
		synth_clean(&odd, odd_pid);
		switch (variant) {
		case 0: /* a finding in its table (the potential deadlock synth_make records) */
			odd.h->tables[HS_T_FINDINGS].count = 1;
			break;
		case 1: /* it crashed */
			odd.h->state = HS_STATE_PACK(HS_STATE_CRASHED, 11);
			odd.h->tables[HS_T_FINDINGS].count = 1;
			((struct hs_finding *)entry(&odd, HS_T_FINDINGS, 0))->kind = HS_FIND_CRASH;
			break;
		case 2: /* SIGKILL, said waitpid */
			odd.h->state = HS_STATE_PACK(HS_STATE_KILLED, 9);
			break;
		case 3: /* still RUNNING, and its pid is gone: vanished */
			as_process(&odd, gone, getpid(), 100, "worker\0", 7);
			odd.h->state = HS_STATE_PACK(HS_STATE_RUNNING, 0);
			break;
		case 4: /* it ended with two threads waiting for each other's lock */
			add_thread(&odd, 0, 100, LOCK_A, 1, LOCK_B, 2, mono_ago(50));
			add_thread(&odd, 1, 101, LOCK_B, 2, LOCK_A, 1, mono_ago(50));
			break;
		case 5: /* an fd leak at its end: three sockets from one site, opened over the whole run */
			add_fd(&odd, 6, 1, HS_FDS_OPEN, HS_FDK_SOCKET, 0, "peer 127.0.0.1:82", 100);
			((struct hs_fd *)entry(&odd, HS_T_FDS, 6))->ts_ns = odd.h->start_mono_ns + 40ull * 1000000000u;
			((struct hs_fd *)entry(&odd, HS_T_FDS, 9))->ts_ns = odd.h->start_mono_ns + 80ull * 1000000000u;
			break;
		case 6: /* a full lock table: a limit finding */
			odd.h->tables[HS_T_LOCKS].dropped = 2;
			break;
		case 7: /* findings it could not record */
			odd.h->findings_dropped = 1;
			break;
		case 8: /* it dropped privileges and could not record after that */
			odd.h->flags |= HS_HDR_UID_CHANGED;
			break;
		case 9: /* an fd slot of a kind heisen-dump does not know: an error */
			((struct hs_fd *)entry(&odd, HS_T_FDS, 7))->kind = 200;
			break;
		case 10: /* a damaged header: its magic wiped */
			memset(odd.h->magic, 0, HS_MAGIC_LEN);
			want = HS_QUICK_BAD;
			break;
		case 11: /* a damaged state word */
			odd.h->state = 0x77;
			want = HS_QUICK_BAD;
			break;
		case 12: /* cut short */
			odd.size = 4096;
			want = HS_QUICK_BAD;
			break;
		}
		write_sparse(&odd, odd_pid);
		got = quick_and_full(&nf, &ne, why, sizeof why);
		snprintf(name, sizeof name, "%d.0.seg: ", (int)odd_pid);
		if (got != want || strncmp(why, name, strlen(name)) != 0)
			fprintf(stderr, "variant %d: verdict %d (%s)\n", variant, got, why);
		CHECK(got == want);
		CHECK(strncmp(why, name, strlen(name)) == 0);
		/* and heisen-dump's full reading does report something there */
		if (nf + ne == 0)
			fprintf(stderr, "variant %d: heisen-dump finds nothing\n", variant);
		CHECK(nf + ne > 0);
		synth_free(&odd);
	}
	/* the same segment clean again: clean again */
	synth_clean(&odd, odd_pid);
	write_sparse(&odd, odd_pid);
	CHECK(quick_and_full(&nf, &ne, why, sizeof why) == HS_QUICK_CLEAN && nf == 0 && ne == 0);
	synth_free(&odd);
	/* a FIFO named like a segment: heisen-dump names it as unreadable */
	snprintf(name, sizeof name, "%s/1.0.seg", tmpdir);
	CHECK(mkfifo(name, 0600) == 0);
	CHECK(quick_and_full(&nf, &ne, why, sizeof why) == HS_QUICK_BAD && ne > 0);
	CHECK_STR(why, "1.0.seg: not a regular file");
	clear_dir();
	synth_free(&s);
}

/* The one name rule both readers use (internal/seg_dir.h). */
static void test_segment_names(void)
{
	pid_t pid = 0;
	unsigned image = 0;
	CHECK(hs_dir_name_kind("123.4.seg", &pid, &image) == HS_NAME_SEGMENT && pid == 123 && image == 4);
	CHECK(hs_dir_name_kind("2147483647.4294967295.seg", &pid, &image) == HS_NAME_SEGMENT &&
	      pid == 2147483647 && image == 4294967295u);
	CHECK(hs_dir_name_kind("2147483648.0.seg", &pid, &image) == HS_NAME_MISNAMED); /* pid too large */
	CHECK(hs_dir_name_kind("1.4294967296.seg", &pid, &image) == HS_NAME_MISNAMED); /* image too large */
	CHECK(hs_dir_name_kind("0.0.seg", &pid, &image) == HS_NAME_MISNAMED);
	CHECK(hs_dir_name_kind("-1.0.seg", &pid, &image) == HS_NAME_MISNAMED);
	CHECK(hs_dir_name_kind("12.seg", &pid, &image) == HS_NAME_MISNAMED);
	CHECK(hs_dir_name_kind("copy.seg", &pid, &image) == HS_NAME_MISNAMED);
	CHECK(hs_dir_name_kind("12.0.seg.bak", &pid, &image) == HS_NAME_OTHER);
	CHECK(hs_dir_name_kind(".seg", &pid, &image) == HS_NAME_OTHER);
	CHECK(hs_dir_name_kind(".123.new", &pid, &image) == HS_NAME_OTHER);
	CHECK(hs_dir_name_kind("123.0.stall", &pid, &image) == HS_NAME_STALL);

	/* the enumeration and the opening: a FIFO is refused, .new skipped */
	char dir[256], path[320], err[128];
	struct stat st;
	snprintf(dir, sizeof dir, "%s/names", tmpdir);
	CHECK(mkdir(dir, 0700) == 0);
	const char *files[] = {"5.0.seg", "x.seg", ".5.new", "5.0.stall", "report.txt"};
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0600);
		CHECK(fd >= 0);
		close(fd);
	}
	snprintf(path, sizeof path, "%s/6.0.seg", dir);
	CHECK(mkfifo(path, 0600) == 0);
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	DIR *d = hs_seg_dir_open(dfd);
	struct hs_seg_dirent e;
	int seen[4] = {0};
	CHECK(d != NULL);
	while (d && hs_seg_dir_next(d, &e))
		seen[e.kind]++;
	if (d)
		closedir(d);
	CHECK(seen[HS_NAME_OTHER] == 0 && seen[HS_NAME_SEGMENT] == 2 && seen[HS_NAME_MISNAMED] == 1 &&
	      seen[HS_NAME_STALL] == 1);
	CHECK(hs_seg_openat(dfd, "6.0.seg", O_RDONLY, &st, err, sizeof err) == -1 &&
	      strcmp(err, "not a regular file") == 0);
	CHECK(hs_seg_openat(dfd, "7.0.seg", O_RDONLY, &st, err, sizeof err) == -1 &&
	      strncmp(err, "cannot open: ", 13) == 0);
	int fd = hs_seg_openat(dfd, "5.0.seg", O_RDONLY, &st, err, sizeof err);
	CHECK(fd >= 0 && S_ISREG(st.st_mode));
	if (fd >= 0)
		close(fd);
	close(dfd);
	for (size_t i = 0; i < sizeof files / sizeof files[0]; i++) {
		snprintf(path, sizeof path, "%s/%s", dir, files[i]);
		unlink(path);
	}
	snprintf(path, sizeof path, "%s/6.0.seg", dir);
	unlink(path);
	rmdir(dir);
}

/* The one /proc/PID/stat reader (internal/proc_stat.h): comm with spaces
 * and parentheses, the fields both programs use, this process itself. */
static void test_proc_stat(void)
{
	struct hs_proc_stat ps;
	const char *line = "4242 (a) b (c) R 17 4242 4242 0 -1 4194560 100 0 0 0 31 7 0 0 20 0 3 0 98765 1 2 3\n";
	CHECK(hs_proc_stat_parse(line, &ps) == 0 && ps.state == 'R' && ps.ppid == 17 && ps.utime == 31 &&
	      ps.stime == 7 && ps.start_ticks == 98765);
	CHECK(hs_proc_stat_parse("4242 (a) R 17 4242", &ps) == -1); /* cut short */
	CHECK(hs_proc_stat_parse("no parenthesis", &ps) == -1);
	CHECK(hs_proc_stat_read(getpid(), 0, &ps) == 0 && ps.ppid == (int)getppid() && ps.start_ticks > 0);
	CHECK(hs_proc_stat_read(getpid(), (pid_t)syscall(SYS_gettid), &ps) == 0 && ps.state == 'R');
	CHECK(hs_proc_stat_read(0x7ffffff0, 0, &ps) == -1);
}

/* The one sum of ring heads (internal/seg_rings.h): used slots only, the
 * first FREE slot ends them, descriptors that do not fit are refused. */
static void test_ring_heads_sum(void)
{
	enum { SLOTS = 4 };
	static uint64_t mem[(sizeof(struct hs_header) + SLOTS * (sizeof(struct hs_thread) + sizeof(struct hs_ring_header))) / 8 + 8];
	struct hs_header *h = (struct hs_header *)(void *)mem;
	uint64_t len = sizeof mem, ev = 7;
	memset(mem, 0, sizeof mem);
	h->segment_size = len;
	h->tables[HS_T_THREADS] = (struct hs_table){.offset = sizeof(struct hs_header), .entry_size = sizeof(struct hs_thread), .capacity = SLOTS};
	h->tables[HS_T_RINGS] = (struct hs_table){.offset = sizeof(struct hs_header) + SLOTS * sizeof(struct hs_thread),
						  .entry_size = sizeof(struct hs_ring_header), .capacity = SLOTS};
	uint32_t states[SLOTS] = {HS_THREAD_LIVE, HS_THREAD_EXITED, HS_THREAD_FREE, HS_THREAD_LIVE};
	uint64_t heads[SLOTS] = {10, 5, 100, 1000};
	for (uint32_t i = 0; i < SLOTS; i++) {
		((struct hs_thread *)(void *)hs_rings_slot(mem, h, i))->state = states[i];
		((struct hs_ring_header *)(void *)hs_rings_ring(mem, h, i))->head = heads[i];
	}
	CHECK(hs_rings_events(mem, len, h, &ev) == 0 && ev == 15);
	h->tables[HS_T_RINGS].capacity = 1u << 20; /* runs past the mapping */
	ev = 7;
	CHECK(hs_rings_events(mem, len, h, &ev) == -1 && ev == 7);
	h->tables[HS_T_RINGS].capacity = SLOTS;
	CHECK(hs_rings_events(mem, len - 8, h, &ev) == -1); /* segment_size beyond the mapping */
}

static int g_blocked_tid;
static void *blocked_in_read(void *arg)
{
	char c;
	__atomic_store_n(&g_blocked_tid, (int)syscall(SYS_gettid), __ATOMIC_RELEASE);
	return read(*(int *)arg, &c, 1) == 1 ? NULL : arg;
}

/* The one measure of a thread's progress (internal/proc_stat.h): a thread
 * that stays in one wait keeps its value; one that left it does not. */
static void test_thread_progress(void)
{
	int fds[2];
	pthread_t th;
	uint64_t cpu = UINT64_MAX, a = 0, b = 0;
	CHECK(pipe(fds) == 0);
	CHECK(pthread_create(&th, NULL, blocked_in_read, &fds[0]) == 0);
	while (!__atomic_load_n(&g_blocked_tid, __ATOMIC_ACQUIRE))
		usleep(1000);
	usleep(100000); /* in read(2) by now */
	pid_t tid = (pid_t)g_blocked_tid;
	CHECK(hs_thread_progress(getpid(), tid, &cpu, &a) == 0 && cpu != UINT64_MAX);
	usleep(50000);
	cpu = UINT64_MAX;
	CHECK(hs_thread_progress(getpid(), tid, &cpu, &b) == 0 && a == b);
	CHECK(write(fds[1], "x", 1) == 1);
	CHECK(pthread_join(th, NULL) == 0);
	cpu = UINT64_MAX;
	CHECK(hs_thread_progress(getpid(), tid, &cpu, &b) == -1); /* gone */
	cpu = UINT64_MAX;
	CHECK(hs_thread_progress(getpid(), (pid_t)syscall(SYS_gettid), &cpu, &b) == 0 && b != a);
	close(fds[0]);
	close(fds[1]);
}

int main(void)
{
	snprintf(tmpdir, sizeof tmpdir, "/tmp/heisen-test-reader-XXXXXX");
	if (!mkdtemp(tmpdir)) {
		perror("mkdtemp");
		return 1;
	}
	if (mono_now() <= g_wait_age_ns + 3000000000u) {
		g_wait_age_ns = mono_now() - 1000000000u;
		g_timeout = (double)g_wait_age_ns / 3e9;
	}
	test_valid();
	test_torn_ring_record();
	test_deadlock_found();
	test_no_cycle();
	test_rwlock_readers();
	test_header_corruption();
	test_session_with_bad_segment();
	test_entry_corruption();
	test_heap_findings();
	test_guard_findings();
	test_processes_and_environment();
	test_fd_findings();
	test_long_cycle_and_limits();
	test_quick_verdict();
	test_segment_names();
	test_proc_stat();
	test_ring_heads_sum();
	test_folded_release_reads_as_two_events();
	test_folded_fd_close_reads_as_two_events();
	test_thread_progress();
	test_string_accessor();
	test_symbolize();
	clear_dir();
	rmdir(tmpdir);
	printf("%d checks, %d failures\n", checks, failures);
	return failures ? 1 : 0;
}
