/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_ring.c — the flight recorder's ring (hs_rec in
 * shim/shim.h) against a reader that follows format.h's protocol: a reader
 * racing the writer never accepts a torn record, records past the ring's
 * capacity are overwritten oldest first, and the head counts everything.
 * Also the segment's fallback when the session directory has no space
 * (through the swappable system-call table), and a fork child's inherited
 * tables copied file to file (hs_seg_copy_ranges).
 */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "unit.h"

#define RECORDS 64u
#define WRITES 2000000u

static struct hs_ring_header *ring;
static struct hs_record *recs;
static volatile int done;

/* The reader's side of the protocol in format.h; returns 1 when rec holds position pos. */
static int read_record(uint64_t pos, struct hs_record *out)
{
	struct hs_record *r = &recs[pos % RECORDS];
	uint64_t s1 = __atomic_load_n(&r->seq, __ATOMIC_ACQUIRE);
	if (s1 != pos + 1)
		return 0;
	out->ts_ns = r->ts_ns;
	out->type = r->type;
	out->stack = r->stack;
	out->a = r->a;
	out->b = r->b;
	out->c = r->c;
	__atomic_thread_fence(__ATOMIC_ACQUIRE);
	return __atomic_load_n(&r->seq, __ATOMIC_RELAXED) == s1;
}

static void *reader(void *arg)
{
	uint64_t *stats = arg; /* accepted, torn */
	while (!done) {
		uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
		uint64_t lo = head > RECORDS ? head - RECORDS : 0;
		for (uint64_t p = lo; p < head; p++) {
			struct hs_record r;
			if (!read_record(p, &r))
				continue;
			__atomic_add_fetch(&stats[0], 1, __ATOMIC_RELAXED);
			/* every field was written from p: a torn record would mix two positions */
			if (r.a != p || r.b != ~p || r.c != p * 3 || r.ts_ns != p + 7 || r.stack != (uint32_t)p)
				stats[1]++;
		}
	}
	return NULL;
}

/* A fresh private ring of RECORDS records in the globals ring/recs, and a
 * thread state t writing to it (its other fields zero). */
static void ring_new(struct hs_tls *t)
{
	ring = calloc(1, sizeof(struct hs_ring_header) + RECORDS * sizeof(struct hs_record));
	recs = (struct hs_record *)(ring + 1);
	memset(t, 0, sizeof *t);
	t->ring = ring;
	t->recs = recs;
	t->ring_mask = RECORDS - 1;
}

static void test_concurrent_reader(void)
{
	struct hs_tls t;
	pthread_t th;
	uint64_t stats[2] = {0, 0};
	struct hs_record r;

	ring_new(&t);
	pthread_create(&th, NULL, reader, stats);
	for (uint64_t p = 0; p < WRITES; p++) {
		hs_rec(&t, p + 7, HS_REC_LOCK_ACQUIRED, (uint32_t)p, p, ~p, p * 3);
		/* halfway, let a reader that was not scheduled yet (a loaded
		 * machine) accept something while writes go on: up to 10 s */
		for (int wait = 0; p == WRITES / 2 && wait < 10000 && !__atomic_load_n(&stats[0], __ATOMIC_RELAXED); wait++)
			usleep(1000);
	}
	done = 1;
	pthread_join(th, NULL);
	CHECK(stats[0] > 0);          /* the reader did see records while they were written */
	CHECK(stats[1] == 0);         /* and never a torn one */
	CHECK(ring->head == WRITES);
	/* after the writer stopped: exactly the newest RECORDS are readable */
	CHECK(!read_record(WRITES - RECORDS - 1, &r));
	CHECK(read_record(WRITES - RECORDS, &r) && r.a == WRITES - RECORDS);
	CHECK(read_record(WRITES - 1, &r) && r.a == WRITES - 1);
	/* a writer killed between invalidating and publishing leaves seq 0: skipped */
	recs[(WRITES - 1) % RECORDS].seq = 0;
	CHECK(!read_record(WRITES - 1, &r));
	free(ring);
}

/* ---- a release folded into its acquisition's record ------------------------ */

/* The writer's pattern at pair k: an acquisition of lock (k & 0xffff) + 1 at
 * 1000 k, then its release at 1000 k + k % 7 -- with another record between
 * them every third pair (not folded: a record of its own), and a release of
 * another lock every fifth (not this acquisition's: its own record). */
#define FOLD_PAIRS 400000u

static void *fold_reader(void *arg)
{
	uint64_t *stats = arg; /* plain, folded, wrong */
	while (!done) {
		uint64_t head = __atomic_load_n(&ring->head, __ATOMIC_ACQUIRE);
		uint64_t lo = head > RECORDS ? head - RECORDS : 0;
		for (uint64_t p = lo; p < head; p++) {
			struct hs_record *r = &recs[p % RECORDS], c;
			if (__atomic_load_n(&r->seq, __ATOMIC_ACQUIRE) != p + 1)
				continue;
			c.ts_ns = r->ts_ns;
			c.type = r->type;
			c.a = r->a;
			c.b = __atomic_load_n(&r->b, __ATOMIC_RELAXED); /* whole, as the dumper reads it */
			__atomic_thread_fence(__ATOMIC_ACQUIRE);
			if (__atomic_load_n(&r->seq, __ATOMIC_RELAXED) != p + 1 || c.type != HS_REC_LOCK_ACQUIRED)
				continue;
			uint64_t k = c.a, id = (k & 0xffff) + 1, fold = c.b >> HS_REC_FOLD_SHIFT;
			if ((c.b & 0xffffffffu) != id || c.ts_ns != 1000 * k)
				__atomic_add_fetch(&stats[2], 1, __ATOMIC_RELAXED);
			else if (fold == 0)
				__atomic_add_fetch(&stats[0], 1, __ATOMIC_RELAXED);
			else if (fold == k % 7 + 1 && k % 3 != 0 && k % 5 != 0)
				__atomic_add_fetch(&stats[1], 1, __ATOMIC_RELAXED);
			else /* a fold that should not have been, or a torn one */
				__atomic_add_fetch(&stats[2], 1, __ATOMIC_RELAXED);
		}
	}
	return NULL;
}

static void test_release_folded(void)
{
	struct hs_tls t;
	pthread_t th;
	uint64_t stats[3] = {0, 0, 0}, releases = 0, others = 0, last, misplaced = 0;
	struct hs_record r;

	ring_new(&t);
	done = 0;
	pthread_create(&th, NULL, fold_reader, stats);
	for (uint64_t k = 1; k <= FOLD_PAIRS; k++) {
		uint32_t id = (uint32_t)(k & 0xffff) + 1;
		hs_rec(&t, 1000 * k, HS_REC_LOCK_ACQUIRED, 0, k, id, 0);
		if (k % 3 == 0) {
			hs_rec(&t, 1000 * k, HS_REC_NEW_EDGE, 0, 1, 0, 0);
			others++;
		}
		if (k % 5 == 0) {
			hs_rec_released(&t, 1000 * k, k + 1, id + 1); /* another lock's release */
			releases++;
		}
		last = ring->head;
		hs_rec_released(&t, 1000 * k + k % 7, k, id);
		/* folded exactly when nothing came between (the ring's head did not move) */
		if (k % 3 != 0 && k % 5 != 0)
			misplaced += ring->head != last;
		else {
			misplaced += ring->head != last + 1;
			releases++;
		}
		for (int wait = 0; k == FOLD_PAIRS / 2 && wait < 10000 && !__atomic_load_n(&stats[1], __ATOMIC_RELAXED);
		     wait++)
			usleep(1000);
	}
	done = 1;
	pthread_join(th, NULL);
	CHECK(stats[1] > 0);  /* the reader saw folded records while they were written */
	CHECK(stats[2] == 0); /* and never a torn, misplaced or wrong fold */
	CHECK(misplaced == 0);
	CHECK(ring->head == FOLD_PAIRS + others + releases);
	/* the newest: pair FOLD_PAIRS (k % 3 == 0 and % 5 == 0: 400000 = 5 * 80000): its own release record */
	r = recs[(ring->head - 1) % RECORDS];
	CHECK(r.type == HS_REC_LOCK_RELEASED && r.a == FOLD_PAIRS && r.ts_ns == 1000ull * FOLD_PAIRS + FOLD_PAIRS % 7);
	/* its acquisition, plain: another lock's release came between */
	r = recs[(ring->head - 3) % RECORDS];
	CHECK(r.type == HS_REC_LOCK_ACQUIRED && r.a == FOLD_PAIRS && r.b >> HS_REC_FOLD_SHIFT == 0);
	/* pair FOLD_PAIRS - 1: acquisition, a new edge, its release; FOLD_PAIRS - 2 folded */
	r = recs[(ring->head - 6) % RECORDS];
	CHECK(r.type == HS_REC_LOCK_ACQUIRED && r.a == FOLD_PAIRS - 1 && r.b >> HS_REC_FOLD_SHIFT == 0);
	r = recs[(ring->head - 7) % RECORDS];
	CHECK(r.type == HS_REC_LOCK_ACQUIRED && r.a == FOLD_PAIRS - 2 &&
	      r.b >> HS_REC_FOLD_SHIFT == (FOLD_PAIRS - 2) % 7 + 1 && (uint32_t)r.b == ((FOLD_PAIRS - 2) & 0xffff) + 1);
	free(ring);
}

/* ---- ENOSPC ---------------------------------------------------------------- */

static uint64_t budget;   /* bytes the fake tmpfs holds */
static uint64_t room;     /* bytes it has left: MADV_POPULATE_WRITE beyond it fails */
static int (*real_madvise)(void *, size_t, int);
static int (*real_ftruncate)(int, off_t);
static int (*real_fallocate)(int, off_t, off_t);

/* fallocate takes from the same room (the tables committed at creation). */
static int fake_fallocate(int fd, off_t off, off_t len)
{
	if ((uint64_t)len > room) {
		errno = ENOSPC;
		return -1;
	}
	room -= (uint64_t)len;
	return real_fallocate(fd, off, len);
}

/* Each attempt starts with the whole budget: a fresh (empty) file being
 * sized, or a retry's truncation to 0, which gives the pages back. */
static int fake_ftruncate(int fd, off_t len)
{
	struct stat st;
	if (len == 0 || (fstat(fd, &st) == 0 && st.st_size == 0))
		room = budget;
	return real_ftruncate(fd, len);
}

/* As the kernel: populating pages a full tmpfs cannot hold fails (EFAULT), no SIGBUS. */
static int fake_madvise(void *addr, size_t len, int advice)
{
	if (len > room) {
		errno = EFAULT;
		return -1;
	}
	room -= len;
	return real_madvise(addr, len, advice);
}

static void test_no_space(void)
{
	char dir[] = "/tmp/heisen-unit-XXXXXX";
	char path[256];
	struct stat st;
	CHECK(mkdtemp(dir) != NULL);
	setenv("HEISEN_DIR", dir, 1);
	setenv("HEISEN_QUIET", "1", 1);
	CHECK(hs_session_setup() == 0);
	real_madvise = hs_sys.madvise;
	hs_sys.madvise = fake_madvise;
	real_ftruncate = hs_sys.ftruncate;
	hs_sys.ftruncate = fake_ftruncate;
	real_fallocate = hs_sys.fallocate;
	hs_sys.fallocate = fake_fallocate;

	/* room for the start of a sparse default segment, then the tables fill it */
	budget = 200 * 1024;
	CHECK(hs_segment_create(0) == 0);
	CHECK(hs_seg.hdr && !(hs_seg.hdr->flags & HS_HDR_FALLBACK_SMALL) && (hs_seg.hdr->flags & HS_HDR_SPARSE));
	snprintf(path, sizeof path, "%s/%d.0.seg", dir, (int)getpid());
	CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == hs_seg.hdr->segment_size);
	/* the hash indexes and the fd table get store a page at a time, not at creation */
	CHECK((uint64_t)st.st_blocks * 512 <= 128 * 1024);
	{
		/* a reserved entry 0 ("none") gets its store with its table's first real entry */
		const struct hs_table *lk = &hs_seg.hdr->tables[HS_T_LOCKS];
		CHECK(!hs_seg_committed(&hs_seg, lk->offset, lk->entry_size));
		CHECK(hs_seg_commit_entry(&hs_seg, HS_T_LOCKS, 1) == 0);
		CHECK(hs_seg_committed(&hs_seg, lk->offset, lk->entry_size));
		CHECK(hs_seg_committed(&hs_seg, lk->offset + lk->entry_size, lk->entry_size));
	}
	{
		/* strings commit page by page until the room is gone: then the table counts as full */
		static char s[1000];
		uint32_t ok = 0;
		memset(s, 'x', sizeof s);
		for (int i = 0; i < 250 && hs_str_add(&hs_seg, s, sizeof s); i++)
			ok++;
		CHECK(ok > 0 && ok < 250);
		CHECK(hs_seg.hdr->tables[HS_T_STRINGS].dropped == 1);
		CHECK(hs_seg.hdr->flags & HS_HDR_OUT_OF_SPACE);
		CHECK(hs_seg_commit_entry(&hs_seg, HS_T_STRINGS, 0) == 0); /* committed stays committed */
	}
	hs_seg_unbind(&hs_seg);

	/* room for a small segment's start only: the fallback geometry, flagged */
	budget = 20 * 1024;
	CHECK(hs_segment_create(0) == 0);
	CHECK(hs_seg.hdr && (hs_seg.hdr->flags & HS_HDR_FALLBACK_SMALL));
	CHECK(memcmp(hs_seg.hdr->magic, HS_MAGIC, HS_MAGIC_LEN) == 0);
	snprintf(path, sizeof path, "%s/%d.1.seg", dir, (int)getpid());
	CHECK(stat(path, &st) == 0 && (uint64_t)st.st_size == hs_seg.hdr->segment_size);
	hs_seg_unbind(&hs_seg);

	/* no room at all: -1, and no half-made file left behind (the pid's next image slot) */
	budget = 0;
	CHECK(hs_segment_create(0) == -1);
	snprintf(path, sizeof path, "%s/%d.2.seg", dir, (int)getpid());
	CHECK(stat(path, &st) != 0 && errno == ENOENT);

	hs_sys.madvise = real_madvise;
	hs_sys.ftruncate = real_ftruncate;
	hs_sys.fallocate = real_fallocate;
	snprintf(path, sizeof path, "rm -rf '%s'", dir);
	CHECK(system(path) == 0);
}

static ssize_t no_copy_file_range(int in, off_t *in_off, int out, off_t *out_off, size_t n)
{
	(void)in, (void)in_off, (void)out, (void)out_off, (void)n;
	errno = ENOSYS;
	return -1;
}

/* A file system without SEEK_DATA / SEEK_HOLE (lseek(2): EINVAL or ENXIO
 * past the end): the copy must take the whole range as data. */
static int seek_data_calls;
static off_t no_seek_data(int fd, off_t off, int whence)
{
	(void)fd, (void)off;
	if (whence == SEEK_DATA || whence == SEEK_HOLE) {
		seek_data_calls++;
		errno = EINVAL;
		return -1;
	}
	return lseek(fd, off, whence);
}

/*
 * A fork child's inherited tables, file to file: the parent's bytes arrive
 * at the same offsets, the index pages the parent never wrote stay holes in
 * the child's file (on tmpfs: SEEK_DATA skips pages fallocated and never
 * written), and without copy_file_range the call fails so that the caller
 * copies through the mappings.
 */
static void test_copy_ranges(void)
{
	char dir[] = "/dev/shm/heisen-unit-XXXXXX";
	char path[256];
	struct statfs sf;
	struct hs_seg parent;
	const struct hs_table *si, *pi, *st;
	uint32_t off;
	int fd, tmpfs;
	if (!mkdtemp(dir)) {
		memcpy(dir, "/tmp/", 5); /* no /dev/shm: the copy is checked, not the holes */
		CHECK(mkdtemp(dir) != NULL);
	}
	tmpfs = statfs(dir, &sf) == 0 && sf.f_type == TMPFS_MAGIC;
	setenv("HEISEN_DIR", dir, 1);
	setenv("HEISEN_QUIET", "1", 1);
	CHECK(hs_session_setup() == 0);
	CHECK(hs_segment_create(0) == 0);
	parent = hs_seg;
	si = &parent.hdr->tables[HS_T_STACK_INDEX];
	pi = &parent.hdr->tables[HS_T_PYFRAME_INDEX];
	st = &parent.hdr->tables[HS_T_STRINGS];
	off = hs_str_add(&hs_seg, "inherited", 9);
	CHECK(off != 0);
	parent.stack_index[3].value = 7;
	__atomic_store_n(&parent.stack_index[3].key, 0x1234, __ATOMIC_RELEASE);

	CHECK(hs_segment_create(1) == 0); /* the child's segment: image 1 of this pid */
	CHECK(hs_seg.hdr != parent.hdr && hs_seg.hdr->image == 1);
	{
		struct hs_seg_range r[] = {
			{si->offset, (uint64_t)si->capacity * si->entry_size, 1},
			{pi->offset, (uint64_t)pi->capacity * pi->entry_size, 1},
			{st->offset, st->count, 0},
		};
		CHECK(hs_seg_copy_ranges(&hs_seg, &parent, r, 3) == 0);
		CHECK(memcmp(hs_seg.strings + off, "inherited", 10) == 0);
		CHECK(hs_seg_committed(&hs_seg, si->offset + 3 * si->entry_size, si->entry_size));
		CHECK(hs_seg.stack_index[3].key == 0x1234 && hs_seg.stack_index[3].value == 7);
		CHECK(hs_seg_committed(&hs_seg, st->offset, st->count));
		if (tmpfs) /* a sparse range: store only where the parent's index had data */
			CHECK(!hs_seg_committed(&hs_seg, pi->offset, (uint64_t)pi->capacity * pi->entry_size));
		snprintf(path, sizeof path, "%s/%d.1.seg", dir, (int)getpid());
		fd = open(path, O_RDONLY);
		CHECK(fd >= 0);
		if (tmpfs && fd >= 0) {
			/* the whole pages of the pyframe index: never written by the parent, none copied */
			off_t lo = (off_t)((pi->offset + 4095) & ~4095ull);
			off_t hi = (off_t)((pi->offset + (uint64_t)pi->capacity * pi->entry_size) & ~4095ull);
			off_t d = lseek(fd, lo, SEEK_DATA);
			CHECK(d < 0 || d >= hi);
		}
		if (fd >= 0)
			close(fd);

		{
			ssize_t (*real)(int, off_t *, int, off_t *, size_t) = hs_sys.copy_file_range;
			hs_sys.copy_file_range = no_copy_file_range;
			CHECK(hs_seg_copy_ranges(&hs_seg, &parent, r, 3) == -1 && errno == ENOSYS);
			hs_sys.copy_file_range = real;
		}
		{
			/* the parent's index written after the first copy, read back
			 * without SEEK_DATA: every byte of the range is copied */
			off_t (*real)(int, off_t, int) = hs_sys.lseek;
			parent.stack_index[5].value = 9;
			__atomic_store_n(&parent.stack_index[5].key, 0x5678, __ATOMIC_RELEASE);
			hs_sys.lseek = no_seek_data;
			CHECK(hs_seg_copy_ranges(&hs_seg, &parent, r, 3) == 0);
			hs_sys.lseek = real;
			CHECK(seek_data_calls > 0);
			CHECK(hs_seg.stack_index[5].key == 0x5678 && hs_seg.stack_index[5].value == 9);
			CHECK(hs_seg.stack_index[3].key == 0x1234 && hs_seg.stack_index[3].value == 7);
		}
	}
	hs_seg_unbind(&hs_seg);
	hs_seg_unbind(&parent);
	snprintf(path, sizeof path, "rm -rf '%s'", dir);
	CHECK(system(path) == 0);
}

int main(void)
{
	test_concurrent_reader();
	test_release_folded();
	test_no_space();
	test_copy_ranges();
	return unit_done("test_ring");
}
