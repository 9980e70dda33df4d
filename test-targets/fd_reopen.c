/* SPDX-License-Identifier: MIT */
/*
 * fd_reopen.c — seed 004 with file descriptors: a TensorFlow-like "file"
 * class whose reopen path closes its handle without clearing it; the reopen
 * fails (the checkpoint file was deleted by the chief), and the destructor
 * closes the old number again.
 *
 *   stale   (default) between the reopen and the destructor another thread
 *           (the checkpoint writer) opens a file and gets the same number:
 *           the destructor closes the writer's file.  The writer's write and
 *           close then fail with EBADF.  heisen: stale-close naming the
 *           destructor (stale closer) and the writer (rightful owner).
 *   double  nobody takes the number: the destructor's close fails with
 *           EBADF.  The process has other threads (a TensorFlow process
 *           always has: here one idle thread), so the number could have
 *           been reused in between.  heisen: double-close (reopen's close,
 *           the destructor's).
 *   file    the same as stale with a FILE *: the reopen path closes
 *           fileno(fp) behind the FILE's back, the destructor fcloses it.
 *           heisen: stale-close proven at the fclose (rule "file").
 *   dir     the same with a DIR * of the checkpoint directory: close(dirfd(d))
 *           behind its back, then closedir.  heisen: stale closes at both
 *           (rules "dirfd" and "dir").
 *
 * Prints "pid", "tid_main", "tid_writer", "fd N", and what failed.
 */
#include <fcntl.h>
#include <dirent.h>
#include <semaphore.h>
#include <sys/stat.h>

#include "tt.h"

struct handle {
	int fd;              /* the C++ class's member */
	FILE *fp;            /* mode file */
	DIR *dp;             /* mode dir */
	char path[256];
};

static char dir[] = "/tmp/heisen-fd-reopen-XXXXXX";
static char ckpt[300];
static sem_t writer_opened, writer_go;
static int writer_fd = -1;
static int use_file, use_dir;
static sem_t idle_done;

/* The other threads of a real process: one that waits for the end. */
static void *idle(void *arg)
{
	sem_wait(&idle_done);
	return arg;
}

__attribute__((noinline)) static void handle_open(struct handle *h, const char *path)
{
	snprintf(h->path, sizeof h->path, "%s", path);
	if (use_file) {
		h->fp = fopen(path, "re");
		h->fd = h->fp ? fileno(h->fp) : -1;
	} else if (use_dir) {
		h->dp = opendir(dir); /* the checkpoint directory's listing */
		h->fd = h->dp ? dirfd(h->dp) : -1;
	} else {
		h->fd = open(path, O_RDONLY | O_CLOEXEC);
	}
	if (h->fd < 0) {
		perror("handle_open");
		exit(2);
	}
}

/* The bug: the handle is closed but not cleared, and the reopen fails. */
__attribute__((noinline)) static int handle_reopen(struct handle *h)
{
	int nfd;
	close(h->fd);
	nfd = open(h->path, O_RDONLY | O_CLOEXEC);
	if (nfd < 0)
		return -1; /* h->fd still holds the old number */
	h->fd = nfd;
	return 0;
}

/* The destructor closes what it believes is its own. */
__attribute__((noinline)) static void handle_destroy(struct handle *h)
{
	if (use_file)
		fclose(h->fp);
	else if (use_dir)
		closedir(h->dp);
	else
		close(h->fd);
}

/* The checkpoint writer: opens its file (taking the freed number), writes later. */
__attribute__((noinline)) static void writer_open_checkpoint(void)
{
	writer_fd = open(ckpt, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
}

__attribute__((noinline)) static void writer_finish(void)
{
	if (write(writer_fd, "ckpt", 4) < 0)
		printf("writer_write %s\n", errno == EBADF ? "EBADF" : strerror(errno));
	if (close(writer_fd) != 0)
		printf("writer_close %s\n", errno == EBADF ? "EBADF" : strerror(errno));
	fflush(stdout);
}

static void *writer(void *arg)
{
	tt_say_tid("tid_writer");
	sem_wait(&writer_go);
	writer_open_checkpoint();
	printf("writer_fd %d\n", writer_fd);
	fflush(stdout);
	sem_post(&writer_opened);
	sem_wait(&writer_go);
	writer_finish();
	return arg;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "stale";
	int stale = strcmp(mode, "double") != 0;
	struct handle h;
	char path[300];
	pthread_t t;
	FILE *f;

	use_file = strcmp(mode, "file") == 0;
	use_dir = strcmp(mode, "dir") == 0;
	if (!mkdtemp(dir))
		return 2;
	snprintf(path, sizeof path, "%s/checkpoint", dir);
	snprintf(ckpt, sizeof ckpt, "%s/checkpoint.tmp", dir);
	if (!(f = fopen(path, "w")))
		return 2;
	fputs("model.ckpt-100\n", f);
	fclose(f);
	sem_init(&writer_opened, 0, 0);
	sem_init(&writer_go, 0, 0);
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	sem_init(&idle_done, 0, 0);
	if (stale)
		TT_CHECK(pthread_create(&t, NULL, writer, NULL));
	else
		TT_CHECK(pthread_create(&t, NULL, idle, NULL));

	handle_open(&h, path);
	printf("fd %d\n", h.fd);
	fflush(stdout);
	unlink(path); /* the chief's non-atomic rename: the file is gone */
	if (use_file) {
		close(fileno(h.fp)); /* the reopen path, behind the FILE's back */
	} else if (use_dir) {
		close(dirfd(h.dp)); /* the same, behind the DIR's back */
	} else if (handle_reopen(&h) == 0) {
		fprintf(stderr, "reopen unexpectedly worked\n");
		return 2;
	}
	if (stale) {
		sem_post(&writer_go);     /* the writer opens: it gets the number */
		sem_wait(&writer_opened);
		if (writer_fd != h.fd) {
			fprintf(stderr, "the writer got fd %d, not %d\n", writer_fd, h.fd);
			return 2;
		}
	}
	handle_destroy(&h);
	if (!use_file && !use_dir && !stale)
		printf("destroy_close %s\n", errno == EBADF ? "EBADF" : "ok");
	if (stale) {
		sem_post(&writer_go);
		TT_CHECK(pthread_join(t, NULL));
	}
	if (!stale) {
		sem_post(&idle_done);
		TT_CHECK(pthread_join(t, NULL));
	}
	unlink(ckpt);
	rmdir(dir);
	printf("done\n");
	return 0;
}
