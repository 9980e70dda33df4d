/* SPDX-License-Identifier: MIT */
/*
 * launcher/reaper.c — signals, spawning, forwarding and reaping.
 *
 * heisen-run handles signals without handlers: the forwarded ones (SIGINT,
 * SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2) and SIGCHLD are blocked and
 * read from a signalfd in the event loop, so nothing runs in signal context
 * at all (a blocked signal is also never dropped by the PID-1 rule that
 * discards default-action signals sent to a namespace's init).  Children get
 * the original mask and dispositions back between fork and exec.
 *
 * Forwarding and the double SIGINT.  The command inherits heisen-run's
 * process group, so Ctrl-C (and Ctrl-\, and a terminal hangup) reaches it
 * straight from the terminal; forwarding the copy that heisen-run also gets
 * would deliver it twice (two KeyboardInterrupts).  The kernel marks those
 * terminal-generated signals SI_KERNEL, so a forwarded signal is skipped
 * when it is SI_KERNEL and the command is still in our process group; every
 * signal sent with kill() (docker stop, kill PID) is SI_USER and forwarded.
 * Left over: `kill -INT -PGID` from a user reaches both of us as SI_USER and
 * is delivered twice — indistinguishable from a kill aimed at heisen-run.
 * A signal whose disposition was SIG_IGN when heisen-run started is not
 * forwarded (the command inherited the same SIG_IGN).
 *
 * Reaping.  heisen-run is a child subreaper (prctl), so orphaned descendants
 * are reparented to it, as to a PID 1; every exited child is reaped.  Before
 * reaping, the zombie's start time is read from /proc so that its segment is
 * marked only if that segment was made by this very process.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

static const int forwarded[] = {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2};
#define NFORWARDED (sizeof forwarded / sizeof forwarded[0])

static int sigfd = -1;
static sigset_t old_mask;
static struct sigaction old_chld, old_pipe;
static int ignored_at_start[NSIG];

/* CLOCK_MONOTONIC in milliseconds: deadlines of the event loop. */
uint64_t hr_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/*
 * Block the forwarded signals and SIGCHLD, open the signalfd, make SIGCHLD
 * default (an inherited SIG_IGN would auto-reap and hide exit statuses),
 * ignore SIGPIPE (a closed stderr must not kill the launcher while its
 * command runs), and become a child subreaper.  Returns 0, or -1 after a
 * message; a failed prctl is only a warning (the run works, orphans just go
 * to init instead).
 */
int hr_signals_init(void)
{
	sigset_t set;
	struct sigaction sa;

	sigemptyset(&set);
	for (size_t i = 0; i < NFORWARDED; i++) {
		sigaddset(&set, forwarded[i]);
		if (sigaction(forwarded[i], NULL, &sa) == 0 && sa.sa_handler == SIG_IGN)
			ignored_at_start[forwarded[i]] = 1;
	}
	sigaddset(&set, SIGCHLD);
	if (sigprocmask(SIG_BLOCK, &set, &old_mask) < 0) {
		hr_err("sigprocmask: %s", strerror(errno));
		return -1;
	}
	sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (sigfd < 0) {
		hr_err("signalfd: %s", strerror(errno));
		return -1;
	}
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGCHLD, &sa, &old_chld) < 0) {
		hr_err("sigaction SIGCHLD: %s", strerror(errno));
		return -1;
	}
	sa.sa_handler = SIG_IGN;
	if (sigaction(SIGPIPE, &sa, &old_pipe) < 0) {
		hr_err("sigaction SIGPIPE: %s", strerror(errno));
		return -1;
	}
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0)
		fprintf(stderr, HR_NAME ": warning: PR_SET_CHILD_SUBREAPER: %s; orphans will not be reaped\n",
			strerror(errno));
	return 0;
}

/*
 * In a forked child, before exec: give back the signal mask and the SIGCHLD
 * and SIGPIPE dispositions heisen-run started with.  Async-signal-safe.
 */
void hr_child_restore(void)
{
	sigaction(SIGCHLD, &old_chld, NULL);
	sigaction(SIGPIPE, &old_pipe, NULL);
	sigprocmask(SIG_SETMASK, &old_mask, NULL);
}

/*
 * fork + exec argv with environment envp (execvpe when search_path, else
 * execve).  out_fd / err_fd, when >= 0, become the child's stdout / stderr;
 * otherwise it inherits ours.  Returns the child's pid, or -1 after a
 * message if fork failed.  *exec_errno is 0 when exec succeeded, else the
 * errno of the failed exec (the child then exits 127 for ENOENT/ENOTDIR,
 * 126 otherwise, as a shell does, and must still be reaped).  The caller
 * reaps the child through hr_service.
 */
pid_t hr_spawn(char *const argv[], char *const envp[], int search_path, int out_fd, int err_fd,
	       int *exec_errno)
{
	int p[2];
	*exec_errno = 0;
	if (pipe2(p, O_CLOEXEC) < 0) {
		hr_err("pipe2: %s", strerror(errno));
		return -1;
	}
	pid_t pid = fork();
	if (pid < 0) {
		hr_err("fork: %s", strerror(errno));
		close(p[0]);
		close(p[1]);
		return -1;
	}
	if (pid == 0) {
		/* Only async-signal-safe calls from here to exec. */
		close(p[0]);
		hr_child_restore();
		if ((out_fd >= 0 && dup2(out_fd, 1) < 0) || (err_fd >= 0 && dup2(err_fd, 2) < 0)) {
			int e = errno;
			(void)!write(p[1], &e, sizeof e);
			_exit(126);
		}
		if (search_path)
			execvpe(argv[0], argv, envp);
		else
			execve(argv[0], argv, envp);
		int e = errno;
		(void)!write(p[1], &e, sizeof e);
		_exit(e == ENOENT || e == ENOTDIR ? 127 : 126);
	}
	close(p[1]);
	int e = 0;
	ssize_t n;
	do
		n = read(p[0], &e, sizeof e);
	while (n < 0 && errno == EINTR);
	close(p[0]);
	if (n == (ssize_t)sizeof e)
		*exec_errno = e ? e : EIO;
	return pid;
}

/* Forward one signal read from the signalfd (see the top of this file). */
static void forward(struct hr_run *r, const struct signalfd_siginfo *si)
{
	int sig = (int)si->ssi_signo;
	if (sig <= 0 || sig >= NSIG || ignored_at_start[sig])
		return;
	if (r->main_done || r->main_pid <= 0) {
		if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP || sig == SIGQUIT)
			r->stop_requested = 1;
		return;
	}
	if (si->ssi_code == SI_KERNEL && getpgid(r->main_pid) == getpgrp())
		return; /* the terminal sent it to the whole group: the command has it */
	if (sig == SIGINT || sig == SIGTERM || sig == SIGHUP)
		r->stop_signal = sig; /* a stop asked from outside (docker stop): not a crash if it ends the command */
	/* main_pid is unreaped, so the pid cannot have been reused. */
	if (kill(r->main_pid, sig) < 0 && errno != ESRCH)
		hr_warn(r, "forwarding signal %d to %d: %s", sig, (int)r->main_pid, strerror(errno));
}

/* Reap every child that has exited; mark segments of those that could not. */
static void reap_all(struct hr_run *r)
{
	for (;;) {
		siginfo_t si;
		memset(&si, 0, sizeof si);
		if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0) {
			if (errno == EINTR)
				continue;
			if (errno == ECHILD)
				r->no_children = 1;
			else
				hr_warn(r, "waitid: %s", strerror(errno));
			return;
		}
		r->no_children = 0;
		if (si.si_pid == 0)
			return; /* children, none exited */
		pid_t pid = si.si_pid;
		uint64_t ticks = 0;
		int have_ticks = hr_proc_start_ticks(pid, &ticks) == 0;
		int st;
		pid_t w;
		do
			w = waitpid(pid, &st, WNOHANG);
		while (w < 0 && errno == EINTR);
		if (w != pid) {
			hr_warn(r, "waitpid %d: %s", (int)pid, w < 0 ? strerror(errno) : "not ready");
			return;
		}
		if (pid == r->helper_pid) {
			r->helper_done = 1;
			r->helper_status = st;
			continue; /* heisen-dump runs without the preload: no segment */
		}
		if (pid == r->main_pid) {
			r->main_done = 1;
			r->main_status = st;
		}
		if (r->session_fd >= 0)
			hr_seg_mark_ended(r->session_fd, pid, have_ticks ? ticks : 0, st);
	}
}

/*
 * Wait up to timeout_ms (-1 = forever, 0 = just look) for signals, then
 * forward what arrived and reap every exited child.  Updates r->main_*,
 * r->helper_*, r->no_children and r->stop_requested.
 */
void hr_service(struct hr_run *r, int timeout_ms)
{
	struct pollfd pfd = {.fd = sigfd, .events = POLLIN};
	if (poll(&pfd, 1, timeout_ms) < 0 && errno != EINTR)
		hr_warn(r, "poll: %s", strerror(errno));
	for (;;) {
		struct signalfd_siginfo si[16];
		ssize_t n = read(sigfd, si, sizeof si);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++)
			if (si[i].ssi_signo != SIGCHLD)
				forward(r, &si[i]);
	}
	reap_all(r);
}

/*
 * Wait for the helper `pid` (just spawned) while still forwarding and
 * reaping, SIGKILLing it after timeout_ms.  Returns 0 with *status set, or
 * -1 if it had to be killed (*status is then its SIGKILL status).
 */
int hr_wait_helper(struct hr_run *r, pid_t pid, int timeout_ms, int *status)
{
	uint64_t deadline = hr_now_ms() + (uint64_t)timeout_ms;
	int killed = 0;
	r->helper_pid = pid;
	r->helper_done = 0;
	reap_all(r);
	while (!r->helper_done) {
		uint64_t now = hr_now_ms();
		if (!killed && now >= deadline) {
			kill(pid, SIGKILL);
			killed = 1;
		}
		hr_service(r, killed ? 100 : (int)(deadline - now < 100 ? deadline - now : 100));
	}
	r->helper_pid = 0;
	*status = r->helper_status;
	return killed ? -1 : 0;
}

/*
 * Keep forwarding and reaping for up to ms milliseconds; return early when
 * no child is left or a terminating signal asked to stop.
 */
void hr_reap_for(struct hr_run *r, int ms)
{
	uint64_t deadline = hr_now_ms() + (uint64_t)ms;
	reap_all(r);
	while (!r->no_children && !r->stop_requested) {
		uint64_t now = hr_now_ms();
		if (now >= deadline)
			break;
		hr_service(r, (int)(deadline - now < 50 ? deadline - now : 50));
	}
}
