/* SPDX-License-Identifier: MIT */
/*
 * shim/proc.c — what a process saw and how much memory it used, kept where
 * a SIGKILL cannot take it away.
 *
 * The environment (struct hs_env, include/heisen/format.h) is read once,
 * when the segment is made: CPUs online and in the affinity mask, the
 * cgroup's CPU quota and memory limit (the tightest on the path up to the
 * controller's mount point), the memory cgroup's OOM-kill counter, /dev/shm,
 * rlimits, the kernel and the libc — what `docker inspect` and the cgroup
 * files would have said, for seed 002's "os.cpu_count() saw 24 cores of a
 * 4-CPU quota".  Every file is read through hs_sys (raw system calls: no
 * malloc, no stdio, no hooks of our own) and nothing is kept open.  A fork
 * child copies its parent's record (async-signal-safe) and reads only the
 * OOM-kill counter anew.
 *
 * Memory is sampled into the header (rss_*), so the last value before a
 * SIGKILL survives: /proc/self/statm for the resident set and getrusage()'s
 * ru_maxrss, the kernel's high-water mark, for the peak.  A sample costs a
 * few microseconds, so it is taken only when (a) a recorded event finds the
 * last sample older than HS_MEM_INTERVAL_NS (the check is one load and one
 * compare in hs_rec()), or (b) large allocations (malloc and mmap of at
 * least HS_MEM_BIG bytes, memhooks.c) have added up to 1/32 of the last
 * resident set since the last sample, at most once per HS_MEM_MIN_GAP_NS —
 * a process growing toward its limit is sampled as it grows; (c) at start,
 * exit, a crash and a terminating signal.  Open descriptors are counted at
 * most once per second with the samples, and at the end.  Where the idea
 * comes from: the OOM killer's own report (RSS per task) and atop's
 * per-process accounting, here written by the process itself.
 */
#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdlib.h>
#include <gnu/libc-version.h>
#include <limits.h>
#include <sched.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hooks.h"
#include "shim.h"

HS_HOT_BSS uint64_t hs_mem_next_ns;              /* [atomic] a time-driven sample is due at or after this */
HS_HOT_BSS static uint64_t mem_last_ns;          /* [atomic] when the last sample was taken */
HS_HOT_BSS static uint64_t mem_big;              /* [atomic] bytes of large allocations since then */
static uint64_t mem_step = 1u << 20;  /* [atomic] mem_big that makes a sample due */
HS_HOT_BSS static uint64_t mem_recheck;          /* [atomic] mem_big at which the gap is next judged on the precise clock */
static uint64_t mem_early_ns;         /* [atomic] when an owed sample was last let past the gap */
HS_HOT_BSS static int mem_owed;                  /* [atomic] the next recorded event takes a sample the gap held back */
HS_HOT_BSS static int mem_sampling;              /* [atomic] a sample is being taken (one at a time) */
HS_HOT_BSS static int32_t maxrss_pid;            /* the process maxrss_base is of: a fork child (another pid)
					 starts from 0 without a store of its own */
HS_HOT_BSS static uint64_t maxrss_base;          /* ru_maxrss (KiB) when this image started: exec keeps the
					 previous image's high-water mark there, so only a larger
					 value is this image's own (a fork child starts from 0) */
static uint64_t page_bytes = 4096;

/* ---- small parsers (no libc beyond string.h) -------------------------------- */

/* The unsigned decimal at *p, advancing *p; 0 when there is none. */
static uint64_t parse_u64(const char **p)
{
	uint64_t v = 0;
	while (**p >= '0' && **p <= '9')
		v = v * 10 + (uint64_t)(*(*p)++ - '0');
	return v;
}

/* The value of "key N" on a line of buf; 1 and *v when found. */
static int keyed(const char *buf, const char *key, uint64_t *v)
{
	size_t k = strlen(key);
	for (const char *p = buf; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		if (strncmp(p, key, k) == 0 && p[k] == ' ') {
			const char *q = p + k + 1;
			*v = parse_u64(&q);
			return 1;
		}
	}
	return 0;
}

/* CPUs in a sysfs list such as "0-3,8,10-11". */
static uint32_t count_cpu_list(const char *p)
{
	uint32_t n = 0;
	while (*p >= '0' && *p <= '9') {
		uint64_t a = parse_u64(&p), b = a;
		if (*p == '-') {
			p++;
			b = parse_u64(&p);
		}
		if (b >= a && b - a < 65536)
			n += (uint32_t)(b - a + 1);
		if (*p != ',')
			break;
		p++;
	}
	return n;
}

/* dst = a + b (+ c), cut to cap; returns dst. */
static char *join(char *dst, size_t cap, const char *a, const char *b, const char *c)
{
	size_t n = 0;
	for (const char *s[] = {a, b, c}, **q = s; q < s + 3; q++)
		for (const char *x = *q; x && *x && n + 1 < cap; x++)
			dst[n++] = *x;
	dst[n] = '\0';
	return dst;
}

/* A small file of dir, e.g. "<dir>/memory.max", into buf (cap bytes), its
 * path joined in the caller's path[pcap] (cut to fit); -1 when unreadable.
 * The caller sizes path: the start's deepest callers keep it small. */
static ssize_t read_in(char *path, size_t pcap, const char *dir, const char *file, char *buf, size_t cap)
{
	return hs_read_small(join(path, pcap, dir, "/", file), buf, cap);
}

/* Drop the last component of the cgroup directory dir (length *n); 0 when
 * that would reach the mount point (length root): the root cgroup has no
 * limits (v1's root files always say unlimited, v2's root has none). */
static int up(char *dir, size_t *n, size_t root)
{
	size_t k = *n;
	if (k <= root)
		return 0;
	while (k > root && dir[k - 1] != '/')
		k--;
	if (k > root)
		k--; /* the slash */
	if (k <= root)
		return 0;
	*n = k;
	dir[k] = '\0';
	return 1;
}

/* ---- cgroups ------------------------------------------------------------------ */

/*
 * The path of controller `ctl` in /proc/self/cgroup ("" for v2's "0::"
 * line) into out.  Returns 1 when found.
 */
static int cgroup_path(const char *self, const char *ctl, char *out, size_t cap)
{
	size_t k = strlen(ctl);
	for (const char *p = self; p && *p; p = strchr(p, '\n'), p = p ? p + 1 : NULL) {
		const char *c = strchr(p, ':'), *e, *nl;
		if (!c)
			break;
		e = strchr(c + 1, ':');
		nl = strchr(p, '\n');
		if (!e || (nl && e > nl))
			continue;
		/* the controllers field: k == 0 matches v2's empty one */
		for (const char *q = c + 1; q <= e;) {
			const char *end = memchr(q, ',', (size_t)(e - q));
			size_t len = (size_t)((end ? end : e) - q);
			if (len == k && strncmp(q, ctl, k) == 0) {
				size_t n = nl ? (size_t)(nl - e - 1) : strlen(e + 1);
				if (n >= cap)
					return 0;
				memcpy(out, e + 1, n);
				out[n] = '\0';
				return 1;
			}
			if (!end)
				break;
			q = end + 1;
		}
	}
	return 0;
}

/*
 * dir = mount + path when that directory exists, else mount itself (flag
 * HS_ENV_CGROUP_ROOT: a cgroup namespace, or a container whose own cgroup is
 * mounted at the root).  Returns the length of dir.
 */
static size_t cgroup_dir(char *dir, size_t cap, const char *mount, const char *path, uint32_t *flags)
{
	struct stat st;
	join(dir, cap, mount, strcmp(path, "/") == 0 ? "" : path, NULL);
	if (hs_sys.lstat(dir, &st) == 0 && S_ISDIR(st.st_mode))
		return strlen(dir);
	*flags |= HS_ENV_CGROUP_ROOT;
	join(dir, cap, mount, NULL, NULL);
	return strlen(dir);
}

/* A memory limit file's value: bytes, 0 for "max" or v1's "unlimited" (>= 2^62). */
static uint64_t limit_value(const char *buf)
{
	const char *p = buf;
	uint64_t v;
	if (*p < '0' || *p > '9')
		return 0;
	v = parse_u64(&p);
	return v >= (1ull << 62) ? 0 : v;
}

/* The tightest memory limit from dir up to, not including, the root cgroup
 * (root bytes of dir are the mount point). */
static uint64_t memory_limit(char *dir, size_t n, size_t root, unsigned version)
{
	char buf[64], path[PATH_MAX];
	uint64_t best = 0;
	if (n <= root)
		return 0;
	do {
		if (read_in(path, sizeof path, dir, version == 2 ? "memory.max" : "memory.limit_in_bytes", buf,
			    sizeof buf) > 0) {
			uint64_t v = limit_value(buf);
			if (v && (!best || v < best))
				best = v;
		}
	} while (up(dir, &n, root));
	return best;
}

/* The tightest CFS quota (quota/period) from dir up to, not including, the root cgroup. */
static void cpu_quota(char *dir, size_t n, size_t root, unsigned version, struct hs_env *e)
{
	char buf[64], path[PATH_MAX];
	if (n <= root)
		return;
	do {
		uint64_t q = 0, per = 0;
		const char *p = buf;
		if (version == 2) {
			/* "max 100000" or "400000 100000" */
			if (read_in(path, sizeof path, dir, "cpu.max", buf, sizeof buf) > 0 && *p >= '0' && *p <= '9') {
				q = parse_u64(&p);
				if (*p == ' ')
					p++;
				per = parse_u64(&p);
			}
		} else if (read_in(path, sizeof path, dir, "cpu.cfs_quota_us", buf, sizeof buf) > 0 && *p >= '0' &&
			   *p <= '9') {
			/* "-1" = none */
			q = parse_u64(&p);
			p = buf;
			if (read_in(path, sizeof path, dir, "cpu.cfs_period_us", buf, sizeof buf) > 0)
				per = parse_u64(&p);
		}
		/* q/per < best_q/best_per, without division */
		if (q && per &&
		    (!e->cpu_quota_us || (__uint128_t)q * e->cpu_period_us < (__uint128_t)e->cpu_quota_us * per)) {
			e->cpu_quota_us = q;
			e->cpu_period_us = per;
		}
	} while (up(dir, &n, root));
}

int hs_oom_kills_read(const struct hs_env *e, uint64_t *out)
{
	/* the directory is shorter than mem_cgroup (tested below), so the path
	   needs that and a file name, not PATH_MAX: this runs at every start, at
	   the deepest point of the segment's creation, where each 4 KiB of stack
	   is a fresh page (bench/README.md "Process start: page-table pages") */
	char buf[512], path[sizeof e->mem_cgroup + 32];
	size_t n = strnlen(e->mem_cgroup, sizeof e->mem_cgroup);
	if (e->cgroup == 0 || n == 0 || n == sizeof e->mem_cgroup)
		return -1;
	if (read_in(path, sizeof path, e->mem_cgroup, e->cgroup == 2 ? "memory.events" : "memory.oom_control", buf,
		    sizeof buf) <= 0)
		return -1;
	return keyed(buf, "oom_kill", out) ? 0 : -1;
}

/* The memory and cpu controllers from self (/proc/self/cgroup): version,
 * directories, limits.  The OOM-kill counter is the caller's.  Not inlined:
 * its ~8 KiB of path buffers stay off the stack of an image that takes the
 * environment cache (fewer fresh stack pages at every start). */
static __attribute__((noinline)) void read_cgroups(struct hs_env *e, const char *self)
{
	static const char *const cpu_mounts[] = {"/sys/fs/cgroup/cpu", "/sys/fs/cgroup/cpu,cpuacct",
						 "/sys/fs/cgroup/cpuacct,cpu"};
	char path[HS_CGROUP_PATH_MAX], dir[PATH_MAX];
	struct stat st;
	size_t n;
	if (hs_sys.lstat("/sys/fs/cgroup/cgroup.controllers", &st) == 0) {
		/* the unified hierarchy (v2) */
		if (!cgroup_path(self, "", path, sizeof path))
			return;
		n = cgroup_dir(dir, sizeof dir, "/sys/fs/cgroup", path, &e->flags);
		e->cgroup = 2;
		e->mem_cgroup_root = (uint32_t)strlen("/sys/fs/cgroup");
		cpu_quota(dir, n, e->mem_cgroup_root, 2, e);
		n = cgroup_dir(dir, sizeof dir, "/sys/fs/cgroup", path, &e->flags);
	} else {
		if (cgroup_path(self, "cpu", path, sizeof path))
			for (size_t i = 0; i < sizeof cpu_mounts / sizeof cpu_mounts[0]; i++) {
				uint32_t ignore = 0;
				if (hs_sys.lstat(cpu_mounts[i], &st) != 0)
					continue;
				n = strcmp(path, "/") == 0 ? strlen(join(dir, sizeof dir, cpu_mounts[i], NULL, NULL))
							   : cgroup_dir(dir, sizeof dir, cpu_mounts[i], path, &ignore);
				cpu_quota(dir, n, strlen(cpu_mounts[i]), 1, e);
				break;
			}
		if (!cgroup_path(self, "memory", path, sizeof path) ||
		    hs_sys.lstat("/sys/fs/cgroup/memory", &st) != 0)
			return;
		n = cgroup_dir(dir, sizeof dir, "/sys/fs/cgroup/memory", path, &e->flags);
		e->cgroup = 1;
		e->mem_cgroup_root = (uint32_t)strlen("/sys/fs/cgroup/memory");
	}
	if (n >= sizeof e->mem_cgroup) {
		e->cgroup = 0;
		e->mem_cgroup_root = 0;
		return;
	}
	memcpy(e->mem_cgroup, dir, n + 1);
	e->mem_limit = memory_limit(dir, n, e->mem_cgroup_root, e->cgroup);
}

/* ---- the environment ------------------------------------------------------------ */

static uint64_t rlim(int resource, uint64_t *hard)
{
	struct rlimit rl;
	if (hs_sys.getrlimit(resource, &rl) != 0)
		return 0;
	if (hard)
		*hard = rl.rlim_max == RLIM_INFINITY ? HS_UNLIMITED : rl.rlim_max;
	return rl.rlim_cur == RLIM_INFINITY ? HS_UNLIMITED : rl.rlim_cur;
}

/* The inode in "cgroup:[4026531835]" (readlink of /proc/self/ns/cgroup); 0 = unknown. */
static uint32_t cgroup_ns_inode(void)
{
	char buf[64];
	ssize_t n = hs_sys.readlink("/proc/self/ns/cgroup", buf, sizeof buf - 1);
	const char *p = buf;
	if (n <= 0)
		return 0;
	buf[n] = '\0';
	while (*p && *p != '[')
		p++;
	if (*p != '[')
		return 0;
	p++;
	return (uint32_t)parse_u64(&p);
}

/*
 * The environment cache: the facts that cost file reads (CPUs online, the
 * cgroup version, directories, CPU quota and memory limit: five to ten
 * files of /sys, four lstats, ~40 us per image on the measuring VM) are
 * shared by the processes of a session through one small file in the
 * session directory, HS_ENV_CACHE_FILE.  A process takes them from there
 * when the file was written at most HS_ENV_CACHE_NS ago by a process whose
 * /proc/self/cgroup read the same, byte for byte, in the same cgroup
 * namespace (both read anew by every image: one file and one readlink);
 * else it reads them itself and writes the file anew after its segment is
 * named (so a session's first file is still its first segment).  What each
 * process reads itself always: the OOM-kill counter (its value at this
 * process's start), the affinity, rlimits, RAM, /dev/shm, kernel and libc.
 * So a limit changed less than HS_ENV_CACHE_NS before an image starts may
 * be reported at its old value (README "Processes").  A torn or foreign
 * file fails its checksum and counts as absent.  Where the idea comes
 * from: the fork child's copy of its parent's record (hs_env_inherit),
 * extended to exec'd images, with the cgroup text as the key because a
 * container runtime moves a process between its fork and its exec.
 * docs/design.md "Processes".
 */
#define ENV_CACHE_MAGIC "HSENVC02"
struct env_cache {
	char magic[8];
	uint64_t read_ns;          /* CLOCK_MONOTONIC before the facts were read */
	uint32_t cgroup_ns;        /* the reader's cgroup namespace inode */
	uint32_t self_len;         /* bytes of self */
	uint32_t cpu_online, cgroup, flags, mem_cgroup_root; /* struct hs_env's; flags: HS_ENV_CGROUP_ROOT only */
	uint64_t cpu_quota_us, cpu_period_us, mem_limit;
	char mem_cgroup[HS_CGROUP_PATH_MAX];
	char self[2048];           /* /proc/self/cgroup as it was read */
	uint64_t sum;              /* env_cache_sum of every word above */
};
/* What this image read itself, for hs_env_cache_store (touched only then:
 * an image that takes the cache reads it into its stack) */
static struct env_cache env_rec;
static int env_rec_fresh; /* env_rec holds this image's own facts, not yet stored */

/* FNV-1a over the record's 64-bit words, not its bytes: the record is
 * ~2.4 KiB and every image checks it (byte by byte it was ~24,000
 * instructions a start); a word-wise FNV still changes with any changed
 * byte, which is all a torn or foreign file needs (the magic says which
 * sum: HSENVC02). */
static uint64_t env_cache_sum(const struct env_cache *c)
{
	const unsigned char *p = (const unsigned char *)c;
	uint64_t h = 0xcbf29ce484222325ull, w;
	_Static_assert(offsetof(struct env_cache, sum) % sizeof w == 0, "the sum covers whole words");
	for (size_t i = 0; i < offsetof(struct env_cache, sum); i += sizeof w) {
		memcpy(&w, p + i, sizeof w);
		h = (h ^ w) * 0x100000001b3ull;
		h ^= h >> 29; /* the high bits of a word reach the low ones */
	}
	return h;
}

/* 1 when cache_path holds facts this process may take (see above), copied
 * into e.  Not inlined: its 2.4 KiB copy of the file is off the stack while
 * the caller reads the rest (fewer fresh stack pages at every start). */
static __attribute__((noinline)) int env_cache_take(struct hs_env *e, const char *cache_path, const char *self, size_t self_len,
			  uint32_t ns, uint64_t now)
{
	struct env_cache rec, *c = &rec;
	int fd = hs_sys.open(cache_path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC, 0);
	ssize_t n;
	if (fd < 0)
		return 0;
	n = hs_sys.pread(fd, c, sizeof *c, 0);
	hs_sys.close(fd);
	if (n != (ssize_t)sizeof *c || memcmp(c->magic, ENV_CACHE_MAGIC, sizeof c->magic) != 0 ||
	    c->sum != env_cache_sum(c) || c->cgroup_ns != ns || c->self_len != self_len ||
	    memcmp(c->self, self, self_len) != 0 || c->read_ns > now || now - c->read_ns > HS_ENV_CACHE_NS ||
	    memchr(c->mem_cgroup, '\0', sizeof c->mem_cgroup) == NULL)
		return 0;
	e->cpu_online = c->cpu_online;
	e->cgroup = c->cgroup;
	e->flags |= c->flags & HS_ENV_CGROUP_ROOT;
	e->mem_cgroup_root = c->mem_cgroup_root;
	e->cpu_quota_us = c->cpu_quota_us;
	e->cpu_period_us = c->cpu_period_us;
	e->mem_limit = c->mem_limit;
	memcpy(e->mem_cgroup, c->mem_cgroup, sizeof e->mem_cgroup);
	return 1;
}

void hs_env_cache_store(const char *cache_path)
{
	int fd;
	if (!env_rec_fresh || !cache_path)
		return;
	env_rec_fresh = 0;
	fd = hs_sys.open(cache_path, O_WRONLY | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0)
		return;
	env_rec.sum = env_cache_sum(&env_rec);
	(void)!hs_sys.pwrite(fd, &env_rec, sizeof env_rec, 0);
	hs_sys.close(fd);
}

void hs_env_read_cached(struct hs_env *e, const char *cache_path)
{
	char buf[256], self[sizeof env_rec.self];
	unsigned char mask[512];
	struct utsname u;
	struct sysinfo si;
	struct statfs sf;
	const char *libc = gnu_get_libc_version();
	ssize_t self_len;
	uint32_t ns;
	uint64_t now = hs_now();
	int nb;

	memset(e, 0, sizeof *e);
	env_rec_fresh = 0;
	self_len = hs_read_small("/proc/self/cgroup", self, sizeof self);
	if (self_len < 0)
		self_len = 0;
	ns = cgroup_ns_inode();
	if (!cache_path || !env_cache_take(e, cache_path, self, (size_t)self_len, ns, now)) {
		struct env_cache *c = &env_rec;
		if (hs_read_small("/sys/devices/system/cpu/online", buf, sizeof buf) > 0)
			e->cpu_online = count_cpu_list(buf);
		if (self_len > 0)
			read_cgroups(e, self);
		memset(c, 0, sizeof *c); /* every byte the checksum covers is defined */
		memcpy(c->magic, ENV_CACHE_MAGIC, sizeof c->magic);
		c->read_ns = now;
		c->cgroup_ns = ns;
		c->self_len = (uint32_t)self_len;
		c->cpu_online = e->cpu_online;
		c->cgroup = e->cgroup;
		c->flags = e->flags & HS_ENV_CGROUP_ROOT;
		c->mem_cgroup_root = e->mem_cgroup_root;
		c->cpu_quota_us = e->cpu_quota_us;
		c->cpu_period_us = e->cpu_period_us;
		c->mem_limit = e->mem_limit;
		memcpy(c->mem_cgroup, e->mem_cgroup, sizeof c->mem_cgroup);
		memcpy(c->self, self, (size_t)self_len);
		env_rec_fresh = cache_path != NULL;
	}
	if (e->cgroup) {
		e->cgroup_ns = ns;
		if (hs_oom_kills_read(e, &e->oom_kills) == 0)
			e->flags |= HS_ENV_OOM_COUNTER;
	}
	if ((nb = hs_sys.sched_getaffinity(sizeof mask, mask)) > 0)
		for (int i = 0; i < nb && i < (int)sizeof mask; i++)
			e->cpu_affinity += (uint32_t)__builtin_popcount(mask[i]);
	if (hs_sys.sysinfo(&si) == 0)
		e->mem_total = (uint64_t)si.totalram * (si.mem_unit ? si.mem_unit : 1);
	if (hs_sys.statfs("/dev/shm", &sf) == 0) {
		e->shm_size = (uint64_t)sf.f_blocks * (uint64_t)sf.f_frsize;
		e->shm_free = (uint64_t)sf.f_bavail * (uint64_t)sf.f_frsize;
	}
	e->nofile_soft = rlim(RLIMIT_NOFILE, &e->nofile_hard);
	e->as_soft = rlim(RLIMIT_AS, NULL);
	e->core_soft = rlim(RLIMIT_CORE, NULL);
	if (hs_sys.uname(&u) == 0)
		join(e->kernel, sizeof e->kernel, u.release, NULL, NULL);
	join(e->libc, sizeof e->libc, libc ? libc : "", NULL, NULL);
}

void hs_env_read(struct hs_env *e)
{
	hs_env_read_cached(e, NULL);
}

void hs_env_inherit(struct hs_env *e, const struct hs_env *parent)
{
	*e = *parent;
	/* the counter "at start" is this process's start, not its parent's */
	if (hs_oom_kills_read(e, &e->oom_kills) == 0)
		e->flags |= HS_ENV_OOM_COUNTER;
	else
		e->flags &= ~HS_ENV_OOM_COUNTER;
}

/* ---- memory and descriptors --------------------------------------------------- */

static int count_entry(void *arg, const char *name, unsigned type)
{
	(void)type;
	*(long *)arg += name[0] != '.';
	return 0;
}

/* Open descriptors of this process (the one reading them not counted); -1
 * when /proc/self/fd cannot be opened or read to its end (no sample then:
 * the header keeps its last one). */
static long count_fds(void)
{
	long n = 0;
	int fd = hs_sys.open("/proc/self/fd", O_RDONLY | O_DIRECTORY | O_CLOEXEC, 0), rc;
	if (fd < 0)
		return -1;
	rc = hs_dir_each(fd, count_entry, &n);
	hs_sys.close(fd);
	if (rc < 0)
		return -1;
	return n > 0 ? n - 1 : 0;
}

/*
 * Open descriptors as the fd table says (fd_core.c filled it from /proc/self/fd
 * at start): spares reading the directory a second time when the process
 * starts.  -1 when fds are not tracked or some number lies beyond the table.
 */
uint64_t hs_fd_seen[HS_FD_SEEN_WORDS];
uint32_t hs_fd_seen_words;

static long count_fds_tracked(const struct hs_header *h)
{
	const struct hs_table *t = &h->tables[HS_T_FDS];
	const struct hs_fd *fds = (const void *)((const char *)h + t->offset);
	uint32_t fd = 0;
	long n = 0;
	if (!(h->flags & HS_HDR_FDS) || __atomic_load_n(&h->fd_beyond, __ATOMIC_RELAXED))
		return -1;
	/* only the blocks this process wrote: the others are empty */
	while (hs_fd_seen_next(&fd, t->capacity))
		for (uint32_t end = fd + HS_FD_SEEN_BLOCK; fd < end && fd < t->capacity; fd++)
			n += __atomic_load_n(&fds[fd].state, __ATOMIC_RELAXED) == HS_FDS_OPEN;
	return n;
}

/*
 * The count of open descriptors for a sample (why: HS_MEMW_*).  The table's
 * count (count_fds_tracked) at the start sample: fd_core.c has just read
 * /proc/self/fd.  At exit, when the last count is less than
 * HS_FDS_INTERVAL_NS old, the table's count too: hs_fds_verify_open has just
 * asked the kernel about every descriptor the table says is open, so it is
 * exact for every descriptor made through a hooked call; one made by a raw
 * system call in that last interval is missed, as the time-driven count
 * misses it between two counts.  Spares a short process a second read of
 * /proc/self/fd (open, two getdents64, close).  Otherwise, and at a death by
 * signal (no verification ran), /proc/self/fd.  README "Processes".
 */
static void note_fds(struct hs_header *h, uint64_t now, unsigned why)
{
	long n = why == HS_MEMW_START ||
			 (why == HS_MEMW_EXIT && now - __atomic_load_n(&h->fds_sample_ns, __ATOMIC_RELAXED) <
							 HS_FDS_INTERVAL_NS)
		 ? count_fds_tracked(h)
		 : -1;
	if (n < 0)
		n = count_fds();
	if (n < 0)
		return;
	__atomic_store_n(&h->fds_open, (uint32_t)n, __ATOMIC_RELAXED);
	if ((uint32_t)n > __atomic_load_n(&h->fds_peak, __ATOMIC_RELAXED))
		__atomic_store_n(&h->fds_peak, (uint32_t)n, __ATOMIC_RELAXED);
	__atomic_store_n(&h->fds_sample_ns, now, __ATOMIC_RELAXED);
}

static int same_segment(const struct hs_tls *t)
{
	return t && t->slot && t->seg_gen == __atomic_load_n(&hs_seg_gen, __ATOMIC_ACQUIRE);
}

void hs_mem_sample(struct hs_tls *t, uint64_t now, unsigned why, uint64_t size)
{
	struct hs_header *h = hs_seg.hdr;
	char buf[128];
	struct rusage ru;
	uint64_t rss = 0, peak;
	const char *p = buf;
	int at_creation = 0;

	/* relaxed: a schedule, ordered with nothing else; a lost race costs one extra sample */
	__atomic_store_n(&hs_mem_next_ns, now + HS_MEM_INTERVAL_NS, __ATOMIC_RELAXED);
	if (!h || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	/* acquire: one sampler at a time; a signal handler that interrupts one skips */
	if (__atomic_exchange_n(&mem_sampling, 1, __ATOMIC_ACQUIRE))
		return;
	/* a vfork child (it shares our memory until it execs) must not write its numbers into
	   its parent's segment */
	if (h->pid != (int32_t)hs_sys.getpid()) {
		__atomic_store_n(&mem_sampling, 0, __ATOMIC_RELEASE);
		return;
	}
	/* an owed sample taken at a record's coarse time: never before the last sample */
	if (now < __atomic_load_n(&mem_last_ns, __ATOMIC_RELAXED))
		now = __atomic_load_n(&mem_last_ns, __ATOMIC_RELAXED);
	__atomic_store_n(&mem_big, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mem_recheck, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mem_owed, 0, __ATOMIC_RELAXED);
	__atomic_store_n(&mem_last_ns, now, __ATOMIC_RELAXED);
	if (why == HS_MEMW_START && !__atomic_load_n(&h->rss_samples, __ATOMIC_RELAXED) &&
	    (rss = __atomic_load_n(&h->rss_bytes, __ATOMIC_RELAXED)) != 0) {
		/* the start sample, the segment's first: the resident set its creation
		   read with the start time (/proc/self/stat field 24, a few hundred
		   microseconds ago), not a second /proc read (statm) */
		at_creation = 1;
	} else if (hs_read_small("/proc/self/statm", buf, sizeof buf) > 0) {
		/* "size resident shared text lib data dt", in pages */
		parse_u64(&p);
		if (*p == ' ')
			p++;
		rss = parse_u64(&p) * page_bytes;
	}
	peak = rss;
	/* an image's start sample: hs_proc_init read the high-water mark a few
	   hundred microseconds ago (maxrss_base, what it inherited across exec);
	   it counts only above that, and the resident set read at creation is
	   the peak so far: no second getrusage.  A fork child's start sample
	   (another pid) still asks, as every later sample does */
	if (!(at_creation && why == HS_MEMW_START && h->pid == maxrss_pid) &&
	    hs_sys.getrusage(RUSAGE_SELF, &ru) == 0 && (uint64_t)ru.ru_maxrss > (h->pid == maxrss_pid ? maxrss_base : 0) &&
	    (uint64_t)ru.ru_maxrss * 1024 > peak)
		peak = (uint64_t)ru.ru_maxrss * 1024;
	if (rss) {
		/* relaxed: counters read as a whole by the dumper, nothing else depends on them */
		__atomic_store_n(&h->rss_bytes, rss, __ATOMIC_RELAXED);
		__atomic_store_n(&h->rss_sample_ns, now, __ATOMIC_RELAXED);
		__atomic_add_fetch(&h->rss_samples, 1, __ATOMIC_RELAXED);
		__atomic_store_n(&mem_step, rss / 32 > (1u << 20) ? rss / 32 : (1u << 20), __ATOMIC_RELAXED);
		/* the ring's record right after the header's value, before the fd census
		   (/proc reads): a process the OOM killer takes in between would leave a
		   trail whose last sample is not the RSS its header reports */
		if (same_segment(t))
			hs_rec(t, now, HS_REC_MEMORY, 0, rss, __atomic_load_n(&h->heap_live_bytes, __ATOMIC_RELAXED),
			       (uint64_t)why | size << 8);
	}
	if (peak > __atomic_load_n(&h->rss_peak_bytes, __ATOMIC_RELAXED))
		__atomic_store_n(&h->rss_peak_bytes, peak, __ATOMIC_RELAXED);
	if (why != HS_MEMW_TIME && why != HS_MEMW_ALLOC)
		note_fds(h, now, why);
	else if (now - __atomic_load_n(&h->fds_sample_ns, __ATOMIC_RELAXED) >= HS_FDS_INTERVAL_NS)
		note_fds(h, now, HS_MEMW_TIME);
	/* release: our stores are done before another sampler may start */
	__atomic_store_n(&mem_sampling, 0, __ATOMIC_RELEASE);
}

int hs_mem_due(uint64_t n, uint64_t now, unsigned *why)
{
	uint64_t acc = __atomic_add_fetch(&mem_big, n, __ATOMIC_RELAXED), step, gap_end;
	/*
	 * The minimum gap is judged on the samples' clock.  now may be the coarse
	 * clock, and the coarse clock can lag the precise one by several ms (one
	 * tick, more when ticks are skipped: 9 ms seen under a VM): judged on it
	 * alone, a burst of allocations in the first few ms after a sample made no
	 * sample at all, and a thread that then went quiet (sleeping until a
	 * SIGKILL) left a last sample without its burst.  The coarse clock is
	 * never ahead, so when it says the gap is over it is; otherwise the
	 * precise one is read once per step of bytes (mem_recheck), not at every
	 * large allocation within the gap: a burst that goes on past the gap is
	 * sampled within one more step of bytes, as a burst is anywhere.
	 *
	 * Bytes held back by the gap are owed a sample: the next recorded event
	 * (hs_rec: a hooked lock, fd or GIL call) takes it at once, through
	 * hs_mem_next_ns, when no such early sample was taken in the last
	 * HS_MEM_INTERVAL_NS (mem_early_ns), else once the gap is over; a large
	 * allocation does not take it early (mem_owed), so the sample comes after
	 * the burst, not in its middle.  A thread that allocates right after a
	 * sample, takes a lock and sleeps until a SIGKILL so leaves its burst in
	 * its last sample; one that records nothing after the burst does not.
	 * docs/design.md "Processes".
	 */
	step = __atomic_load_n(&mem_step, __ATOMIC_RELAXED);
	if (acc >= step) {
		gap_end = __atomic_load_n(&mem_last_ns, __ATOMIC_RELAXED) + HS_MEM_MIN_GAP_NS;
		if (now >= gap_end)
			goto due;
		if (acc >= __atomic_load_n(&mem_recheck, __ATOMIC_RELAXED)) {
			if (hs_now() >= gap_end)
				goto due;
			/* relaxed: a racing thread costs one clock read, or an early sample, more or less */
			__atomic_store_n(&mem_recheck, acc + step, __ATOMIC_RELAXED);
			if (now >= __atomic_load_n(&mem_early_ns, __ATOMIC_RELAXED) + HS_MEM_INTERVAL_NS) {
				__atomic_store_n(&mem_early_ns, now, __ATOMIC_RELAXED);
				__atomic_store_n(&mem_owed, 1, __ATOMIC_RELAXED);
				__atomic_store_n(&hs_mem_next_ns, 0, __ATOMIC_RELAXED);
			} else if (gap_end < __atomic_load_n(&hs_mem_next_ns, __ATOMIC_RELAXED)) {
				__atomic_store_n(&hs_mem_next_ns, gap_end, __ATOMIC_RELAXED);
			}
		}
	}
	if (now >= __atomic_load_n(&hs_mem_next_ns, __ATOMIC_RELAXED) && !__atomic_load_n(&mem_owed, __ATOMIC_RELAXED)) {
		*why = HS_MEMW_TIME;
		return 1;
	}
	return 0;
due:
	*why = HS_MEMW_ALLOC;
	return 1;
}

void hs_proc_init(void)
{
	long pg = sysconf(_SC_PAGESIZE);
	struct rusage ru;
	if (pg > 0)
		page_bytes = (uint64_t)pg;
	if (hs_sys.getrusage(RUSAGE_SELF, &ru) == 0)
		maxrss_base = (uint64_t)ru.ru_maxrss;
	maxrss_pid = (int32_t)hs_sys.getpid();
	/* the start sample (HS_MEMW_START) comes after the first records: no time-driven one before it */
	__atomic_store_n(&hs_mem_next_ns, hs_now() + HS_MEM_INTERVAL_NS, __ATOMIC_RELAXED);
}

HS_FORK_TEXT void hs_proc_after_fork(void)
{
	/* a new process: its high-water mark is its own (it starts at the parent's RSS):
	   maxrss_base is not its (maxrss_pid); no store here, each page of ours a fork
	   child writes is a copy-on-write fault before its exec */
	if (__atomic_load_n(&mem_sampling, __ATOMIC_RELAXED)) /* a thread of the parent may have held it */
		__atomic_store_n(&mem_sampling, 0, __ATOMIC_RELAXED);
}

void hs_proc_end(struct hs_tls *t, unsigned why)
{
	struct hs_header *h = hs_seg.hdr;
	uint64_t now = hs_now(), v;
	if (!h || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE))
		return;
	hs_mem_sample(t, now, why, 0);
	if (why == HS_MEMW_EXIT && hs_oom_kills_read(&h->env, &v) == 0) {
		__atomic_store_n(&h->oom_kills_end, v, __ATOMIC_RELAXED);
		/* release: a reader that sees the time sees the value */
		__atomic_store_n(&h->oom_kills_end_ns, now, __ATOMIC_RELEASE);
	}
}

/* ---- privilege drops ---------------------------------------------------------- */

#ifndef HS_CORE_ONLY /* hooks: libheisen.so only, not the unit tests' core */

/*
 * After a successful setuid-family call: when the process can no longer
 * create files in its session directory (HEISEN_DIR, 0700 and owned by the
 * user who started the session — root under a container's heisen-run),
 * its later images (exec) and fork children cannot get segments, and its
 * own segment cannot be marked by a later image.  Its current segment stays
 * writable (the mapping was made before the drop), so it says so there, for
 * good: HS_HDR_UID_CHANGED and a HS_REC_UID_CHANGED record.  heisen-dump
 * then reports a `limit` finding for it instead of "killed without running
 * any code" or nothing.  gosu-style drops through raw system calls (Go's
 * syscall package) are not seen: README "Privilege drops".
 */
static void note_uid_change(void)
{
	struct hs_header *h = hs_seg.hdr;
	const char *dir = getenv("HEISEN_DIR");
	struct hs_tls *t;
	long r;
	int err;
	if (!h || !dir || !__atomic_load_n(&hs_recording, __ATOMIC_ACQUIRE) || h->pid != (int32_t)hs_sys.getpid())
		return;
	/* the effective ids decide what a new file may be created under: faccessat2's AT_EACCESS */
	r = hs_sys.access_dir(dir, W_OK | X_OK);
	if (r == 0)
		return;
	err = errno;
	__atomic_or_fetch(&h->flags, HS_HDR_UID_CHANGED, __ATOMIC_RELEASE);
	if ((t = hs_enter()) != NULL) {
		hs_rec(t, hs_now(), HS_REC_UID_CHANGED, 0, (uint64_t)hs_sys.getuid(), (uint64_t)hs_sys.geteuid(),
		       (uint64_t)err);
		hs_leave(t);
	}
}

HS_EXPORT int setuid(uid_t uid)
{
	int rc = HS_REAL(setuid)(uid);
	if (rc == 0)
		note_uid_change();
	return rc;
}

HS_EXPORT int seteuid(uid_t euid)
{
	int rc = HS_REAL(seteuid)(euid);
	if (rc == 0)
		note_uid_change();
	return rc;
}

HS_EXPORT int setreuid(uid_t ruid, uid_t euid)
{
	int rc = HS_REAL(setreuid)(ruid, euid);
	if (rc == 0)
		note_uid_change();
	return rc;
}

HS_EXPORT int setresuid(uid_t ruid, uid_t euid, uid_t suid)
{
	int rc = HS_REAL(setresuid)(ruid, euid, suid);
	if (rc == 0)
		note_uid_change();
	return rc;
}
#endif /* HS_CORE_ONLY */
