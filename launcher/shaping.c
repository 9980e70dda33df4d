/* SPDX-License-Identifier: MIT */
/*
 * launcher/shaping.c — what one run is given to fail under: its seed, fault
 * injection (--fail, --fail-after, --heap-limit) and chaos schedules
 * (--chaos).
 *
 * Everything here reaches the shim as environment variables, read once at
 * start-up by shim/faults.c and shim/chaos.c (docs/interfaces.md "Fault
 * injection and chaos"):
 *
 *   HEISEN_SEED=S               the run's seed (decimal u64)
 *   HEISEN_FAIL=FN:P:ERRNO[:MIN],…  FN in malloc, open, close; P in [0,1];
 *                               ERRNO a number (the launcher takes names);
 *                               MIN: malloc>=SIZE, smaller ones never fail
 *   HEISEN_FAIL_AFTER=N         the Nth call of those functions fails
 *   HEISEN_HEAP_LIMIT=BYTES     allocations beyond this live total fail
 *   HEISEN_CHAOS=1              perturb scheduling, decisions from the seed
 *   HEISEN_CPUS=N               --cpus: what sysconf/get_nprocs answer
 *   HEISEN_GC_STRESS=T          --gc-stress: with launcher/pystress first on
 *                               PYTHONPATH, gc.set_threshold(T)
 *   PYTHONHASHSEED=S mod 2^32   unless the user set it: CPython's hashes, so
 *                               its allocation pattern, the same in a replay
 *
 * A single run gets them set in heisen-run's own environment before the
 * command's is built (session.c copies it); heisen-dump ignores them.  A
 * driver (repeat.c) passes these options to each child run as given, and
 * its own --seed / --chaos per run (hr_shape_seed_args).
 */
#include <errno.h>
#include <limits.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "launcher.h"

static struct {
	uint64_t seed;
	int seed_given;
	int chaos;
	char fail[512];          /* HEISEN_FAIL as built */
	const char *fail_after;
	char heap_limit[32];
	long cpus;               /* --cpus; 0 = not given */
	const char *gc_stress;   /* --gc-stress[=THRESHOLD]; NULL = not given */
	uint64_t mem_limit;      /* --mem-limit bytes; 0 = not given (cgroup.c) */
	double cpu_quota;        /* --cpu-quota CPUs; 0 = not given (cgroup.c) */
} s;

static const struct {
	const char *name;
	int value;
} errnos[] = {
	{"ENOMEM", ENOMEM}, {"EMFILE", EMFILE}, {"ENFILE", ENFILE}, {"EIO", EIO},       {"EINTR", EINTR},
	{"EACCES", EACCES}, {"ENOENT", ENOENT}, {"ENOSPC", ENOSPC}, {"EAGAIN", EAGAIN}, {"EBADF", EBADF},
	{"EPERM", EPERM},   {"EROFS", EROFS},   {"EDQUOT", EDQUOT},
};

static uint64_t parse_u64(const char *opt, const char *arg)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(arg, &end, 0);
	if (errno || end == arg || *end || *arg == '-') {
		hr_err("%s: not a whole number >= 0: %s", opt, arg);
		exit(HR_EXIT_SELF);
	}
	return v;
}

/* "512M", "2G", "4096", "64k": bytes.  Exits 125 when it is not a size. */
static uint64_t parse_size(const char *opt, const char *arg)
{
	char *end;
	errno = 0;
	double v = strtod(arg, &end);
	uint64_t mul = 1;
	if (end != arg && *end) {
		switch (*end | 0x20) {
		case 'k': mul = 1ull << 10; break;
		case 'm': mul = 1ull << 20; break;
		case 'g': mul = 1ull << 30; break;
		case 't': mul = 1ull << 40; break;
		default: mul = 0;
		}
		end++;
		if (*end == 'i')
			end++;
		if ((*end | 0x20) == 'b')
			end++;
	}
	if (errno || end == arg || *end || mul == 0 || !(v > 0) || v * (double)mul > 1.8e19) {
		hr_err("%s: not a size (bytes, or with k/M/G): %s", opt, arg);
		exit(HR_EXIT_SELF);
	}
	return (uint64_t)(v * (double)mul);
}

/* One --fail FN[:P[:ERRNO]] appended to s.fail as FN:P:ERRNO (numeric). */
static void add_fail(const char *arg)
{
	char fn[48];
	uint64_t min_size = 0;
	const char *c1 = strchr(arg, ':');
	size_t fl = c1 ? (size_t)(c1 - arg) : strlen(arg);
	if (fl == 0 || fl >= sizeof fn)
		goto bad;
	memcpy(fn, arg, fl);
	fn[fl] = '\0';
	char *ge = strstr(fn, ">=");
	if (ge) {
		/* malloc>=SIZE: smaller allocations never fail (a start-up runs untouched) */
		min_size = parse_size("--fail malloc>=", ge + 2);
		*ge = '\0';
		if (strcmp(fn, "malloc"))
			goto bad;
	}
	int def_errno;
	if (!strcmp(fn, "malloc"))
		def_errno = ENOMEM;
	else if (!strcmp(fn, "open"))
		def_errno = EMFILE;
	else if (!strcmp(fn, "close"))
		def_errno = EIO;
	else
		goto bad;
	double p = 1.0;
	int e = def_errno;
	if (c1) {
		char *end;
		p = strtod(c1 + 1, &end);
		if (end == c1 + 1 || !(p >= 0 && p <= 1) || (*end && *end != ':'))
			goto bad;
		if (*end == ':') {
			const char *en = end + 1;
			size_t i = 0;
			for (; i < sizeof errnos / sizeof errnos[0]; i++)
				if (!strcmp(en, errnos[i].name))
					break;
			if (i < sizeof errnos / sizeof errnos[0])
				e = errnos[i].value;
			else {
				char *e2;
				long v = strtol(en, &e2, 10);
				if (e2 == en || *e2 || v <= 0 || v > 4095)
					goto bad;
				e = (int)v;
			}
		}
	}
	size_t k = strlen(s.fail);
	int w = min_size ? snprintf(s.fail + k, sizeof s.fail - k, "%s%s:%.9g:%d:%llu", k ? "," : "", fn, p, e,
				    (unsigned long long)min_size)
			 : snprintf(s.fail + k, sizeof s.fail - k, "%s%s:%.9g:%d", k ? "," : "", fn, p, e);
	if (w >= (int)(sizeof s.fail - k))
		goto bad;
	return;
bad:
	hr_err("--fail: expected malloc[>=SIZE]|open|close[:PROBABILITY[:ERRNO]] (e.g. open:0.05:EMFILE), not %s",
	       arg);
	exit(HR_EXIT_SELF);
}

/*
 * One option of this file: remember it; --seed and --chaos are marked as
 * the driver's own (each child run gets its own).  Exits 125 on a bad
 * value.  Returns 0 when c was ours, -1 when not.
 */
int hr_shape_option(int c, const char *arg, char **argv, int optind)
{
	switch (c) {
	case HR_OPT_SEED:
	case HR_OPT_CHAOS: {
		uint64_t v = parse_u64(c == HR_OPT_SEED ? "--seed" : "--chaos", arg);
		if (s.seed_given && v != s.seed) {
			hr_err("--seed and --chaos name two different seeds (%llu, %llu): give one",
			       (unsigned long long)s.seed, (unsigned long long)v);
			exit(HR_EXIT_SELF);
		}
		s.seed = v;
		s.seed_given = 1;
		if (c == HR_OPT_CHAOS)
			s.chaos = 1;
		hr_repro_drop(argv, optind, arg);
		return 0;
	}
	case HR_OPT_FAIL:
		add_fail(arg);
		return 0;
	case HR_OPT_FAIL_AFTER:
		if (parse_u64("--fail-after", arg) == 0) {
			hr_err("--fail-after: calls are counted from 1");
			exit(HR_EXIT_SELF);
		}
		s.fail_after = arg;
		return 0;
	case HR_OPT_CPUS: {
		char *end;
		errno = 0;
		long v = strtol(arg, &end, 10);
		if (errno || end == arg || *end || v < 1 || v > 4096) {
			hr_err("--cpus: not a number of CPUs in 1..4096: %s", arg);
			exit(HR_EXIT_SELF);
		}
		s.cpus = v;
		return 0;
	}
	case HR_OPT_GC_STRESS:
		if (arg && (parse_u64("--gc-stress", arg) == 0 || parse_u64("--gc-stress", arg) > 100000)) {
			hr_err("--gc-stress: a gen-0 threshold in 1..100000, not %s", arg);
			exit(HR_EXIT_SELF);
		}
		s.gc_stress = arg ? arg : "1";
		return 0;
	case HR_OPT_MEM_LIMIT:
		s.mem_limit = parse_size("--mem-limit", arg);
		return 0;
	case HR_OPT_CPU_QUOTA: {
		char *end;
		errno = 0;
		double v = strtod(arg, &end);
		if (errno || end == arg || *end || !(v >= 0.01 && v <= 4096)) {
			hr_err("--cpu-quota: a number of CPUs in 0.01..4096 (e.g. 0.5, 4), not %s", arg);
			exit(HR_EXIT_SELF);
		}
		s.cpu_quota = v;
		return 0;
	}
	case HR_OPT_HEAP_LIMIT:
		snprintf(s.heap_limit, sizeof s.heap_limit, "%llu",
			 (unsigned long long)parse_size("--heap-limit", arg));
		return 0;
	}
	return -1;
}

/* The base seed: --seed/--chaos, else one from the clock and the pid
 * (chosen once, kept small enough to type). */
uint64_t hr_shape_seed(void)
{
	if (!s.seed_given) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		uint64_t x = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20) ^ ((uint64_t)getpid() << 40);
		x ^= x >> 33;
		x *= 0xff51afd7ed558ccdull;
		x ^= x >> 33;
		s.seed = x % 1000000000ull;
		s.seed_given = 1;
	}
	return s.seed;
}

/* The words that give one child run its seed: "--seed S", or "--chaos S"
 * when chaos is on.  Writes at most 2 entries to v; returns how many. */
size_t hr_shape_seed_args(char **v, const char *seed)
{
	v[0] = s.chaos ? "--chaos" : "--seed";
	v[1] = (char *)seed;
	return 2;
}

/*
 * For a single run: put HEISEN_SEED, HEISEN_FAIL, HEISEN_FAIL_AFTER,
 * HEISEN_HEAP_LIMIT and HEISEN_CHAOS into our environment (the command's is
 * built from it), each only when its option was given.  Without --seed, a
 * run that injects faults or chaos gets a fresh seed, said on stderr so the
 * run can be replayed.  Returns 0, or -1 after a message (ENOMEM).
 */
/*
 * --cpus N: HEISEN_CPUS=N (shim/cpus.c: sysconf, get_nprocs, so
 * os.cpu_count()) and, when the machine has more than N CPUs in our mask,
 * the first N of them as our affinity (the command inherits it).  Returns
 * 0, or -1 after a message.
 */
static int shape_cpus(struct hr_run *r)
{
	char buf[16];
	cpu_set_t have, want;
	snprintf(buf, sizeof buf, "%ld", s.cpus);
	if (setenv("HEISEN_CPUS", buf, 1)) {
		hr_err("out of memory");
		return -1;
	}
	if (sched_getaffinity(0, sizeof have, &have) < 0) {
		hr_warn(r, "--cpus: sched_getaffinity: %s; only the reported count changes", strerror(errno));
		return 0;
	}
	if (CPU_COUNT(&have) <= s.cpus) {
		if (CPU_COUNT(&have) < s.cpus)
			hr_warn(r, "--cpus %ld: only %d CPUs here; the program is told %ld, it runs on %d", s.cpus,
				CPU_COUNT(&have), s.cpus, CPU_COUNT(&have));
		return 0;
	}
	CPU_ZERO(&want);
	for (int c = 0, k = 0; c < CPU_SETSIZE && k < s.cpus; c++)
		if (CPU_ISSET(c, &have)) {
			CPU_SET(c, &want);
			k++;
		}
	if (sched_setaffinity(0, sizeof want, &want) < 0) {
		hr_err("--cpus: sched_setaffinity: %s", strerror(errno));
		return -1;
	}
	return 0;
}

/* --gc-stress: sitecustomize.py (launcher/pystress) first on PYTHONPATH,
 * HEISEN_GC_STRESS=THRESHOLD.  Returns 0, or -1 after a message. */
static int shape_gc(void)
{
	char self[PATH_MAX], dir[PATH_MAX + 16], path[2 * PATH_MAX + 32];
	ssize_t k = readlink("/proc/self/exe", self, sizeof self - 1);
	const char *found = NULL;
	if (k > 0) {
		self[k] = '\0';
		char *slash = strrchr(self, '/');
		if (slash)
			*slash = '\0';
		/* the build tree: next to heisen-run; installed: <libdir>/heisen/pystress */
		const char *cands[] = {"%s/pystress", "%s/" HR_LIBDIR_REL "/pystress"};
		for (size_t i = 0; i < 2 && !found; i++) {
			snprintf(dir, sizeof dir, cands[i], self);
			snprintf(path, sizeof path, "%s/sitecustomize.py", dir);
			if (access(path, R_OK) == 0)
				found = dir;
		}
	}
	if (!found) {
		hr_err("--gc-stress: sitecustomize.py not found next to %s nor in its libdir", self);
		return -1;
	}
	const char *old = getenv("PYTHONPATH");
	snprintf(path, sizeof path, "%s%s%s", found, old && *old ? ":" : "", old ? old : "");
	if (setenv("PYTHONPATH", path, 1) || setenv("HEISEN_GC_STRESS", s.gc_stress, 1)) {
		hr_err("out of memory");
		return -1;
	}
	return 0;
}

int hr_shape_env(struct hr_run *r)
{
	if (s.cpus && shape_cpus(r) < 0)
		return -1;
	if (s.gc_stress && shape_gc() < 0)
		return -1;
	if ((s.mem_limit || s.cpu_quota > 0) && hr_cgroup_enter(s.mem_limit, s.cpu_quota) < 0)
		return -1;
	int seeded = s.fail[0] || s.fail_after || s.heap_limit[0] || s.chaos;
	if (!s.seed_given && !seeded)
		return 0;
	int chosen = !s.seed_given;
	char buf[32];
	snprintf(buf, sizeof buf, "%llu", (unsigned long long)hr_shape_seed());
	if (chosen && !r->quiet)
		fprintf(stderr, HR_NAME ": seed %s (replay with --seed %s)\n", buf, buf);
	int rc = setenv("HEISEN_SEED", buf, 1);
	if (s.fail_after && !s.fail[0])
		add_fail("malloc:0");
	if (s.fail[0])
		rc |= setenv("HEISEN_FAIL", s.fail, 1);
	if (s.fail_after)
		rc |= setenv("HEISEN_FAIL_AFTER", s.fail_after, 1);
	if (s.heap_limit[0])
		rc |= setenv("HEISEN_HEAP_LIMIT", s.heap_limit, 1);
	if (s.chaos)
		rc |= setenv("HEISEN_CHAOS", "1", 1);
	/* Python's string hashes (dict and set sizes, so its allocations) from the
	 * seed too, unless the user fixed them */
	if (!getenv("PYTHONHASHSEED")) {
		char h[16];
		snprintf(h, sizeof h, "%llu", (unsigned long long)(hr_shape_seed() % 4294967296ull));
		rc |= setenv("PYTHONHASHSEED", h, 1);
	}
	if (rc) {
		hr_err("out of memory");
		return -1;
	}
	return 0;
}

/* A run that injected faults and then exited non-zero ended abnormally:
 * its report names the injected failures (dumper/faults.h). */
int hr_shape_abnormal(int wait_status)
{
	int faults = s.fail[0] || s.fail_after || s.heap_limit[0];
	return faults && WIFEXITED(wait_status) && WEXITSTATUS(wait_status) != 0;
}

void hr_shape_usage(FILE *f)
{
	fprintf(f,
		"\n"
		"Shaping a run (deterministic by seed; each passes to every run of a driver):\n"
		"  --seed S              the seed of heisen's own decisions (HEISEN_SEED); a driver's\n"
		"                        run k gets S+k\n"
		"  --fail FN[:P[:ERRNO]] FN = malloc|open|close fails with probability P (default 1)\n"
		"                        and ERRNO (a name or number; default ENOMEM, EMFILE, EIO);\n"
		"                        malloc>=SIZE: only allocations of SIZE bytes or more;\n"
		"                        may be repeated; each injected failure is an event in the\n"
		"                        ring with its stack, named in the report\n"
		"  --fail-after N        the Nth call of those functions fails (default: malloc);\n"
		"                        later ones with probability P\n"
		"  --heap-limit SIZE     allocations that would take the live heap past SIZE (k/M/G)\n"
		"                        return NULL/ENOMEM (Python raises MemoryError)\n"
		"  --chaos SEED          perturb scheduling at locks, the GIL, thread start, malloc,\n"
		"                        free and close from SEED: victim threads sleep 1-16 ms at\n"
		"                        their lock points, others yield, nap or change CPU\n"
		"  --cpus N              tell the program it has N CPUs (sysconf, get_nprocs,\n"
		"                        os.cpu_count()) and run it on N of ours when we have them\n"
		"  --gc-stress[=T]       Python: gc.set_threshold(T) (default 1), so finalizers run\n"
		"                        at arbitrary points\n"
		"  --mem-limit SIZE      run CMD in a new memory cgroup limited to SIZE (k/M/G), no swap\n"
		"  --cpu-quota Q         run CMD in a new cpu cgroup with a quota of Q CPUs (e.g. 0.5)\n"
		"                        (both: v2 where mounted, else v1; made and removed here)\n");
}
