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
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

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

/* Print the full report of heisen-dump between banners.  Returns heisen-dump's
 * exit code (0 none, 1 findings, 2 errors) or -1 if it did not run. */
static int print_report(struct hr_run *r)
{
	int fd = new_out("heisen-report");
	if (fd < 0)
		return -1;
	const char *opts[3] = {NULL};
	if (r->hang_seconds > 0) {
		opts[0] = "--hang-timeout";
		opts[1] = r->hang_timeout;
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

/*
 * One watchdog tick: run `heisen-dump --check-hang S SESSION`.  On
 * signatures not reported before, print them and the full report and
 * remember them.  Returns 1 when a new hang was seen, else 0 (no hang, only
 * known ones, or heisen-dump failed: that is said once per distinct
 * message, and the run goes on).
 */
int hr_watch_tick(struct hr_run *r)
{
	if (hr_seg_count(r->session_fd) == 0)
		return 0; /* nothing recorded yet (or a command without the shim) */
	int out = new_out("heisen-check"), err = new_out("heisen-check-err");
	if (out < 0 || err < 0) {
		if (out >= 0)
			close(out);
		if (err >= 0)
			close(err);
		return 0;
	}
	char *argv[] = {r->dump, "--check-hang", (char *)r->hang_timeout, r->session, NULL};
	int e, st = -1, fresh = 0;
	pid_t pid = hr_spawn(argv, r->dump_env, 0, out, err, &e);
	int timed_out = pid > 0 ? hr_wait_helper(r, pid, HR_CHECK_TIMEOUT_MS, &st) : 0;
	char *text = slurp(out), *etext = slurp(err);
	char msg[PATH_MAX + 512] = "";
	if (pid < 0 || e)
		snprintf(msg, sizeof msg, "cannot run %s: %s", r->dump, strerror(e ? e : errno));
	else if (timed_out < 0)
		snprintf(msg, sizeof msg, "%s --check-hang took longer than %d s: killed it", r->dump,
			 HR_CHECK_TIMEOUT_MS / 1000);
	else if (WIFEXITED(st) && WEXITSTATUS(st) == 3 && text) {
		size_t nlines = 0;
		for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
			nlines++;
			if (*line && !seen(r, line)) {
				char **s = realloc(r->sigs, (r->nsigs + 1) * sizeof *s);
				char *copy = strdup(line);
				if (!s || !copy) {
					free(copy);
					if (s)
						r->sigs = s;
					break;
				}
				r->sigs = s;
				r->sigs[r->nsigs++] = copy;
				if (!fresh)
					fprintf(stderr, HR_NAME ": hang detected (no progress for %s s):\n",
						r->hang_timeout);
				fresh = 1;
				fprintf(stderr, "  %s\n", line);
			}
		}
		if (nlines == 0 && !r->hang_seen) {
			/* exit 3 without a signature: report once all the same */
			fprintf(stderr, HR_NAME ": hang detected (no progress for %s s)\n", r->hang_timeout);
			fresh = 1;
		}
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
	free(text);
	free(etext);
	close(out);
	close(err);
	if (fresh) {
		r->hang_seen = 1;
		print_report(r);
		if (!r->on_hang_kill)
			fprintf(stderr, HR_NAME ": still running; session: %s\n", r->session);
	}
	return fresh;
}

static const char *sig_name(int sig)
{
	const char *s = sigabbrev_np(sig);
	return s ? s : "?";
}

/*
 * The end-of-run report.  abnormal says the command was killed by a signal
 * or a hang was seen.  Runs heisen-dump when the session holds segments; if
 * the run was abnormal or heisen-dump found something (exit 1) or failed
 * (exit 2), prints its report between banners and the session path.
 * Otherwise prints nothing.  Returns 1 when the run was clean, 0 otherwise.
 */
int hr_final_report(struct hr_run *r, int abnormal)
{
	int st = r->main_status;
	if (WIFSIGNALED(st))
		fprintf(stderr, HR_NAME ": %s was killed by signal %d (SIG%s)%s\n", r->cmd[0], WTERMSIG(st),
			sig_name(WTERMSIG(st)), WCOREDUMP(st) ? ", core dumped" : "");
	if (hr_seg_count(r->session_fd) == 0) {
		if (abnormal)
			fprintf(stderr, HR_NAME ": nothing was recorded in %s (a static binary, or LD_PRELOAD "
				"removed on the way?)\n", r->session);
		return !abnormal;
	}
	int fd = new_out("heisen-report");
	if (fd < 0)
		return 0;
	const char *opts[3] = {NULL};
	if (r->hang_seconds > 0) {
		opts[0] = "--hang-timeout";
		opts[1] = r->hang_timeout;
	}
	int ds = run_dump(r, opts, fd, HR_REPORT_TIMEOUT_MS);
	int rc = ds >= 0 && WIFEXITED(ds) ? WEXITSTATUS(ds) : -1;
	int clean = !abnormal && rc == 0;
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
		nc += hr_seg_live_pids(r->session_fd, cand + nc, 1024 - nc);
		for (size_t i = 0; i < nc && n < KILL_MAX; i++) {
			size_t j = 0;
			while (j < n && pids[j] != cand[i])
				j++;
			if (j == n && !is_self_or_ancestor(cand[i]))
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
