/* SPDX-License-Identifier: MIT */
/*
 * dumper/procs.h — a session as a tree of processes.
 *
 * What each process saw when it started (its environment: CPUs, quota,
 * memory limit, rlimits, kernel, libc), what it used (memory samples,
 * descriptors), who started it (the real parent, and the logical one when
 * multiprocessing's forkserver stands between), and how it ended.  From that:
 * the `killed` finding for a process that died without running any code,
 * `oom-kill` when the evidence says the OOM killer did it (the memory
 * cgroup's OOM-kill counter rose during its life, its memory was near the
 * limit, the cgroup's own peak reached it) — always saying which evidence —
 * and the warnings where the environment itself is a likely cause: a CPU
 * count far above what the process may use (seed 002's second bug), a
 * memory limit at or below the observed peak, a low open-files limit with
 * many descriptors open.  Everything read from a segment is checked here
 * (strings terminated, the cgroup path one heisen-dump may read); what is
 * wrong is complained on the segment.  Design: docs/design.md "Processes";
 * docs/interfaces.md "Processes and environment".
 */
#ifndef HEISEN_DUMPER_PROCS_H
#define HEISEN_DUMPER_PROCS_H

#include <stdbool.h>
#include <stdint.h>

#include <heisen/format.h>

struct hs_session;
struct hs_proc;
struct hs_findings;
struct hs_fnd;

/* One process of the session: every image of one (pid, start time), in image order. */
struct hs_pnode {
	int32_t pid;
	uint64_t start_ticks;
	struct hs_proc **images;     /* at least one */
	size_t nimages;
	int32_t real_ppid;           /* the parent at start (first image) */
	struct hs_pnode *real_parent;/* that parent, when it is in the session */
	struct hs_pnode *parent;     /* the logical parent (forkserver children: the process the
					forkserver worked for), NULL for a root */
	const char *via;             /* "fork" (a fork child's first image), "exec" (started by an exec:
					posix_spawn, vfork+exec, a shell), "forkserver" */
	struct hs_pnode **children;  /* logical children, by start time */
	size_t nchildren;
	unsigned depth;              /* 0 for a root */
	size_t index;                /* in hs_ptree.nodes */
};

struct hs_ptree {
	struct hs_pnode *nodes;      /* by start time */
	size_t n;
	struct hs_pnode **roots;
	size_t nroots;
};

/* What the dumper knows of one segment's process, read once at load. */
struct hs_pinfo {
	struct hs_pnode *node;
	/* the environment at start, checked (env_valid: the segment has one) */
	bool env_valid, env_inherited;
	struct hs_env env;           /* strings terminated and cleaned */
	bool cgroup_ok;              /* env.mem_cgroup may be read by heisen-dump */
	/* memory and descriptors, from the live header (the writer's clock for *_ns) */
	uint64_t rss, rss_peak, rss_sample_ns, rss_samples;
	uint64_t oom_end, oom_end_ns;
	uint32_t fds_open, fds_peak;
	bool fds_now_asked, fds_now_known; /* hs_proc_fds_now: asked once; the count could be read */
	uint32_t fds_now;
	uint32_t fds_open_at_exit;   /* fds it created, open at a normal end, of sites that left
					HS_FD_LEAK_MIN or more but did not grow: a working set (analyze.c) */
	/* a terminating signal the process recorded itself (HS_STATE_SIGNALED) */
	bool term;
	int32_t term_signal, term_code, term_pid;
	uint32_t term_uid;
	uint64_t last_ns;            /* the last sign of life: newest record, sample or end (writer's clock) */
};

/* How a `killed` / `oom-kill` finding knows what it says (hs_fnd.death). */
#define HS_EV_OOM_COUNTER 0x1u   /* the memory cgroup's OOM-kill counter rose during its life */
#define HS_EV_NEAR_LIMIT 0x2u    /* its last memory sample was near the memory limit */
#define HS_EV_CGROUP_PEAK 0x4u   /* the cgroup's own peak usage reached the limit */
#define HS_EV_SIGKILL 0x8u       /* heisen-run's waitpid said SIGKILL */

struct hs_death {
	unsigned evidence;           /* HS_EV_* */
	uint64_t oom_before, oom_after;
	int32_t oom_after_pid;       /* the process whose exit read oom_after; 0 = heisen-dump, now */
	bool oom_after_start;        /* oom_after is another process's counter at its start */
	uint64_t limit;              /* the memory limit, 0 = none */
	uint64_t cgroup_peak;        /* the cgroup's own peak usage, 0 = unknown */
	double ran_seconds;          /* start to end, or to the last sign of life */
	bool ran_at_least;           /* the end is not known: ran_seconds is a lower bound */
	int signal;                  /* 9 when known (heisen-run), else 0 */
};

/* A warning: the environment itself is a likely cause. */
enum hs_wkind {
	HS_W_CPU_OVERSUBSCRIBED,     /* the CPU count a pool is sized by is far above the CPUs it may use */
	HS_W_MEMORY_LIMIT,           /* a memory limit at or below the observed peak */
	HS_W_OPEN_FILES,             /* a low open-files limit with many descriptors open */
	HS_W_KINDS
};

struct hs_warning {
	enum hs_wkind kind;
	char message[512];
	int32_t *pids;               /* the processes it concerns */
	size_t npids;
	/* the numbers behind it (0 when not relevant to the kind) */
	uint32_t cpu_online, cpu_affinity;
	double cpu_allowed;
	struct hs_env cpu_env;       /* the environment the CPU warning is about (for grouping) */
	uint64_t limit, peak;
	int32_t peak_pid;
	uint64_t fds, nofile;
};

struct hs_warnings {
	struct hs_warning *v;
	size_t n;
};

/* Build the per-process information and the tree of s (its procs loaded).
 * Returns 0, or -1 out of memory (what was built stays usable). */
int hs_procs_load(struct hs_session *s);
void hs_procs_free(struct hs_session *s);

/* Append the `killed` and `oom-kill` findings of s to out (processes that
 * have a deadlock, hang or self-deadlock finding there already get no
 * `killed`: the hang explains why they were killed).  Returns 0 or -1. */
int hs_proc_findings(struct hs_session *s, struct hs_findings *out);

/* The warnings of s.  Returns 0 or -1 (out holds what was found). */
int hs_warnings_find(struct hs_session *s, struct hs_warnings *out);
void hs_warnings_free(struct hs_warnings *w);
const char *hs_wkind_name(enum hs_wkind k);   /* "cpu-oversubscription", ... */

/* The CPUs e allows: min(affinity, quota / period), 0 when unknown. */
double hs_env_cpu_allowed(const struct hs_env *e);

/* "12.3 MiB", "512 B"... into buf. Returns buf. */
char *hs_fmt_bytes(char *buf, size_t len, uint64_t bytes);

/* The one-line message of a killed / oom-kill finding. */
void hs_death_message(const struct hs_fnd *f, char *msg, size_t len);

/* p's command line as one string ("python3 app.py ..."), cut to len. */
void hs_proc_cmdline(const struct hs_proc *p, char *buf, size_t len);

/* The open descriptors of a live process now (/proc/PID/fd, counted on the
 * first call): true with *n, false when p is not running or it cannot be read. */
bool hs_proc_fds_now(struct hs_proc *p, uint32_t *n);

/* The memory limit of p, 0 when none or unknown. */
uint64_t hs_proc_limit(const struct hs_proc *p);

#endif
