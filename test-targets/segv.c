/* SPDX-License-Identifier: MIT */
/*
 * segv — crash on demand, with a named function at the top of the stack.
 *
 *   segv [segv]   write through a NULL struct pointer in write_through_null():
 *                 SIGSEGV at fault address 0x10 (the field's offset)
 *   segv thread   the same, in a worker thread (crash_thread) while the main
 *                 thread waits in pthread_join
 *   segv abort    abort() from abort_here(): SIGABRT
 *   segv fpe      integer division by zero in divide_by_zero(): SIGFPE
 *   segv ill      an undefined instruction in illegal_instruction(): SIGILL
 *   segv bus      touch a page of a file mapping beyond the file's end in
 *                 touch_past_eof(): SIGBUS at the printed fault address
 *   segv first    the SIGSEGV of segv, in crash_first(), before any output
 *                 through stdio or heap block of the program's ("pid P"
 *                 written with write(2)): nothing has needed a call stack yet
 *   segv corrupt-first  a heap block's overrun writes a wild size into glibc's
 *                 top chunk (the next malloc from it would make glibc abort:
 *                 "malloc(): corrupted top size"), then the SIGSEGV of first,
 *                 in crash_first(): the process must still die of SIGSEGV
 *   segv recover  the program's own SIGSEGV handler (installed in main, after
 *                 heisen's) jumps out of write_through_null() and the program
 *                 exits 0: handled, not a crash, nothing to report
 *
 * heisen must record a crash finding (signal, fault address, stack) and then
 * let the signal kill the process exactly as it would have without heisen
 * (same exit status, same core dump).  Prints "pid P", "tid T" of the
 * crashing thread and, for segv/bus, "fault_addr 0x…".
 */
#include "tt.h"

#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdint.h>
#include <sys/mman.h>

struct record {
	long id;
	long len;
	int value; /* offset 0x10 */
};

/* volatile so the compiler cannot see the NULL and replace the store by a trap. */
struct record *volatile the_record = NULL;
volatile int divisor = 0;

__attribute__((noinline)) void write_through_null(void)
{
	struct record *r = the_record;
	printf("fault_addr %p\n", (void *)&r->value);
	fflush(stdout);
	r->value = 42;
}

__attribute__((noinline)) void abort_here(void)
{
	abort();
}

__attribute__((noinline)) int divide_by_zero(void)
{
	return 1000 / divisor;
}

__attribute__((noinline)) void illegal_instruction(void)
{
	__builtin_trap();
}

__attribute__((noinline)) void touch_past_eof(void)
{
	char path[] = "/tmp/heisen-segv-bus-XXXXXX";
	int fd = mkstemp(path);
	if (fd < 0) {
		perror("mkstemp");
		exit(2);
	}
	unlink(path);
	long page = sysconf(_SC_PAGESIZE);
	volatile char *p = mmap(NULL, (size_t)page, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (p == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	printf("fault_addr %p\n", (void *)p);
	fflush(stdout);
	p[0] = 1; /* the file is empty: SIGBUS */
}

__attribute__((noinline)) void crash_first(void)
{
	char buf[32];
	struct record *r = the_record;
	int n = snprintf(buf, sizeof buf, "pid %d\n", (int)getpid());
	if (write(1, buf, (size_t)n) != n)
		exit(2);
	r->value = 42;
}

/* A 24-byte block carved from glibc's top chunk, overrun by 8 bytes: the
 * top chunk's size word right after it becomes larger than the arena. */
__attribute__((noinline)) void corrupt_top(void)
{
	char *volatile p = malloc(24);
	size_t wild = ((size_t)1 << 40) | 1;
	if (!p)
		exit(2);
	memcpy(p + 24, &wild, sizeof wild);
}

static sigjmp_buf recover_point;

static void recover_handler(int sig)
{
	(void)sig;
	siglongjmp(recover_point, 1);
}

static int crash_and_recover(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = recover_handler;
	sigemptyset(&sa.sa_mask);
	if (sigaction(SIGSEGV, &sa, NULL) != 0) {
		perror("sigaction");
		return 2;
	}
	if (sigsetjmp(recover_point, 1) == 0) {
		write_through_null();
		return 1; /* not reached */
	}
	printf("recovered\n");
	return 0;
}

static void *crash_thread(void *arg)
{
	(void)arg;
	tt_say_tid("tid");
	write_through_null();
	return NULL;
}

int main(int argc, char **argv)
{
	const char *mode = argc > 1 ? argv[1] : "segv";
	if (strcmp(mode, "first") == 0)
		crash_first();
	if (strcmp(mode, "corrupt-first") == 0) {
		corrupt_top();
		crash_first();
	}
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	if (strcmp(mode, "thread") == 0) {
		tt_run_thread(crash_thread, NULL);
		return 0;
	}
	tt_say_tid("tid");
	if (strcmp(mode, "segv") == 0)
		write_through_null();
	else if (strcmp(mode, "abort") == 0)
		abort_here();
	else if (strcmp(mode, "fpe") == 0)
		printf("%d\n", divide_by_zero());
	else if (strcmp(mode, "ill") == 0)
		illegal_instruction();
	else if (strcmp(mode, "bus") == 0)
		touch_past_eof();
	else if (strcmp(mode, "recover") == 0)
		return crash_and_recover();
	else {
		fprintf(stderr, "usage: %s [segv|first|thread|abort|fpe|ill|bus|recover]\n", argv[0]);
		return 2;
	}
	printf("survived\n");
	return 0;
}
