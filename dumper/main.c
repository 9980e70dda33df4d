/* SPDX-License-Identifier: MIT */
/*
 * dumper/main.c — heisen-dump: read a session directory and report.
 *
 *   heisen-dump [--json | --dot] [--all] [--hang-timeout SECONDS] [--no-symbols]
 *               [--stalled PID:SECONDS[,...]] [--still PID/TID:SECONDS[,...] [--snapshot-stuck]]
 *               [--snapshot] SESSION_DIR
 *   heisen-dump --check-hang SECONDS [--still PID/TID:SECONDS[,...]] SESSION_DIR
 *   heisen-dump diff [--json] [--no-symbols] SESSION_A SESSION_B   (diff.c)
 *
 * --stalled: the process made no progress for SECONDS (heisen-run's
 * watchdog judged it): a `hang` of every thread, with its snapshot stack.
 * --snapshot: judge that here (progress over one second), after asking
 * every thread of every live process for a snapshot (dumper/stall.c).
 * --still: these threads made no progress for SECONDS (heisen-run measured
 * it); the per-thread rule (stall.c hs_judge_still) says which processes
 * hang: a `hang` with each thread's verdict.
 *
 * Exit status: 0 no finding, 1 findings, 2 an error (errors dominate);
 * --check-hang: 3 a deadlock or hang, 0 none, 2 an error and no hang (a
 * watchdog must not miss a hang because another segment is corrupt).
 * The CLI contract is docs/interfaces.md "heisen-dump".
 */
#include <getopt.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "analyze.h"
#include "diff.h"
#include "report.h"
#include "session.h"
#include "stall.h"
#include <internal/snapshot_request.h>

enum format { FMT_TEXT, FMT_JSON, FMT_DOT };

struct options {
	enum format format;
	double hang_timeout;
	bool symbols;
	bool check_hang;
	bool snapshot;
	struct hs_stall *stalls;
	size_t nstalls;
	struct hs_still *still;
	size_t nstill;
	bool still_given;     /* --still was given (heisen-run measured; "" = nothing still) */
	bool timeout_given;   /* --hang-timeout was given */
	bool all;             /* --all: every process's context, every frame (text) */
	bool snapshot_stuck;  /* --snapshot-stuck: snapshots of the processes --still judged hung, after judging */
	const char *dir;
};

#define SNAPSHOT_SAMPLE_S 1.0   /* --snapshot: progress is judged over this long */
#define SNAPSHOT_WAIT_MS 300    /* then the threads get this long to answer */
#define WATCH_CAP_S 60.0        /* --hang-timeout without --still: threads are watched at most this long */

static void usage(FILE *f)
{
	fprintf(f, "usage: heisen-dump [--json | --dot] [--all] [--hang-timeout SECONDS] [--no-symbols]\n"
		   "                   [--stalled PID:SECONDS[,...]] [--still PID/TID:SECONDS[,...] [--snapshot-stuck]]\n"
		   "                   [--snapshot] SESSION_DIR\n"
		   "       heisen-dump --check-hang SECONDS [--still PID/TID:SECONDS[,...]] SESSION_DIR\n"
		   "       heisen-dump diff [--json] [--no-symbols] SESSION_A SESSION_B\n");
}

static int parse_seconds(const char *s, double *out)
{
	char *end;
	double v = strtod(s, &end);
	if (end == s || *end || !isfinite(v) || v < 0) {
		fprintf(stderr, "heisen-dump: not a number of seconds: %s\n", s);
		return -1;
	}
	*out = v;
	return 0;
}

static int parse_args(int argc, char **argv, struct options *o)
{
	static const struct option longopts[] = {
		{"json", no_argument, NULL, 'j'},          {"dot", no_argument, NULL, 'd'},
		{"hang-timeout", required_argument, NULL, 't'}, {"no-symbols", no_argument, NULL, 'n'},
		{"check-hang", required_argument, NULL, 'c'}, {"help", no_argument, NULL, 'h'},
		{"stalled", required_argument, NULL, 's'},   {"snapshot", no_argument, NULL, 'S'},
		{"still", required_argument, NULL, 'T'},   {"all", no_argument, NULL, 'a'},
		{"snapshot-stuck", no_argument, NULL, 'K'},
		{NULL, 0, NULL, 0},
	};
	int c;
	*o = (struct options){.format = FMT_TEXT, .hang_timeout = 30.0, .symbols = true};
	while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
		switch (c) {
		case 'j': o->format = FMT_JSON; break;
		case 'd': o->format = FMT_DOT; break;
		case 'n': o->symbols = false; break;
		case 't':
			if (parse_seconds(optarg, &o->hang_timeout))
				return -1;
			o->timeout_given = true;
			break;
		case 'c':
			o->check_hang = true, o->symbols = false;
			if (parse_seconds(optarg, &o->hang_timeout))
				return -1;
			break;
		case 'S': o->snapshot = true; break;
		case 'a': o->all = true; break;
		case 'K': o->snapshot_stuck = true; break;
		case 's':
			if (hs_stalls_parse(optarg, &o->stalls, &o->nstalls) != 0) {
				fprintf(stderr, "heisen-dump: --stalled: expected PID:SECONDS[,PID:SECONDS...]: %s\n", optarg);
				return -1;
			}
			break;
		case 'T':
			o->still_given = true;
			if (*optarg && hs_still_parse(optarg, &o->still, &o->nstill) != 0) {
				fprintf(stderr, "heisen-dump: --still: expected PID/TID:SECONDS[,...]: %s\n", optarg);
				return -1;
			}
			break;
		case 'h': usage(stdout); exit(0);
		default: usage(stderr); return -1;
		}
	}
	if (optind != argc - 1) {
		usage(stderr);
		return -1;
	}
	o->dir = argv[optind];
	return 0;
}

/* A segment file cut short under our mapping (someone truncated it) raises
 * SIGBUS on the next read: end with a clear message, not a crash. */
static void on_sigbus(int sig)
{
	static const char msg[] = "heisen-dump: a segment file shrank while it was being read (SIGBUS)\n";
	(void)sig;
	if (write(2, msg, sizeof msg - 1) < 0) {
		/* nothing more to do */
	}
	_exit(2);
}

static void print_errors(struct hs_session *s)
{
	hs_session_collect_errors(s);
	for (size_t i = 0; i < s->nerrors; i++)
		fprintf(stderr, "heisen-dump: %s: %s\n", s->errors[i].file, s->errors[i].msg);
}

static int check_hang(struct hs_session *s, const struct hs_findings *f)
{
	char sig[1024];
	int hung = 0;
	for (size_t i = 0; i < f->n; i++) {
		if (f->v[i].kind != HS_F_DEADLOCK && f->v[i].kind != HS_F_HANG)
			continue;
		hs_signature(&f->v[i], sig, sizeof sig);
		printf("%s\n", sig);
		hung = 1;
	}
	fflush(stdout);
	print_errors(s);
	return hung ? 3 : s->nerrors ? 2 : 0;
}

int main(int argc, char **argv)
{
	struct hs_session s;
	struct hs_findings f;
	struct options o;
	int rc;

	if (argc > 1 && strcmp(argv[1], "diff") == 0) {
		signal(SIGBUS, on_sigbus);
		return hs_diff_main(argc - 1, argv + 1);
	}
	if (parse_args(argc, argv, &o) != 0)
		return 2;
	signal(SIGBUS, on_sigbus);
	if (hs_session_load(&s, o.dir, o.symbols) != 0) {
		print_errors(&s);
		hs_session_free(&s);
		return 2;
	}
	if (o.snapshot && !o.check_hang) {
		/* sample, ask for snapshots, then read the session again to see them */
		if (hs_snapshot_session(&s, SNAPSHOT_SAMPLE_S, SNAPSHOT_WAIT_MS, &o.stalls, &o.nstalls) != 0)
			hs_session_error(&s, o.dir, "out of memory while taking snapshots");
		hs_session_free(&s);
		if (hs_session_load(&s, o.dir, o.symbols) != 0) {
			print_errors(&s);
			hs_session_free(&s);
			return 2;
		}
	}
	/* on its own, heisen-dump --hang-timeout watches the threads itself */
	bool watch = !o.check_hang && !o.still_given && o.timeout_given;
	size_t judged_from = o.nstalls;
	if (watch && hs_measure_still(&s, o.hang_timeout, WATCH_CAP_S, &o.still, &o.nstill) != 0)
		hs_session_error(&s, o.dir, "out of memory while watching threads");
	if (o.nstill && hs_judge_still(&s, o.still, o.nstill, o.hang_timeout, &o.stalls, &o.nstalls) != 0)
		hs_session_error(&s, o.dir, "out of memory while judging threads");
	if ((watch || o.snapshot_stuck) && o.nstalls > judged_from) {
		/* a hang found here: ask its threads for their stacks — after judging, since the
		   snapshot signal interrupts some waits (pyzmq's Context.term() returns) */
		for (size_t i = judged_from; i < o.nstalls; i++)
			for (size_t k = 0; k < s.nprocs; k++)
				if (s.procs[k].seg.hdr.pid == o.stalls[i].pid && hs_proc_alive(&s.procs[k]))
					hs_snapshot_proc(&s.procs[k]);
		usleep(SNAPSHOT_WAIT_MS * 1000);
		hs_session_free(&s);
		if (hs_session_load(&s, o.dir, o.symbols) != 0) {
			print_errors(&s);
			hs_session_free(&s);
			return 2;
		}
	}
	if (!o.check_hang && hs_stalls_noted(&s, &o.stalls, &o.nstalls) != 0)
		hs_session_error(&s, o.dir, "out of memory while reading stall notes");
	if (hs_analyze_stalled(&s, o.hang_timeout, !o.check_hang, o.stalls, o.nstalls, &f) != 0)
		hs_session_error(&s, o.dir, "out of memory during analysis");
	if (o.check_hang) {
		rc = check_hang(&s, &f);
	} else {
		if (o.format == FMT_JSON)
			hs_report_json(stdout, &s, &f);
		else if (o.format == FMT_DOT)
			hs_report_dot(stdout, &s, &f);
		else
			hs_report_text(stdout, &s, &f, o.all);
		fflush(stdout);
		print_errors(&s);
		rc = s.nerrors ? 2 : f.n ? 1 : 0;
	}
	hs_findings_free(&f);
	hs_session_free(&s);
	for (size_t i = 0; i < o.nstalls; i++)
		free(o.stalls[i].threads);
	free(o.stalls);
	free(o.still);
	return rc;
}
