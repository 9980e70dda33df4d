/* SPDX-License-Identifier: MIT */
/*
 * dumper/liveness.c — the end state of a segment's process, including the
 * one the process could not write itself (vanished: SIGKILL, OOM killer).
 * No ptrace and no signals sent: kill(pid, 0) only asks.  Design:
 * docs/interfaces.md "Ending states".
 */
#include "liveness.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <heisen/format.h>
#include <internal/proc_stat.h>

int hs_proc_start_ticks(pid_t pid, uint64_t *ticks)
{
	struct hs_proc_stat ps;
	if (hs_proc_stat_read(pid, 0, &ps) != 0)
		return -1;
	*ticks = ps.start_ticks;
	return 0;
}

/* A zombie has run its last instruction: it counts as gone. */
static bool pid_is_ours(pid_t pid, uint64_t start_ticks)
{
	struct hs_proc_stat ps;
	if (pid <= 0)
		return false;
	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	if (hs_proc_stat_read(pid, 0, &ps) != 0)
		return true;
	if (ps.state == 'Z' || ps.state == 'X')
		return false;
	return start_ticks == 0 || ps.start_ticks == start_ticks;
}

enum hs_pstate hs_liveness(uint64_t state_word, pid_t pid, uint64_t start_ticks, int64_t *value)
{
	*value = HS_STATE_VALUE(state_word);
	switch (HS_STATE_OF(state_word)) {
	case HS_STATE_RUNNING:
		return pid_is_ours(pid, start_ticks) ? HS_P_RUNNING : HS_P_VANISHED;
	case HS_STATE_EXITED:
		return HS_P_EXITED;
	case HS_STATE_CRASHED:
		return HS_P_CRASHED;
	case HS_STATE_EXECED:
		return HS_P_EXECED;
	case HS_STATE_KILLED:
	case HS_STATE_SIGNALED:
		return HS_P_KILLED;
	default:
		*value = HS_STATE_OF(state_word);
		return HS_P_UNKNOWN;
	}
}

const char *hs_pstate_name(enum hs_pstate s)
{
	static const char *const names[] = {
		[HS_P_RUNNING] = "running", [HS_P_EXITED] = "exited",   [HS_P_CRASHED] = "crashed",
		[HS_P_EXECED] = "execed",   [HS_P_VANISHED] = "vanished", [HS_P_KILLED] = "killed",
		[HS_P_UNKNOWN] = "unknown",
	};
	return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "unknown";
}

const char *hs_signal_name(int sig)
{
	static const char *const names[] = {
		[SIGHUP] = "SIGHUP",   [SIGINT] = "SIGINT",     [SIGQUIT] = "SIGQUIT", [SIGILL] = "SIGILL",
		[SIGTRAP] = "SIGTRAP", [SIGABRT] = "SIGABRT",   [SIGBUS] = "SIGBUS",   [SIGFPE] = "SIGFPE",
		[SIGKILL] = "SIGKILL", [SIGUSR1] = "SIGUSR1",   [SIGSEGV] = "SIGSEGV", [SIGUSR2] = "SIGUSR2",
		[SIGPIPE] = "SIGPIPE", [SIGALRM] = "SIGALRM",   [SIGTERM] = "SIGTERM", [SIGCHLD] = "SIGCHLD",
		[SIGCONT] = "SIGCONT", [SIGSTOP] = "SIGSTOP",   [SIGTSTP] = "SIGTSTP", [SIGTTIN] = "SIGTTIN",
		[SIGTTOU] = "SIGTTOU", [SIGURG] = "SIGURG",      [SIGXCPU] = "SIGXCPU", [SIGXFSZ] = "SIGXFSZ",
		[SIGVTALRM] = "SIGVTALRM", [SIGPROF] = "SIGPROF", [SIGWINCH] = "SIGWINCH", [SIGIO] = "SIGIO",
		[SIGPWR] = "SIGPWR",   [SIGSYS] = "SIGSYS",
	};
	static char buf[24];
	if (sig > 0 && (unsigned)sig < sizeof names / sizeof names[0] && names[sig])
		return names[sig];
	snprintf(buf, sizeof buf, "SIG%d", sig);
	return buf;
}
