/* SPDX-License-Identifier: MIT */
/*
 * fd_handover.c — a correct server that must yield no fd finding.
 *
 * An acceptor thread accepts loopback connections and hands each socket to
 * one of two worker threads through a queue; the worker reads the request,
 * also opens, reads and closes a file of its own (so its closes alternate
 * between numbers it created and numbers handed to it, on numbers the
 * kernel reuses all the time), and closes the socket.  Client threads
 * connect, send, and close.  Then the process forks; the child closes every
 * number from 3 to 255 (a daemon's close-all sweep, most of them EBADF) and
 * exits.  The listening socket stays open at exit (one fd: not a leak).
 *
 * Prints "pid", "served N", "child_exit 0".
 */
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "tt.h"

#define CLIENTS 3
#define PER_CLIENT 150
#define QMAX 64

static pthread_mutex_t qlock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t qcond = PTHREAD_COND_INITIALIZER;
static int queue[QMAX], qhead, qtail, qdone;
static int served;
static struct sockaddr_in where;

static void push(int fd)
{
	TT_CHECK(pthread_mutex_lock(&qlock));
	while (qtail - qhead == QMAX)
		TT_CHECK(pthread_cond_wait(&qcond, &qlock));
	queue[qtail++ % QMAX] = fd;
	TT_CHECK(pthread_cond_broadcast(&qcond));
	TT_CHECK(pthread_mutex_unlock(&qlock));
}

static int pop(void)
{
	int fd;
	TT_CHECK(pthread_mutex_lock(&qlock));
	while (qhead == qtail && !qdone)
		TT_CHECK(pthread_cond_wait(&qcond, &qlock));
	fd = qhead == qtail ? -1 : queue[qhead++ % QMAX];
	TT_CHECK(pthread_cond_broadcast(&qcond));
	TT_CHECK(pthread_mutex_unlock(&qlock));
	return fd;
}

static void *acceptor(void *arg)
{
	int lfd = *(int *)arg;
	for (int i = 0; i < CLIENTS * PER_CLIENT; i++) {
		int fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
		if (fd < 0) {
			perror("accept4");
			exit(2);
		}
		push(fd);
	}
	TT_CHECK(pthread_mutex_lock(&qlock));
	qdone = 1;
	TT_CHECK(pthread_cond_broadcast(&qcond));
	TT_CHECK(pthread_mutex_unlock(&qlock));
	return NULL;
}

static void *worker(void *arg)
{
	char buf[256];
	int fd;
	while ((fd = pop()) >= 0) {
		int own = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
		if (own < 0 || read(own, buf, sizeof buf) <= 0 || close(own) != 0)
			exit(3);
		if (read(fd, buf, 1) != 1)
			exit(4);
		if (close(fd) != 0) {
			perror("worker close");
			exit(5);
		}
		__atomic_add_fetch(&served, 1, __ATOMIC_RELAXED);
	}
	return arg;
}

static void *client(void *arg)
{
	for (int i = 0; i < PER_CLIENT; i++) {
		int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (fd < 0 || connect(fd, (struct sockaddr *)&where, sizeof where) != 0 || write(fd, "x", 1) != 1) {
			perror("client");
			exit(6);
		}
		if (close(fd) != 0)
			exit(7);
	}
	return arg;
}

int main(void)
{
	pthread_t acc, work[2], cl[CLIENTS];
	socklen_t len = sizeof where;
	int lfd, status;
	pid_t pid;

	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	memset(&where, 0, sizeof where);
	where.sin_family = AF_INET;
	where.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (lfd < 0 || bind(lfd, (struct sockaddr *)&where, sizeof where) != 0 || listen(lfd, 128) != 0 ||
	    getsockname(lfd, (struct sockaddr *)&where, &len) != 0) {
		perror("listen");
		return 2;
	}
	TT_CHECK(pthread_create(&acc, NULL, acceptor, &lfd));
	for (int i = 0; i < 2; i++)
		TT_CHECK(pthread_create(&work[i], NULL, worker, NULL));
	for (int i = 0; i < CLIENTS; i++)
		TT_CHECK(pthread_create(&cl[i], NULL, client, NULL));
	for (int i = 0; i < CLIENTS; i++)
		TT_CHECK(pthread_join(cl[i], NULL));
	TT_CHECK(pthread_join(acc, NULL));
	for (int i = 0; i < 2; i++)
		TT_CHECK(pthread_join(work[i], NULL));
	printf("served %d\n", served);
	fflush(stdout);
	pid = fork();
	if (pid == 0) {
		for (int fd = 3; fd < 256; fd++)
			close(fd); /* the close-all sweep: EBADF for most */
		_exit(0);
	}
	if (pid < 0 || waitpid(pid, &status, 0) != pid)
		return 2;
	printf("child_exit %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : -1);
	return 0; /* lfd stays open: one listening socket at exit is not a leak */
}
