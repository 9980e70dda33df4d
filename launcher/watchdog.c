/* SPDX-License-Identifier: MIT */
/*
 * launcher/watchdog.c — heisen-dump as a subprocess: hang checks, reports,
 * and killing a hung tree.
 *
 * heisen-run never interprets a session itself beyond segment headers: it
 * asks heisen-dump (docs/interfaces.md "heisen-dump"), always without
 * LD_PRELOAD and HEISEN_DIR in its environment, so the reader is not
 * recorded into the session it reads.  Output goes to an anonymous memfd and
 * is copied to our stderr only when it is wanted, so the command's own
 * stderr is untouched by a clean run.  While a heisen-dump runs, signals are
 * still forwarded and children still reaped (hr_wait_helper), and a stuck
 * heisen-dump is killed after a time limit.
 *
 * Hang signatures: `--check-hang S` prints one stable line per deadlock or
 * hang and exits 3.  A tick that shows a signature not reported before
 * prints the full report once; the same signatures are not reported again.
 *
 * Hangs per thread: every tick also samples the progress of each thread of
 * each live process of the session — heisen-dump's measure, the same code
 * (internal/still.h: its own ring records, its CPU time and the system
 * call it is in) — so busy background threads (a library's I/O thread
 * retrying a connection) do not hide a thread that stays in one wait.
 * Threads still past the hang timeout (hs_still_past, the threshold
 * heisen-dump applies too) go to heisen-dump as --still PID/TID:SECONDS;
 * heisen-dump judges (dumper/stall.c hs_judge_still): the main thread
 * stuck in a wait only its own process can end, or every thread that is
 * not idle stuck, is a hang.  Waiting for the outside world or for another
 * live process is not.  heisen-run is only the policy: when to sample,
 * when to ask, which hangs it reported, the kill.
 * Before the report, every thread of the processes concerned is asked for
 * a snapshot of its own stack (the snapshot signal, format.h; no ptrace).
 * Design: docs/design.md "Hangs".
 */
#include <stdint.h>
#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <internal/seg_verdict.h>
#include <internal/snapshot_request.h>
#include <internal/still.h>

#include "launcher.h"

#define BANNER_END "==== end of heisen report ===="

/* A new memfd for a helper's output, or -1 after a message. */
static int new_out(const char *what)
{
	int fd = memfd_create(what, MFD_CLOEXEC);
	if (fd < 0)
		hr_err("memfd_create: %s", strerror(errno));
	return fd;
}

/* The whole content of memfd fd as a malloc'd NUL-terminated string (""
 * when empty or unreadable, NULL only on ENOMEM). */
static char *slurp(int fd)
{
	off_t n = lseek(fd, 0, SEEK_END);
	if (n < 0)
		n = 0;
	char *s = malloc((size_t)n + 1);
	if (!s)
		return NULL;
	ssize_t k = pread(fd, s, (size_t)n, 0);
	s[k > 0 ? k : 0] = '\0';
	return s;
}

/* Copy memfd fd to stderr, adding a final newline if it lacks one. */
static void copy_to_stderr(int fd)
{
	char buf[8192];
	off_t off = 0;
	ssize_t k;
	char last = '\n';
	while ((k = pread(fd, buf, sizeof buf, off)) > 0) {
		for (ssize_t w = 0; w < k;) {
			ssize_t m = write(2, buf + w, (size_t)(k - w));
			if (m < 0 && errno == EINTR)
				continue;
			if (m <= 0)
				return;
			w += m;
		}
		last = buf[k - 1];
		off += k;
	}
	if (last != '\n')
		(void)!write(2, "\n", 1);
}

/*
 * Run heisen-dump with `opts` (NULL-terminated, at most 4) and the session,
 * stdout and stderr into out_fd.  Returns its wait status, or -1 after a
 * message when it could not be run or had to be killed.
 */
static int run_dump(struct hr_run *r, const char *const opts[], int out_fd, int timeout_ms)
{
	char *argv[8];
	size_t n = 0;
	argv[n++] = r->dump;
	for (size_t i = 0; opts[i] && n < 6; i++)
		argv[n++] = (char *)opts[i];
	argv[n++] = r->session;
	argv[n] = NULL;
	int e;
	pid_t pid = hr_spawn(argv, r->dump_env, 0, out_fd, out_fd, &e);
	if (pid < 0)
		return -1;
	int st;
	int rc = hr_wait_helper(r, pid, timeout_ms, &st);
	if (e) {
		hr_warn(r, "cannot run %s: %s", r->dump, strerror(e));
		return -1;
	}
	if (rc < 0) {
		hr_warn(r, "%s %s took longer than %d s: killed it", r->dump, opts[0] ? opts[0] : "",
			timeout_ms / 1000);
		return -1;
	}
	return st;
}

/* Print the full report of heisen-dump between banners, with --still
 * `still` unless it is NULL or "", and --snapshot-stuck when snap_stuck
 * (heisen-dump judges the still threads first, then asks the processes it
 * judged hung for snapshots: the snapshot signal interrupts some waits —
 * pyzmq's Context.term() — and a judgement taken after it could call the
 * hang just found no hang).  Returns heisen-dump's exit code (0 none, 1
 * findings, 2 errors) or -1 if it did not run. */
static int print_report(struct hr_run *r, const char *still, int snap_stuck)
{
	int fd = new_out("heisen-report");
	if (fd < 0)
		return -1;
	const char *opts[6] = {NULL};
	size_t n = 0;
	if (r->hang_seconds > 0) {
		opts[n++] = "--hang-timeout";
		opts[n++] = r->hang_timeout;
	}
	if (still && *still) {
		opts[n++] = "--still";
		opts[n++] = still;
		if (snap_stuck)
			opts[n++] = "--snapshot-stuck";
	}
	int st = run_dump(r, opts, fd, HR_REPORT_TIMEOUT_MS);
	fprintf(stderr, "==== heisen report: %s ====\n", r->session);
	copy_to_stderr(fd);
	fprintf(stderr, BANNER_END "\n");
	close(fd);
	return st >= 0 && WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static int seen(const struct hr_run *r, const char *sig)
{
	for (size_t i = 0; i < r->nsigs; i++)
		if (strcmp(r->sigs[i], sig) == 0)
			return 1;
	return 0;
}

/* ---- stalls: no progress at all ------------------------------------------- */

static struct hr_stall *stall_of(struct hr_run *r, pid_t pid)
{
	for (size_t i = 0; i < r->nstalls; i++)
		if (r->stalls[i].pid == pid)
			return &r->stalls[i];
	return NULL;
}

/*
 * Sampling a still process less often.  Ring records are memory: every
 * tick reads them for every live process.  /proc is not (a stat, a task
 * listing and a syscall file per thread: a few thousand small reads a
 * second for a few hundred processes), so a process is read there only
 * when it is due: every tick while it moves (or until it has been still for
 * 4 ticks), then every quarter of the time it has been still, at most every
 * eighth of the hang timeout (3.75 s for 30 s), and at once when its ring
 * records move.  What it costs: a thread that starts moving again without a
 * ring record is seen at most that much later, so its stillness is
 * measured that much short and a later hang of it is reported at most an
 * eighth of the timeout late; a stillness is never measured long.  Timeouts
 * of 4 s or less sample every process every tick.
 */
static uint64_t sample_every_ms(const struct hr_run *r, const struct hr_stall *e, uint64_t now)
{
	uint64_t every = (now - e->since_ms) / 4, cap = (uint64_t)(r->hang_seconds * 1000.0 / 8.0);
	if (every > cap)
		every = cap;
	return every > HR_TICK_MS ? every : HR_TICK_MS;
}

/*
 * Sample every live process of the session: ring records every tick; its
 * CPU time (and its start time, which stands for the segment's own check,
 * hr_seg_confirm) from /proc when it is due (above).  A process whose
 * progress moved starts a new (not yet reported) stall clock, unless it is
 * being rebased after a snapshot; processes that are gone are forgotten.
 */
static void sample_progress(struct hr_run *r, uint64_t now)
{
	pid_t pids[1024];
	size_t n = hr_seg_live_pids(r->session_fd, pids, 1024), k = 0;
	for (size_t i = 0; i < r->nstalls; i++)
		r->stalls[i].alive = r->stalls[i].sampled = 0;
	for (size_t i = 0; i < n; i++) {
		uint64_t events, cpu, start, snapval;
		int snapsig;
		struct hr_stall *e = stall_of(r, pids[i]);
		if (hr_seg_progress(r->session_fd, pids[i], &events, &snapsig, &snapval) < 0)
			continue;
		if (e && !e->rebase && events == e->events &&
		    now + HR_TICK_MS / 2 < e->sampled_ms + sample_every_ms(r, e, now)) {
			e->alive = 1; /* not due: as last read */
			continue;
		}
		if (hr_proc_cpu_ticks(pids[i], &cpu, &start) < 0 || hr_seg_confirm(pids[i], start) < 0)
			continue; /* gone, or the pid is another process now */
		uint64_t prog = hs_still_proc_progress(events, cpu);
		if (!e) {
			struct hr_stall *v = realloc(r->stalls, (r->nstalls + 1) * sizeof *v);
			if (!v)
				continue;
			r->stalls = v;
			e = &v[r->nstalls++];
			*e = (struct hr_stall){.pid = pids[i], .progress = prog, .since_ms = now};
		} else {
			hs_still_note(&e->progress, &e->since_ms, prog, now, e->rebase);
		}
		e->snapsig = snapsig;
		e->snapval = snapval;
		/* first sight, or a snapshot's work: "moved", read every thread's CPU time */
		e->cpu_prev = e->cpu_seen && !e->rebase ? e->cpu : cpu + 1;
		e->cpu = cpu;
		e->cpu_seen = 1;
		e->events = events;
		e->sampled_ms = now;
		e->sampled = 1;
		e->alive = 1;
	}
	for (size_t i = 0; i < r->nstalls; i++)
		if (r->stalls[i].alive)
			r->stalls[k++] = r->stalls[i];
	r->nstalls = k;
}

static struct hr_still *still_of(struct hr_run *r, pid_t pid, pid_t tid)
{
	for (size_t i = 0; i < r->nstill; i++)
		if (r->still[i].pid == pid && r->still[i].tid == tid)
			return &r->still[i];
	return NULL;
}

/* Progress of one thread, heisen-dump's measure (internal/still.h): its
 * ring records (heads[] of its slot, if it has one) and what the kernel
 * says; *cpu as hs_thread_progress. */
static int thread_progress(pid_t pid, pid_t tid, const pid_t *tids, const uint64_t *heads, size_t nh,
			   uint64_t *cpu, uint64_t *out)
{
	uint64_t head = 0;
	for (size_t i = 0; i < nh; i++)
		if (tids[i] == tid)
			head = heads[i];
	return hs_still_thread_progress(pid, tid, head, cpu, out);
}

/*
 * Sample every thread of the processes sample_progress read from /proc in
 * this tick: a thread whose progress moved starts a new still clock
 * (unless its process is being rebased: the progress a snapshot made is not
 * progress); threads that are gone are forgotten; the threads of a process
 * not due are kept as last read.
 */
static void sample_threads(struct hr_run *r, uint64_t now)
{
	size_t k = 0;
	static pid_t tids[4096];
	static uint64_t heads[4096];
	for (size_t i = 0; i < r->nstill; i++) {
		const struct hr_stall *ps = stall_of(r, r->still[i].pid);
		r->still[i].alive = ps && !ps->sampled;
	}
	for (size_t i = 0; i < r->nstalls; i++) {
		char path[64];
		DIR *d;
		struct dirent *de;
		struct hr_stall *ps = &r->stalls[i];
		pid_t pid = ps->pid;
		if (!ps->sampled)
			continue;
		size_t nh = hr_seg_thread_heads(r->session_fd, pid, tids, heads, 4096);
		int remapped = 0, keep_clock = ps->rebase;
		int cpu_still = ps->cpu_seen && ps->cpu == ps->cpu_prev;
		ps->rebase = 0;
		snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
		if (!(d = opendir(path)))
			continue;
		while ((de = readdir(d))) {
			pid_t tid = (pid_t)strtol(de->d_name, NULL, 10);
			uint64_t prog;
			struct hr_still *e;
			if (tid <= 0)
				continue;
			if (!remapped && nh < 4096) {
				size_t j = 0;
				while (j < nh && tids[j] != tid)
					j++;
				if (j == nh) {
					/* a thread the mapping does not show: its slot may be newer than the mapping */
					hr_seg_remap(r->session_fd, pid);
					nh = hr_seg_thread_heads(r->session_fd, pid, tids, heads, 4096);
					remapped = 1;
				}
			}
			/* the process's CPU time did not move: neither did this thread's */
			struct hr_still *known = still_of(r, pid, tid);
			uint64_t cpu = known && cpu_still ? known->cpu : UINT64_MAX;
			if (thread_progress(pid, tid, tids, heads, nh, &cpu, &prog) < 0)
				continue;
			if (!(e = known)) {
				struct hr_still *v = realloc(r->still, (r->nstill + 1) * sizeof *v);
				if (!v)
					continue;
				r->still = v;
				e = &v[r->nstill++];
				*e = (struct hr_still){.pid = pid, .tid = tid, .progress = prog, .since_ms = now};
			} else {
				hs_still_note(&e->progress, &e->since_ms, prog, now, keep_clock);
			}
			e->cpu = cpu;
			e->alive = 1;
		}
		closedir(d);
	}
	for (size_t i = 0; i < r->nstill; i++)
		if (r->still[i].alive)
			r->still[k++] = r->still[i];
	r->nstill = k;
}

/* "PID/TID:SECONDS,..." of every thread still for the hang timeout, for
 * heisen-dump --still; "" when none. */
static void still_arg(struct hr_run *r, uint64_t now, char *buf, size_t len)
{
	size_t used = 0, left = 0;
	buf[0] = '\0';
	for (size_t i = 0; i < r->nstill; i++) {
		double sec = (double)(now - r->still[i].since_ms) / 1000.0;
		if (!hs_still_past(sec, r->hang_seconds))
			continue;
		if (used + 40 >= len) {
			left++;
			continue;
		}
		used += (size_t)snprintf(buf + used, len - used, "%s%d/%d:%.1f", used ? "," : "",
					 (int)r->still[i].pid, (int)r->still[i].tid, sec);
	}
	if (left && !r->still_overflow_said) {
		hr_warn(r, "%zu still threads beyond the first %zu bytes of --still were not judged", left, len);
		r->still_overflow_said = 1;
	}
}

/* Since when the longest-still thread of pid has been still (now if none). */
static uint64_t still_since(const struct hr_run *r, pid_t pid, uint64_t now)
{
	uint64_t since = now;
	for (size_t i = 0; i < r->nstill; i++)
		if (r->still[i].pid == pid && r->still[i].since_ms < since)
			since = r->still[i].since_ms;
	return since;
}

/* Keep the notes of reported stalls up to date (segment.c): the stall
 * outlives a --on-hang kill and heisen-run itself. */
static void note_stalls(struct hr_run *r, uint64_t now)
{
	for (size_t i = 0; i < r->nstalls; i++) {
		struct hr_stall *s = &r->stalls[i];
		if (!s->reported)
			continue;
		uint64_t since = still_since(r, s->pid, now);
		if (!hs_still_past((double)(now - since) / 1000.0, r->hang_seconds)) {
			s->reported = 0; /* it moved again: a later hang is new */
			continue;
		}
		hr_seg_note_stall(r->session_fd, s->pid, since * 1000000ull, (double)(now - since) / 1000.0);
	}
}

/* The pid of a --check-hang signature line ("kind pid tids locks"). */
static pid_t line_pid(const char *line)
{
	const char *sp = strchr(line, ' ');
	return sp ? (pid_t)strtol(sp + 1, NULL, 10) : 0;
}

/*
 * May heisen-run signal pid, which a segment of the session names?  Only
 * when the process is the one that wrote the segment (start time, the
 * file owner's uid, libheisen.so loaded: hs_snapshot_target_verify) — a
 * segment is shared memory, and a forged one must not make heisen-run,
 * often root, signal someone else's process.  what names the signal for
 * the warning; a process that is simply gone is not warned about.
 * Returns 1 when it may.
 */
static int target_verified(struct hr_run *r, pid_t pid, const char *what, int *installed)
{
	uint64_t ticks;
	uid_t owner;
	char why[200];
	int inst = 0;
	if (hr_seg_identity(r->session_fd, pid, &ticks, &owner, &inst) < 0)
		return 0;
	if (installed)
		*installed = inst;
	if (hs_snapshot_target_verify(pid, ticks, owner, why, sizeof why) == 0)
		return 1;
	if (strcmp(why, "gone") != 0)
		hr_warn(r, "not sending %s to pid %d, named by a segment of %s: %s", what, (int)pid, r->session, why);
	return 0;
}

/*
 * Ask every thread of the processes in want[0..n) for a snapshot, give
 * them HR_SNAPSHOT_WAIT_MS (still forwarding signals and reaping), then
 * take the progress they made by answering as the new baseline, without
 * restarting their stall clocks: a snapshot is not progress.
 */
static void snapshots_answered(struct hr_run *r, const pid_t *want, size_t n);

static void snapshot_pids(struct hr_run *r, const pid_t *want, size_t n)
{
	size_t asked = 0;
	for (size_t i = 0; i < n; i++) {
		struct hr_stall *e = stall_of(r, want[i]);
		int installed = 0;
		/* heisen's own signal number, never the one the segment names */
		if (e && e->snapsig && target_verified(r, want[i], "a snapshot request", &installed) && installed)
			asked += hs_snapshot_request_all(want[i], hs_snapshot_signal(), e->snapval);
	}
	if (!asked)
		return;
	/* the whole wait: hr_service returns at the first signal (a helper's SIGCHLD) */
	for (uint64_t now = hr_now_ms(), end = now + HR_SNAPSHOT_WAIT_MS; now < end; now = hr_now_ms())
		hr_service(r, (int)(end - now));
	snapshots_answered(r, want, n);
}

/* The processes in want answered snapshot requests (ours, or heisen-dump's
 * --snapshot-stuck): what they did to answer is the new baseline of their
 * progress, their still clocks kept. */
static void snapshots_answered(struct hr_run *r, const pid_t *want, size_t n)
{
	if (!n)
		return;
	for (size_t i = 0; i < n; i++) {
		struct hr_stall *e = stall_of(r, want[i]);
		if (e)
			e->rebase = 1;
	}
	uint64_t now = hr_now_ms();
	sample_progress(r, now);
	sample_threads(r, now);
}

/*
 * Whether this tick must ask heisen-dump --check-hang.  What it judges is
 * made of threads that stopped moving: a wait-for cycle or a lock wait
 * needs blocked threads, a hang threads still for the hang timeout.  So
 * the check runs when the set of threads still for at least one tick
 * (pid, tid, since when, and how many doublings of the hang timeout it has
 * been still: the --still list) changed since the last check, and at least every HR_CHECK_EVERY_MS all the same (a lock wait
 * that began before heisen-run first saw the thread).  A session of idle
 * processes then costs no heisen-dump run at all between those.
 */
static int check_needed(struct hr_run *r, uint64_t now, const char *still)
{
	static uint64_t last_sig, last_ms;
	static int checked;
	uint64_t h = 1469598103934665603ull;
	for (size_t i = 0; i < r->nstill; i++) {
		const struct hr_still *t = &r->still[i];
		if (now - t->since_ms < HR_TICK_MS)
			continue;
		/* its seconds grow every tick; what changes the key is crossing the hang
		   timeout and then each doubling of it (1x, 2x, 4x ...): a verdict taken
		   right at the threshold is taken again soon, and a thread still for an
		   hour costs a dozen checks, not one per tick */
		uint64_t n = r->hang_seconds > 0 ? (uint64_t)((double)(now - t->since_ms) / (r->hang_seconds * 1000.0)) : 0;
		uint64_t v[4] = {(uint64_t)t->pid, (uint64_t)t->tid, t->since_ms, n ? 64u - (uint64_t)__builtin_clzll(n) : 0};
		for (size_t k = 0; k < 4; k++)
			h = (h ^ v[k]) * 1099511628211ull;
	}
	h ^= strlen(still) == 0; /* a --still list cut short (said once) */
	if (checked && h == last_sig && now - last_ms < HR_CHECK_EVERY_MS)
		return 0;
	checked = 1;
	last_sig = h;
	last_ms = now;
	return 1;
}

static int remember(struct hr_run *r, const char *line)
{
	char **s = realloc(r->sigs, (r->nsigs + 1) * sizeof *s);
	char *copy = strdup(line);
	if (!s || !copy) {
		free(copy);
		if (s)
			r->sigs = s;
		return -1;
	}
	r->sigs = s;
	r->sigs[r->nsigs++] = copy;
	return 0;
}

/*
 * One watchdog tick.  `heisen-dump --check-hang S [--still LIST] SESSION`
 * is the judge: threads blocked on locks longer than S, wait-for cycles,
 * and the per-thread rule over the threads that made no progress for S
 * (sample_threads).  On a signature not reported before: print it, ask
 * the processes concerned for snapshots of every thread, then print the
 * full report (with the same --still).  A process whose stall was already
 * reported and still lasts is not reported again.  Returns 1 when a new
 * hang was reported, else 0 (heisen-dump failing is said once per distinct
 * message, and the run goes on).
 */
int hr_watch_tick(struct hr_run *r)
{
	if (hr_seg_watch(r->session_fd) == 0)
		return 0; /* nothing recorded yet (or a command without the shim) */
	uint64_t now = hr_now_ms();
	sample_progress(r, now);
	sample_threads(r, now);
	static char still[16384];
	still_arg(r, now, still, sizeof still);
	if (!check_needed(r, now, still))
		return 0;
	int out = new_out("heisen-check"), err = new_out("heisen-check-err");
	if (out < 0 || err < 0) {
		if (out >= 0)
			close(out);
		if (err >= 0)
			close(err);
		return 0;
	}
	char *argv[] = {r->dump, "--check-hang", (char *)r->hang_timeout, r->session, NULL, NULL, NULL};
	if (*still) {
		argv[3] = "--still";
		argv[4] = still;
		argv[5] = r->session;
	}
	int e, st = -1, fresh = 0;
	pid_t pid = hr_spawn(argv, r->dump_env, 0, out, err, &e);
	int timed_out = pid > 0 ? hr_wait_helper(r, pid, HR_CHECK_TIMEOUT_MS, &st) : 0;
	char *text = slurp(out), *etext = slurp(err);
	char msg[PATH_MAX + 512] = "";
	char *lines[256];
	size_t nlines = 0;
	int hung = 0;
	if (pid < 0 || e)
		snprintf(msg, sizeof msg, "cannot run %s: %s", r->dump, strerror(e ? e : errno));
	else if (timed_out < 0)
		snprintf(msg, sizeof msg, "%s --check-hang took longer than %d s: killed it", r->dump,
			 HR_CHECK_TIMEOUT_MS / 1000);
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 3 && text) {
		hung = 1;
		for (char *line = strtok(text, "\n"); line && nlines < 256; line = strtok(NULL, "\n"))
			if (*line)
				lines[nlines++] = line;
	} else if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0)) {
		char *nl = etext ? strchr(etext, '\n') : NULL;
		if (nl)
			*nl = '\0';
		snprintf(msg, sizeof msg, "%s --check-hang failed (%s %d): %.300s", r->dump,
			 WIFEXITED(st) ? "exit" : "signal", WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st),
			 etext && *etext ? etext : "no message");
	}
	if (*msg && (!r->last_check_error || strcmp(msg, r->last_check_error) != 0)) {
		hr_warn(r, "%s", msg);
		free(r->last_check_error);
		r->last_check_error = strdup(msg);
	}

	/* What is new; a process whose hang was reported and lasts is one hang. */
	int new_line[256] = {0};
	pid_t want[256], stuck[256];
	size_t nwant = 0, nstuck = 0;
	for (size_t i = 0; i < nlines; i++) {
		struct hr_stall *s = stall_of(r, line_pid(lines[i]));
		if (seen(r, lines[i]))
			continue;
		if (s && s->reported) {
			remember(r, lines[i]); /* the same hang, seen differently */
			continue;
		}
		new_line[i] = 1;
		fresh = 1;
	}
	if (hung && nlines == 0 && !r->hang_seen)
		fresh = 1; /* exit 3 without a signature: report once all the same */
	if (fresh) {
		fprintf(stderr, HR_NAME ": hang detected (no progress for %s s):\n", r->hang_timeout);
		for (size_t i = 0; i < nlines; i++)
			if (new_line[i]) {
				size_t ll = strlen(lines[i]);
				int is_stuck = ll > 6 && strcmp(lines[i] + ll - 6, " stuck") == 0;
				fprintf(stderr, "  %s\n", lines[i]);
				if (is_stuck)
					fprintf(stderr, "  stalled %d: stuck for %.1f s (per-thread rule)\n",
						(int)line_pid(lines[i]),
						(double)(now - still_since(r, line_pid(lines[i]), now)) / 1000.0);
				/* a stuck thread is judged by the report's heisen-dump before its snapshot
				   (print_report), the others' stacks are asked for here */
				if (is_stuck && *still && nstuck < sizeof stuck / sizeof stuck[0])
					stuck[nstuck++] = line_pid(lines[i]);
				else if (nwant < sizeof want / sizeof want[0])
					want[nwant++] = line_pid(lines[i]);
			}
		snapshot_pids(r, want, nwant);
		for (size_t i = 0; i < nlines; i++) {
			struct hr_stall *s = stall_of(r, line_pid(lines[i]));
			if (!seen(r, lines[i]))
				remember(r, lines[i]);
			if (s)
				s->reported = 1;
		}
		r->hang_seen = 1;
		note_stalls(r, now);
		print_report(r, still, nstuck > 0);
		snapshots_answered(r, stuck, nstuck);
		if (!r->on_hang_kill)
			fprintf(stderr, HR_NAME ": still running; session: %s\n", r->session);
	} else {
		note_stalls(r, now);
	}
	free(text);
	free(etext);
	close(out);
	close(err);
	return fresh;
}

/* Copy memfd fd into file name of directory dfd (replaced). 0 or -1. */
static int save_copy(int fd, int dfd, const char *name)
{
	int out = openat(dfd, name, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0644);
	char buf[8192];
	off_t off = 0;
	ssize_t k;
	int rc = 0;
	if (out < 0)
		return -1;
	while ((k = pread(fd, buf, sizeof buf, off)) > 0) {
		for (ssize_t w = 0; w < k;) {
			ssize_t m = write(out, buf + w, (size_t)(k - w));
			if (m < 0 && errno == EINTR)
				continue;
			if (m <= 0) {
				rc = -1;
				break;
			}
			w += m;
		}
		off += k;
	}
	if (close(out) != 0)
		rc = -1;
	return rc;
}

/*
 * --report-dir: write the final report there as <session name>.report.txt
 * (text_fd, heisen-dump's text report as printed) and .report.json (a
 * second heisen-dump run, --json), so that the report outlives a session
 * on the container's /dev/shm.  The directory is made (0755) if missing.
 * A failure is said, never fatal.
 */
static void save_reports(struct hr_run *r, int text_fd, const char *const opts[])
{
	const char *base = strrchr(r->session, '/');
	char name[PATH_MAX + 16];
	base = base && base[1] ? base + 1 : r->session;
	if (mkdir(r->report_dir, 0755) != 0 && errno != EEXIST) {
		hr_warn(r, "--report-dir %s: %s", r->report_dir, strerror(errno));
		return;
	}
	int dfd = open(r->report_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0) {
		hr_warn(r, "--report-dir %s: %s", r->report_dir, strerror(errno));
		return;
	}
	snprintf(name, sizeof name, "%s.report.txt", base);
	if (save_copy(text_fd, dfd, name) != 0)
		hr_warn(r, "--report-dir: cannot write %s/%s: %s", r->report_dir, name, strerror(errno));
	int jfd = new_out("heisen-report-json");
	if (jfd >= 0) {
		const char *jopts[6] = {"--json"};
		for (size_t i = 0; opts[i] && i < 4; i++)
			jopts[i + 1] = opts[i];
		int ds = run_dump(r, jopts, jfd, HR_REPORT_TIMEOUT_MS);
		snprintf(name, sizeof name, "%s.report.json", base);
		if (ds < 0 || save_copy(jfd, dfd, name) != 0)
			hr_warn(r, "--report-dir: cannot write %s/%s", r->report_dir, name);
		close(jfd);
	}
	close(dfd);
}

static const char *sig_name(int sig)
{
	const char *s = sigabbrev_np(sig);
	return s ? s : "?";
}

/* The command ended by the stop signal heisen-run forwarded to it (docker
 * stop's SIGTERM, a Ctrl-C): the end that was asked for, not a crash. */
int hr_stopped(const struct hr_run *r)
{
	return r->stop_signal && WIFSIGNALED(r->main_status) && WTERMSIG(r->main_status) == r->stop_signal;
}

/*
 * The end-of-run report.  abnormal says the command was killed by a signal
 * (other than the stop signal heisen-run forwarded, hr_stopped) or a hang
 * was seen.  When the session holds segments: a run that was not
 * abnormal, with no thread still past the hang timeout and no --report-dir,
 * whose segments all pass the quick verdict (internal/seg_verdict.h:
 * headers, thread and fd slots; milliseconds for hundreds of processes) is
 * clean without more.  Otherwise heisen-dump reads the session; if the run
 * was abnormal or heisen-dump found something (exit 1) or failed (exit 2),
 * prints its report between banners and the session path.  Otherwise
 * prints nothing.  Returns 1 when the run was clean, 0 otherwise.
 */
int hr_final_report(struct hr_run *r, int abnormal)
{
	int st = r->main_status;
	if (WIFSIGNALED(st) && (abnormal || !hr_stopped(r)))
		fprintf(stderr, HR_NAME ": %s was killed by signal %d (SIG%s)%s\n", r->cmd[0], WTERMSIG(st),
			sig_name(WTERMSIG(st)), WCOREDUMP(st) ? ", core dumped" : "");
	if (hr_seg_count(r->session_fd) == 0) {
		if (abnormal)
			fprintf(stderr, HR_NAME ": nothing was recorded in %s (a static binary, or LD_PRELOAD "
				"removed on the way?)\n", r->session);
		return !abnormal;
	}
	const char *opts[5] = {NULL};
	static char still[16384];
	still[0] = '\0';
	if (r->hang_seconds > 0) {
		/* the threads as last measured: heisen-dump need not watch them again */
		still_arg(r, hr_now_ms(), still, sizeof still);
		opts[0] = "--hang-timeout";
		opts[1] = r->hang_timeout;
		opts[2] = "--still";
		opts[3] = still;
	}
	/* a clean end needs no full reading: every segment's header (and its
	   thread and fd slots) says there is nothing to report (seg_verdict.h) */
	size_t nsegs;
	if (!abnormal && !r->report_dir && !still[0] &&
	    hs_session_quick(r->session_fd, &nsegs, NULL, 0) == HS_QUICK_CLEAN && nsegs > 0)
		return 1;
	int fd = new_out("heisen-report");
	if (fd < 0)
		return 0;
	int ds = run_dump(r, opts, fd, HR_REPORT_TIMEOUT_MS);
	int rc = ds >= 0 && WIFEXITED(ds) ? WEXITSTATUS(ds) : -1;
	int clean = !abnormal && rc == 0;
	if (r->report_dir)
		save_reports(r, fd, opts);
	if (!clean) {
		fprintf(stderr, "==== heisen report: %s ====\n", r->session);
		copy_to_stderr(fd);
		if (rc < 0 || rc > 2)
			fprintf(stderr, "(heisen-dump did not finish normally: %s %d)\n",
				ds >= 0 && WIFSIGNALED(ds) ? "signal" : "status",
				ds >= 0 && WIFSIGNALED(ds) ? WTERMSIG(ds) : rc);
		fprintf(stderr, BANNER_END "\n");
		fprintf(stderr, HR_NAME ": session: %s\n", r->session);
	}
	close(fd);
	return clean;
}

/* Is pid heisen-run itself or one of its ancestors?  (A session shared
 * through an inherited HEISEN_DIR may hold our parents' segments.) */
static int is_self_or_ancestor(pid_t pid)
{
	for (pid_t p = getpid(); p > 0;) {
		if (p == pid)
			return 1;
		if (p == 1)
			break;
		p = hr_proc_ppid(p);
	}
	return pid == 1 && getpid() != 1; /* never the real init */
}

#define KILL_MAX 8192

/*
 * --on-hang kill: SIGKILL the whole tree — the command, every live process
 * with a segment in the session (checked against its start time), and
 * every descendant of those found through /proc/<pid>/task/<tid>/children;
 * as PID 1 also kill(-1).  Repeats while new processes turn up (a fork in
 * flight), reaps what it can for up to HR_KILL_REAP_MS, and marks the
 * segments of killed processes it cannot reap KILLED(SIGKILL).  Never kills
 * heisen-run or its ancestors.
 */
void hr_kill_tree(struct hr_run *r)
{
	static pid_t pids[KILL_MAX];
	size_t n = 0;
	for (int round = 0; round < 20; round++) {
		size_t before = n, start = n;
		pid_t cand[1024];
		size_t nc = 0;
		if (!r->main_done)
			cand[nc++] = r->main_pid;
		size_t first_seg = nc;
		nc += hr_seg_live_pids(r->session_fd, cand + nc, 1024 - nc);
		for (size_t i = 0; i < nc && n < KILL_MAX; i++) {
			size_t j = 0;
			while (j < n && pids[j] != cand[i])
				j++;
			/* a pid only a segment names is killed only once verified as the segment's process */
			if (j == n && !is_self_or_ancestor(cand[i]) &&
			    (i < first_seg || target_verified(r, cand[i], "SIGKILL", NULL)))
				pids[n++] = cand[i];
		}
		/* breadth-first over children; pids[] grows as we go */
		for (size_t i = 0; i < n && n < KILL_MAX; i++) {
			pid_t kids[512];
			size_t nk = hr_proc_children(pids[i], kids, 512);
			for (size_t k = 0; k < nk && n < KILL_MAX; k++) {
				size_t j = 0;
				while (j < n && pids[j] != kids[k])
					j++;
				if (j == n && !is_self_or_ancestor(kids[k]))
					pids[n++] = kids[k];
			}
		}
		if (r->pid1)
			kill(-1, SIGKILL); /* everything in our pid namespace but us */
		for (size_t i = round == 0 ? 0 : start; i < n; i++)
			if (kill(pids[i], SIGKILL) < 0 && errno != ESRCH)
				hr_warn(r, "kill %d: %s", (int)pids[i], strerror(errno));
		if (round > 0 && n == before)
			break;
		hr_service(r, 20);
	}
	hr_reap_for(r, HR_KILL_REAP_MS);
	for (size_t i = 0; i < n; i++)
		hr_seg_mark_killed_if_gone(r->session_fd, pids[i], SIGKILL);
	fprintf(stderr, HR_NAME ": --on-hang kill: killed %zu process%s; session: %s\n", n,
		n == 1 ? "" : "es", r->session);
}
