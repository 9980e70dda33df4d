/* SPDX-License-Identifier: MIT */
/*
 * launcher/launcher.h — internal interfaces of heisen-run.
 *
 * heisen-run starts a command under libheisen.so, forwards signals to it,
 * reaps every process of the tree (it is often PID 1 in a container), watches
 * for hangs by running `heisen-dump --check-hang` twice a second, marks the
 * segments of processes that died without saying so, and prints heisen-dump's
 * report when the run ended badly.  One concern per file:
 *
 *   main.c      options and the order of the run
 *   paths.c     where libheisen.so and heisen-dump are
 *   session.c   the session directory and the child's environment
 *   segment.c   reading and marking segment headers (include/heisen/format.h)
 *   procfs.c    what /proc says about a pid (start time, children)
 *   reaper.c    signals, spawning, forwarding, reaping
 *   watchdog.c  heisen-dump as a subprocess: hang checks, reports, the kill
 *
 * Design: docs/design.md; contracts: docs/interfaces.md.  Nothing here is
 * exported; heisen-run is one process and, apart from its signal mask, keeps
 * no state that a child could inherit (every descriptor is O_CLOEXEC).
 */
#ifndef HEISEN_LAUNCHER_H
#define HEISEN_LAUNCHER_H

#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <sys/types.h>

#define HR_NAME "heisen-run"

/* Exit status of heisen-run for its own errors (bad usage, no library ...),
 * as docker run and env do: the command never ran. */
#define HR_EXIT_SELF 125

/* Watchdog period and the time limits on helper runs of heisen-dump. */
#define HR_TICK_MS 500
#define HR_CHECK_TIMEOUT_MS 10000
/* heisen-dump --check-hang runs when the still threads changed, and at
 * least this often all the same (watchdog.c check_needed). */
#define HR_CHECK_EVERY_MS 300000
#define HR_REPORT_TIMEOUT_MS 120000

/* After the main child ended: how long to keep reaping (not PID 1), how long
 * leftovers get after SIGTERM before SIGKILL (PID 1), and how long to reap
 * after a SIGKILL of the tree.  See main.c "Ending a run". */
#define HR_LINGER_MS 500
#define HR_PID1_GRACE_MS 2000
#define HR_KILL_REAP_MS 3000

/* Everything one run knows.  Filled by main.c; the other files read it and
 * update the fields they own (noted per field). */
struct hr_run {
	/* options (main.c) */
	const char *dir_opt;       /* --dir, or NULL */
	const char *hang_timeout;  /* seconds, as given (heisen-dump parses it again) */
	double hang_seconds;       /* 0 = watchdog off */
	int on_hang_kill;          /* --on-hang kill */
	int quiet;                 /* --quiet */
	int rm_clean;              /* --rm */
	int python_malloc;         /* --python-malloc: PYTHONMALLOC=malloc for the command */
	const char *report_dir;    /* --report-dir, or NULL (watchdog.c hr_final_report) */
	char **cmd;                /* the command, NULL-terminated */

	/* paths (paths.c), absolute */
	char lib[PATH_MAX];
	char dump[PATH_MAX];

	/* session (session.c) */
	char session[PATH_MAX];    /* absolute */
	int session_fd;            /* O_DIRECTORY|O_CLOEXEC */
	int session_created;       /* 1 when this run made the directory */
	int session_auto;          /* 1 for the default /dev/shm path (not --dir, not HEISEN_DIR) */
	int not_recording;         /* no usable session directory: the command runs without heisen */
	char **child_env;          /* environment of the command */
	char **dump_env;           /* environment of heisen-dump: no LD_PRELOAD, no HEISEN_DIR */

	/* children (reaper.c) */
	int pid1;                  /* getpid() == 1 */
	pid_t main_pid;
	int main_done, main_status;
	pid_t helper_pid;          /* the heisen-dump run being waited for, 0 = none */
	int helper_done, helper_status;
	int no_children;           /* last reap saw ECHILD */
	int stop_requested;        /* a terminating signal arrived after the main child ended */
	int stop_signal;           /* the last SIGINT/SIGTERM/SIGHUP forwarded to the command, 0 = none */

	/* watchdog (watchdog.c) */
	int hang_seen;
	char **sigs;               /* hang signatures already reported */
	size_t nsigs;
	char *last_check_error;    /* last stderr of a failing --check-hang, printed once */
	struct hr_stall *stalls;   /* progress of each live process of the session */
	size_t nstalls;
	struct hr_still *still;    /* progress of each thread of those processes */
	size_t nstill;
	int still_overflow_said;   /* more still threads than --still can carry: said once */
};

/* The watchdog's view of one thread (watchdog.c): progress = its own ring
 * records + its CPU ticks + the system call it is in, heisen-dump's
 * measure (internal/still.h); a thread whose
 * progress has not moved since since_ms is still, and heisen-dump judges
 * whether still threads make a hang (--still, dumper/stall.c). */
struct hr_still {
	pid_t pid, tid;
	uint64_t progress;
	uint64_t cpu;              /* its utime + stime as last read (procfs.c) */
	uint64_t since_ms;
	int alive;
};

/* The watchdog's view of one live process (watchdog.c): a process whose
 * progress (ring records + CPU ticks) has not moved since since_ms is
 * stalled; a stall is reported once, and one that ends and comes back is
 * new.  Its ring records are read every tick (memory); /proc only when it
 * is due (watchdog.c "Sampling a still process less often"). */
struct hr_stall {
	pid_t pid;
	uint64_t progress;
	uint64_t since_ms;         /* when progress last moved (or was first seen) */
	int snapsig;               /* the process's snapshot signal, 0 = none */
	uint64_t snapval;          /* the si_value of its snapshot requests (hs_snapshot_value) */
	uint64_t cpu, cpu_prev;    /* its CPU ticks at the last /proc reading and at the one before */
	int cpu_seen;
	int reported;              /* this stall was reported */
	uint64_t hung_since_ms;    /* reported by the per-thread rule: since when its longest stuck thread was still */
	int alive;                 /* seen in the current tick */
	uint64_t events;           /* its ring records at the last reading */
	uint64_t sampled_ms;       /* when /proc was last read for it */
	int sampled;               /* /proc was read for it in this tick: its threads are sampled too */
	int rebase;                /* take what it did since as the baseline, clocks kept (a snapshot's work) */
};
#define HR_SNAPSHOT_WAIT_MS 300  /* how long threads get to answer a snapshot request */

/* paths.c */
int hr_find_paths(struct hr_run *r);
int hr_dir_open_safe(const char *dir, int create, char *canon, char *why, size_t whylen);

/* session.c */
int hr_session_open(struct hr_run *r);
int hr_build_envs(struct hr_run *r);
void hr_session_remove_if_clean(struct hr_run *r, int only_if_empty);
#define HR_WARNINGS_NAME "heisen-warnings"  /* libheisen.so's warnings, in the session */
void hr_session_warnings(struct hr_run *r);
char *hr_preload_value(const char *ours, const char *existing);

/* segment.c */
int hr_seg_mark_ended(int dirfd, pid_t pid, uint64_t start_ticks, int wstatus);
int hr_seg_mark_killed_if_gone(int dirfd, pid_t pid, int signo);
/* The watchdog's view of the session (segment.c "the watchdog's segments"):
 * hr_seg_watch brings it up to date and returns the number of segment
 * names; hr_seg_live_pids, hr_seg_progress and hr_seg_thread_heads read
 * the segments it keeps mapped; hr_seg_remap maps pid's segment again (at
 * most every HR_REMAP_MS) so that thread slots committed since show. */
#define HR_REMAP_MS 5000
#define HR_RECHECK_MS 5000  /* a mapped segment's process start time is checked again this often */
size_t hr_seg_watch(int dirfd);
void hr_seg_remap(int dirfd, pid_t pid);
size_t hr_seg_live_pids(int dirfd, pid_t *out, size_t max);
int hr_seg_count(int dirfd);
int hr_seg_progress(int dirfd, pid_t pid, uint64_t *events, int *snapsig, uint64_t *snapval);
size_t hr_seg_thread_heads(int dirfd, pid_t pid, pid_t *tids, uint64_t *heads, size_t max);
int hr_seg_note_stall(int dirfd, pid_t pid, uint64_t since_mono_ns, double seconds);
int hr_seg_identity(int dirfd, pid_t pid, uint64_t *start_ticks, uid_t *owner, int *snapshot_installed);
int hr_seg_confirm(pid_t pid, uint64_t start_ticks);

/* procfs.c */
int hr_proc_start_ticks(pid_t pid, uint64_t *ticks);
size_t hr_proc_children(pid_t pid, pid_t *out, size_t max);
pid_t hr_proc_ppid(pid_t pid);
int hr_proc_cpu_ticks(pid_t pid, uint64_t *ticks, uint64_t *start_ticks);

/* reaper.c */
int hr_signals_init(void);
void hr_child_restore(void);
pid_t hr_spawn(char *const argv[], char *const envp[], int search_path, int out_fd, int err_fd,
	       int *exec_errno);
void hr_service(struct hr_run *r, int timeout_ms);
int hr_wait_helper(struct hr_run *r, pid_t pid, int timeout_ms, int *status);
void hr_reap_for(struct hr_run *r, int ms);
uint64_t hr_now_ms(void);

/* watchdog.c */
int hr_watch_tick(struct hr_run *r);
int hr_final_report(struct hr_run *r, int abnormal);
int hr_stopped(const struct hr_run *r);
void hr_kill_tree(struct hr_run *r);

/* repeat.c and shaping.c: reproducing a flaky failure.  Their long
 * options (codes from HR_OPT_REPEAT on) go into main.c's getopt table with
 * HR_REPRO_OPTIONS; main.c hands each to hr_repro_option. */
enum {
	HR_OPT_REPEAT = 1024, HR_OPT_UNTIL_FAIL, HR_OPT_PARALLEL, HR_OPT_RAMP, HR_OPT_KEEP,
	HR_OPT_SEED, HR_OPT_CHAOS, HR_OPT_FAIL, HR_OPT_FAIL_AFTER, HR_OPT_HEAP_LIMIT,
	HR_OPT_CPUS, HR_OPT_GC_STRESS, HR_OPT_MEM_LIMIT, HR_OPT_CPU_QUOTA,
};
#define HR_REPRO_OPTIONS \
	{"repeat", required_argument, NULL, HR_OPT_REPEAT}, \
	{"until-fail", no_argument, NULL, HR_OPT_UNTIL_FAIL}, \
	{"parallel", required_argument, NULL, HR_OPT_PARALLEL}, \
	{"ramp", required_argument, NULL, HR_OPT_RAMP}, \
	{"keep-sessions", no_argument, NULL, HR_OPT_KEEP}, \
	{"seed", required_argument, NULL, HR_OPT_SEED}, \
	{"chaos", required_argument, NULL, HR_OPT_CHAOS}, \
	{"fail", required_argument, NULL, HR_OPT_FAIL}, \
	{"fail-after", required_argument, NULL, HR_OPT_FAIL_AFTER}, \
	{"heap-limit", required_argument, NULL, HR_OPT_HEAP_LIMIT}, \
	{"cpus", required_argument, NULL, HR_OPT_CPUS}, \
	{"gc-stress", optional_argument, NULL, HR_OPT_GC_STRESS}, \
	{"mem-limit", required_argument, NULL, HR_OPT_MEM_LIMIT}, \
	{"cpu-quota", required_argument, NULL, HR_OPT_CPU_QUOTA}
int hr_repro_option(int c, const char *arg, char **argv, int optind);
void hr_repro_drop(char **argv, int optind, const char *arg);
int hr_repro_driving(void);
void hr_repro_usage(FILE *f);
int hr_repro_main(struct hr_run *r, char **argv, int cmd_at);
int hr_shape_option(int c, const char *arg, char **argv, int optind);
uint64_t hr_shape_seed(void);
size_t hr_shape_seed_args(char **v, const char *seed);
int hr_shape_env(struct hr_run *r);
int hr_shape_abnormal(int wait_status);
int hr_cgroup_enter(uint64_t mem_limit, double cpu_quota);
void hr_cgroup_spawned(void);
void hr_shape_usage(FILE *f);

/* main.c */
void hr_warn(const struct hr_run *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void hr_err(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
