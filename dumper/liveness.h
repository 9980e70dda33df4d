/* SPDX-License-Identifier: MIT */
/*
 * dumper/liveness.h — how a segment's process ended, or whether it still runs.
 *
 * The state word says running / exited / crashed / execed / killed.  A
 * segment still RUNNING whose pid is gone (or a zombie), or whose pid now
 * belongs to a process that started at another time (pid reuse, told apart by field 22
 * of /proc/<pid>/stat), vanished: killed without running any code (SIGKILL,
 * the OOM killer).  Design: docs/interfaces.md "Ending states".
 */
#ifndef HEISEN_DUMPER_LIVENESS_H
#define HEISEN_DUMPER_LIVENESS_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

enum hs_pstate {
	HS_P_RUNNING,
	HS_P_EXITED,    /* value = exit status */
	HS_P_CRASHED,   /* value = signal */
	HS_P_EXECED,    /* value = the image that replaced it */
	HS_P_VANISHED,  /* RUNNING, but the pid is gone or reused */
	HS_P_KILLED,    /* value = signal: written by heisen-run from waitpid, or by the process itself
			   when a terminating signal found it at SIG_DFL (HS_STATE_SIGNALED: the sender is known) */
	HS_P_UNKNOWN,   /* a state word this reader does not know; value = the raw state */
};

/*
 * Decide the process state from the state word and, for RUNNING, from the
 * system: kill(pid, 0) and the start time in /proc.  start_ticks 0 means
 * "not recorded" and skips the reuse check.  *value receives the state's
 * value.  Never fails; unreadable /proc counts as "same process".
 */
enum hs_pstate hs_liveness(uint64_t state_word, pid_t pid, uint64_t start_ticks, int64_t *value);

/* "running", "exited", ... as in the JSON schema. */
const char *hs_pstate_name(enum hs_pstate s);

/* Field 22 of /proc/<pid>/stat (start time in clock ticks since boot).
 * Returns 0, or -1 when it cannot be read or parsed. */
int hs_proc_start_ticks(pid_t pid, uint64_t *ticks);

/* "SIGSEGV" for 11, "SIG37" for unknown ones; never NULL.  Not reentrant
 * for unknown numbers (static buffer). */
const char *hs_signal_name(int sig);

#endif
