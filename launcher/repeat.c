/* SPDX-License-Identifier: MIT */
/*
 * launcher/repeat.c — reproducing a flaky failure: --repeat, --until-fail,
 * --parallel, --ramp.
 *
 * A flaky crash is reproduced by running the program many times, often many
 * copies at once, until one run fails — what a user otherwise does by hand
 * with a shell loop and `&` (seed 000: the crash appeared only with ten
 * copies of the test harness at once).  heisen-run does it as a driver: each
 * run is a child heisen-run of its own (the same binary, the same options
 * less these, --dir <parent>/run-NNNN, --seed S and, unless the user chose,
 * --on-hang kill), so every detector and report of a single run works
 * unchanged in each; its stdout and stderr (the program's and the report)
 * go to <parent>/run-NNNN.log.  A run is abnormal when its heisen-run exits
 * non-zero (the program's exit code, 128 + a signal, 137 after a hang) or
 * `heisen-dump --json` of its session lists any finding; the findings give
 * each failure a signature (kind + the top frames by name, never an
 * address), so that one bug met in thirty runs is one line of the summary.
 * Clean runs' sessions and logs are deleted unless --keep-sessions.
 *
 * Seeds.  Run k (from 0) gets seed base + k; the seed reaches the program
 * as HEISEN_SEED and drives every seeded decision of the shim (fault
 * injection, chaos schedules: shim/faults.c, shim/chaos.c), so the replay
 * command printed for a failing run — the same options with --seed S and
 * none of the driver's — makes the same decisions again.  What seeds do
 * not fix (the kernel's scheduling, other processes) is why a replay may
 * need the same pressure again: the summary says so for a parallel run.
 *
 * Ordering.  Runs start in index order, at most `parallel` at a time
 * (--ramp: levels A..B, each level a round of that many copies at once).
 * With --until-fail, the first abnormal run to end stops the driver: no new
 * run starts, the runs still going get SIGTERM (SIGKILL 5 s later), and
 * they are left out of the counts (their sessions are removed: a run cut
 * short proves nothing).  SIGINT/SIGTERM to the driver does the same.
 *
 * Design: docs/design.md "Reproducing on demand"; contracts: docs/interfaces.md "heisen-run
 * --repeat".  Anchors: rr's chaos mode's "run until it fails" loop, and
 * pytest-flakefinder / stress(1)-style reruns.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

extern char **environ;

#define STOP_GRACE_MS 5000   /* runs cut short: SIGTERM, then SIGKILL this much later */
#define SIG_FRAMES 3         /* frames in a finding's signature */
#define MAX_PARALLEL 1024
#define RUN_DIR_MAX (PATH_MAX + 32) /* <parent>/run-NNNN */

/* The options of this file and of shaping.c, as parsed (main.c's getopt). */
static struct {
	long repeat;             /* --repeat N; 0 = not given */
	int until_fail;          /* --until-fail */
	int parallel;            /* --parallel K; 0 = not given */
	int ramp_lo, ramp_hi;    /* --ramp A..B; 0 = not given */
	int keep_sessions;       /* --keep-sessions */
	int on_hang_given;       /* the user chose --on-hang */
	char *drop;              /* argv indices that a child run must not get */
	int argc;
} o;

/* One distinct finding signature and how often it was met. */
struct sig {
	char *text;
	long runs;
	long first_run;
};

/* The outcome of one run. */
struct outcome {
	int status;              /* the child heisen-run's exit code, or 128+signal */
	int nfindings;
	int hang;                /* a deadlock/hang finding, or exit 137 */
	char kind[64];           /* "signal SIGSEGV", "exit 3", "hang", "finding", "" = clean */
	char fault[1024];        /* the last failure heisen injected, as a signature; "" = none */
};

/* A run in flight. */
struct slot {
	pid_t pid;
	long index;
	uint64_t seed;
	int level;
};

static struct {
	struct hr_run *r;
	char **argv;
	int cmd_at;               /* argv index of the command */
	int opt_end;              /* end of heisen-run's options (a "--" before CMD excluded) */
	char self[PATH_MAX];
	long runs, failures, cut;
	struct { char kind[64]; long n; } kinds[32];
	size_t nkinds;
	struct sig *sigs;
	size_t nsigs;
	long first_fail;          /* run index, -1 = none */
	uint64_t first_seed;
	int first_status, first_level;
	char first_kind[64];
	char first_fault[1024];
	char first_dir[RUN_DIR_MAX];
	uint64_t t0;
	int progress;             /* stderr is a terminal and not --quiet */
	int stopping;
	int dump_failed_said;
} d;

/* ---- options --------------------------------------------------------------- */

/* o.drop sized for argv, made once. */
static void ensure_drop(char **argv)
{
	if (!o.drop) {
		while (argv[o.argc])
			o.argc++;
		o.drop = calloc((size_t)o.argc + 1, 1);
		if (!o.drop) {
			hr_err("out of memory");
			exit(HR_EXIT_SELF);
		}
	}
}

/* Mark the words of the option getopt has just read (it stopped at optind). */
static void drop_args(char **argv, int optind, const char *arg)
{
	ensure_drop(argv);
	/* "--opt value" took two words, "--opt=value" and "--flag" one */
	int first = optind - 1;
	if (arg && arg == argv[optind - 1] && optind >= 2)
		first = optind - 2;
	for (int i = first; i < optind; i++)
		o.drop[i] = 1;
}

static long number(const char *opt, const char *s, long lo, long hi)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi) {
		hr_err("%s: not a whole number in %ld..%ld: %s", opt, lo, hi, s);
		exit(HR_EXIT_SELF);
	}
	return v;
}

/*
 * One option of this file (codes HR_OPT_REPEAT..): remember it and mark its
 * words in argv as the driver's own.  Exits 125 on a bad value.  Returns 0
 * when it was one of ours, -1 when c is not.
 */
int hr_repro_option(int c, const char *arg, char **argv, int optind)
{
	switch (c) {
	case HR_OPT_REPEAT:
		o.repeat = number("--repeat", arg, 1, 1000000000L);
		break;
	case HR_OPT_UNTIL_FAIL:
		o.until_fail = 1;
		break;
	case HR_OPT_PARALLEL:
		o.parallel = (int)number("--parallel", arg, 1, MAX_PARALLEL);
		break;
	case HR_OPT_RAMP: {
		const char *dots = strstr(arg, "..");
		char lo[32];
		if (!dots || (size_t)(dots - arg) >= sizeof lo) {
			hr_err("--ramp: expected A..B (copies at once, from A up to B), not %s", arg);
			exit(HR_EXIT_SELF);
		}
		memcpy(lo, arg, (size_t)(dots - arg));
		lo[dots - arg] = '\0';
		o.ramp_lo = (int)number("--ramp", lo, 1, MAX_PARALLEL);
		o.ramp_hi = (int)number("--ramp", dots + 2, o.ramp_lo, MAX_PARALLEL);
		break;
	}
	case HR_OPT_KEEP:
		o.keep_sessions = 1;
		break;
	default:
		return hr_shape_option(c, arg, argv, optind);
	}
	drop_args(argv, optind, arg);
	return 0;
}

/* Mark the words of an option that child runs get from the driver instead
 * (--dir, --seed, --chaos): shaping.c and main.c's --dir. */
void hr_repro_drop(char **argv, int optind, const char *arg)
{
	drop_args(argv, optind, arg);
}

/* Was any option given that makes heisen-run a driver of several runs? */
int hr_repro_driving(void)
{
	return o.repeat || o.until_fail || o.parallel || o.ramp_lo;
}

void hr_repro_usage(FILE *f)
{
	fprintf(f,
		"\n"
		"Reproducing a flaky failure (each run a session of its own under one directory):\n"
		"  --repeat N            run CMD N times (with --parallel K: N runs, K at a time)\n"
		"  --until-fail          stop at the first abnormal run: a signal, a non-zero exit,\n"
		"                        a hang or any finding (without --repeat: no limit)\n"
		"  --parallel K          K runs at once\n"
		"  --ramp A..B           rounds of A, A+1, ... B runs at once, until one fails\n"
		"  --keep-sessions       keep the sessions of clean runs too\n"
		"                        then one summary: failures by kind, distinct findings, the\n"
		"                        first failing run's session and seed, the command to replay it\n");
	hr_shape_usage(f);
}

/* ---- helpers --------------------------------------------------------------- */

static void say_progress(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void say_progress(const char *fmt, ...)
{
	if (!d.progress)
		return;
	va_list ap;
	va_start(ap, fmt);
	fputs("\r\033[K", stderr);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fflush(stderr);
}

static void clear_progress(void)
{
	if (d.progress)
		fputs("\r\033[K", stderr);
}

/* Remove a flat session directory and its log; errors leave leftovers only. */
static void remove_run(const char *dir)
{
	int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	DIR *dd = fd >= 0 ? fdopendir(fd) : NULL;
	if (dd) {
		struct dirent *de;
		while ((de = readdir(dd)))
			if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
				(void)unlinkat(fd, de->d_name, 0);
		closedir(dd);
	} else if (fd >= 0) {
		close(fd);
	}
	(void)rmdir(dir);
	char log[RUN_DIR_MAX + 8];
	snprintf(log, sizeof log, "%s.log", dir);
	(void)unlink(log);
}

static void run_dir(long index, char *out, size_t n)
{
	snprintf(out, n, "%s/run-%04ld", d.r->session, index + 1);
}

/* The name of a frame for a signature: a function, else the module's base
 * name; Python frames as "function (file.py)".  NULL when it has neither. */
static const char *frame_name(json_t *fr, char *buf, size_t n)
{
	const char *fn = json_string_value(json_object_get(fr, "function"));
	const char *file = json_string_value(json_object_get(fr, "file"));
	const char *mod = json_string_value(json_object_get(fr, "module"));
	if (json_is_true(json_object_get(fr, "python")) && fn) {
		const char *b = file ? strrchr(file, '/') : NULL;
		snprintf(buf, n, "%s (%s)", fn, b ? b + 1 : file ? file : "?");
		return buf;
	}
	if (fn)
		return fn;
	if (mod) {
		const char *b = strrchr(mod, '/');
		snprintf(buf, n, "[%s]", b ? b + 1 : mod);
		return buf;
	}
	return NULL;
}

/* The first stack of a finding: "stacks"[0], else a thread's wait or
 * snapshot stack (deadlocks and hangs). */
static json_t *first_stack(json_t *f)
{
	json_t *st = json_array_get(json_object_get(f, "stacks"), 0);
	if (st)
		return st;
	json_t *th = json_array_get(json_object_get(f, "threads"), 0);
	if (!th)
		return NULL;
	if ((st = json_object_get(th, "wait_stack")) && json_is_object(st))
		return st;
	if ((st = json_object_get(th, "stack")) && json_is_object(st))
		return st;
	return NULL;
}

/* kind + the top SIG_FRAMES named frames of its first stack. */
static void signature(json_t *f, char *out, size_t n)
{
	const char *kind = json_string_value(json_object_get(f, "kind"));
	size_t k = (size_t)snprintf(out, n, "%s", kind ? kind : "?");
	json_t *frames = json_object_get(first_stack(f), "frames");
	int shown = 0;
	for (size_t i = 0; i < json_array_size(frames) && shown < SIG_FRAMES && k < n; i++) {
		char buf[256];
		const char *name = frame_name(json_array_get(frames, i), buf, sizeof buf);
		if (!name)
			continue;
		k += (size_t)snprintf(out + k, n - k, "%s%s", shown ? " < " : ": ", name);
		shown++;
	}
	/* the innermost Python frame too: native tops alike in every crash of an
	 * interpreter without symbols differ by the Python line that ran them */
	for (size_t i = 0; i < json_array_size(frames) && k < n; i++) {
		json_t *fr = json_array_get(frames, i);
		if (!json_is_true(json_object_get(fr, "python")))
			continue;
		char buf[256];
		const char *name = frame_name(fr, buf, sizeof buf);
		if (name && i >= (size_t)shown)
			snprintf(out + k, n - k, " | %s", name);
		break;
	}
}

static void count_signature(const char *text, long index)
{
	for (size_t i = 0; i < d.nsigs; i++)
		if (strcmp(d.sigs[i].text, text) == 0) {
			d.sigs[i].runs++;
			return;
		}
	struct sig *v = realloc(d.sigs, (d.nsigs + 1) * sizeof *v);
	char *t = strdup(text);
	if (!v || !t) {
		free(t);
		if (v)
			d.sigs = v;
		return;
	}
	d.sigs = v;
	d.sigs[d.nsigs++] = (struct sig){t, 1, index};
}

/*
 * Run `heisen-dump --json` on one run's session, set out->nfindings and
 * out->hang, and count each distinct signature once per run.  Returns the number of
 * findings, or -1 when heisen-dump could not say (said once).
 */
static int read_findings(const char *dir, long index, struct outcome *out)
{
	int fd = memfd_create("heisen-json", MFD_CLOEXEC);
	if (fd < 0)
		return -1;
	int nulfd = open("/dev/null", O_WRONLY | O_CLOEXEC);
	char *argv[] = {d.r->dump, "--json", (char *)dir, NULL};
	int e;
	pid_t pid = hr_spawn(argv, d.r->dump_env, 0, fd, nulfd, &e);
	if (nulfd >= 0)
		close(nulfd);
	int st = 0;
	if (pid > 0)
		while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
			;
	if (pid < 0 || e || !WIFEXITED(st) || WEXITSTATUS(st) > 2) {
		close(fd);
		if (!d.dump_failed_said++)
			hr_err("%s --json %s did not run to its end: findings of that run are not counted", d.r->dump,
			       dir);
		return -1;
	}
	off_t len = lseek(fd, 0, SEEK_END);
	char *text = len > 0 ? malloc((size_t)len + 1) : NULL;
	ssize_t got = text ? pread(fd, text, (size_t)len, 0) : 0;
	close(fd);
	if (!text)
		return 0;
	text[got > 0 ? got : 0] = '\0';
	json_error_t err;
	json_t *root = json_loads(text, 0, &err);
	free(text);
	if (!root) {
		if (!d.dump_failed_said++)
			hr_err("%s --json %s: not JSON (%s): findings of that run are not counted", d.r->dump, dir,
			       err.text);
		return -1;
	}
	json_t *fs = json_object_get(root, "findings");
	char **seen = calloc(json_array_size(fs) + 1, sizeof *seen);
	size_t nseen = 0;
	for (size_t i = 0; i < json_array_size(fs); i++) {
		json_t *f = json_array_get(fs, i);
		const char *kind = json_string_value(json_object_get(f, "kind"));
		if (kind && (!strcmp(kind, "hang") || !strcmp(kind, "deadlock") || !strcmp(kind, "self-deadlock")))
			out->hang = 1;
		char sig[1024];
		signature(f, sig, sizeof sig);
		int dup = 0;
		for (size_t k = 0; seen && k < nseen; k++)
			dup |= strcmp(seen[k], sig) == 0;
		if (!dup) {
			count_signature(sig, index);
			if (seen)
				seen[nseen++] = strdup(sig);
		}
	}
	for (size_t k = 0; k < nseen; k++)
		free(seen[k]);
	free(seen);
	out->nfindings = (int)json_array_size(fs);
	/* the last injected failure of any process: what the failure likely followed */
	json_int_t last_ns = -1;
	json_t *procs = json_object_get(root, "processes");
	for (size_t i = 0; i < json_array_size(procs); i++) {
		json_t *inj = json_object_get(json_array_get(procs, i), "injected_faults");
		json_t *f = json_array_get(inj, json_array_size(inj) ? json_array_size(inj) - 1 : 0);
		json_int_t ns = json_integer_value(json_object_get(f, "ts_ns"));
		if (!f || ns <= last_ns)
			continue;
		last_ns = ns;
		char sig[900];
		json_object_set_new(f, "kind", json_string(json_string_value(json_object_get(f, "call"))));
		json_t *stacks = json_array();
		json_array_append(stacks, json_object_get(f, "stack"));
		json_object_set_new(f, "stacks", stacks);
		signature(f, sig, sizeof sig);
		const char *en = json_string_value(json_object_get(f, "errno_name"));
		snprintf(out->fault, sizeof out->fault, "%s (%s)", sig, en ? en : "?");
	}
	json_decref(root);
	return out->nfindings;
}

static void count_kind(const char *kind)
{
	for (size_t i = 0; i < d.nkinds; i++)
		if (strcmp(d.kinds[i].kind, kind) == 0) {
			d.kinds[i].n++;
			return;
		}
	if (d.nkinds < sizeof d.kinds / sizeof d.kinds[0]) {
		snprintf(d.kinds[d.nkinds].kind, sizeof d.kinds[0].kind, "%s", kind);
		d.kinds[d.nkinds++].n = 1;
	}
}

/* ---- the command lines ------------------------------------------------------ */

/* A child run's argv: see the top of this file.  Returns a malloc'd vector
 * (its strings shared with argv and the static buffers passed), or NULL. */
static char **child_argv(const char *dir, const char *seed)
{
	char **v = calloc((size_t)o.argc + 16, sizeof *v);
	if (!v)
		return NULL;
	size_t n = 0;
	v[n++] = d.self;
	if (!o.on_hang_given) {
		v[n++] = "--on-hang";
		v[n++] = "kill";
	}
	for (int i = 1; i < d.opt_end; i++)
		if (!o.drop || !o.drop[i])
			v[n++] = d.argv[i];
	v[n++] = "--dir";
	v[n++] = (char *)dir;
	n += hr_shape_seed_args(v + n, seed);
	v[n++] = "--";
	for (int i = d.cmd_at; d.argv[i]; i++)
		v[n++] = d.argv[i];
	v[n] = NULL;
	return v;
}

/* Append s to buf, single-quoted for a POSIX shell when it needs quoting. */
static void shell_word(char *buf, size_t n, const char *s)
{
	size_t k = strlen(buf);
	int plain = *s != '\0';
	for (const char *p = s; *p; p++)
		if (!strchr("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-+=/.,:@%", *p))
			plain = 0;
	if (k && k + 1 < n)
		buf[k++] = ' ';
	if (plain) {
		snprintf(buf + k, n - k, "%s", s);
		return;
	}
	if (k + 1 < n)
		buf[k++] = '\'';
	for (const char *p = s; *p && k + 5 < n; p++) {
		if (*p == '\'') {
			memcpy(buf + k, "'\\''", 4);
			k += 4;
		} else {
			buf[k++] = *p;
		}
	}
	if (k + 1 < n)
		buf[k++] = '\'';
	buf[k < n ? k : n - 1] = '\0';
}

/* The command that replays the first failing run: this heisen-run with
 * the options a single run had (and --on-hang kill for a hang, as the run
 * had), the run's seed, and the command. */
static void replay_command(const char *seed, char *buf, size_t n)
{
	buf[0] = '\0';
	shell_word(buf, n, d.argv[0]);
	if (!o.on_hang_given && !strcmp(d.first_kind, "hang")) {
		/* as the run was: the watchdog ends the replayed hang too */
		shell_word(buf, n, "--on-hang");
		shell_word(buf, n, "kill");
	}
	for (int i = 1; i < d.opt_end; i++)
		if (!o.drop || !o.drop[i])
			shell_word(buf, n, d.argv[i]);
	char *extra[4] = {NULL};
	size_t k = hr_shape_seed_args(extra, seed);
	for (size_t i = 0; i < k; i++)
		shell_word(buf, n, extra[i]);
	shell_word(buf, n, "--");
	for (int i = d.cmd_at; d.argv[i]; i++)
		shell_word(buf, n, d.argv[i]);
}

/* ---- the loop ----------------------------------------------------------------- */

static int start_run(struct slot *s, long index, int level)
{
	char dir[RUN_DIR_MAX], log[RUN_DIR_MAX + 8], seed[32];
	run_dir(index, dir, sizeof dir);
	snprintf(log, sizeof log, "%s.log", dir);
	s->seed = hr_shape_seed() + (uint64_t)index;
	snprintf(seed, sizeof seed, "%llu", (unsigned long long)s->seed);
	int lfd = open(log, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (lfd < 0) {
		hr_err("cannot create %s: %s", log, strerror(errno));
		return -1;
	}
	char **argv = child_argv(dir, seed);
	if (!argv) {
		close(lfd);
		hr_err("out of memory");
		return -1;
	}
	int e;
	s->pid = hr_spawn(argv, environ, 0, lfd, lfd, &e);
	free(argv);
	close(lfd);
	if (s->pid < 0)
		return -1;
	if (e) {
		hr_err("%s: %s", d.self, strerror(e));
		return -1;
	}
	s->index = index;
	s->level = level;
	return 0;
}

static void stop_all(struct slot *slots, int n)
{
	for (int i = 0; i < n; i++)
		if (slots[i].pid > 0)
			kill(slots[i].pid, SIGTERM);
}

/* One run ended with wait status st: classify it, count it.  Returns 1 when
 * it was abnormal. */
static int finish_run(struct slot *s, int st)
{
	char dir[RUN_DIR_MAX];
	run_dir(s->index, dir, sizeof dir);
	s->pid = 0;
	if (d.stopping) {
		/* cut short by the driver: not a result */
		d.cut++;
		remove_run(dir);
		return 0;
	}
	struct outcome out = {0};
	out.status = WIFEXITED(st) ? WEXITSTATUS(st) : WIFSIGNALED(st) ? 128 + WTERMSIG(st) : HR_EXIT_SELF;
	if (out.status == HR_EXIT_SELF) {
		hr_err("run %ld: heisen-run failed itself (exit 125): see %s.log", s->index + 1, dir);
		d.stopping = 2;
		return 1;
	}
	read_findings(dir, s->index, &out);
	if (out.status == 128 + 9 && !o.on_hang_given)
		out.hang = out.hang || out.nfindings == 0;
	if (out.hang)
		snprintf(out.kind, sizeof out.kind, "hang");
	else if (out.status > 128 && out.status < 128 + 65) {
		const char *nm = sigabbrev_np(out.status - 128);
		snprintf(out.kind, sizeof out.kind, "signal SIG%s", nm ? nm : "?");
	} else if (out.status != 0)
		snprintf(out.kind, sizeof out.kind, "exit %d", out.status);
	else if (out.nfindings > 0)
		snprintf(out.kind, sizeof out.kind, "finding");
	d.runs++;
	if (!out.kind[0]) {
		if (!o.keep_sessions)
			remove_run(dir);
		return 0;
	}
	d.failures++;
	count_kind(out.kind);
	if (d.first_fail < 0 || s->index < d.first_fail) {
		d.first_fail = s->index;
		d.first_seed = s->seed;
		d.first_status = out.status;
		d.first_level = s->level;
		snprintf(d.first_kind, sizeof d.first_kind, "%s", out.kind);
		snprintf(d.first_dir, sizeof d.first_dir, "%s", dir);
		snprintf(d.first_fault, sizeof d.first_fault, "%s", out.fault);
	}
	return 1;
}

static void summary(long planned)
{
	clear_progress();
	double secs = (double)(hr_now_ms() - d.t0) / 1000.0;
	fprintf(stderr, "==== heisen-run summary: %s ====\n", d.r->session);
	fprintf(stderr, "runs: %ld", d.runs);
	if (planned > 0)
		fprintf(stderr, " of %ld", planned);
	if (o.ramp_lo)
		fprintf(stderr, " (ramp %d..%d)", o.ramp_lo, o.ramp_hi);
	else if (o.parallel > 1)
		fprintf(stderr, " (%d at once)", o.parallel);
	fprintf(stderr, ", failed: %ld, %.1f s\n", d.failures, secs);
	if (d.cut)
		fprintf(stderr, "cut short after the first failure (not counted): %ld\n", d.cut);
	if (d.nkinds) {
		fprintf(stderr, "failures by kind:");
		for (size_t i = 0; i < d.nkinds; i++)
			fprintf(stderr, "%s %s: %ld", i ? "," : "", d.kinds[i].kind, d.kinds[i].n);
		fputc('\n', stderr);
	}
	fprintf(stderr, "distinct findings: %zu\n", d.nsigs);
	for (size_t i = 0; i < d.nsigs; i++)
		fprintf(stderr, "  %ld run%s (first: run %ld)  %s\n", d.sigs[i].runs, d.sigs[i].runs == 1 ? "" : "s",
			d.sigs[i].first_run + 1, d.sigs[i].text);
	if (d.first_fail >= 0) {
		char seed[32];
		static char cmd[65536];
		snprintf(seed, sizeof seed, "%llu", (unsigned long long)d.first_seed);
		fprintf(stderr, "first failure: run %ld, seed %s: %s\n", d.first_fail + 1, seed, d.first_kind);
		if (d.first_fault[0])
			fprintf(stderr, "  after an injected failure: %s\n", d.first_fault);
		fprintf(stderr, "  session: %s\n", d.first_dir);
		fprintf(stderr, "  output:  %s.log\n", d.first_dir);
		replay_command(seed, cmd, sizeof cmd);
		fprintf(stderr, "replay: %s\n", cmd);
		if (d.first_level > 1)
			fprintf(stderr, "  (it failed with %d runs at once: the seed replays heisen's own decisions, "
					"not the load; add --parallel %d --until-fail to replay that too)\n",
				d.first_level, d.first_level);
	} else {
		fprintf(stderr, "no run failed\n");
	}
	fprintf(stderr, "==== end of heisen-run summary ====\n");
}

/*
 * The driver (see the top of this file).  r has the parsed options and the
 * paths; argv is heisen-run's own, cmd_at the index of CMD in it.  Makes
 * the parent session directory, runs, prints the summary.  Returns the exit
 * status: 0 when no run failed, else the first failing run's status (1 for
 * a run with findings only); 125 on an error of heisen-run itself; 130 when
 * stopped by SIGINT before any failure.
 */
int hr_repro_main(struct hr_run *r, char **argv, int cmd_at)
{
	d.r = r;
	d.argv = argv;
	d.cmd_at = cmd_at;
	d.opt_end = cmd_at > 1 && !strcmp(argv[cmd_at - 1], "--") ? cmd_at - 1 : cmd_at;
	d.first_fail = -1;
	d.t0 = hr_now_ms();
	d.progress = isatty(2) && !r->quiet;
	ssize_t k = readlink("/proc/self/exe", d.self, sizeof d.self - 1);
	if (k <= 0) {
		hr_err("readlink /proc/self/exe: %s", strerror(errno));
		return HR_EXIT_SELF;
	}
	d.self[k] = '\0';
	/* --dir names the parent here: each run gets its own; --on-hang as the user chose */
	ensure_drop(argv);
	for (int i = 1; i < d.opt_end; i++) {
		if (!strcmp(argv[i], "--dir") && i + 1 < d.opt_end)
			o.drop[i] = o.drop[i + 1] = 1;
		else if (!strncmp(argv[i], "--dir=", 6))
			o.drop[i] = 1;
		else if (!strcmp(argv[i], "--on-hang") || !strncmp(argv[i], "--on-hang=", 10))
			o.on_hang_given = 1;
	}
	if (hr_session_open(r) < 0 || hr_build_envs(r) < 0)
		return HR_EXIT_SELF;

	int width = o.ramp_lo ? o.ramp_hi : o.parallel ? o.parallel : 1;
	long planned; /* 0 = until a failure */
	if (o.ramp_lo) {
		planned = 0;
		for (int l = o.ramp_lo; l <= o.ramp_hi; l++)
			planned += (long)l * (o.repeat ? o.repeat : 1);
	} else if (o.repeat) {
		planned = o.repeat;
	} else {
		planned = o.until_fail ? 0 : width;
	}
	int until_fail = o.until_fail || o.ramp_lo;

	struct slot *slots = calloc((size_t)width, sizeof *slots);
	if (!slots) {
		hr_err("out of memory");
		return HR_EXIT_SELF;
	}
	sigset_t wait_set;
	sigemptyset(&wait_set);
	sigaddset(&wait_set, SIGCHLD);
	sigaddset(&wait_set, SIGINT);
	sigaddset(&wait_set, SIGTERM);
	sigaddset(&wait_set, SIGHUP);

	long next = 0, active = 0;
	int level = o.ramp_lo ? o.ramp_lo : width;
	long level_left = o.ramp_lo ? (long)level * (o.repeat ? o.repeat : 1) : -1;
	uint64_t stop_at = 0;
	int interrupted = 0;
	for (;;) {
		while (!d.stopping && active < level && (planned == 0 || next < planned) && level_left != 0) {
			int i = 0;
			while (slots[i].pid > 0)
				i++;
			if (start_run(&slots[i], next, level) < 0) {
				d.stopping = 2;
				break;
			}
			next++;
			active++;
			if (level_left > 0)
				level_left--;
		}
		if (active == 0) {
			if (!d.stopping && o.ramp_lo && level_left == 0 && level < o.ramp_hi && !d.failures) {
				level++;
				level_left = (long)level * (o.repeat ? o.repeat : 1);
				continue;
			}
			break;
		}
		if (d.progress) {
			char of[32] = "", lv[32] = "";
			if (planned)
				snprintf(of, sizeof of, " of %ld", planned);
			if (o.ramp_lo)
				snprintf(lv, sizeof lv, ", %d at once", level);
			say_progress("run %ld%s, %ld failed, %.0f s%s", d.runs + active, of, d.failures,
				     (double)(hr_now_ms() - d.t0) / 1000.0, lv);
		}
		struct timespec ts = {0, 200 * 1000 * 1000};
		siginfo_t si;
		int sig = sigtimedwait(&wait_set, &si, &ts);
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP) {
			if (d.stopping) {
				for (int i = 0; i < width; i++)
					if (slots[i].pid > 0)
						kill(slots[i].pid, SIGKILL);
			} else {
				interrupted = 128 + sig;
				d.stopping = 1;
				stop_at = hr_now_ms() + STOP_GRACE_MS;
				stop_all(slots, width);
			}
		}
		int st;
		pid_t pid;
		while ((pid = waitpid(-1, &st, WNOHANG)) > 0) {
			for (int i = 0; i < width; i++) {
				if (slots[i].pid != pid)
					continue;
				active--;
				if (finish_run(&slots[i], st) && until_fail && !d.stopping) {
					d.stopping = 1;
					stop_at = hr_now_ms() + STOP_GRACE_MS;
					stop_all(slots, width);
				}
			}
		}
		if (d.stopping && stop_at && hr_now_ms() > stop_at) {
			for (int i = 0; i < width; i++)
				if (slots[i].pid > 0)
					kill(slots[i].pid, SIGKILL);
			stop_at = 0;
		}
	}
	free(slots);
	summary(planned);
	int failed = d.first_fail >= 0;
	if (!failed && !o.keep_sessions) {
		hr_session_remove_if_clean(r, 0);
		(void)rmdir(r->session);
	}
	if (d.stopping == 2)
		return HR_EXIT_SELF;
	if (failed)
		return d.first_status ? d.first_status : 1;
	return interrupted;
}
