/* SPDX-License-Identifier: MIT */
/*
 * launcher/cgroup.c — --mem-limit SIZE and --cpu-quota Q: the command runs
 * in a cgroup of its own, made below heisen-run's and removed at the end,
 * as a container would give it (seed 002: workers OOM-killed in a
 * memory-limited container; timeouts under a 4-CPU quota).
 *
 * cgroup v2 where /sys/fs/cgroup/cgroup.controllers exists (memory.max,
 * memory.swap.max = 0, cpu.max "Q*100000 100000"; the controllers enabled
 * in the parent's cgroup.subtree_control); else v1, one directory per
 * controller (memory.limit_in_bytes, memory.memsw.limit_in_bytes when the
 * kernel has it; cpu.cfs_period_us = 100000, cpu.cfs_quota_us = Q*100000).
 * The directory is <our cgroup>/heisen-run-<pid>.  heisen-run moves itself
 * in just before the command is started, so the command and everything it
 * starts are born inside, and back out right after (hr_cgroup_spawned):
 * heisen-dump's report is not limited.  Removed at exit (atexit), after the
 * command's tree has been reaped; what cannot be made says why and ends the
 * run (exit 125): a limit asked for and not applied must never look like a
 * run that passed under it.
 */
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "launcher.h"

#define CG_MAX 2 /* memory, cpu (v1: two directories; v2: one) */

static struct {
	char dir[CG_MAX][PATH_MAX];      /* the cgroups made, "" = none */
	char parent[CG_MAX][PATH_MAX];   /* where heisen-run was */
	int n;
	int v2;
} cg;

static int write_file(const char *dir, const char *name, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));
static int write_file(const char *dir, const char *name, const char *fmt, ...)
{
	char path[PATH_MAX + 64], val[64];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(val, sizeof val, fmt, ap);
	va_end(ap);
	snprintf(path, sizeof path, "%s/%s", dir, name);
	FILE *f = fopen(path, "we");
	if (!f)
		return -1;
	int rc = fputs(val, f) < 0 ? -1 : 0;
	if (fclose(f) != 0)
		rc = -1;
	return rc;
}

/* Our cgroup directory for controller (v1) or the unified one (v2) into
 * out; -1 with a reason in why. */
static int own_dir(const char *controller, char *out, size_t n, char *why, size_t wn)
{
	FILE *f = fopen("/proc/self/cgroup", "re");
	char line[PATH_MAX + 64];
	int found = -1;
	if (!f) {
		snprintf(why, wn, "/proc/self/cgroup: %s", strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof line, f)) {
		line[strcspn(line, "\n")] = '\0';
		char *c1 = strchr(line, ':'), *c2 = c1 ? strchr(c1 + 1, ':') : NULL;
		if (!c2)
			continue;
		*c2 = '\0';
		const char *ctls = c1 + 1, *path = c2 + 1;
		if (strcmp(path, "/") == 0)
			path = "";
		if (cg.v2 && line[0] == '0' && !*ctls) {
			snprintf(out, n, "/sys/fs/cgroup%s", path);
			found = 0;
			break;
		}
		if (!cg.v2) {
			char list[256];
			snprintf(list, sizeof list, ",%s,", ctls);
			char want[64];
			snprintf(want, sizeof want, ",%s,", controller);
			if (strstr(list, want)) {
				snprintf(out, n, "/sys/fs/cgroup/%s%s", controller, path);
				if (access(out, W_OK) != 0)
					snprintf(out, n, "/sys/fs/cgroup/cpu,cpuacct%s", path);
				found = 0;
				break;
			}
		}
	}
	fclose(f);
	if (found < 0)
		snprintf(why, wn, "no %s cgroup controller in /proc/self/cgroup", cg.v2 ? "unified" : controller);
	return found;
}

/* Make one cgroup below our own for controller; its index in cg. */
static int make(const char *controller, char *why, size_t wn)
{
	char parent[PATH_MAX];
	if (own_dir(controller, parent, sizeof parent, why, wn) < 0)
		return -1;
	if (cg.v2) {
		for (int i = 0; i < cg.n; i++)
			if (strcmp(cg.parent[i], parent) == 0)
				goto enable; /* the unified directory, already made */
	}
	int i = cg.n;
	snprintf(cg.parent[i], sizeof cg.parent[i], "%s", parent);
	if (snprintf(cg.dir[i], sizeof cg.dir[i], "%s/heisen-run-%d", parent, (int)getpid()) >= (int)sizeof cg.dir[i] ||
	    mkdir(cg.dir[i], 0755) < 0) {
		snprintf(why, wn, "mkdir %s: %s", cg.dir[i], strerror(errno));
		cg.dir[i][0] = '\0';
		return -1;
	}
	cg.n++;
enable:
	if (cg.v2 && write_file(parent, "cgroup.subtree_control", "+%s", controller) < 0) {
		snprintf(why, wn, "enabling +%s in %s/cgroup.subtree_control: %s", controller, parent, strerror(errno));
		return -1;
	}
	for (int k = 0; k < cg.n; k++)
		if (strcmp(cg.parent[k], parent) == 0)
			return k;
	return -1;
}

static void remove_all(void)
{
	for (int i = cg.n; i-- > 0;) {
		if (!cg.dir[i][0])
			continue;
		for (int tries = 0; tries < 50 && rmdir(cg.dir[i]) < 0 && errno == EBUSY; tries++)
			usleep(20000);
		if (access(cg.dir[i], F_OK) == 0)
			fprintf(stderr, HR_NAME ": warning: could not remove cgroup %s: %s\n", cg.dir[i], strerror(errno));
	}
}

/*
 * Make the cgroup(s) for --mem-limit bytes (0 = none) and --cpu-quota cpus
 * (0 = none) and move heisen-run into them.  Returns 0, or -1 after a
 * message saying what could not be made (nothing is left behind).
 */
int hr_cgroup_enter(uint64_t mem_limit, double cpu_quota)
{
	char why[PATH_MAX + 128];
	cg.v2 = access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0;
	if (mem_limit) {
		int i = make("memory", why, sizeof why);
		if (i < 0)
			goto fail;
		if (cg.v2 ? write_file(cg.dir[i], "memory.max", "%llu", (unsigned long long)mem_limit) < 0
			  : write_file(cg.dir[i], "memory.limit_in_bytes", "%llu", (unsigned long long)mem_limit) < 0) {
			snprintf(why, sizeof why, "setting the memory limit in %s: %s", cg.dir[i], strerror(errno));
			goto fail;
		}
		/* no swap to escape to, as in a container without swap */
		if (cg.v2)
			(void)write_file(cg.dir[i], "memory.swap.max", "0");
		else
			(void)write_file(cg.dir[i], "memory.memsw.limit_in_bytes", "%llu", (unsigned long long)mem_limit);
	}
	if (cpu_quota > 0) {
		int i = make("cpu", why, sizeof why);
		long quota = (long)(cpu_quota * 100000.0 + 0.5);
		if (i < 0)
			goto fail;
		if (cg.v2 ? write_file(cg.dir[i], "cpu.max", "%ld 100000", quota) < 0
			  : (write_file(cg.dir[i], "cpu.cfs_period_us", "100000") < 0 ||
			     write_file(cg.dir[i], "cpu.cfs_quota_us", "%ld", quota) < 0)) {
			snprintf(why, sizeof why, "setting the CPU quota in %s: %s", cg.dir[i], strerror(errno));
			goto fail;
		}
	}
	for (int i = 0; i < cg.n; i++)
		if (write_file(cg.dir[i], "cgroup.procs", "%d", (int)getpid()) < 0) {
			snprintf(why, sizeof why, "moving into %s: %s", cg.dir[i], strerror(errno));
			hr_cgroup_spawned();
			goto fail;
		}
	atexit(remove_all);
	return 0;
fail:
	hr_err("--mem-limit/--cpu-quota: cannot make a cgroup (%s); run as root with a writable cgroup "
	       "hierarchy, or set the limit outside (docker run --memory/--cpus)",
	       why);
	remove_all();
	return -1;
}

/* The command has been started: heisen-run leaves its cgroups (the command
 * stays), so the report's heisen-dump is not limited.  Idempotent. */
void hr_cgroup_spawned(void)
{
	for (int i = 0; i < cg.n; i++)
		if (cg.dir[i][0])
			(void)write_file(cg.parent[i], "cgroup.procs", "%d", (int)getpid());
}
