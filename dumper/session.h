/* SPDX-License-Identifier: MIT */
/*
 * dumper/session.h — a session directory as the dumper sees it.
 *
 * Loading a session opens every "*.seg" file in the directory, validates it,
 * decides how its process ended and copies its thread slots once, so that
 * analysis and reports all work from one snapshot taken at one time.
 * Segments that cannot be used become errors naming the file; the others
 * are still reported.  Design: docs/interfaces.md "Session directory".
 */
#ifndef HEISEN_DUMPER_SESSION_H
#define HEISEN_DUMPER_SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "liveness.h"
#include "procs.h"
#include "segment.h"
#include "snapshot.h"

struct hs_sym;

struct hs_error {
	char file[256];          /* segment file name, or the session directory */
	char msg[HS_MSG_MAX];
};

struct hs_proc {
	struct hs_seg seg;
	enum hs_pstate pstate;
	int64_t value;           /* exit status, signal, or next image */
	struct hs_tsnap *threads;
	uint32_t nthreads;       /* live and exited slots, in slot order */
	struct hs_fdsnap *fds;   /* fd numbers ever seen, by number */
	uint32_t nfds;
	char exe[HS_EXE_MAX + 1];
	struct hs_sym *sym;      /* made on first use by hs_proc_sym */
	bool symbols;            /* use debug info (false: --no-symbols) */
	unsigned collected;      /* complaints already moved to the session's errors */
	bool lost_reported;
	/* processes and environment (procs.h) */
	uint64_t state_word;     /* the state word as liveness judged it */
	struct hs_pinfo *info;   /* environment, memory, place in the tree */
};

struct hs_session {
	const char *dir;
	struct hs_proc *procs;   /* sorted by pid, then image */
	size_t nprocs;
	struct hs_error *errors;
	size_t nerrors;
	uint64_t now_ns;         /* CLOCK_MONOTONIC when loaded */
	struct hs_pinfo *info_store; /* procs[i].info, one block (procs.c) */
	struct hs_ptree *tree;   /* the process tree (procs.c) */
};

/*
 * Load every segment of dir.  Returns 0 (s filled; individual bad segments
 * are in s->errors), or -1 when dir cannot be read (s->errors says why).
 * symbols: whether hs_proc_sym may read debug info.  Free with
 * hs_session_free in both cases.
 */
int hs_session_load(struct hs_session *s, const char *dir, bool symbols);

void hs_session_free(struct hs_session *s);

/* Append an error about file (a name, not a path) to the session. */
void hs_session_error(struct hs_session *s, const char *file, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/*
 * Move every segment complaint gathered so far into s->errors (each
 * once).  Call after analysis and reports, which are what read most of the
 * segment.  Idempotent for complaints already moved.
 */
void hs_session_collect_errors(struct hs_session *s);

/* The symbolizer of p, made on first use.  May return NULL (out of memory). */
struct hs_sym *hs_proc_sym(struct hs_proc *p);

/* true when p may still change: its process runs. */
bool hs_proc_alive(const struct hs_proc *p);

/* A CLOCK_MONOTONIC time of p's writer as CLOCK_REALTIME ns (0 stays 0). */
uint64_t hs_proc_realtime(const struct hs_proc *p, uint64_t mono_ns);

/* A thread snapshot of p by tid, or NULL. */
const struct hs_tsnap *hs_proc_thread(const struct hs_proc *p, int32_t tid);

#endif
