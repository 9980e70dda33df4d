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

/* Fields 3 (state) and 22 (start time) of /proc/<pid>/stat. */
static int proc_stat(pid_t pid, char *state, uint64_t *ticks)
{
	char path[64], buf[1024];
	const char *p;
	size_t n;
	FILE *f;

	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	if (!(f = fopen(path, "re")))
		return -1;
	n = fread(buf, 1, sizeof buf - 1, f);
	fclose(f);
	buf[n] = '\0';
	/* comm may hold spaces and parentheses: fields restart after the last ')'. */
	if (!(p = strrchr(buf, ')')))
		return -1;
	p++;
	for (int field = 3; field <= 22; field++) {
		while (*p == ' ')
			p++;
		if (!*p)
			return -1;
		if (field == 3)
			*state = *p;
		if (field == 22) {
			char *end;
			errno = 0;
			*ticks = strtoull(p, &end, 10);
			return (errno || end == p) ? -1 : 0;
		}
		while (*p && *p != ' ')
			p++;
	}
	return -1;
}

int hs_proc_start_ticks(pid_t pid, uint64_t *ticks)
{
	char state;
	return proc_stat(pid, &state, ticks);
}

/* A zombie has run its last instruction: it counts as gone. */
static bool pid_is_ours(pid_t pid, uint64_t start_ticks)
{
	uint64_t now_ticks;
	char state;
	if (pid <= 0)
		return false;
	if (kill(pid, 0) != 0 && errno != EPERM)
		return false;
	if (proc_stat(pid, &state, &now_ticks) != 0)
		return true;
	if (state == 'Z' || state == 'X')
		return false;
	return start_ticks == 0 || now_ticks == start_ticks;
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
