/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_clock.c — the coarse clock read inline from the vDSO's
 * data (shim/clock.c, shim.h hs_now_coarse): a thread's first reads are
 * the call (a short process never searches); after HS_VCLOCK_AFTER of
 * them, where the kernel maps a [vvar] area whose data has one of the
 * generic layouts (every x86-64 kernel here), the place is found, and
 * each read lies between two clock_gettime(CLOCK_MONOTONIC_COARSE) reads
 * around it, across ticks; where it is not found, hs_now_coarse is the
 * call, and bracketed alike.  A fork child that enters a new time
 * namespace (its parent's unshare(CLONE_NEWTIME), the monotonic clocks
 * 1000 s ahead) has the namespace's page where the data was (an odd count
 * that never changes, the namespace's clock mode): it reads the
 * namespace's time, through the call (where the namespace cannot be made,
 * without privilege, that part says so and is not run).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "unit.h"

/* init.c's, which the core library does not have: no vDSO function here, libc's call */
int (*hs_vdso_clock_gettime)(clockid_t, struct timespec *);

static uint64_t coarse(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* 1 when /proc/self/maps names a [vvar] mapping. */
static int has_vvar(void)
{
	char line[512];
	int found = 0;
	FILE *f = fopen("/proc/self/maps", "r");
	while (f && fgets(line, sizeof line, f))
		found |= strstr(line, " [vvar]") != NULL;
	if (f)
		fclose(f);
	return found;
}

/* The child's reads, bracketed by its clock_gettime's (the namespace's time): 0 when all are. */
static int child_reads(void)
{
	for (int i = 0; i < 1000; i++) {
		uint64_t before = coarse(), now = hs_now_coarse(), after = coarse();
		if (before > now || now > after) {
			fprintf(stderr, "time namespace child: %llu not within [%llu, %llu]\n", (unsigned long long)now,
				(unsigned long long)before, (unsigned long long)after);
			return 1;
		}
	}
	return 0;
}

static void time_namespace_child(void)
{
	static const char offsets[] = "monotonic 1000 0\n";
	uint64_t outside = coarse();
	int fd, status = 0;
	pid_t pid;
	if (unshare(CLONE_NEWTIME) != 0) {
		printf("test_clock: no time namespace here (%s): not checked\n", strerror(errno));
		return;
	}
	fd = open("/proc/self/timens_offsets", O_WRONLY | O_CLOEXEC);
	CHECK(fd >= 0 && write(fd, offsets, sizeof offsets - 1) == (ssize_t)(sizeof offsets - 1));
	if (fd >= 0)
		close(fd);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		/* in the namespace: its clocks 1000 s ahead of the parent's */
		int bad = coarse() < outside + 999000000000ull || child_reads();
		_exit(bad);
	}
	CHECK(pid > 0 && waitpid(pid, &status, 0) == pid);
	CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

int main(void)
{
	uint64_t first = coarse(), last = 0, ticks = 0;
	unsigned long calls = 0;
	CHECK(hs_vclock.state == 0);
	(void)hs_now_coarse(); /* the first reads are calls: no search yet */
	CHECK(hs_vclock.state == 0);
	while (hs_vclock.state == 0 && calls < 1000000) {
		(void)hs_now_coarse();
		calls++;
	}
	CHECK(hs_vclock.state != 0); /* a thread that reads it often looks */
	CHECK(calls > 60000);
#if defined(__x86_64__)
	if (has_vvar())
		CHECK(hs_vclock.state == 1);
#endif
	if (hs_vclock.state != 1)
		printf("test_clock: the vDSO data was not found here: hs_now_coarse calls clock_gettime\n");
	/* across at least a few ticks (4 ms each at HZ=250), at most 2 s */
	for (unsigned long i = 0; ticks < 5 && coarse() - first < 2000000000ull; i++) {
		uint64_t before = coarse(), now = hs_now_coarse(), after = coarse();
		CHECK(before <= now && now <= after);
		if (before > now || now > after) {
			fprintf(stderr, "read %lu: %llu not within [%llu, %llu]\n", i, (unsigned long long)now,
				(unsigned long long)before, (unsigned long long)after);
			break;
		}
		if (last && now != last)
			ticks++;
		last = now;
	}
	CHECK(ticks >= 1);
	time_namespace_child();
	printf("test_clock: %llu ticks seen, state %d\n", (unsigned long long)ticks, hs_vclock.state);
	return unit_done("test_clock");
}
