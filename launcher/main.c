/* SPDX-License-Identifier: MIT */
/*
 * launcher/main.c — heisen-run: options and the order of a run.
 *
 *   heisen-run [--dir DIR] [--hang-timeout S] [--on-hang report|kill]
 *              [--python-malloc] [--quiet] [--rm] -- CMD ARGS...
 *
 * A run: find libheisen.so and heisen-dump (paths.c); take over signals and
 * become a subreaper (reaper.c); make the session (session.c); start CMD
 * with LD_PRELOAD and HEISEN_DIR; then loop — forward signals, reap every
 * child, and every HR_TICK_MS ask heisen-dump whether anything hangs
 * (watchdog.c) — until CMD itself ends.  It is the Docker ENTRYPOINT, often
 * PID 1.  Design: docs/design.md; contracts: docs/interfaces.md.
 *
 * Ending a run.  The run ends when CMD ends; other descendants may still
 * live.  Not PID 1: heisen-run keeps reaping for up to HR_LINGER_MS while
 * children remain (processes exiting along with CMD, e.g. from the same
 * Ctrl-C, get their segments marked), then leaves the rest alone — they are
 * reparented as they would have been without heisen-run.  PID 1: everything
 * left dies with us anyway (the kernel SIGKILLs a namespace whose init
 * exits), so heisen-run sends SIGTERM to all of it, reaps for up to
 * HR_PID1_GRACE_MS, then SIGKILLs the rest and reaps them, so that the
 * report sees the final state of every process.  A second SIGINT/SIGTERM
 * cuts either wait short.  Then heisen-dump's report (watchdog.c).
 *
 * Exit status: CMD's exit code, or 128 + signal when it was killed; 127 /
 * 126 when it could not be executed (not found / not executable), as a shell
 * does; 128 + 9 after --on-hang kill; 125 for heisen-run's own errors.
 */
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "launcher.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: " HR_NAME " [options] -- CMD [ARGS...]\n"
		"Run CMD under libheisen.so, watch it for hangs, report when it ends badly.\n"
		"\n"
		"  --dir DIR             session directory (created 0700 if missing); default:\n"
		"                        $HEISEN_DIR, else /dev/shm/heisen-$UID/<cmd>-<pid>-<time>\n"
		"  --hang-timeout S      a thread blocked S seconds is hung (default 30; 0 = no watchdog)\n"
		"  --on-hang report|kill on a hang, print the report and keep watching (report,\n"
		"                        default) or also SIGKILL the process tree and exit 137 (kill)\n"
		"  --python-malloc       set PYTHONMALLOC=malloc for CMD: CPython's small objects then\n"
		"                        come from malloc, where the heap checker sees them\n"
		"  --quiet, -q           no warnings, no session line after a clean run\n"
		"  --rm                  remove the session's segments after a clean run\n"
		"  --report-dir DIR      also write the final report there, as text and JSON\n"
		"                        (<session name>.report.txt, .report.json), e.g. a volume\n"
		"                        that outlives the container's /dev/shm\n"
		"  --help, -h            this text\n"
		"\n"
		"Exit status: CMD's, or 128+signal when it was killed; 126/127 when it could not be\n"
		"run; 125 on an error of " HR_NAME " itself.\n"
		"Environment: HEISEN_LIB and HEISEN_DUMP override where libheisen.so and heisen-dump are.\n");
	hr_repro_usage(f);
}

/* "heisen-run: <message>" on stderr, always.  For errors that end the run. */
void hr_err(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	fputs(HR_NAME ": ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* "heisen-run: warning: <message>" on stderr, unless --quiet.  The run goes on. */
void hr_warn(const struct hr_run *r, const char *fmt, ...)
{
	if (r && r->quiet)
		return;
	va_list ap;
	va_start(ap, fmt);
	fputs(HR_NAME ": warning: ", stderr);
	vfprintf(stderr, fmt, ap);
	fputc('\n', stderr);
	va_end(ap);
}

/* Parse argv into r; returns only when a command was given (exits 125 on a
 * usage error, 0 after --help). */
static void parse_options(struct hr_run *r, int argc, char **argv)
{
	enum { OPT_DIR = 256, OPT_HANG, OPT_ON_HANG, OPT_RM, OPT_PYMALLOC, OPT_REPORT_DIR };
	static const struct option opts[] = {
		{"dir", required_argument, NULL, OPT_DIR},
		{"hang-timeout", required_argument, NULL, OPT_HANG},
		{"on-hang", required_argument, NULL, OPT_ON_HANG},
		{"quiet", no_argument, NULL, 'q'},
		{"rm", no_argument, NULL, OPT_RM},
		{"python-malloc", no_argument, NULL, OPT_PYMALLOC},
		{"report-dir", required_argument, NULL, OPT_REPORT_DIR},
		{"help", no_argument, NULL, 'h'},
		HR_REPRO_OPTIONS,
		{NULL, 0, NULL, 0},
	};
	int c;
	r->hang_timeout = "30";
	r->hang_seconds = 30;
	/* '+': stop at the first non-option, so CMD's own options stay CMD's. */
	while ((c = getopt_long(argc, argv, "+qh", opts, NULL)) != -1) {
		switch (c) {
		case OPT_DIR:
			if (!*optarg) {
				hr_err("--dir needs a directory");
				exit(HR_EXIT_SELF);
			}
			r->dir_opt = optarg;
			break;
		case OPT_HANG: {
			char *end;
			errno = 0;
			double v = strtod(optarg, &end);
			if (errno || end == optarg || *end || !isfinite(v) || v < 0) {
				hr_err("--hang-timeout: not a number of seconds >= 0: %s", optarg);
				exit(HR_EXIT_SELF);
			}
			r->hang_timeout = optarg;
			r->hang_seconds = v;
			break;
		}
		case OPT_ON_HANG:
			if (strcmp(optarg, "report") == 0)
				r->on_hang_kill = 0;
			else if (strcmp(optarg, "kill") == 0)
				r->on_hang_kill = 1;
			else {
				hr_err("--on-hang: expected report or kill, not %s", optarg);
				exit(HR_EXIT_SELF);
			}
			break;
		case 'q':
			r->quiet = 1;
			break;
		case OPT_RM:
			r->rm_clean = 1;
			break;
		case OPT_PYMALLOC:
			r->python_malloc = 1;
			break;
		case OPT_REPORT_DIR:
			if (!*optarg) {
				hr_err("--report-dir needs a directory");
				exit(HR_EXIT_SELF);
			}
			r->report_dir = optarg;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			if (c >= HR_OPT_REPEAT && hr_repro_option(c, optarg, argv, optind) == 0)
				break;
			usage(stderr);
			exit(HR_EXIT_SELF);
		}
	}
	if (optind >= argc) {
		hr_err("no command given");
		usage(stderr);
		exit(HR_EXIT_SELF);
	}
	r->cmd = argv + optind;
}

/* Our exit status for the command's wait status: its code, or 128 + signal. */
static int exit_code_of(int st)
{
	if (WIFEXITED(st))
		return WEXITSTATUS(st);
	if (WIFSIGNALED(st))
		return 128 + WTERMSIG(st);
	return HR_EXIT_SELF;
}

/* After CMD ended: see "Ending a run" at the top of this file. */
static void finish_descendants(struct hr_run *r)
{
	if (!r->pid1) {
		hr_reap_for(r, HR_LINGER_MS);
		return;
	}
	hr_reap_for(r, 0);
	if (r->no_children)
		return;
	kill(-1, SIGTERM);
	hr_reap_for(r, HR_PID1_GRACE_MS);
	if (r->no_children)
		return;
	kill(-1, SIGKILL);
	r->stop_requested = 0;
	hr_reap_for(r, HR_KILL_REAP_MS);
}

int main(int argc, char **argv)
{
	static struct hr_run run = {.session_fd = -1};
	struct hr_run *r = &run;

	parse_options(r, argc, argv);
	r->pid1 = getpid() == 1;
	if (hr_repro_driving()) /* --repeat, --until-fail, --parallel, --ramp: launcher/repeat.c */
		return hr_find_paths(r) < 0 || hr_signals_init() < 0 ? HR_EXIT_SELF
								  : hr_repro_main(r, argv, (int)(r->cmd - argv));
	if (hr_find_paths(r) < 0 || hr_signals_init() < 0 || hr_session_open(r) < 0 ||
	    hr_shape_env(r) < 0 || hr_build_envs(r) < 0)
		return HR_EXIT_SELF;

	int e;
	r->main_pid = hr_spawn(r->cmd, r->child_env, 1, -1, -1, &e);
	hr_cgroup_spawned(); /* --mem-limit, --cpu-quota: the command stays in its cgroup, we leave */
	if (r->main_pid < 0) {
		hr_session_warnings(r);
		hr_session_remove_if_clean(r, 1);
		return HR_EXIT_SELF;
	}
	if (e) {
		hr_err("%s: %s", r->cmd[0], strerror(e));
		while (!r->main_done)
			hr_service(r, 100);
		hr_session_warnings(r);
		hr_session_remove_if_clean(r, 1);
		return exit_code_of(r->main_status);
	}

	if (r->not_recording)
		r->hang_seconds = 0; /* nothing to watch: the command runs without heisen */
	uint64_t next_tick = hr_now_ms() + HR_TICK_MS;
	while (!r->main_done) {
		uint64_t now = hr_now_ms();
		if (r->hang_seconds > 0 && now >= next_tick) {
			if (hr_watch_tick(r) && r->on_hang_kill) {
				hr_kill_tree(r);
				return 128 + SIGKILL;
			}
			next_tick = hr_now_ms() + HR_TICK_MS;
			continue;
		}
		hr_service(r, r->hang_seconds > 0 ? (int)(next_tick - now) : -1);
	}

	finish_descendants(r);
	if (r->not_recording) {
		/* said at the start, said again where the end of the output is read */
		fprintf(stderr, HR_NAME ": NOT RECORDED: %s ran without heisen (no usable session directory)\n",
			r->cmd[0]);
		return exit_code_of(r->main_status);
	}
	int abnormal = (WIFSIGNALED(r->main_status) && !hr_stopped(r)) || r->hang_seen ||
		       hr_shape_abnormal(r->main_status); /* an error exit after injected faults */
	int clean = hr_final_report(r, abnormal);
	hr_session_warnings(r);
	int recorded = hr_seg_count(r->session_fd) > 0;
	if (clean && (r->rm_clean || r->session_auto))
		hr_session_remove_if_clean(r, 0);
	else if (!recorded)
		hr_session_remove_if_clean(r, 1);
	if (clean && recorded && !r->quiet) {
		if (hr_stopped(r)) /* one line: the stop and the verdict */
			fprintf(stderr, HR_NAME ": %s stopped by SIG%s (forwarded); ", r->cmd[0],
				sigabbrev_np(r->stop_signal));
		if (r->rm_clean)
			fprintf(stderr, "%sno findings; session removed (--rm)\n", hr_stopped(r) ? "" : HR_NAME ": ");
		else if (r->session_auto)
			fprintf(stderr, "%sno findings; session removed (name one with --dir to keep it)\n",
				hr_stopped(r) ? "" : HR_NAME ": ");
		else
			fprintf(stderr, "%sno findings; session: %s\n", hr_stopped(r) ? "" : HR_NAME ": ", r->session);
	}
	return exit_code_of(r->main_status);
}
