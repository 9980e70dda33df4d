/* SPDX-License-Identifier: MIT */
/*
 * shim/cpus.c — what the program is told about the machine's CPUs under
 * heisen-run --cpus N: sysconf(_SC_NPROCESSORS_ONLN / _CONF), get_nprocs
 * and get_nprocs_conf answer N, so os.cpu_count(), multiprocessing's pool
 * sizes and a thread pool's default width are N — seed 002's
 * ProcessPoolExecutor that saw 24 cores of a 4-CPU quota, reproduced (or a
 * bigger machine simulated) on a laptop.  heisen-run also sets the real
 * affinity mask to N CPUs when the machine has them (sched_getaffinity
 * then says so too; launcher/shaping.c).
 *
 * HEISEN_CPUS=N (read once at start-up; before that, and without it, every
 * call is the real one).  Not covered: /proc/cpuinfo and
 * /sys/devices/system/cpu read directly (nproc(1) with OMP_NUM_THREADS,
 * numpy's BLAS reading sysfs), and cgroup quotas (heisen-run --cpu-quota).
 */
#include <stdlib.h>
#include <sys/sysinfo.h>
#include <unistd.h>

#include "hooks.h"
#include "inject.h"
#include "shim.h"

static long cpus_told; /* 0 = the truth */

void hs_cpus_init(void)
{
	const char *v = getenv("HEISEN_CPUS");
	long n = v ? strtol(v, NULL, 10) : 0;
	cpus_told = n > 0 && n <= 4096 ? n : 0;
}

HS_EXPORT long sysconf(int name)
{
	if (cpus_told && (name == _SC_NPROCESSORS_ONLN || name == _SC_NPROCESSORS_CONF))
		return cpus_told;
	return HS_REAL(sysconf)(name);
}

HS_EXPORT int get_nprocs(void)
{
	return cpus_told ? (int)cpus_told : HS_REAL(get_nprocs)();
}

HS_EXPORT int get_nprocs_conf(void)
{
	return cpus_told ? (int)cpus_told : HS_REAL(get_nprocs_conf)();
}
