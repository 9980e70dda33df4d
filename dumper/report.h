/* SPDX-License-Identifier: MIT */
/*
 * dumper/report.h — what the three reports (text, JSON, DOT) share: locks as
 * the user should see them, stacks as symbolized frames, names of modes,
 * kinds and events, and the entry points of the reports themselves.
 */
#ifndef HEISEN_DUMPER_REPORT_H
#define HEISEN_DUMPER_REPORT_H

#include <stdio.h>

#include "analyze.h"
#include "symbolize.h"

/* A lock as reports show it (LOCKREF in docs/interfaces.md). */
struct hs_lockref {
	uint64_t addr;
	uint32_t gen;          /* 0 when the lock id was not usable */
	const char *kind;      /* "mutex", "rwlock", "spin", "gil", "semaphore", or NULL */
	char name[128];        /* heisen_name_lock() name or data symbol, "" when none */
	char label[160];       /* name, else the address: what text reports print */
};

/*
 * Describe lock id (when valid) at addr (used when the id is not: 0 lets
 * the id's own address win).  Reads the lock entry through snapshot.c, its
 * name through the strings table, else the data symbol when p symbolizes.
 */
void hs_lockref(struct hs_proc *p, uint32_t id, uint64_t addr, struct hs_lockref *out);

/* A stack, symbolized, hook frames removed. */
struct hs_frames {
	const struct hs_frame *f[HS_STACK_DEPTH];
	uint32_t n;
	bool valid;       /* the stack id could be read */
	bool truncated;   /* the real stack was deeper */
};

/* Read and symbolize stack id of p into out (out->valid false when it
 * cannot be read: id 0, not ready, or corrupt, which is complained). */
void hs_frames_of(struct hs_proc *p, uint32_t id, struct hs_frames *out);

/* snprintf at buf + *used, advancing *used but never past len - 1: the
 * string is cut, never overrun, however many calls follow. */
void hs_appendf(char *buf, size_t len, size_t *used, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

const char *hs_mode_name(unsigned mode);          /* "write" / "read" */
const char *hs_lock_kind_name(unsigned kind);     /* NULL when unknown */
const char *hs_wait_kind_name(unsigned kind);     /* "lock", "cond", "gil", NULL for none */
const char *hs_event_name(unsigned type);         /* "lock-acquired", ...; "unknown" */

/* Why a memory sample was taken (enum hs_mem_why): "start", "interval", "allocation", "exit", "signal". */
const char *hs_mem_why_name(unsigned why);

/* "site", "full", "none" (hs_header.heap_stacks), NULL when unknown. */
const char *hs_heap_stacks_name(unsigned v);

/* What the stacks of a heap finding are, for a reader: one line, no newline. */
const char *hs_heap_stacks_note(unsigned v);

/*
 * The one-line message of a heap finding f (double-free, invalid-free,
 * heap-overflow), ASan's first line: "double free of 0x... (64 bytes) in
 * thread 12: first freed by thread 11, allocated by thread 10".  Shared by
 * the text and JSON reports so the two never disagree.
 */
void hs_heap_message(const struct hs_fnd *f, char *msg, size_t len);

/* File descriptors: names as in the JSON schema. */
const char *hs_fd_kind_name(unsigned kind);   /* "file", "socket", "pipe", ... */
const char *hs_fd_call_name(unsigned call);   /* "open", "accept", "close", "fclose", ... */
const char *hs_fd_op_name(unsigned op);       /* "open", "close", "close-failed", "owner" */
const char *hs_fd_rule_name(unsigned rule);   /* "ebadf", "file", "dir", "owner", "confirmed" */

/* The creation event of generation gen in an fd finding's history, or NULL. */
const struct hs_fd_event *hs_fd_creation(const struct hs_fnd *f, uint32_t gen);

/* The one-line message of an fd finding (double-close, stale-close,
 * fd-leak), shared by the text and JSON reports. */
void hs_fd_message(const struct hs_fnd *f, char *msg, size_t len);

/* The thread's held entry for the lock that another thread of the finding
 * waits for, else its innermost held lock, else NULL. */
const struct hs_held *hs_relevant_hold(const struct hs_fnd *f, const struct hs_tsnap *t);

/* The entry of holder's held stack that waiter waits for, or NULL (the
 * holder blocks it as a queued writer, or the copies disagree). */
const struct hs_held *hs_held_for(const struct hs_tsnap *holder, const struct hs_tsnap *waiter);

/* Each report writes the whole session to out.  The text report prints
 * errors to stderr itself (via main); JSON carries them in "errors".
 * The text report leads with the answer: a summary line per finding and per
 * process that ended badly, the findings in full, the warnings, the process
 * tree and context of the processes that matter; all (heisen-dump --all)
 * adds every other process's context and unfolds runs of frames without
 * symbols. */
void hs_report_text(FILE *out, struct hs_session *s, const struct hs_findings *f, bool all);
void hs_report_json(FILE *out, struct hs_session *s, const struct hs_findings *f);
void hs_report_dot(FILE *out, struct hs_session *s, const struct hs_findings *f);

#endif
