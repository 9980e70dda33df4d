/* SPDX-License-Identifier: MIT */
/*
 * dl_handle_calls — libc's functions called through a library handle, the
 * way a plugin loader or an FFI does it: dlopen("libc.so.6") and dlsym
 * for free, close, pthread_mutex_lock and pthread_mutex_unlock, never the
 * names the program links.  argv[1] picks the bug:
 *   double-free   a 4 KiB block freed twice (glibc itself is silent: the
 *                 block is too large for its tcache check)
 *   double-close  a pipe's read end closed twice while another thread lives
 *                 (a plugin host always has more than one: in a process of
 *                 one thread the repeat is harmless and only noted)
 *   abba          two locks taken in both orders, one thread after the other
 *   clean         malloc/free, open/close and the locks in one order
 * Prints "pid P", "tid_main T", then "done ok" when it survived.
 */
#include <dlfcn.h>
#include <semaphore.h>

#include "tt.h"

static void (*libc_free)(void *);
static int (*libc_close)(int);
static int (*libc_lock)(pthread_mutex_t *);
static int (*libc_unlock)(pthread_mutex_t *);

static pthread_mutex_t accounts = PTHREAD_MUTEX_INITIALIZER;
static pthread_mutex_t ledger = PTHREAD_MUTEX_INITIALIZER;

__attribute__((noinline)) static void release_buffer(void *p)
{
	libc_free(p);
}

__attribute__((noinline)) static void release_again(void *p)
{
	libc_free(p);
}

__attribute__((noinline)) static void close_reader(int fd)
{
	libc_close(fd);
}

__attribute__((noinline)) static void close_reader_again(int fd)
{
	libc_close(fd);
}

__attribute__((noinline)) static void transfer(void)
{
	libc_lock(&accounts);
	libc_lock(&ledger);
	libc_unlock(&ledger);
	libc_unlock(&accounts);
}

__attribute__((noinline)) static void audit(void)
{
	libc_lock(&ledger);
	libc_lock(&accounts);
	libc_unlock(&accounts);
	libc_unlock(&ledger);
}

static sem_t idle_done;

static void *idle(void *arg)
{
	(void)arg;
	sem_wait(&idle_done);
	return NULL;
}

static void *resolve(void *h, const char *name)
{
	void *p = dlsym(h, name);
	if (!p) {
		fprintf(stderr, "dlsym %s: %s\n", name, dlerror());
		exit(2);
	}
	return p;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "clean";
	void *h = dlopen("libc.so.6", RTLD_NOW);
	if (!h) {
		fprintf(stderr, "dlopen: %s\n", dlerror());
		return 2;
	}
	libc_free = resolve(h, "free");
	libc_close = resolve(h, "close");
	libc_lock = resolve(h, "pthread_mutex_lock");
	libc_unlock = resolve(h, "pthread_mutex_unlock");
	printf("pid %d\n", (int)getpid());
	tt_say_tid("tid_main");
	fflush(stdout);
	if (strcmp(mode, "double-free") == 0) {
		char *p = malloc(4096), *q;
		memset(p, 1, 4096);
		release_buffer(p);
		q = malloc(4096); /* glibc hands the chunk straight back unless something sits between */
		release_again(p);
		(void)q;
	} else if (strcmp(mode, "double-close") == 0) {
		int fds[2];
		pthread_t t;
		sem_init(&idle_done, 0, 0);
		TT_CHECK(pthread_create(&t, NULL, idle, NULL));
		if (pipe(fds) != 0)
			return 2;
		close_reader(fds[0]);
		close_reader_again(fds[0]);
		sem_post(&idle_done);
		pthread_join(t, NULL);
	} else if (strcmp(mode, "abba") == 0) {
		transfer();
		audit();
	} else {
		char *p = malloc(64);
		int fds[2];
		libc_free(p);
		if (pipe(fds) != 0)
			return 2;
		libc_close(fds[0]);
		libc_close(fds[1]);
		transfer();
		transfer();
	}
	printf("done ok\n");
	dlclose(h);
	return 0;
}
