/* SPDX-License-Identifier: MIT */
/*
 * fd_syscall_close.c — closes heisen cannot see: libuv (uvloop, Node)
 * closes its descriptors with syscall(SYS_close), never through close().
 * The program accepts 100 connections' worth of sockets, one per loop turn
 * at one call site, and closes 90 of them as libuv does; 10 stay open (its
 * listening sockets and live connections) when it exits normally.
 *
 * heisen: at most the 10 really open are open at exit (the kernel's word,
 * asked at exit), never the 90 closed behind its back.
 *
 * Prints "pid", "kept FD" for each open one.
 */
#include <sys/socket.h>

#include "tt.h"

#define CONNECTIONS 100

__attribute__((noinline)) static int uv_socket(void)
{
	return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

__attribute__((noinline)) static void uv_close(int fd)
{
	syscall(SYS_close, fd); /* libuv's uv__close_nocancel */
}

int main(void)
{
	int fds[CONNECTIONS];
	printf("pid %d\n", (int)getpid());
	for (int i = 0; i < CONNECTIONS; i++) {
		if ((fds[i] = uv_socket()) < 0) {
			perror("socket");
			return 2;
		}
	}
	for (int i = 0; i < CONNECTIONS; i++) {
		if (i % 10 == 0)
			printf("kept %d\n", fds[i]);
		else
			uv_close(fds[i]);
	}
	fflush(stdout);
	return 0;
}
