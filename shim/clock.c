/* SPDX-License-Identifier: MIT */
/*
 * shim/clock.c — the coarse clock read inline from the kernel's vDSO data
 * (hs_now_coarse, shim.h; docs/design.md "Cost").
 *
 * Every lock acquisition and release reads CLOCK_MONOTONIC_COARSE once.
 * The vDSO's clock_gettime costs about 2 ns a call on a 2-vCPU KVM guest
 * (its stack alignment, the clock id's decoding, the registers it clears
 * on return: bench/README.md "Python lock pairs that repeat, and the
 * coarse clock read inline"), more than
 * what it reads: for the coarse clocks the kernel keeps, in a read-only
 * page it maps into every process ([vvar] in /proc/self/maps), the
 * seconds and nanoseconds of its last tick under a sequence count, and
 * __vdso_clock_gettime(CLOCK_MONOTONIC_COARSE) only copies them out.
 * hs_now_coarse copies them itself: two loads between two reads of the
 * sequence count, no call.
 *
 * The page's layout is the kernel's (struct vdso_data in
 * include/vdso/datapage.h, struct vdso_clock since Linux 6.15), not an
 * ABI, so it is found, never assumed: only the first page of the mapping
 * /proc/self/maps names [vvar] is read (the data; the pages after it may
 * fault when read: a paravirtual clock's page on another hypervisor), and
 * a place is taken only when, at the offsets of one of the generic
 * layouts (the data at the page's start or 128 bytes in; a 32- or 40-byte
 * header before basetime[]: with or without max_cycles), the sequence count is even and the same before and after, the clock
 * mode is a small number (not a time namespace's), and basetime[] holds
 * exactly what clock_gettime answers at that moment for both
 * CLOCK_MONOTONIC_COARSE and CLOCK_REALTIME_COARSE (two 16-byte values
 * that no other place matches by chance).  Anything else -- no [vvar]
 * mapping or no /proc, another architecture, a kernel with another
 * layout, a time namespace -- leaves the state "none" and hs_now_coarse
 * calls the vDSO (or libc, where there is none: valgrind) as before.  Each read also checks the clock mode: a fork child that
 * enters a new time namespace (unshare(CLONE_NEWTIME) in its parent) has
 * a namespace page mapped at the same place, and falls back to the call.
 *
 * The search runs once per process, once a thread has made HS_VCLOCK_AFTER
 * coarse reads through the call (below): async-signal-safe (no allocation,
 * no lock; raw system calls).  Two threads may both run it: they find the
 * same place.
 */
#include <fcntl.h>
#include <string.h>
#include <time.h>

#include "shim.h"

struct hs_vclock hs_vclock;

/*
 * The search reads /proc/self/maps, which the kernel writes out whole: 20
 * to 90 us (a Python process, a loaded machine), the cost of some 20,000
 * lock pairs' calls.  A thread looks only after it has read the coarse
 * clock HS_VCLOCK_AFTER times through the call: a process that takes a few hundred locks (a
 * short script, a process start) never pays for it; a service taking
 * locks in a loop pays once.
 */
#define HS_VCLOCK_AFTER 65536u
static __thread uint32_t vclock_calls __attribute__((tls_model("initial-exec")));

#define VCLOCK_PAGE 4096u
#define VCLOCK_MODE_MAX 15          /* VDSO_CLOCKMODE_NONE, _TSC, _PVCLOCK, _HVCLOCK, ...; a time namespace's is INT_MAX */

/* 1 when seq (a page that stays mapped) at data offset d, basetime at d + h, is the coarse clocks' data. */
static int vclock_matches(const unsigned char *page, unsigned d, unsigned h)
{
	const uint32_t *seq = (const uint32_t *)(const void *)(page + d);
	const uint64_t *bt = (const uint64_t *)(const void *)(page + d + h);
	for (int tries = 0; tries < 8; tries++) {
		struct timespec mono, real;
		uint32_t s = __atomic_load_n(&seq[0], __ATOMIC_ACQUIRE);
		int32_t mode = (int32_t)__atomic_load_n(&seq[1], __ATOMIC_RELAXED);
		uint64_t ms, mn, rs, rn;
		if (s & 1)
			continue; /* a tick is being written */
		if (mode < 0 || mode > VCLOCK_MODE_MAX)
			return 0;
		ms = __atomic_load_n(&bt[2 * CLOCK_MONOTONIC_COARSE], __ATOMIC_RELAXED);
		mn = __atomic_load_n(&bt[2 * CLOCK_MONOTONIC_COARSE + 1], __ATOMIC_RELAXED);
		rs = __atomic_load_n(&bt[2 * CLOCK_REALTIME_COARSE], __ATOMIC_RELAXED);
		rn = __atomic_load_n(&bt[2 * CLOCK_REALTIME_COARSE + 1], __ATOMIC_RELAXED);
		if (clock_gettime(CLOCK_MONOTONIC_COARSE, &mono) != 0 || clock_gettime(CLOCK_REALTIME_COARSE, &real) != 0)
			return 0;
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (__atomic_load_n(&seq[0], __ATOMIC_RELAXED) != s)
			continue; /* a tick came in between: again */
		return ms == (uint64_t)mono.tv_sec && mn == (uint64_t)mono.tv_nsec && rs == (uint64_t)real.tv_sec &&
		       rn == (uint64_t)real.tv_nsec;
	}
	return 0;
}

/*
 * The start of this process's [vvar] mapping, from /proc/self/maps (raw
 * system calls, a buffer on the stack), or 0.
 */
static uintptr_t vvar_start(void)
{
	char buf[4096];
	size_t have = 0;
	uintptr_t found = 0;
	int fd = hs_sys.open("/proc/self/maps", O_RDONLY | O_CLOEXEC, 0);
	if (fd < 0)
		return 0;
	for (;;) {
		ssize_t n = hs_sys.read(fd, buf + have, sizeof buf - 1 - have);
		char *line = buf, *nl;
		if (n <= 0)
			break;
		have += (size_t)n;
		buf[have] = 0;
		while ((nl = memchr(line, '\n', have - (size_t)(line - buf))) != NULL) {
			*nl = 0;
			if (strstr(line, " [vvar]")) {
				uintptr_t a = 0;
				for (const char *c = line; (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'f'); c++)
					a = a * 16 + (uintptr_t)(*c <= '9' ? *c - '0' : *c - 'a' + 10);
				found = a;
				goto out;
			}
			line = nl + 1;
		}
		/* the partial line to the buffer's start (a line longer than the buffer is dropped) */
		have -= (size_t)(line - buf);
		if (have == sizeof buf - 1)
			have = 0;
		memmove(buf, line, have);
	}
out:
	hs_sys.close(fd);
	return found;
}

void hs_vclock_find(void)
{
	static const unsigned data_at[] = {0, 128}, header[] = {0x28, 0x20};
	uintptr_t vvar;
	if (__atomic_load_n(&hs_vclock.state, __ATOMIC_ACQUIRE) != 0)
		return;
#if defined(__x86_64__)
	/* only the mapping's first page is read: the data page (later ones may fault when read) */
	if ((vvar = vvar_start()) != 0 && vvar % VCLOCK_PAGE == 0)
		for (unsigned i = 0; i < sizeof data_at / sizeof data_at[0]; i++)
			for (unsigned j = 0; j < sizeof header / sizeof header[0]; j++)
				if (vclock_matches((const unsigned char *)vvar, data_at[i], header[j])) {
					hs_vclock.seq = (const uint32_t *)(vvar + data_at[i]);
					hs_vclock.mono = (const uint64_t *)(vvar + data_at[i] + header[j]) +
							 2 * CLOCK_MONOTONIC_COARSE;
					__atomic_store_n(&hs_vclock.state, 1, __ATOMIC_RELEASE);
					return;
				}
#else
	(void)vvar;
	(void)data_at;
	(void)header;
#endif
	__atomic_store_n(&hs_vclock.state, -1, __ATOMIC_RELEASE);
}

uint64_t hs_now_coarse_slow(void)
{
	struct timespec ts;
	int (*f)(clockid_t, struct timespec *) = hs_vdso_clock_gettime;
	int st = __atomic_load_n(&hs_vclock.state, __ATOMIC_ACQUIRE);
	if (st == 0 && ++vclock_calls >= HS_VCLOCK_AFTER) {
		hs_vclock_find();
		st = __atomic_load_n(&hs_vclock.state, __ATOMIC_ACQUIRE);
	}
	for (int tries = 0; st > 0 && tries < 64; tries++) {
		/* hs_now_coarse's read again, while a tick is written */
		const uint32_t *seq = hs_vclock.seq;
		uint32_t s = __atomic_load_n(&seq[0], __ATOMIC_ACQUIRE);
		uint32_t mode = __atomic_load_n(&seq[1], __ATOMIC_RELAXED);
		uint64_t sec = __atomic_load_n(&hs_vclock.mono[0], __ATOMIC_RELAXED);
		uint64_t nsec = __atomic_load_n(&hs_vclock.mono[1], __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_ACQUIRE);
		if (mode == HS_VCLOCK_MODE_TIMENS)
			break; /* a time namespace's page there now (a fork child's): the call */
		if (!(s & 1) && __atomic_load_n(&seq[0], __ATOMIC_RELAXED) == s)
			return sec * 1000000000ull + nsec;
	}
	if (HS_LIKELY(f != NULL) && HS_LIKELY(f(CLOCK_MONOTONIC_COARSE, &ts) == 0))
		return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
