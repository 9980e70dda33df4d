/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_heap.c — the heap checker (shim/heap_core.c) from inside a
 * process that runs under libheisen.so with HEISEN_HEAP=1: every allocation
 * entry point's alignment, realloc and malloc_usable_size, calloc's zeroing
 * and overflow, errno across free, and the findings as they land in the
 * process's own segment: a double free with its three stacks, two threads
 * racing to free one block (exactly one report per race), an overflow by
 * one byte, invalid frees, and a foreign pointer that must pass untouched.
 * A second child checks that HEISEN_ON_HEAP_ERROR=abort records, then dies
 * of SIGABRT.
 *
 * Usage: test_heap /path/to/libheisen.so — it re-executes itself with the
 * library preloaded and a fresh session directory.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "heisen/format.h"

extern void *__libc_malloc(size_t);

static int failures, checks;
#define CHECK(cond)                                                                              \
	do {                                                                                     \
		checks++;                                                                        \
		if (!(cond)) {                                                                   \
			failures++;                                                              \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                                \
	} while (0)

/* The segment of process pid's image in the session, mapped read-only. */
static const struct hs_header *segment_of(pid_t pid, int image)
{
	char path[4096];
	struct stat st;
	void *m;
	int fd;
	snprintf(path, sizeof path, "%s/%d.%d.seg", getenv("HEISEN_DIR"), (int)pid, image);
	fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) != 0) {
		perror(path);
		exit(2);
	}
	m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
	close(fd);
	if (m == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	return m;
}

static const struct hs_finding *finding(const struct hs_header *h, uint32_t i)
{
	return (const struct hs_finding *)((const char *)h + h->tables[HS_T_FINDINGS].offset +
					   (uint64_t)i * h->tables[HS_T_FINDINGS].entry_size);
}

static uint32_t nfindings(const struct hs_header *h)
{
	uint32_t n = __atomic_load_n(&h->tables[HS_T_FINDINGS].count, __ATOMIC_ACQUIRE);
	return n < h->tables[HS_T_FINDINGS].capacity ? n : h->tables[HS_T_FINDINGS].capacity;
}

/* The finding of kind about addr, NULL when there is none. */
static const struct hs_finding *find(const struct hs_header *h, unsigned kind, const void *addr)
{
	for (uint32_t i = 0; i < nfindings(h); i++) {
		const struct hs_finding *f = finding(h, i);
		if (f->ready == 1 && f->kind == kind && f->addr == (uint64_t)(uintptr_t)addr)
			return f;
	}
	return NULL;
}

/* Times findings of kind were seen (duplicates fold into a count). */
static uint64_t seen(const struct hs_header *h, unsigned kind)
{
	uint64_t n = 0;
	for (uint32_t i = 0; i < nfindings(h); i++)
		if (finding(h, i)->ready == 1 && finding(h, i)->kind == kind)
			n += finding(h, i)->count;
	return n;
}

static const struct hs_header *self;

/* ---- allocation entry points ------------------------------------------------ */

static void fill_and_free(void *p, size_t n)
{
	memset(p, 0x5a, n);
	free(p);
}

static void test_alignments(void)
{
	size_t page = (size_t)sysconf(_SC_PAGESIZE);
	uint64_t before = seen(self, HS_FIND_HEAP_OVERFLOW) + seen(self, HS_FIND_INVALID_FREE);
	for (size_t a = sizeof(void *); a <= 65536; a <<= 1) {
		void *p = NULL;
		CHECK(posix_memalign(&p, a, 100) == 0 && p && ((uintptr_t)p & (a - 1)) == 0);
		CHECK(malloc_usable_size(p) == 100);
		fill_and_free(p, 100);
		p = aligned_alloc(a, 3 * a);
		CHECK(p && ((uintptr_t)p & (a - 1)) == 0);
		fill_and_free(p, 3 * a);
		p = memalign(a, 1);
		CHECK(p && ((uintptr_t)p & (a - 1)) == 0);
		fill_and_free(p, 1);
	}
	{
		void *p = (void *)1;
		int e;
		errno = 77;
		CHECK(posix_memalign(&p, 24, 10) == EINVAL && p == (void *)1);
		CHECK(posix_memalign(&p, 0, 10) == EINVAL);
		e = posix_memalign(&p, 64, SIZE_MAX - 100);
		CHECK(e == ENOMEM && errno == 77);
		p = memalign(24, 10); /* glibc rounds up to a power of two */
		CHECK(p && ((uintptr_t)p & 31) == 0);
		fill_and_free(p, 10);
	}
	for (size_t n = 0; n < 200; n += 17) {
		char *p = malloc(n);
		CHECK(p && ((uintptr_t)p & 15) == 0 && malloc_usable_size(p) == n);
		fill_and_free(p, n);
	}
	{
		void *v = valloc(10), *pv = pvalloc(10);
		CHECK(v && ((uintptr_t)v & (page - 1)) == 0 && malloc_usable_size(v) == 10);
		CHECK(pv && ((uintptr_t)pv & (page - 1)) == 0 && malloc_usable_size(pv) == page);
		fill_and_free(v, 10);
		fill_and_free(pv, page);
	}
	CHECK(seen(self, HS_FIND_HEAP_OVERFLOW) + seen(self, HS_FIND_INVALID_FREE) == before);
}

static void test_realloc_calloc(void)
{
	unsigned char *p = malloc(10), *q;
	int *z;
	for (int i = 0; i < 10; i++)
		p[i] = (unsigned char)i;
	q = realloc(p, 5000);
	CHECK(q && malloc_usable_size(q) == 5000);
	for (int i = 0; i < 10; i++)
		CHECK(q[i] == i);
	memset(q + 10, 0xee, 4990);
	p = realloc(q, 3);
	CHECK(p && malloc_usable_size(p) == 3 && p[0] == 0 && p[2] == 2);
	q = reallocarray(p, 4, 8);
	CHECK(q && malloc_usable_size(q) == 32 && q[1] == 1);
	errno = 0;
	CHECK(reallocarray(q, SIZE_MAX / 2, 3) == NULL && errno == ENOMEM);
	CHECK(q[2] == 2); /* untouched by the failed call */
	CHECK(realloc(q, 0) == NULL); /* glibc: frees */
	q = realloc(NULL, 7);
	CHECK(q && malloc_usable_size(q) == 7);
	free(q);

	z = calloc(1000, sizeof *z);
	CHECK(z != NULL);
	for (int i = 0; i < 1000; i++)
		if (z[i] != 0) {
			CHECK(!"calloc not zeroed");
			break;
		}
	free(z);
	errno = 0;
	CHECK(calloc(SIZE_MAX / 4, 8) == NULL && errno == ENOMEM);
	errno = 0;
	CHECK(malloc(SIZE_MAX - 8) == NULL && errno == ENOMEM);
	CHECK(__atomic_load_n(&self->heap_failures, __ATOMIC_RELAXED) >= 1);
	CHECK(__atomic_load_n(&self->heap_last_fail_size, __ATOMIC_RELAXED) == SIZE_MAX - 8);
}

/* Balanced malloc(8)/free pairs: enough operations for a thread's counts to reach the header. */
static void churn_pairs(void)
{
	for (int i = 0; i < 130; i++)
		free(malloc(8));
}

static void test_errno_and_counters(void)
{
	char *p = malloc(123);
	uint64_t live, now;
	churn_pairs(); /* each thread adds its counts to the header every 64 operations */
	live = __atomic_load_n(&self->heap_live_bytes, __ATOMIC_RELAXED);
	CHECK(self->flags & HS_HDR_HEAP);
	CHECK(self->heap_stacks == HS_HEAP_STACKS_SITE);
	CHECK(self->heap_allocs > 0 && live >= 123 && self->heap_peak_bytes >= live);
	errno = 1234;
	free(p);
	CHECK(errno == 1234);
	churn_pairs();
	/* exact but for a pair split by a flush (8 bytes either way) */
	now = __atomic_load_n(&self->heap_live_bytes, __ATOMIC_RELAXED);
	CHECK(now + 123 >= live - 8 && now + 123 <= live + 8);
	errno = 4321;
	p = malloc(5);
	CHECK(errno == 4321);
	free(p);
}

/* ---- findings ---------------------------------------------------------------- */

static __attribute__((noinline)) void *alloc_here(size_t n) { return malloc(n); }
static __attribute__((noinline)) void free_first(void *p) { free(p); }
static __attribute__((noinline)) void free_second(void *p) { free(p); }

static void test_double_free(void)
{
	char *p = alloc_here(4096);
	const struct hs_finding *f;
	void *other[64];
	free_first(p);
	for (int i = 0; i < 64; i++) /* allocations in between: the block stays in quarantine */
		other[i] = malloc(4096);
	free_second(p); /* HEISEN_ON_HEAP_ERROR=continue: reported, skipped */
	for (int i = 0; i < 64; i++)
		free(other[i]);
	f = find(self, HS_FIND_DOUBLE_FREE, p);
	CHECK(f != NULL);
	if (!f)
		return;
	CHECK(f->size == 4096);
	CHECK(f->stack != 0 && f->stack2 != 0 && f->stack3 != 0);
	CHECK(f->stack != f->stack2 && f->stack2 != f->stack3);
	CHECK(f->tid == getpid() && f->tid2 == getpid() && f->tid3 == getpid());
}

#define RACES 200
static pthread_barrier_t race_bar;
static void *race_block[RACES];

static void *racer(void *arg)
{
	(void)arg;
	for (int i = 0; i < RACES; i++) {
		pthread_barrier_wait(&race_bar);
		free(race_block[i]);
		pthread_barrier_wait(&race_bar);
	}
	return NULL;
}

static void test_racing_free(void)
{
	pthread_t a, b;
	uint64_t before = seen(self, HS_FIND_DOUBLE_FREE);
	for (int i = 0; i < RACES; i++)
		race_block[i] = malloc(48);
	pthread_barrier_init(&race_bar, NULL, 2);
	pthread_create(&a, NULL, racer, NULL);
	pthread_create(&b, NULL, racer, NULL);
	pthread_join(a, NULL);
	pthread_join(b, NULL);
	/* one winner and one double free per block, never two or none */
	CHECK(seen(self, HS_FIND_DOUBLE_FREE) - before == RACES);
}

static void test_overflow(void)
{
	char *p = malloc(13);
	char *volatile end = p + 13;
	const struct hs_finding *f;
	*end = 'x';
	free(p);
	f = find(self, HS_FIND_HEAP_OVERFLOW, p);
	CHECK(f != NULL && f->size == 13 && f->stack != 0 && f->stack3 != 0);
}

/* Overflows found either way: a broken canary (or a sampled block's
 * broken slack) at the free, or a sampled block's guard page at once. */
static uint64_t overflows(void)
{
	return seen(self, HS_FIND_HEAP_OVERFLOW) + seen(self, HS_FIND_HEAP_BUFFER_OVERFLOW);
}

/* Every size across both formats (a small block's canary is glibc's slack,
 * 1 to 15 bytes, stored masked into the word it shares with the last user
 * bytes; none when the block fills its chunk exactly, where the byte past
 * it is glibc's size word of the next chunk): calloc's zeros survive it, a
 * block written to its last byte is no finding, and one byte past it
 * always is, whether the block was sampled for a guard page
 * (HEISEN_GUARD_RATE: about one in 5000 is, so a run of 2200 allocations
 * often has one) or not.  The byte is put back after the free that found
 * it: past an exact fit it is glibc's, as it is natively, and glibc would
 * stop the run at that next chunk. */
static void test_overflow_every_size(void)
{
	uint64_t before = overflows();
	int not_zero = 0;
	for (size_t n = 1; n <= 1100; n++) {
		unsigned char *q = calloc(1, n);
		for (size_t i = 0; i < n; i++)
			not_zero |= q[i] != 0;
		memset(q, 0xa1, n);
		free(q);
	}
	CHECK(not_zero == 0);
	CHECK(overflows() == before);
	for (size_t n = 1; n <= 1100; n++) {
		char *q = malloc(n);
		char *volatile end = q + n;
		char was = *end;
		memset(q, 'a', n);
		*end = 'x';
		free(q);
		*end = was; /* the block was kept from glibc: still allocated */
	}
	CHECK(overflows() == before + 1100);
}

static void test_invalid_and_foreign(void)
{
	char *p = malloc(64), *q;
	const struct hs_finding *f;
	uint64_t inv = seen(self, HS_FIND_INVALID_FREE), dbl = seen(self, HS_FIND_DOUBLE_FREE);
	free(p + 16); /* the middle of a block */
	f = find(self, HS_FIND_INVALID_FREE, p + 16);
	CHECK(f != NULL && f->size == 64 && f->offset == 16 && f->stack3 != 0);
	free(p + 3); /* misaligned */
	CHECK(find(self, HS_FIND_INVALID_FREE, p + 3) != NULL);
	free(p); /* the block itself is still fine */
	CHECK(seen(self, HS_FIND_INVALID_FREE) == inv + 2);

	q = __libc_malloc(100); /* foreign: glibc's own */
	memset(q, 0, 100);
	CHECK(malloc_usable_size(q) >= 100);
	q = realloc(q, 200);
	CHECK(q != NULL);
	free(q);
	CHECK(seen(self, HS_FIND_INVALID_FREE) == inv + 2 && seen(self, HS_FIND_DOUBLE_FREE) == dbl);
}

/* ---- HEISEN_ON_HEAP_ERROR=abort in a child ----------------------------------- */

static int abort_child(void)
{
	char *p = alloc_here(100);
	free_first(p);
	free_second(p);
	return 0; /* not reached */
}

static void test_abort(const char *exe)
{
	pid_t pid = fork();
	int status;
	if (pid == 0) {
		setenv("HEISEN_ON_HEAP_ERROR", "abort", 1);
		execl(exe, exe, "abort-child", (char *)NULL);
		_exit(127);
	}
	CHECK(waitpid(pid, &status, 0) == pid);
	CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT);
	{
		const struct hs_header *h = segment_of(pid, 1); /* image 1: the fork's own is 0 */
		CHECK(seen(h, HS_FIND_DOUBLE_FREE) == 1);
		CHECK(seen(h, HS_FIND_CRASH) == 1);
	}
}

/* Remove the run's HEISEN_DIR (its segments, 5 MiB each, and its
 * .environment): the directory is this run's own (mkdtemp below), and
 * every run left one in /tmp before. */
static void remove_run_dir(const char *d)
{
	char path[4096];
	struct dirent *e;
	DIR *dp;
	if (!d || strncmp(d, "/tmp/heisen-test-heap-", 22) != 0 || !(dp = opendir(d)))
		return;
	while ((e = readdir(dp)) != NULL) {
		if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
			continue;
		snprintf(path, sizeof path, "%s/%s", d, e->d_name);
		unlink(path);
	}
	closedir(dp);
	rmdir(d);
}

int main(int argc, char **argv)
{
	if (argc == 2 && strcmp(argv[1], "abort-child") == 0)
		return abort_child();
	if (!getenv("HEISEN_HEAP_TEST_CHILD")) {
		char dir[] = "/tmp/heisen-test-heap-XXXXXX", lib[4096];
		if (argc < 2 || !realpath(argv[1], lib) || !mkdtemp(dir)) {
			fprintf(stderr, "usage: test_heap /path/to/libheisen.so\n");
			return 2;
		}
		setenv("HEISEN_HEAP_TEST_CHILD", "1", 1);
		setenv("LD_PRELOAD", lib, 1);
		setenv("HEISEN_DIR", dir, 1);
		setenv("HEISEN_HEAP", "1", 1);
		setenv("HEISEN_ON_HEAP_ERROR", "continue", 1);
		setenv("HEISEN_QUIET", "1", 1);
		unsetenv("HEISEN_HEAP_STACKS");
		unsetenv("HEISEN_QUARANTINE_MB");
		execl("/proc/self/exe", argv[0], (char *)NULL);
		perror("exec");
		return 2;
	}
	self = segment_of(getpid(), 0);
	test_alignments();
	test_realloc_calloc();
	test_errno_and_counters();
	test_double_free();
	test_racing_free();
	test_overflow();
	test_overflow_every_size();
	test_invalid_and_foreign();
	test_abort("/proc/self/exe");
	printf("test_heap: %d passed, %d failed\n", checks - failures, failures);
	remove_run_dir(getenv("HEISEN_DIR"));
	return failures ? 1 : 0;
}
