/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/test_dir_walk.c — the shim's one directory walker
 * (hs_dir_each, shim/sysops.c), which reads /proc/self/fd (the inherited
 * descriptors, the fd count), /proc/self/task (a crash's snapshots) and
 * session directories (the sessions cap, removing a clean session):
 * every entry of a directory larger than its buffer, an early stop, and
 * its error paths driven through the swappable system-call table — a
 * getdents64 that fails at once, one that fails after a first batch
 * (the entries read before are delivered, the walk says -1), and a
 * malformed record (EIO instead of reading past it).  And one caller's
 * documented degradation: a memory sample whose /proc/self/fd walk fails
 * takes no fd count (the header keeps its last one) instead of a partial one.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "unit.h"

#define FILES 300 /* with long names: several getdents64 batches of HS_DIR_BUF bytes */

struct seen {
	unsigned all, files, dots, stop_at, getdents_calls;
};

static int count(void *arg, const char *name, unsigned type)
{
	struct seen *s = arg;
	s->all++;
	if (name[0] == '.')
		s->dots++;
	else if (!strncmp(name, "entry-with-a-long-name-", 23) && (type == DT_REG || type == DT_UNKNOWN))
		s->files++;
	return s->stop_at && s->all == s->stop_at;
}

static ssize_t (*real_getdents64)(int, void *, size_t);
static int calls;

static ssize_t getdents_fails(int fd, void *buf, size_t n)
{
	(void)fd;
	(void)buf;
	(void)n;
	calls++;
	errno = EIO;
	return -1;
}

static ssize_t getdents_fails_second(int fd, void *buf, size_t n)
{
	if (calls++ == 0)
		return real_getdents64(fd, buf, n);
	errno = ENOMEM;
	return -1;
}

static ssize_t getdents_malformed(int fd, void *buf, size_t n)
{
	ssize_t got = real_getdents64(fd, buf, n);
	if (got > 0)
		memset((char *)buf + 16, 0, 2); /* the first record's reclen: 0 */
	return got;
}

static int open_dir(const char *path)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0) {
		perror(path);
		exit(2);
	}
	return fd;
}

static const struct hs_geometry geo = {16, 4096, 64, 32, 64, 4, 16, 16, 16, 16, 16};

/* hs_mem_sample's fd count (proc.c count_fds over hs_dir_each). */
static void test_fd_count_sample(void)
{
	uint64_t now = 1000000000ull;
	int extra[3];
	unit_segment(&hs_seg, &geo);
	hs_seg.hdr->pid = (int32_t)getpid();
	__atomic_store_n(&hs_recording, 1, __ATOMIC_RELEASE);
	for (int i = 0; i < 3; i++)
		extra[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);

	/* the walk succeeds: the count is taken, at least stdin..stderr and ours */
	hs_mem_sample(NULL, now, HS_MEMW_EXIT, 0);
	CHECK(hs_seg.hdr->fds_sample_ns == now);
	CHECK(hs_seg.hdr->fds_open >= 6);

	/* it fails after a first batch: no sample, the last one stays */
	hs_seg.hdr->fds_open = 12345;
	calls = 1; /* getdents_fails_second: already past its one good batch */
	hs_sys.getdents64 = getdents_fails_second;
	hs_mem_sample(NULL, now + 1, HS_MEMW_EXIT, 0);
	CHECK(hs_seg.hdr->fds_sample_ns == now);
	CHECK(hs_seg.hdr->fds_open == 12345);
	hs_sys.getdents64 = real_getdents64;

	for (int i = 0; i < 3; i++)
		close(extra[i]);
	__atomic_store_n(&hs_recording, 0, __ATOMIC_RELEASE);
}

int main(void)
{
	char dir[] = "/tmp/heisen-dir-walk-XXXXXX", path[4096];
	struct seen s;
	int fd, rc;

	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 2;
	}
	for (int i = 0; i < FILES; i++) {
		snprintf(path, sizeof path, "%s/entry-with-a-long-name-%04d-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", dir, i);
		close(open(path, O_CREAT | O_WRONLY | O_CLOEXEC, 0600));
	}
	real_getdents64 = hs_sys.getdents64;

	/* every entry, across batches: FILES files, "." and ".." */
	memset(&s, 0, sizeof s);
	fd = open_dir(dir);
	rc = hs_dir_each(fd, count, &s);
	CHECK(rc == 0);
	CHECK(s.files == FILES);
	CHECK(s.dots == 2);
	CHECK(s.all == FILES + 2);
	close(fd);

	/* the callback ends the walk */
	memset(&s, 0, sizeof s);
	s.stop_at = 3;
	fd = open_dir(dir);
	CHECK(hs_dir_each(fd, count, &s) == 1);
	CHECK(s.all == 3);
	close(fd);

	/* getdents64 fails at once: nothing delivered, -1 with its errno */
	memset(&s, 0, sizeof s);
	calls = 0;
	hs_sys.getdents64 = getdents_fails;
	fd = open_dir(dir);
	errno = 0;
	rc = hs_dir_each(fd, count, &s);
	CHECK(rc == -1 && errno == EIO);
	CHECK(s.all == 0 && calls == 1);
	close(fd);

	/* fails after a first batch: that batch delivered, the rest not, -1 */
	memset(&s, 0, sizeof s);
	calls = 0;
	hs_sys.getdents64 = getdents_fails_second;
	fd = open_dir(dir);
	errno = 0;
	rc = hs_dir_each(fd, count, &s);
	CHECK(rc == -1 && errno == ENOMEM);
	CHECK(s.all > 0 && s.all < FILES + 2);
	close(fd);

	/* a record whose length is 0: EIO, never a loop or a read past the batch */
	memset(&s, 0, sizeof s);
	hs_sys.getdents64 = getdents_malformed;
	fd = open_dir(dir);
	errno = 0;
	rc = hs_dir_each(fd, count, &s);
	CHECK(rc == -1 && errno == EIO);
	CHECK(s.all == 0);
	close(fd);
	hs_sys.getdents64 = real_getdents64;

	for (int i = 0; i < FILES; i++) {
		snprintf(path, sizeof path, "%s/entry-with-a-long-name-%04d-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx", dir, i);
		unlink(path);
	}
	rmdir(dir);
	test_fd_count_sample();
	return unit_done("test_dir_walk");
}
