/* SPDX-License-Identifier: MIT */
/*
 * fd_calls.c — every interposed call that creates an fd, once, and every
 * way one dies.
 *
 *   open    (default) create one fd with each call and leave them open at
 *           exit (each at its own site: no fd-leak, which needs three from
 *           one site); prints "fd_<call> N" for each.
 *   close   the same, then close each with its own closer (close, fclose,
 *           closedir, close_range, closefrom, dup2 onto it); prints
 *           "closed N".
 *   exec    open a close-on-exec file and a plain one, then exec this
 *           program again with "after-exec", which prints "inherited N".
 *
 * Prints "pid" first.
 */
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/inotify.h>
#include <sys/mman.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <netinet/in.h>
#include <arpa/inet.h>

#include "tt.h"

extern int __open_2(const char *, int);
extern int __openat_2(int, const char *, int);

static void say(const char *call, int fd)
{
	if (fd < 0) {
		fprintf(stderr, "%s failed: %s\n", call, strerror(errno));
		exit(2);
	}
	printf("fd_%s %d\n", call, fd);
}

/* Send fd over one end of a socketpair, receive it on the other. */
static int pass_fd(int fd)
{
	int sv[2], got = -1;
	char byte = 'x', cbuf[CMSG_SPACE(sizeof(int))];
	struct iovec iov = {&byte, 1};
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = cbuf, .msg_controllen = sizeof cbuf};
	struct cmsghdr *c;
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0)
		return -1;
	say("socketpair", sv[0]);
	c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof fd);
	if (sendmsg(sv[0], &m, 0) != 1)
		return -1;
	m.msg_controllen = sizeof cbuf;
	if (recvmsg(sv[1], &m, MSG_CMSG_CLOEXEC) != 1)
		return -1;
	c = CMSG_FIRSTHDR(&m);
	if (c && c->cmsg_type == SCM_RIGHTS)
		memcpy(&got, CMSG_DATA(c), sizeof got);
	close(sv[0]);
	close(sv[1]);
	return got;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "open";
	int fds[64], n = 0, p[2], lfd, cfd;
	struct sockaddr_in a = {.sin_family = AF_INET};
	socklen_t alen = sizeof a;
	sigset_t set;
	FILE *fp, *fp2, *fp3;
	DIR *d, *d2;

	printf("pid %d\n", (int)getpid());
	if (strcmp(mode, "after-exec") == 0) {
		for (int fd = 3; fd < 64; fd++)
			if (fcntl(fd, F_GETFD) >= 0)
				printf("inherited %d\n", fd);
		return 0;
	}
	if (strcmp(mode, "exec") == 0) {
		printf("cloexec %d\n", open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
		printf("plain %d\n", open("/proc/self/status", O_RDONLY));
		fflush(stdout);
		execl(argv[0], argv[0], "after-exec", (char *)NULL);
		return 2;
	}
	say("open", fds[n++] = open("/proc/self/stat", O_RDONLY | O_CLOEXEC));
	say("open64", fds[n++] = open64("/proc/self/stat", O_RDONLY));
	say("openat", fds[n++] = openat(AT_FDCWD, "/proc/self/stat", O_RDONLY));
	say("openat64", fds[n++] = openat64(AT_FDCWD, "/proc/self/stat", O_RDONLY));
	say("__open_2", fds[n++] = __open_2("/proc/self/stat", O_RDONLY));
	say("__openat_2", fds[n++] = __openat_2(AT_FDCWD, "/proc/self/stat", O_RDONLY));
	say("creat", fds[n++] = creat("/tmp/heisen-fd-calls-creat", 0600));
	unlink("/tmp/heisen-fd-calls-creat");
	say("socket", lfd = socket(AF_INET, SOCK_STREAM, 0));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (bind(lfd, (struct sockaddr *)&a, sizeof a) || listen(lfd, 4) || getsockname(lfd, (struct sockaddr *)&a, &alen))
		return 2;
	fds[n++] = lfd;
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cfd, (struct sockaddr *)&a, sizeof a))
		return 2;
	fds[n++] = cfd;
	say("accept", fds[n++] = accept(lfd, NULL, NULL));
	cfd = socket(AF_INET, SOCK_STREAM, 0);
	if (connect(cfd, (struct sockaddr *)&a, sizeof a))
		return 2;
	fds[n++] = cfd;
	say("accept4", fds[n++] = accept4(lfd, NULL, NULL, SOCK_CLOEXEC));
	if (pipe(p))
		return 2;
	say("pipe", fds[n++] = p[0]);
	fds[n++] = p[1];
	if (pipe2(p, O_CLOEXEC))
		return 2;
	say("pipe2", fds[n++] = p[0]);
	fds[n++] = p[1];
	say("dup", fds[n++] = dup(fds[0]));
	say("dup2", fds[n++] = dup2(fds[0], 60));
	say("dup3", fds[n++] = dup3(fds[0], 61, O_CLOEXEC));
	say("fcntl", fds[n++] = fcntl(fds[0], F_DUPFD_CLOEXEC, 40));
	say("eventfd", fds[n++] = eventfd(0, EFD_CLOEXEC));
	say("timerfd_create", fds[n++] = timerfd_create(CLOCK_MONOTONIC, 0));
	sigemptyset(&set);
	sigaddset(&set, SIGUSR2);
	say("signalfd", fds[n++] = signalfd(-1, &set, 0));
	say("epoll_create", fds[n++] = epoll_create(1));
	say("epoll_create1", fds[n++] = epoll_create1(EPOLL_CLOEXEC));
	say("inotify_init", fds[n++] = inotify_init());
	say("inotify_init1", fds[n++] = inotify_init1(IN_CLOEXEC));
	say("memfd_create", fds[n++] = memfd_create("heisen-test", MFD_CLOEXEC));
	say("recvmsg", fds[n++] = pass_fd(fds[0]));
	fp = fopen("/proc/self/stat", "re");
	say("fopen", fp ? fileno(fp) : -1);
	fp2 = fdopen(dup(fds[0]), "r");
	say("fdopen", fp2 ? fileno(fp2) : -1);
	fp3 = fopen("/proc/self/stat", "r");
	fp3 = fp3 ? freopen("/proc/self/status", "r", fp3) : NULL;
	say("freopen", fp3 ? fileno(fp3) : -1);
	d = opendir("/proc/self");
	say("opendir", d ? dirfd(d) : -1);
	d2 = fdopendir(open("/proc/self", O_RDONLY | O_DIRECTORY));
	say("fdopendir", d2 ? dirfd(d2) : -1);
	fflush(stdout);
	if (strcmp(mode, "close") != 0)
		return 0; /* every one of them open at exit */
	fclose(fp);
	fclose(fp2);
	fclose(fp3);
	closedir(d);
	closedir(d2);
	dup2(fds[1], fds[2]); /* onto an open number: closes it */
	close_range((unsigned)fds[n - 4], (unsigned)fds[n - 1], 0);
	for (int i = 0; i < n - 4; i++)
		close(fds[i]);
	closefrom(3);
	printf("closed %d\n", n);
	return 0;
}
