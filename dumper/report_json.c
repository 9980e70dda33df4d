/* SPDX-License-Identifier: MIT */
/*
 * dumper/report_json.c — the machine report, exactly the schema of
 * docs/interfaces.md ("JSON schema"): one object with "heisen", "processes",
 * "findings" and "errors".  Every *_ns field is CLOCK_REALTIME nanoseconds
 * (converted with the segment's start_real_ns / start_mono_ns pair) so that
 * times from different processes compare; "seconds" is a duration.  Keys
 * beyond the schema are additions, never changes.  Tests and tools parse
 * this, so it must always be valid JSON, whatever the segment holds.
 */
#include <stdlib.h>
#include <string.h>

#include "faults.h"
#include "json.h"
#include "report.h"
#include "stall.h"

#define EVENTS_SHOWN 16

static void lockref(struct hs_json *j, const char *key, struct hs_proc *p, uint32_t id, uint64_t addr)
{
	struct hs_lockref r;
	hs_lockref(p, id, addr, &r);
	hs_json_object(j, key);
	hs_json_hex(j, "address", r.addr);
	hs_json_uint(j, "generation", r.gen);
	hs_json_str(j, "kind", r.kind);
	hs_json_str(j, "name", r.name[0] ? r.name : NULL);
	hs_json_end_object(j);
}

static void frame(struct hs_json *j, const struct hs_frame *f)
{
	hs_json_object(j, NULL);
	hs_json_str(j, "function", f->function);
	hs_json_str(j, "file", f->file);
	if (f->file)
		hs_json_int(j, "line", f->line);
	else
		hs_json_null(j, "line");
	if (f->python) {
		/* a Python frame stands for a code object at a line, not an address */
		hs_json_null(j, "module");
		hs_json_null(j, "offset");
		hs_json_null(j, "pc");
	} else {
		hs_json_str(j, "module", f->module);
		hs_json_hex(j, "offset", f->offset);
		hs_json_hex(j, "pc", f->pc);
	}
	hs_json_bool(j, "python", f->python);
	hs_json_end_object(j);
}

/* A stack object; tid null when has_tid is false (nobody in particular). */
static void stack_of(struct hs_json *j, const char *key, struct hs_proc *p, uint32_t id, const char *role,
		     int32_t tid, bool has_tid)
{
	struct hs_frames fr;
	hs_frames_of(p, id, &fr);
	hs_json_object(j, key);
	hs_json_str(j, "role", role);
	if (has_tid)
		hs_json_int(j, "tid", tid);
	else
		hs_json_null(j, "tid");
	hs_json_bool(j, "truncated", fr.truncated);
	hs_json_array(j, "frames");
	for (uint32_t i = 0; i < fr.n; i++)
		frame(j, fr.f[i]);
	hs_json_end_array(j);
	hs_json_end_object(j);
}

static void stack(struct hs_json *j, const char *key, struct hs_proc *p, uint32_t id, const char *role,
		  int32_t tid)
{
	stack_of(j, key, p, id, role, tid, true);
}

static const char *label(struct hs_proc *p, uint32_t id, uint64_t addr, struct hs_lockref *r)
{
	hs_lockref(p, id, addr, r);
	return r->label;
}

/* ---- processes ---------------------------------------------------------- */

/* What a stack's role says of a held entry taken on the leaf path
 * (HS_HELDF_SITE: its call site's stack only), else "". */
static const char *site_only(const struct hs_held *h)
{
	return (h->flags & HS_HELDF_SITE) ? " (call site only)" : "";
}

static void held(struct hs_json *j, struct hs_proc *p, const struct hs_tsnap *t)
{
	struct hs_lockref r;
	char role[256];
	hs_json_array(j, "held");
	for (uint32_t i = 0; i < t->t.held_count; i++) {
		const struct hs_held *h = &t->t.held[i];
		hs_json_object(j, NULL);
		lockref(j, "lock", p, h->lock, h->addr);
		hs_json_str(j, "mode", hs_mode_name(h->mode));
		hs_json_bool(j, "trylock", h->trylock);
		hs_json_uint(j, "since_ns", hs_proc_realtime(p, h->since_ns));
		snprintf(role, sizeof role, "acquire %s%s", label(p, h->lock, h->addr, &r), site_only(h));
		stack(j, "stack", p, h->stack, role, t->t.tid);
		/* taken on the leaf path: its call site's stack only (HS_HELDF_SITE) */
		hs_json_bool(j, "stack_site_only", (h->flags & HS_HELDF_SITE) != 0);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void waiting(struct hs_json *j, struct hs_session *s, struct hs_proc *p, const struct hs_tsnap *t)
{
	struct hs_lockref r;
	bool cond = t->t.wait_kind == HS_WAIT_COND;
	char role[256];
	if (t->t.wait_kind == HS_WAIT_NONE) {
		hs_json_null(j, "waiting");
		return;
	}
	hs_json_object(j, "waiting");
	hs_json_str(j, "kind", hs_wait_kind_name(t->t.wait_kind));
	lockref(j, "lock", p, t->t.wait_lock, cond ? 0 : t->t.wait_addr);
	if (cond)
		hs_json_hex(j, "cond", t->t.wait_addr);
	hs_json_str(j, "mode", hs_mode_name(t->t.wait_mode));
	hs_json_uint(j, "since_ns", hs_proc_realtime(p, t->t.wait_since_ns));
	hs_json_double(j, "seconds", hs_wait_seconds(s, p, t));
	snprintf(role, sizeof role, "wait for %s", label(p, t->t.wait_lock, cond ? 0 : t->t.wait_addr, &r));
	stack(j, "stack", p, t->t.wait_stack, role, t->t.tid);
	hs_json_end_object(j);
}

static void event_fields(struct hs_json *j, struct hs_proc *p, const struct hs_record *r)
{
	char path[1024];
	switch (r->type) {
	case HS_REC_LOCK_ACQUIRED:
		lockref(j, "lock", p, (uint32_t)r->b, r->a);
		hs_json_str(j, "mode", hs_mode_name(r->c & 0xff));
		hs_json_bool(j, "trylock", (r->c >> 8) & 0xff);
		hs_json_uint(j, "waited_ns", r->c >> 16);
		break;
	case HS_REC_LOCK_RELEASED:
		lockref(j, "lock", p, (uint32_t)r->b, r->a);
		/* true: written into its acquisition's record (format.h HS_REC_FOLD_SHIFT) */
		hs_json_bool(j, "folded", r->c == HS_REC_RELEASE_FOLDED);
		break;
	case HS_REC_LOCK_BUSY:
	case HS_REC_LOCK_DESTROYED:
		lockref(j, "lock", p, (uint32_t)r->b, r->a);
		break;
	case HS_REC_LOCK_ERROR:
		lockref(j, "lock", p, (uint32_t)r->b, r->a);
		hs_json_uint(j, "errno", r->c);
		break;
	case HS_REC_COND_WAIT:
	case HS_REC_COND_WOKE:
		hs_json_hex(j, "cond", r->a);
		hs_json_hex(j, "mutex", r->b);
		if (r->type == HS_REC_COND_WOKE)
			hs_json_uint(j, "result", r->c);
		break;
	case HS_REC_THREAD_START:
	case HS_REC_THREAD_EXIT:
		hs_json_int(j, "tid", (int64_t)r->a);
		break;
	case HS_REC_NEW_EDGE: hs_json_uint(j, "edge", r->a); break;
	case HS_REC_FINDING: hs_json_uint(j, "finding", r->a); break;
	case HS_REC_FORK: hs_json_int(j, "child", (int64_t)r->a); break;
	case HS_REC_EXIT: hs_json_int(j, "status", (int64_t)r->a); break;
	case HS_REC_DLOPEN:
		hs_seg_string(&p->seg, r->a, path, sizeof path);
		hs_json_str(j, "path", path);
		hs_json_bool(j, "ok", r->b == 1);
		break;
	case HS_REC_SIGNAL:
		hs_json_int(j, "signal", (int64_t)r->a);
		hs_json_str(j, "signal_name", hs_signal_name((int)r->a));
		hs_json_hex(j, "address", r->b);
		break;
	case HS_REC_MEMORY:
		hs_json_uint(j, "rss_bytes", r->a);
		if (hs_seg_flags(&p->seg) & HS_HDR_HEAP)
			hs_json_uint(j, "heap_live_bytes", r->b);
		else
			hs_json_null(j, "heap_live_bytes");
		hs_json_str(j, "why", hs_mem_why_name((unsigned)(r->c & 0xff)));
		hs_json_uint(j, "alloc_bytes", r->c >> 8);
		break;
	case HS_REC_UID_CHANGED:
		hs_json_uint(j, "uid", r->a);
		hs_json_uint(j, "euid", r->b);
		hs_json_int(j, "errno", (int64_t)r->c);
		break;
	case HS_REC_TERM_SIGNAL:
		hs_json_int(j, "signal", (int64_t)r->a);
		hs_json_str(j, "signal_name", hs_signal_name((int)r->a));
		hs_json_int(j, "sender_pid", (int64_t)r->b);
		hs_json_int(j, "si_code", (int64_t)r->c);
		break;
	case HS_REC_FD_CREATED:
		hs_json_int(j, "fd", (int64_t)r->a);
		hs_json_uint(j, "generation", r->b);
		hs_json_str(j, "fd_kind", hs_fd_kind_name(r->c & 0xff));
		hs_json_str(j, "call", hs_fd_call_name((r->c >> 8) & 0xff));
		break;
	case HS_REC_FD_CLOSED:
		hs_json_int(j, "fd", (int64_t)r->a);
		hs_json_uint(j, "generation", r->b);
		hs_json_str(j, "call", hs_fd_call_name((unsigned)r->c));
		break;
	case HS_REC_FD_CLOSE_FAILED:
		hs_json_int(j, "fd", (int64_t)r->a);
		hs_json_uint(j, "generation", r->b);
		hs_json_str(j, "call", hs_fd_call_name((unsigned)(r->c >> 16)));
		hs_json_uint(j, "errno", r->c & 0xffff);
		break;
	case HS_REC_FAULT_INJECTED:
		hs_json_str(j, "call", hs_fault_call_name((unsigned)r->a));
		hs_json_uint(j, "arg", r->b);
		hs_json_uint(j, "errno", r->c & 0xffff);
		hs_json_uint(j, "nth", r->c >> 16);
		break;
	case HS_REC_CHAOS:
		hs_json_str(j, "point", hs_chaos_point_name((unsigned)r->a));
		hs_json_str(j, "action", hs_chaos_action_name((unsigned)r->b));
		hs_json_uint(j, "value", r->c & 0xffffffffu);
		hs_json_uint(j, "count", r->c >> 32);
		break;
	default:
		break;
	}
}

static void events(struct hs_json *j, struct hs_proc *p, const struct hs_tsnap *t)
{
	struct hs_record ev[EVENTS_SHOWN];
	size_t n = hs_read_ring(&p->seg, t->slot, ev, EVENTS_SHOWN);
	hs_json_array(j, "events");
	for (size_t i = 0; i < n; i++) {
		hs_json_object(j, NULL);
		hs_json_uint(j, "ts_ns", hs_proc_realtime(p, ev[i].ts_ns));
		hs_json_str(j, "type", hs_event_name(ev[i].type));
		event_fields(j, p, &ev[i]);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

/* The thread's latest snapshot: {"ns", "stack", "holds_gil", "why"} or null;
 * "stale" when a finding shows it and it was taken before the finding began. */
static void snapshot(struct hs_json *j, struct hs_proc *p, const struct hs_tsnap *t, bool stale)
{
	char role[128];
	if (!t->t.snap_ns) {
		hs_json_null(j, "snapshot");
		return;
	}
	hs_json_object(j, "snapshot");
	hs_json_uint(j, "ns", hs_proc_realtime(p, t->t.snap_ns));
	snprintf(role, sizeof role, "thread %d snapshot", t->t.tid);
	stack(j, "stack", p, t->t.snap_stack, role, t->t.tid);
	hs_json_bool(j, "holds_gil", (t->t.snap_flags & HS_SNAPF_HOLDS_GIL) != 0);
	hs_json_str(j, "why", hs_snapshot_why(t));
	hs_json_bool(j, "stale", stale);
	hs_json_end_object(j);
}

/* The GIL as a LOCKREF: the GIL node when the writer has one, else made up. */
static void gilref(struct hs_json *j, const char *key, struct hs_proc *p, const struct hs_tsnap *t)
{
	struct hs_lockref r;
	uint32_t id = t && t->t.wait_kind == HS_WAIT_GIL && t->t.wait_lock ? t->t.wait_lock : (uint32_t)p->seg.hdr.gil_lock;
	hs_lockref(p, id, 0, &r);
	hs_json_object(j, key);
	hs_json_hex(j, "address", r.addr ? r.addr : (t ? t->t.wait_addr : 0));
	hs_json_uint(j, "generation", r.gen ? r.gen : 1);
	hs_json_str(j, "kind", "gil");
	hs_json_str(j, "name", "GIL");
	hs_json_end_object(j);
}

static void thread(struct hs_json *j, struct hs_session *s, struct hs_proc *p, const struct hs_tsnap *t)
{
	hs_json_object(j, NULL);
	hs_json_int(j, "tid", t->t.tid);
	hs_json_str(j, "name", t->name);
	hs_json_str(j, "state", t->t.state == HS_THREAD_LIVE ? "live" : "exited");
	hs_json_bool(j, "torn", t->torn);
	hs_json_uint(j, "held_overflow", t->t.held_overflow);
	held(j, p, t);
	waiting(j, s, p, t);
	hs_json_bool(j, "holds_gil", hs_holds_gil(p, t, 0));
	snapshot(j, p, t, false);
	events(j, p, t);
	hs_json_end_object(j);
}

static void argv(struct hs_json *j, const struct hs_header *h)
{
	size_t off = 0;
	hs_json_array(j, "argv");
	for (uint32_t i = 0; i < h->argc && off < HS_ARGV_MAX; i++) {
		size_t n = strnlen(h->argv + off, HS_ARGV_MAX - off);
		hs_json_strn(j, NULL, h->argv + off, n);
		off += n + 1;
	}
	hs_json_end_array(j);
}

static void dropped(struct hs_json *j, struct hs_proc *p)
{
	uint64_t fd = hs_seg_findings_dropped(&p->seg), ft = hs_seg_dropped(&p->seg, HS_T_FINDINGS);
	hs_json_object(j, "dropped");
	hs_json_uint(j, "locks", hs_seg_dropped(&p->seg, HS_T_LOCKS));
	hs_json_uint(j, "edges", hs_seg_dropped(&p->seg, HS_T_EDGES));
	hs_json_uint(j, "stacks", hs_seg_dropped(&p->seg, HS_T_STACKS));
	hs_json_uint(j, "findings", fd > ft ? fd : ft);
	hs_json_uint(j, "modules", hs_seg_dropped(&p->seg, HS_T_MODULES));
	hs_json_uint(j, "strings", hs_seg_dropped(&p->seg, HS_T_STRINGS));
	hs_json_uint(j, "threads", hs_seg_dropped(&p->seg, HS_T_THREADS));
	hs_json_end_object(j);
}

static void end_fields(struct hs_json *j, struct hs_proc *p)
{
	uint64_t end = hs_seg_end_ns(&p->seg);
	if (p->pstate == HS_P_EXITED)
		hs_json_int(j, "exit_status", p->value);
	if (p->pstate == HS_P_CRASHED || p->pstate == HS_P_KILLED) {
		hs_json_int(j, "signal", p->value);
		hs_json_str(j, "signal_name", hs_signal_name((int)p->value));
	}
	if (p->pstate == HS_P_KILLED && p->info && p->info->term) {
		/* the process saw the signal itself (HS_STATE_SIGNALED): who sent it */
		hs_json_object(j, "sent_by");
		if (p->info->term_pid)
			hs_json_int(j, "pid", p->info->term_pid);
		else
			hs_json_null(j, "pid");
		hs_json_uint(j, "uid", p->info->term_uid);
		hs_json_int(j, "si_code", p->info->term_code);
		hs_json_end_object(j);
	} else if (p->pstate == HS_P_KILLED) {
		hs_json_null(j, "sent_by");
	}
	hs_json_uint(j, "start_ns", p->seg.hdr.start_real_ns);
	if (end)
		hs_json_uint(j, "end_ns", hs_proc_realtime(p, end));
	else
		hs_json_null(j, "end_ns");
}

/* "python": what the shim found of CPython, null when the process had none. */
static void python(struct hs_json *j, const struct hs_header *h)
{
	if (!(h->python & HS_PY_SEEN)) {
		hs_json_null(j, "python");
		return;
	}
	hs_json_object(j, "python");
	/* from shared memory: bounded, never trusted to be terminated */
	hs_json_strn(j, "version", h->python_version, strnlen(h->python_version, sizeof h->python_version));
	hs_json_bool(j, "frames", (h->python & HS_PY_FRAMES) != 0);
	hs_json_bool(j, "got_patched", (h->python & HS_PY_GOT_PATCHED) != 0);
	hs_json_end_object(j);
}

/* "heap": the heap checker's counters, null when it was off in the process.
 * From the header copied at load; the stack id is checked where it is read. */
static void heap(struct hs_json *j, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	if (!(hs_seg_flags(&p->seg) & HS_HDR_HEAP)) {
		hs_json_null(j, "heap");
		return;
	}
	hs_json_object(j, "heap");
	hs_json_uint(j, "live_bytes", h->heap_live_bytes);
	hs_json_uint(j, "peak_bytes", h->heap_peak_bytes);
	hs_json_uint(j, "allocs", h->heap_allocs);
	hs_json_uint(j, "failures", h->heap_failures);
	if (h->heap_failures) {
		hs_json_object(j, "last_failure");
		hs_json_uint(j, "size", h->heap_last_fail_size);
		stack_of(j, "stack", p, h->heap_last_fail_stack, "allocation failure", 0, false);
		hs_json_end_object(j);
	} else {
		hs_json_null(j, "last_failure");
	}
	hs_json_str(j, "stacks", hs_heap_stacks_name(h->heap_stacks));
	hs_json_uint(j, "quarantine_bytes", h->heap_quarantine_bytes);
	hs_json_end_object(j);
}

/* ---- processes and environment ----------------------------------------------- */

static void rlimit(struct hs_json *j, const char *key, uint64_t v)
{
	if (v == HS_UNLIMITED)
		hs_json_null(j, key);
	else
		hs_json_uint(j, key, v);
}

static void uint_or_null(struct hs_json *j, const char *key, uint64_t v)
{
	if (v)
		hs_json_uint(j, key, v);
	else
		hs_json_null(j, key);
}

/* "environment": what the process saw at start, null when the segment has none. */
static void environment(struct hs_json *j, const struct hs_pinfo *pi)
{
	const struct hs_env *e = &pi->env;
	if (!pi->env_valid) {
		hs_json_null(j, "environment");
		return;
	}
	hs_json_object(j, "environment");
	hs_json_bool(j, "inherited", pi->env_inherited);
	hs_json_uint(j, "cpu_online", e->cpu_online);
	hs_json_uint(j, "cpu_affinity", e->cpu_affinity);
	uint_or_null(j, "cpu_quota_us", e->cpu_quota_us);
	uint_or_null(j, "cpu_period_us", e->cpu_quota_us ? e->cpu_period_us : 0);
	hs_json_double(j, "cpu_allowed", hs_env_cpu_allowed(e));
	uint_or_null(j, "memory_limit_bytes", e->mem_limit);
	hs_json_uint(j, "memory_total_bytes", e->mem_total);
	hs_json_uint(j, "shm_bytes", e->shm_size);
	hs_json_uint(j, "shm_free_bytes", e->shm_free);
	hs_json_object(j, "rlimits");
	rlimit(j, "nofile", e->nofile_soft);
	rlimit(j, "nofile_hard", e->nofile_hard);
	rlimit(j, "as", e->as_soft);
	rlimit(j, "core", e->core_soft);
	hs_json_end_object(j);
	hs_json_str(j, "kernel", e->kernel);
	hs_json_str(j, "libc", e->libc);
	if (e->cgroup) {
		hs_json_object(j, "cgroup");
		hs_json_uint(j, "version", e->cgroup);
		hs_json_str(j, "memory", e->mem_cgroup);
		hs_json_bool(j, "mount_root", (e->flags & HS_ENV_CGROUP_ROOT) != 0);
		if (e->flags & HS_ENV_OOM_COUNTER)
			hs_json_uint(j, "oom_kills_at_start", e->oom_kills);
		else
			hs_json_null(j, "oom_kills_at_start");
		hs_json_end_object(j);
	} else {
		hs_json_null(j, "cgroup");
	}
	hs_json_end_object(j);
}

/* "memory": the samples, null when none was taken. */
static void memory(struct hs_json *j, struct hs_proc *p)
{
	const struct hs_pinfo *pi = p->info;
	uint32_t fds;
	hs_json_object(j, "memory");
	hs_json_uint(j, "rss_bytes", pi->rss);
	hs_json_uint(j, "peak_rss_bytes", pi->rss_peak);
	hs_json_uint(j, "samples", pi->rss_samples);
	if (pi->rss_sample_ns)
		hs_json_uint(j, "sampled_ns", hs_proc_realtime(p, pi->rss_sample_ns));
	else
		hs_json_null(j, "sampled_ns");
	uint_or_null(j, "limit_bytes", hs_proc_limit(p));
	hs_json_uint(j, "fds_open", pi->fds_open);
	hs_json_uint(j, "fds_peak", pi->fds_peak);
	if (hs_proc_fds_now(p, &fds))
		hs_json_uint(j, "fds_now", fds);
	else
		hs_json_null(j, "fds_now");
	if (pi->oom_end_ns)
		hs_json_uint(j, "oom_kills_at_exit", pi->oom_end);
	else
		hs_json_null(j, "oom_kills_at_exit");
	hs_json_end_object(j);
}

/* "modules": the loaded objects with their build-ids. */
static void modules(struct hs_json *j, struct hs_proc *p)
{
	uint32_t n = hs_seg_count(&p->seg, HS_T_MODULES);
	hs_json_array(j, "modules");
	for (uint32_t i = 0; i < n; i++) {
		struct hs_module m;
		char path[1024], id[2 * HS_BUILD_ID_MAX + 1];
		if (hs_read_module(&p->seg, i, &m) != 0 || hs_seg_string(&p->seg, m.path, path, sizeof path) != 0)
			continue;
		for (unsigned k = 0; k < m.build_id_len && k < HS_BUILD_ID_MAX; k++)
			snprintf(id + 2 * k, 3, "%02x", m.build_id[k]);
		id[2 * (m.build_id_len < HS_BUILD_ID_MAX ? m.build_id_len : HS_BUILD_ID_MAX)] = '\0';
		hs_json_object(j, NULL);
		hs_json_str(j, "path", path);
		hs_json_str(j, "build_id", id[0] ? id : NULL);
		hs_json_bool(j, "dlopen", (m.flags & HS_MOD_DLOPEN) != 0);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

/* Place in the tree: the logical parent, how it was started, its children. */
static void tree_fields(struct hs_json *j, const struct hs_proc *p)
{
	const struct hs_pnode *n = p->info ? p->info->node : NULL;
	if (!n) {
		hs_json_null(j, "parent");
		return;
	}
	if (n->parent)
		hs_json_int(j, "parent", n->parent->pid);
	else
		hs_json_null(j, "parent");
	if (n->real_parent)
		hs_json_int(j, "real_parent", n->real_parent->pid);
	else
		hs_json_null(j, "real_parent");
	hs_json_str(j, "via", n->via);
	hs_json_array(j, "children");
	for (size_t i = 0; i < n->nchildren; i++)
		hs_json_int(j, NULL, n->children[i]->pid);
	hs_json_end_array(j);
}

static void tree_node(struct hs_json *j, const struct hs_pnode *n)
{
	hs_json_object(j, NULL);
	hs_json_int(j, "pid", n->pid);
	hs_json_array(j, "images");
	for (size_t i = 0; i < n->nimages; i++)
		hs_json_uint(j, NULL, n->images[i]->seg.hdr.image);
	hs_json_end_array(j);
	hs_json_str(j, "via", n->via);
	hs_json_array(j, "children");
	for (size_t i = 0; i < n->nchildren; i++)
		tree_node(j, n->children[i]);
	hs_json_end_array(j);
	hs_json_end_object(j);
}

/* "owner": what carries the generation, null when nothing does. */
static const char *owner_name(uint32_t flags)
{
	if (flags & HS_FDF_OWNER_FILE)
		return "file";
	if (flags & HS_FDF_OWNER_DIR)
		return "dir";
	if (flags & HS_FDF_OWNER_TAG)
		return "tag";
	return NULL;
}

/* FDREF (docs/interfaces.md "File descriptors"): one open fd of the table. */
static void fdref(struct hs_json *j, struct hs_proc *p, const struct hs_fdsnap *d, bool with_stack)
{
	char role[160];
	hs_json_object(j, NULL);
	hs_json_int(j, "fd", d->fd);
	hs_json_uint(j, "generation", d->f.gen);
	hs_json_str(j, "kind", hs_fd_kind_name(d->f.kind));
	hs_json_str(j, "call", hs_fd_call_name(d->f.call));
	hs_json_str(j, "path", d->f.path[0] ? d->f.path : NULL);
	hs_json_bool(j, "cloexec", (d->f.flags & HS_FDF_CLOEXEC) != 0);
	hs_json_bool(j, "inherited", (d->f.flags & HS_FDF_INHERITED) != 0);
	hs_json_str(j, "owner", owner_name(d->f.flags));
	if (d->f.tid)
		hs_json_int(j, "tid", d->f.tid);
	else
		hs_json_null(j, "tid");
	hs_json_uint(j, "since_ns", hs_proc_realtime(p, d->f.ts_ns));
	if (p->pstate == HS_P_EXECED)
		hs_json_bool(j, "closed_by_exec", (d->f.flags & HS_FDF_CLOEXEC) != 0);
	hs_json_bool(j, "torn", d->torn);
	if (with_stack) {
		if (d->f.stack) {
			snprintf(role, sizeof role, "creation of fd %d", d->fd);
			stack(j, "stack", p, d->f.stack, role, d->f.tid);
		} else {
			hs_json_null(j, "stack");
		}
	}
	hs_json_end_object(j);
}

/* "fds": the fd table's open numbers and counters, null when not tracked. */
static void fds(struct hs_json *j, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	if (!(hs_seg_flags(&p->seg) & HS_HDR_FDS)) {
		hs_json_null(j, "fds");
		return;
	}
	hs_json_object(j, "fds");
	hs_json_uint(j, "numbers", h->tables[HS_T_FDS].capacity);
	hs_json_uint(j, "created", h->fd_created);
	hs_json_uint(j, "closed", h->fd_closed);
	hs_json_uint(j, "beyond", h->fd_beyond);
	hs_json_uint(j, "max", h->fd_max);
	hs_json_uint(j, "torn", h->fd_torn);
	hs_json_uint(j, "double_closes_harmless", h->fd_double_closes_harmless);
	hs_json_uint(j, "open_at_exit", p->info ? p->info->fds_open_at_exit : 0);
	hs_json_uint(j, "history_dropped", hs_seg_dropped(&p->seg, HS_T_FD_HISTORY));
	hs_json_str(j, "stacks", h->fd_stacks == HS_HEAP_STACKS_FULL ? "full" : "site");
	hs_json_array(j, "open");
	for (uint32_t i = 0; i < p->nfds; i++)
		if (p->fds[i].f.state == HS_FDS_OPEN)
			fdref(j, p, &p->fds[i], true);
	hs_json_end_array(j);
	hs_json_end_object(j);
}

static void warnings(struct hs_json *j, struct hs_session *s)
{
	struct hs_warnings w;
	if (hs_warnings_find(s, &w) != 0)
		hs_session_error(s, s->dir, "out of memory while looking for warnings");
	hs_json_array(j, "warnings");
	for (size_t i = 0; i < w.n; i++) {
		const struct hs_warning *x = &w.v[i];
		hs_json_object(j, NULL);
		hs_json_str(j, "kind", hs_wkind_name(x->kind));
		hs_json_array(j, "pids");
		for (size_t k = 0; k < x->npids; k++)
			hs_json_int(j, NULL, x->pids[k]);
		hs_json_end_array(j);
		hs_json_str(j, "message", x->message);
		switch (x->kind) {
		case HS_W_CPU_OVERSUBSCRIBED:
			hs_json_uint(j, "cpu_online", x->cpu_online);
			hs_json_uint(j, "cpu_affinity", x->cpu_affinity);
			hs_json_double(j, "cpu_allowed", x->cpu_allowed);
			break;
		case HS_W_MEMORY_LIMIT:
			hs_json_uint(j, "limit_bytes", x->limit);
			hs_json_uint(j, "peak_bytes", x->peak);
			if (x->peak_pid)
				hs_json_int(j, "peak_pid", x->peak_pid);
			else
				hs_json_null(j, "peak_pid");
			break;
		case HS_W_OPEN_FILES:
			hs_json_uint(j, "fds", x->fds);
			hs_json_uint(j, "nofile", x->nofile);
			break;
		default:
			break;
		}
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
	hs_warnings_free(&w);
}

/* "injected_faults": the failures heisen injected that the rings still hold
 * (dumper/faults.h), oldest first, each with its stack; "injected_faults_total"
 * how many the rings hold (past FAULTS_SHOWN, the array keeps the first one
 * and the newest FAULTS_SHOWN - 1). */
#define FAULTS_SHOWN 16
static void injected_faults(struct hs_json *j, struct hs_proc *p)
{
	struct hs_fault_ev ev[FAULTS_SHOWN];
	size_t total, n = hs_faults_read(p, ev, FAULTS_SHOWN, &total);
	hs_json_uint(j, "injected_faults_total", total);
	hs_json_array(j, "injected_faults");
	for (size_t i = 0; i < n; i++) {
		const struct hs_record *r = &ev[i].r;
		const char *en = strerrorname_np((int)(r->c & 0xffff));
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", ev[i].tid);
		hs_json_uint(j, "ts_ns", hs_proc_realtime(p, r->ts_ns));
		hs_json_str(j, "call", hs_fault_call_name((unsigned)r->a));
		if (r->a == HS_FAULT_MALLOC || r->a == HS_FAULT_HEAP_LIMIT)
			hs_json_uint(j, "size", r->b);
		if (r->a == HS_FAULT_CLOSE)
			hs_json_int(j, "fd", (int64_t)r->b);
		hs_json_uint(j, "errno", r->c & 0xffff);
		hs_json_str(j, "errno_name", en);
		hs_json_uint(j, "nth", r->c >> 16);
		stack(j, "stack", p, r->stack, "injected failure", ev[i].tid);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

/* "chaos": the chaos decisions that did something (heisen-run --chaos;
 * dumper/faults.h), oldest first, at most CHAOS_SHOWN (the first and the
 * newest), and "chaos_total"; absent without any. */
#define CHAOS_SHOWN 256
static void chaos_decisions(struct hs_json *j, struct hs_proc *p)
{
	static struct hs_fault_ev ev[CHAOS_SHOWN];
	size_t total, n = hs_ring_type_read(p, HS_REC_CHAOS, ev, CHAOS_SHOWN, &total);
	if (!total)
		return;
	hs_json_uint(j, "chaos_total", total);
	hs_json_array(j, "chaos");
	for (size_t i = 0; i < n; i++) {
		const struct hs_record *r = &ev[i].r;
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", ev[i].tid);
		hs_json_str(j, "point", hs_chaos_point_name((unsigned)r->a));
		hs_json_str(j, "action", hs_chaos_action_name((unsigned)r->b));
		hs_json_uint(j, "value", r->c & 0xffffffffu);
		hs_json_uint(j, "count", r->c >> 32);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void process(struct hs_json *j, struct hs_session *s, struct hs_proc *p)
{
	const struct hs_header *h = &p->seg.hdr;
	hs_json_object(j, NULL);
	hs_json_int(j, "pid", h->pid);
	hs_json_int(j, "ppid", h->ppid);
	hs_json_uint(j, "image", h->image);
	hs_json_str(j, "exe", p->exe);
	argv(j, h);
	hs_json_bool(j, "argv_truncated", h->argv_truncated != 0);
	hs_json_str(j, "state", hs_pstate_name(p->pstate));
	end_fields(j, p);
	hs_json_str(j, "segment", p->seg.name);
	hs_json_uint(j, "events_recorded", hs_seg_events(&p->seg));
	hs_json_bool(j, "suspect", (hs_seg_flags(&p->seg) & HS_HDR_SUSPECT) != 0);
	python(j, h);
	heap(j, p);
	if (p->info) {
		tree_fields(j, p);
		memory(j, p);
		environment(j, p->info);
	}
	modules(j, p);
	fds(j, p);
	injected_faults(j, p); /* heisen-run --fail, --heap-limit */
	chaos_decisions(j, p); /* heisen-run --chaos */
	dropped(j, p);
	hs_json_array(j, "threads");
	for (uint32_t i = 0; i < p->nthreads; i++)
		thread(j, s, p, &p->threads[i]);
	hs_json_end_array(j);
	hs_json_end_object(j);
}

/* ---- findings ------------------------------------------------------------ */

static void potential(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	struct hs_lockref a, b;
	char role[512];
	size_t used = 0;
	hs_appendf(msg, len, &used, "lock-order cycle:");
	hs_json_array(j, "locks");
	for (uint32_t i = 0; i < f->nedges; i++) {
		lockref(j, NULL, f->proc, f->edges[i].from, 0);
		hs_appendf(msg, len, &used, " %s ->", label(f->proc, f->edges[i].from, 0, &a));
	}
	if (f->nedges)
		hs_appendf(msg, len, &used, " %s", label(f->proc, f->edges[f->nedges - 1].to, 0, &a));
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	for (uint32_t i = 0; i < f->nedges; i++) {
		const struct hs_edge *e = &f->edges[i];
		label(f->proc, e->from, 0, &a), label(f->proc, e->to, 0, &b);
		if (e->flags & HS_EDGE_FROM_SITE)
			snprintf(role, sizeof role, "acquire %s (then %s; call site only: taken %u times with nothing nested before)",
				 a.label, b.label, e->from_site_n);
		else
			snprintf(role, sizeof role, "acquire %s (then %s)", a.label, b.label);
		stack(j, NULL, f->proc, e->from_stack, role, e->tid);
		snprintf(role, sizeof role, "acquire %s while holding %s", b.label, a.label);
		stack(j, NULL, f->proc, e->to_stack, role, e->tid);
	}
	hs_json_end_array(j);
	hs_json_array(j, "edges");
	for (uint32_t i = 0; i < f->nedges; i++) {
		const struct hs_edge *e = &f->edges[i];
		label(f->proc, e->from, 0, &a), label(f->proc, e->to, 0, &b);
		hs_json_object(j, NULL);
		lockref(j, "from", f->proc, e->from, 0);
		lockref(j, "to", f->proc, e->to, 0);
		hs_json_str(j, "from_mode", hs_mode_name(e->from_mode));
		hs_json_str(j, "to_mode", hs_mode_name(e->to_mode));
		hs_json_int(j, "tid", e->tid);
		snprintf(role, sizeof role, "acquire %s (then %s)", a.label, b.label);
		stack(j, "from_stack", f->proc, e->from_stack, role, e->tid);
		/* the leaf path: from_stack is the held lock's call site's only */
		hs_json_bool(j, "from_stack_site_only", (e->flags & HS_EDGE_FROM_SITE) != 0);
		if (e->flags & HS_EDGE_FROM_SITE)
			hs_json_uint(j, "from_site_n", e->from_site_n);
		snprintf(role, sizeof role, "acquire %s while holding %s", b.label, a.label);
		stack(j, "to_stack", f->proc, e->to_stack, role, e->tid);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void crash(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	snprintf(msg, len, "thread %d received %s (si_code %d) at address 0x%llx", f->rec.tid,
		 hs_signal_name(f->rec.signo), f->rec.si_code, (unsigned long long)f->rec.addr);
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	stack(j, NULL, f->proc, f->rec.stack, "faulting thread", f->rec.tid);
	for (uint32_t i = 0; i < f->nothers; i++) {
		char role[128];
		snprintf(role, sizeof role, "thread %d at the crash", f->others[i]->t.tid);
		stack(j, NULL, f->proc, f->others[i]->t.snap_stack, role, f->others[i]->t.tid);
	}
	hs_json_end_array(j);
	/* every other thread, as it recorded itself when the crash asked */
	hs_json_array(j, "threads");
	for (uint32_t i = 0; i < f->nothers; i++) {
		const struct hs_tsnap *t = f->others[i];
		char role[128];
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", t->t.tid);
		hs_json_str(j, "name", t->name);
		snprintf(role, sizeof role, "thread %d at the crash", t->t.tid);
		stack(j, "stack", f->proc, t->t.snap_stack, role, t->t.tid);
		hs_json_bool(j, "holds_gil", hs_holds_gil(f->proc, t, f->since_ns));
		hs_json_str(j, "why", "crash");
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
	hs_json_int(j, "signal", f->rec.signo);
	hs_json_str(j, "signal_name", hs_signal_name(f->rec.signo));
	hs_json_int(j, "si_code", f->rec.si_code);
	hs_json_hex(j, "address", f->rec.addr);
	/* heisen's own abort after a heap finding (HEISEN_ON_HEAP_ERROR=abort) */
	hs_json_bool(j, "heap_abort", f->heap_abort);
	if (f->heap_abort) {
		size_t used = strlen(msg);
		hs_appendf(msg, len, &used, " (heisen's own abort after a heap finding)");
	}
}

/* double-free, invalid-free, heap-overflow: docs/interfaces.md "The heap". */
static void heap_finding(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_finding *r = &f->rec;
	bool known = r->size != 0;  /* invalid-free: inside a block heisen knows */
	hs_heap_message(f, msg, len);
	hs_json_hex(j, "address", r->addr);
	if (f->kind != HS_F_INVALID_FREE || known)
		hs_json_uint(j, "size", r->size);
	else
		hs_json_null(j, "size");
	if (f->kind == HS_F_INVALID_FREE) {
		if (f->in_block) {
			hs_json_object(j, "block");
			hs_json_hex(j, "address", f->block);
			hs_json_uint(j, "size", r->size);
			hs_json_uint(j, "offset", r->offset);
			hs_json_end_object(j);
		} else {
			hs_json_null(j, "block");
		}
	}
	hs_json_str(j, "heap_stacks", hs_heap_stacks_name(f->proc->seg.hdr.heap_stacks));
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	switch (f->kind) {
	case HS_F_DOUBLE_FREE:
		stack(j, NULL, f->proc, r->stack, "second free", r->tid);
		stack(j, NULL, f->proc, r->stack2, "first free", r->tid2);
		stack(j, NULL, f->proc, r->stack3, "allocation", r->tid3);
		break;
	case HS_F_HEAP_OVERFLOW:
		stack(j, NULL, f->proc, r->stack, "free", r->tid);
		stack(j, NULL, f->proc, r->stack3, "allocation", r->tid3);
		break;
	default:
		stack(j, NULL, f->proc, r->stack, "free", r->tid);
		if (known && (r->stack3 || r->tid3))
			stack(j, NULL, f->proc, r->stack3, "allocation", r->tid3);
		if (known && (r->stack2 || r->tid2))
			stack(j, NULL, f->proc, r->stack2, "earlier free", r->tid2);
		break;
	}
	hs_json_end_array(j);
}

/* use-after-free, heap-buffer-overflow: docs/interfaces.md "Guard pages". */
static void guard_finding(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_finding *r = &f->rec;
	int64_t off = (int32_t)r->offset;
	hs_heap_message(f, msg, len);
	hs_json_hex(j, "address", r->addr);
	hs_json_uint(j, "size", r->size);
	hs_json_int(j, "offset", off);
	if (r->access == HS_ACCESS_READ)
		hs_json_str(j, "access", "read");
	else if (r->access == HS_ACCESS_WRITE)
		hs_json_str(j, "access", "write");
	else
		hs_json_null(j, "access");
	hs_json_str(j, "where", off < 0 ? "before" : (uint64_t)off >= r->size ? "after" : "inside");
	hs_json_object(j, "block");
	hs_json_hex(j, "address", f->block);
	hs_json_uint(j, "size", r->size);
	hs_json_end_object(j);
	hs_json_str(j, "signal_name", hs_signal_name(r->signo));
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	stack(j, NULL, f->proc, r->stack, "access", r->tid);
	if (r->stack2 || r->tid2)
		stack(j, NULL, f->proc, r->stack2, "free", r->tid2);
	stack(j, NULL, f->proc, r->stack3, "allocation", r->tid3);
	hs_json_end_array(j);
}

/* double-close, stale-close: docs/interfaces.md "File descriptors". */
static void fd_close_finding(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_finding *r = &f->rec;
	bool stale = f->kind == HS_F_STALE_CLOSE;
	char role[128];
	hs_fd_message(f, msg, len);
	hs_json_int(j, "fd", (int64_t)r->addr);
	hs_json_uint(j, "generation", r->size);
	hs_json_str(j, "rule", hs_fd_rule_name(r->offset));
	if (r->signo)
		hs_json_int(j, "errno", r->signo);
	else
		hs_json_null(j, "errno");
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	stack(j, NULL, f->proc, r->stack, stale ? "stale close" : "second close", r->tid);
	if (r->stack2 || r->tid2)
		stack(j, NULL, f->proc, r->stack2, stale ? "stale owner's generation" : "first close", r->tid2);
	stack(j, NULL, f->proc, r->stack3, stale ? "rightful owner's creation" : "creation", r->tid3);
	if (stale && f->nhist && f->hist[f->nhist - 1].op == HS_FDE_CLOSE_FAILED &&
	    !(r->offset == HS_FD_RULE_OWNER && f->hist[f->nhist - 1].call == HS_FDC_CLOSE_OWNED))
		stack(j, NULL, f->proc, f->hist[f->nhist - 1].stack, "rightful owner's failed close",
		      f->hist[f->nhist - 1].tid);
	hs_json_end_array(j);
	hs_json_array(j, "history");
	for (uint32_t i = 0; i < f->nhist; i++) {
		const struct hs_fd_event *e = &f->hist[i];
		hs_json_object(j, NULL);
		hs_json_uint(j, "generation", e->gen);
		hs_json_str(j, "op", hs_fd_op_name(e->op));
		hs_json_str(j, "call", hs_fd_call_name(e->call));
		hs_json_str(j, "kind", hs_fd_kind_name(e->kind));
		hs_json_str(j, "path", e->op == HS_FDE_CREATE && e->path[0] ? e->path : NULL);
		if (e->tid)
			hs_json_int(j, "tid", e->tid);
		else
			hs_json_null(j, "tid");
		if (e->op == HS_FDE_CLOSE_FAILED)
			hs_json_int(j, "errno", e->err);
		else
			hs_json_null(j, "errno");
		hs_json_str(j, "owner", owner_name(e->flags));
		hs_json_uint(j, "ts_ns", hs_proc_realtime(f->proc, e->ts_ns));
		snprintf(role, sizeof role, "%s of fd %d generation %u", hs_fd_op_name(e->op), e->fd, e->gen);
		stack_of(j, "stack", f->proc, e->stack, role, e->tid, e->tid != 0);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

/* fd-leak: the open fds by creation site. */
static void fd_leak(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	char role[256];
	hs_fd_message(f, msg, len);
	hs_json_str(j, "at", f->at_hang ? "hang" : "end");
	hs_json_uint(j, "open", f->nleaked);
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	for (uint32_t i = 0; i < f->ngroups; i++) {
		const struct hs_fd_group *g = &f->groups[i];
		size_t used = 0;
		hs_appendf(role, sizeof role, &used, "created %u fd%s still open (fd", g->nfds, g->nfds == 1 ? "" : "s");
		for (uint32_t k = 0; k < g->nfds; k++)
			hs_appendf(role, sizeof role, &used, "%s %d", k ? "," : "", g->fds[k]->fd);
		hs_appendf(role, sizeof role, &used, ")");
		stack(j, NULL, f->proc, g->stack, role, g->fds[0]->f.tid);
	}
	hs_json_end_array(j);
	hs_json_array(j, "groups");
	for (uint32_t i = 0; i < f->ngroups; i++) {
		const struct hs_fd_group *g = &f->groups[i];
		const struct hs_fdsnap *d = g->fds[0];
		hs_json_object(j, NULL);
		hs_json_uint(j, "count", g->nfds);
		hs_json_str(j, "kind", hs_fd_kind_name(d->f.kind));
		hs_json_str(j, "call", hs_fd_call_name(d->f.call));
		hs_json_str(j, "path", d->f.path[0] ? d->f.path : NULL);
		hs_json_int(j, "tid", d->f.tid);
		hs_json_array(j, "fds");
		for (uint32_t k = 0; k < g->nfds; k++)
			fdref(j, f->proc, g->fds[k], false);
		hs_json_end_array(j);
		snprintf(role, sizeof role, "creation of %u fd%s", g->nfds, g->nfds == 1 ? "" : "s");
		stack(j, "stack", f->proc, g->stack, role, d->f.tid);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void self_deadlock(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	struct hs_lockref l;
	char role[256];
	label(f->proc, f->rec.lock, f->rec.addr, &l);
	snprintf(msg, len, "thread %d locks %s again while holding it", f->rec.tid, l.label);
	hs_json_array(j, "locks");
	lockref(j, NULL, f->proc, f->rec.lock, f->rec.addr);
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	snprintf(role, sizeof role, "relock %s", l.label);
	stack(j, NULL, f->proc, f->rec.stack, role, f->rec.tid);
	if (f->rec.offset)
		snprintf(role, sizeof role, "first acquisition of %s (call site only: taken %u times with nothing nested before)",
			 l.label, f->rec.offset);
	else
		snprintf(role, sizeof role, "first acquisition of %s", l.label);
	stack(j, NULL, f->proc, f->rec.stack2, role, f->rec.tid);
	hs_json_end_array(j);
	/* the leaf path: stack2 is the held entry's call site's only (format.h, struct hs_finding) */
	hs_json_bool(j, "first_stack_site_only", f->rec.offset != 0);
	if (f->rec.offset)
		hs_json_uint(j, "first_site_n", f->rec.offset);
}

static uint64_t wait_target(const struct hs_tsnap *t)
{
	return t->t.wait_kind == HS_WAIT_COND ? 0 : t->t.wait_addr;
}

/* Who holds what t waits for, and where they took it. */
static void held_by(struct hs_json *j, struct hs_proc *p, const struct hs_tsnap *t)
{
	const struct hs_tsnap *h[8];
	struct hs_lockref r;
	char role[256];
	size_t n = hs_holders(p, t, h, 8);
	hs_json_array(j, "held_by");
	for (size_t i = 0; i < n && i < 8; i++) {
		const struct hs_held *he = hs_held_for(h[i], t);
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", h[i]->t.tid);
		hs_json_str(j, "wait_kind", hs_wait_kind_name(h[i]->t.wait_kind));
		if (he) {
			snprintf(role, sizeof role, "thread %d acquires %s%s", h[i]->t.tid, label(p, he->lock, he->addr, &r),
				 site_only(he));
			stack(j, "stack", p, he->stack, role, h[i]->t.tid);
			hs_json_bool(j, "stack_site_only", (he->flags & HS_HELDF_SITE) != 0);
		} else {
			hs_json_null(j, "stack");
		}
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void blocked_thread(struct hs_json *j, struct hs_session *s, struct hs_fnd *f, const struct hs_tsnap *t)
{
	const struct hs_held *rel = hs_relevant_hold(f, t);
	struct hs_lockref r;
	char role[256];
	hs_json_object(j, NULL);
	hs_json_int(j, "tid", t->t.tid);
	hs_json_str(j, "name", t->name);
	bool gil = hs_holds_gil(f->proc, t, f->since_ns), gil_held = false;
	hs_json_array(j, "holds");
	for (uint32_t i = 0; i < t->t.held_count; i++) {
		gil_held |= f->proc->seg.hdr.gil_lock && t->t.held[i].lock == f->proc->seg.hdr.gil_lock;
		lockref(j, NULL, f->proc, t->t.held[i].lock, t->t.held[i].addr);
	}
	if (gil && !gil_held)
		gilref(j, NULL, f->proc, NULL);
	hs_json_end_array(j);
	hs_json_bool(j, "holds_gil", gil);
	hs_json_str(j, "wait_kind", hs_wait_kind_name(t->t.wait_kind));
	if (t->t.wait_kind == HS_WAIT_GIL)
		gilref(j, "waits_for", f->proc, t);
	else
		lockref(j, "waits_for", f->proc, t->t.wait_lock, wait_target(t));
	hs_json_uint(j, "since_ns", hs_proc_realtime(f->proc, t->t.wait_since_ns));
	hs_json_double(j, "seconds", hs_wait_seconds(s, f->proc, t));
	if (rel) {
		snprintf(role, sizeof role, "thread %d acquires %s%s", t->t.tid, label(f->proc, rel->lock, rel->addr, &r),
			 site_only(rel));
		stack(j, "hold_stack", f->proc, rel->stack, role, t->t.tid);
		/* taken on the leaf path: its call site's stack only (HS_HELDF_SITE) */
		hs_json_bool(j, "hold_stack_site_only", (rel->flags & HS_HELDF_SITE) != 0);
	} else {
		hs_json_null(j, "hold_stack");
	}
	snprintf(role, sizeof role, "thread %d waits for %s", t->t.tid,
		 label(f->proc, t->t.wait_lock, wait_target(t), &r));
	stack(j, "wait_stack", f->proc, t->t.wait_stack, role, t->t.tid);
	held_by(j, f->proc, t);
	if (hs_snapshot_fresh(f, t)) {
		snprintf(role, sizeof role, "thread %d snapshot", t->t.tid);
		stack(j, "stack", f->proc, t->t.snap_stack, role, t->t.tid);
	} else {
		hs_json_null(j, "stack");
	}
	hs_json_end_object(j);
}

static void holder_stacks(struct hs_json *j, struct hs_proc *p, const struct hs_tsnap *t)
{
	const struct hs_tsnap *h[4];
	struct hs_lockref r;
	char role[256];
	size_t n = hs_holders(p, t, h, 4);
	for (size_t i = 0; i < n && i < 4; i++) {
		const struct hs_held *he = hs_held_for(h[i], t);
		if (!he)
			continue;
		snprintf(role, sizeof role, "thread %d acquires %s (holds it)%s", h[i]->t.tid,
			 label(p, he->lock, he->addr, &r), site_only(he));
		stack(j, NULL, p, he->stack, role, h[i]->t.tid);
	}
}

static void blocked_stacks(struct hs_json *j, struct hs_fnd *f)
{
	struct hs_lockref r;
	char role[256];
	hs_json_array(j, "stacks");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		const struct hs_held *rel = hs_relevant_hold(f, t);
		if (rel) {
			snprintf(role, sizeof role, "thread %d acquires %s%s", t->t.tid,
				 label(f->proc, rel->lock, rel->addr, &r), site_only(rel));
			stack(j, NULL, f->proc, rel->stack, role, t->t.tid);
		}
		snprintf(role, sizeof role, "thread %d waits for %s", t->t.tid,
			 label(f->proc, t->t.wait_lock, wait_target(t), &r));
		stack(j, NULL, f->proc, t->t.wait_stack, role, t->t.tid);
		if (f->kind == HS_F_HANG)
			holder_stacks(j, f->proc, t);
	}
	/* a lock-wait hang: the process's other live threads, where they are */
	for (uint32_t i = 0; f->kind == HS_F_HANG && i < f->nothers; i++) {
		const struct hs_tsnap *t = f->others[i];
		if (!t->t.snap_ns || !t->t.snap_stack)
			continue;
		snprintf(role, sizeof role, "thread %d, another thread of the process", t->t.tid);
		stack(j, NULL, f->proc, t->t.snap_stack, role, t->t.tid);
	}
	hs_json_end_array(j);
}

static void blocked(struct hs_json *j, struct hs_session *s, struct hs_fnd *f, char *msg, size_t len)
{
	struct hs_lockref r;
	size_t used = 0;
	hs_appendf(msg, len, &used, "%s:", f->kind == HS_F_DEADLOCK ? "threads wait for each other" : "blocked");
	hs_json_array(j, "locks");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		if (t->t.wait_kind == HS_WAIT_GIL) {
			gilref(j, NULL, f->proc, t);
			hs_appendf(msg, len, &used, "%s thread %d waits for GIL", i ? ";" : "", t->t.tid);
			continue;
		}
		lockref(j, NULL, f->proc, t->t.wait_lock, wait_target(t));
		hs_appendf(msg, len, &used, "%s thread %d waits for %s%s",
					 i ? ";" : "", t->t.tid, label(f->proc, t->t.wait_lock, wait_target(t), &r),
					 hs_holds_gil(f->proc, t, f->since_ns) ? " holding the GIL" : "");
	}
	hs_json_end_array(j);
	blocked_stacks(j, f);
	hs_json_array(j, "threads");
	for (uint32_t i = 0; i < f->nthreads; i++)
		blocked_thread(j, s, f, f->threads[i]);
	hs_json_end_array(j);
}

/* A process that made no progress: every thread, blocked anywhere. */
static void stalled(struct hs_json *j, struct hs_session *s, struct hs_fnd *f, char *msg, size_t len)
{
	struct hs_proc *p = f->proc;
	char role[256];
	size_t used = 0;
	uint32_t nwait = 0;
	if (f->stall && f->stall->threads)
		hs_appendf(msg, len, &used, "stuck for %.1f s (per-thread rule): %u thread%s",
			   f->stalled_seconds, f->nthreads, f->nthreads == 1 ? "" : "s");
	else
		hs_appendf(msg, len, &used, "no progress for %.1f s (no events, no CPU time): %u thread%s",
			   f->stalled_seconds, f->nthreads, f->nthreads == 1 ? "" : "s");
	if (f->stall && f->stall->threads) {
		static const char *const names[] = {[HS_TV_ACTIVE] = "active", [HS_TV_IDLE] = "idle",
						    [HS_TV_STUCK] = "stuck", [HS_TV_PEER] = "peer",
						    [HS_TV_UNKNOWN] = "unknown"};
		/* the per-thread rule's verdict on every thread (stall.c hs_judge_still) */
		hs_json_array(j, "judged_threads");
		for (uint32_t i = 0; i < f->stall->nthreads; i++) {
			const struct hs_tjudge *t = &f->stall->threads[i];
			hs_json_object(j, NULL);
			hs_json_int(j, "tid", t->tid);
			hs_json_bool(j, "main", t->tid == p->seg.hdr.pid);
			hs_json_str(j, "verdict", names[t->verdict]);
			hs_json_double(j, "still_seconds", t->still_seconds);
			hs_json_bool(j, "busy", t->busy);
			hs_json_str(j, "wait", t->what);
			hs_json_array(j, "peers");
			for (uint32_t k = 0; k < t->npeers; k++)
				hs_json_int(j, NULL, t->peers[k]);
			hs_json_end_array(j);
			hs_json_end_object(j);
		}
		hs_json_end_array(j);
	} else {
		hs_json_null(j, "judged_threads");
	}
	if (f->stalled_child)
		hs_appendf(msg, len, &used, "; its descendant %d is stalled too (it may only wait for it)", f->stalled_child);
	hs_json_double(j, "stalled_seconds", f->stalled_seconds);
	if (f->stalled_child)
		hs_json_int(j, "stalled_descendant", f->stalled_child);
	else
		hs_json_null(j, "stalled_descendant");
	hs_json_array(j, "locks");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		if (t->t.wait_kind == HS_WAIT_GIL)
			gilref(j, NULL, p, t);
		else if (t->t.wait_kind == HS_WAIT_LOCK)
			lockref(j, NULL, p, t->t.wait_lock, wait_target(t));
		nwait += t->t.wait_kind != HS_WAIT_NONE;
	}
	hs_json_end_array(j);
	if (nwait)
		hs_appendf(msg, len, &used, ", %u waiting for a lock", nwait);
	hs_json_array(j, "stacks");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		if (t->t.snap_ns && t->t.snap_stack) {
			snprintf(role, sizeof role, "thread %d (%s) snapshot%s", t->t.tid, t->name,
				 hs_snapshot_fresh(f, t) ? "" : " (stale: before the stall)");
			stack(j, NULL, p, t->t.snap_stack, role, t->t.tid);
		}
		if (t->t.wait_kind != HS_WAIT_NONE && t->t.wait_stack) {
			snprintf(role, sizeof role, "thread %d waits", t->t.tid);
			stack(j, NULL, p, t->t.wait_stack, role, t->t.tid);
		}
	}
	hs_json_end_array(j);
	hs_json_array(j, "threads");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		bool fresh = hs_snapshot_fresh(f, t);
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", t->t.tid);
		hs_json_str(j, "name", t->name);
		if (t->t.snap_ns && t->t.snap_stack) {
			snprintf(role, sizeof role, "thread %d snapshot", t->t.tid);
			stack(j, "stack", p, t->t.snap_stack, role, t->t.tid);
		} else {
			const char *why = hs_no_snapshot_reason(p, t);
			hs_json_null(j, "stack");
			if (why)
				hs_json_str(j, "no_snapshot", why);
		}
		hs_json_bool(j, "stale", !fresh);
		if (t->t.snap_ns)
			hs_json_uint(j, "snapshot_ns", hs_proc_realtime(p, t->t.snap_ns));
		else
			hs_json_null(j, "snapshot_ns");
		waiting(j, s, p, t);
		hs_json_bool(j, "holds_gil", hs_holds_gil(p, t, f->since_ns));
		hs_json_array(j, "holds");
		for (uint32_t k = 0; k < t->t.held_count; k++)
			lockref(j, NULL, p, t->t.held[k].lock, t->t.held[k].addr);
		hs_json_end_array(j);
		if (t->t.wait_kind == HS_WAIT_GIL)
			gilref(j, "waits_for", p, t);
		else if (t->t.wait_kind == HS_WAIT_LOCK)
			lockref(j, "waits_for", p, t->t.wait_lock, wait_target(t));
		else
			hs_json_null(j, "waits_for");
		hs_json_double(j, "seconds", t->t.wait_kind != HS_WAIT_NONE ? hs_wait_seconds(s, p, t) : f->stalled_seconds);
		if (t->t.wait_kind == HS_WAIT_LOCK || t->t.wait_kind == HS_WAIT_GIL)
			held_by(j, p, t);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

/* killed, oom-kill: docs/interfaces.md "Processes and environment". */
static void death(struct hs_json *j, struct hs_fnd *f, char *msg, size_t len)
{
	const struct hs_death *d = &f->death;
	struct hs_proc *p = f->proc;
	const struct hs_pinfo *pi = p->info;
	hs_death_message(f, msg, len);
	if (d->signal) {
		hs_json_int(j, "signal", d->signal);
		hs_json_str(j, "signal_name", hs_signal_name(d->signal));
	} else {
		hs_json_null(j, "signal");
		hs_json_null(j, "signal_name");
	}
	hs_json_array(j, "evidence");
	if (d->evidence & HS_EV_OOM_COUNTER) {
		hs_json_object(j, NULL);
		hs_json_str(j, "kind", "oom-kill-counter");
		hs_json_str(j, "cgroup", pi->env.mem_cgroup);
		hs_json_uint(j, "before", d->oom_before);
		hs_json_uint(j, "after", d->oom_after);
		if (d->oom_after_pid) {
			hs_json_str(j, "read_by", d->oom_after_start ? "start" : "exit");
			hs_json_int(j, "read_by_pid", d->oom_after_pid);
		} else {
			hs_json_str(j, "read_by", "heisen-dump");
			hs_json_null(j, "read_by_pid");
		}
		hs_json_end_object(j);
	}
	if (d->evidence & HS_EV_NEAR_LIMIT) {
		hs_json_object(j, NULL);
		hs_json_str(j, "kind", "near-limit");
		hs_json_uint(j, "rss_bytes", pi->rss);
		hs_json_uint(j, "limit_bytes", d->limit);
		hs_json_double(j, "ratio", (double)pi->rss / (double)d->limit);
		hs_json_end_object(j);
	}
	if (d->evidence & HS_EV_CGROUP_PEAK) {
		hs_json_object(j, NULL);
		hs_json_str(j, "kind", "cgroup-peak");
		hs_json_uint(j, "peak_bytes", d->cgroup_peak);
		hs_json_uint(j, "limit_bytes", d->limit);
		hs_json_end_object(j);
	}
	if (d->evidence & HS_EV_SIGKILL) {
		hs_json_object(j, NULL);
		hs_json_str(j, "kind", "waitpid-sigkill");
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
	memory(j, p);
	if (hs_seg_flags(&p->seg) & HS_HDR_HEAP) {
		hs_json_uint(j, "heap_live_bytes", p->seg.hdr.heap_live_bytes);
		hs_json_uint(j, "heap_peak_bytes", p->seg.hdr.heap_peak_bytes);
	} else {
		hs_json_null(j, "heap_live_bytes");
		hs_json_null(j, "heap_peak_bytes");
	}
	hs_json_double(j, "ran_seconds", d->ran_seconds);
	hs_json_bool(j, "ran_at_least", d->ran_at_least);
	hs_json_uint(j, "start_ns", p->seg.hdr.start_real_ns);
	hs_json_uint(j, "last_seen_ns", hs_proc_realtime(p, pi->last_ns));
	if (pi->node && pi->node->parent)
		hs_json_int(j, "parent", pi->node->parent->pid);
	else
		hs_json_null(j, "parent");
	hs_json_array(j, "locks");
	hs_json_end_array(j);
	hs_json_array(j, "stacks");
	hs_json_end_array(j);
	/* every thread of the process, with its last events */
	hs_json_array(j, "threads");
	for (uint32_t i = 0; i < f->nthreads; i++) {
		const struct hs_tsnap *t = f->threads[i];
		hs_json_object(j, NULL);
		hs_json_int(j, "tid", t->t.tid);
		hs_json_str(j, "name", t->name);
		hs_json_str(j, "state", t->t.state == HS_THREAD_LIVE ? "live" : "exited");
		events(j, p, t);
		hs_json_end_object(j);
	}
	hs_json_end_array(j);
}

static void tids(struct hs_json *j, struct hs_fnd *f)
{
	hs_json_array(j, "tids");
	if (f->nthreads)
		for (uint32_t i = 0; i < f->nthreads; i++)
			hs_json_int(j, NULL, f->threads[i]->t.tid);
	else if (f->kind == HS_F_POTENTIAL)
		for (uint32_t i = 0; i < f->nedges; i++) {
			bool seen = false;
			for (uint32_t k = 0; k < i; k++)
				seen |= f->edges[k].tid == f->edges[i].tid;
			if (!seen)
				hs_json_int(j, NULL, f->edges[i].tid);
		}
	else if (f->kind == HS_F_FD_LEAK)
		for (uint32_t i = 0; i < f->ngroups; i++) {
			bool seen = false;
			for (uint32_t k = 0; k < i; k++)
				seen |= f->groups[k].fds[0]->f.tid == f->groups[i].fds[0]->f.tid;
			if (!seen)
				hs_json_int(j, NULL, f->groups[i].fds[0]->f.tid);
		}
	else if (f->kind == HS_F_STALE_CLOSE) {
		/* [the stale closer, the rightful owner] */
		hs_json_int(j, NULL, f->rec.tid);
		if (f->rec.tid3 && f->rec.tid3 != f->rec.tid)
			hs_json_int(j, NULL, f->rec.tid3);
	} else if (f->kind == HS_F_DOUBLE_CLOSE) {
		/* [second close, first close, creation], as the stacks */
		hs_json_int(j, NULL, f->rec.tid);
		hs_json_int(j, NULL, f->rec.tid2);
		hs_json_int(j, NULL, f->rec.tid3);
	} else if (f->kind == HS_F_DOUBLE_FREE) {
		/* [second free, first free, allocation], as the stacks */
		hs_json_int(j, NULL, f->rec.tid);
		hs_json_int(j, NULL, f->rec.tid2);
		hs_json_int(j, NULL, f->rec.tid3);
	} else if (hs_fkind_guard(f->kind)) {
		/* [access, free (when freed), allocation], as the stacks */
		hs_json_int(j, NULL, f->rec.tid);
		if (f->rec.stack2 || f->rec.tid2)
			hs_json_int(j, NULL, f->rec.tid2);
		hs_json_int(j, NULL, f->rec.tid3);
	} else if (hs_fkind_heap(f->kind)) {
		hs_json_int(j, NULL, f->rec.tid);
		if (f->rec.size && f->rec.tid3)
			hs_json_int(j, NULL, f->rec.tid3);
	} else
		hs_json_int(j, NULL, f->rec.tid);
	hs_json_end_array(j);
}

static void finding(struct hs_json *j, struct hs_session *s, struct hs_fnd *f)
{
	char msg[1024] = "";
	hs_json_object(j, NULL);
	hs_json_str(j, "kind", hs_fkind_name(f->kind));
	hs_json_int(j, "pid", f->proc->seg.hdr.pid);
	hs_json_str(j, "segment", f->proc->seg.name);
	tids(j, f);
	if (f->kind != HS_F_DEADLOCK && f->kind != HS_F_HANG && f->kind != HS_F_FD_LEAK)
		hs_json_uint(j, "count", f->rec.count);
	switch (f->kind) {
	case HS_F_POTENTIAL: potential(j, f, msg, sizeof msg); break;
	case HS_F_CRASH: crash(j, f, msg, sizeof msg); break;
	case HS_F_SELF_DEADLOCK: self_deadlock(j, f, msg, sizeof msg); break;
	case HS_F_DOUBLE_FREE:
	case HS_F_HEAP_OVERFLOW:
	case HS_F_INVALID_FREE: heap_finding(j, f, msg, sizeof msg); break;
	case HS_F_USE_AFTER_FREE:
	case HS_F_HEAP_BUFFER_OVERFLOW: guard_finding(j, f, msg, sizeof msg); break;
	case HS_F_OOM_KILL:
	case HS_F_KILLED: death(j, f, msg, sizeof msg); break;
	case HS_F_STALE_CLOSE:
	case HS_F_DOUBLE_CLOSE: fd_close_finding(j, f, msg, sizeof msg); break;
	case HS_F_FD_LEAK: fd_leak(j, f, msg, sizeof msg); break;
	case HS_F_LIMIT:
		snprintf(msg, sizeof msg, "%s", f->limit);
		if (f->unrecorded)
			hs_json_bool(j, "privilege_drop", true);
		break;
	case HS_F_HANG:
		if (f->stalled_seconds > 0) {
			stalled(j, s, f, msg, sizeof msg);
			break;
		}
		blocked(j, s, f, msg, sizeof msg);
		break;
	default: blocked(j, s, f, msg, sizeof msg); break;
	}
	hs_json_str(j, "message", msg);
	hs_json_end_object(j);
}

void hs_report_json(FILE *out, struct hs_session *s, const struct hs_findings *f)
{
	struct hs_json j;
	hs_json_init(&j, out);
	hs_json_object(&j, NULL);
	hs_json_object(&j, "heisen");
	hs_json_uint(&j, "abi", HS_ABI_VERSION);
	hs_json_str(&j, "session", s->dir);
	hs_json_end_object(&j);
	hs_json_array(&j, "processes");
	for (size_t i = 0; i < s->nprocs; i++)
		process(&j, s, &s->procs[i]);
	hs_json_end_array(&j);
	hs_json_array(&j, "findings");
	for (size_t i = 0; i < f->n; i++)
		finding(&j, s, &f->v[i]);
	hs_json_end_array(&j);
	warnings(&j, s);
	hs_json_array(&j, "tree");
	for (size_t i = 0; s->tree && i < s->tree->nroots; i++)
		tree_node(&j, s->tree->roots[i]);
	hs_json_end_array(&j);
	/* Last: reading everything above is what finds most corruption. */
	hs_session_collect_errors(s);
	hs_json_array(&j, "errors");
	for (size_t i = 0; i < s->nerrors; i++) {
		hs_json_object(&j, NULL);
		hs_json_str(&j, "file", s->errors[i].file);
		hs_json_str(&j, "message", s->errors[i].msg);
		hs_json_end_object(&j);
	}
	hs_json_end_array(&j);
	hs_json_end_object(&j);
}
