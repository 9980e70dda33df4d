/* SPDX-License-Identifier: MIT */
/*
 * fork_learnt_sites — a shell's shape: the parent forks three children one
 * after the other; each child, between fork and exec, allocates and frees a
 * block at call sites only the children meet (a shell's command lookup),
 * then execs /bin/true.  Under heisen the first child meets those sites
 * before its segment exists and makes it; its parent learns them from it
 * (shim/init.c, "sites a fork child learnt") for the next children.
 *
 * Each child counts, with raw system calls (nothing heisen hooks), the pages
 * of its shared mappings that are in its page table just after the fork and
 * again after its malloc and free, and prints "child K read N" (N: the
 * pages that came in between).  fork does not copy the page table entries
 * of shared mappings (the segments, the session's reference page, the learnt
 * sites' page), so N counts exactly the pages of them the child's heap
 * operations read or wrote: a child reading its parent's segment for a
 * site's stack faults each page of it in.  Prints "done" at the end.
 */
#include <fcntl.h>
#include <stdint.h>
#include <sys/wait.h>

#include "tt.h"

static long raw(long n, long a, long b, long c, long d)
{
	long rc;
	register long r10 __asm__("r10") = d;
	__asm__ volatile("syscall" : "=a"(rc) : "a"(n), "D"(a), "S"(b), "d"(c), "r"(r10) : "rcx", "r11", "memory");
	return rc;
}

static char maps[1 << 16];
static uint64_t ents[512];

/* Pages of the shared mappings present in this process's page table; -1 on error. */
static long shared_present(void)
{
	long fd = raw(SYS_openat, AT_FDCWD, (long)"/proc/self/maps", O_RDONLY | O_CLOEXEC, 0), n = 0, got, pm;
	long count = 0;
	char *line, *end;
	if (fd < 0)
		return -1;
	while (n < (long)sizeof maps - 1 && (got = raw(SYS_read, fd, (long)(maps + n), (long)sizeof maps - 1 - n, 0)) > 0)
		n += got;
	raw(SYS_close, fd, 0, 0, 0);
	maps[n] = 0;
	pm = raw(SYS_openat, AT_FDCWD, (long)"/proc/self/pagemap", O_RDONLY | O_CLOEXEC, 0);
	if (pm < 0)
		return -1;
	for (line = maps; *line; line = end + 1) {
		unsigned long lo, hi;
		char perms[5];
		end = strchr(line, '\n');
		if (!end)
			break;
		if (sscanf(line, "%lx-%lx %4s", &lo, &hi, perms) != 3 || perms[3] != 's')
			continue;
		for (unsigned long pg = lo / 4096; pg < hi / 4096;) {
			unsigned long k = hi / 4096 - pg < 512 ? hi / 4096 - pg : 512;
			if (raw(SYS_pread64, pm, (long)ents, (long)(k * 8), (long)(pg * 8)) != (long)(k * 8)) {
				raw(SYS_close, pm, 0, 0, 0);
				return -1;
			}
			for (unsigned long i = 0; i < k; i++)
				count += (long)(ents[i] >> 63);
			pg += k;
		}
	}
	raw(SYS_close, pm, 0, 0, 0);
	return count;
}

/* The children's own sites (never inlined: each call is one return address). */
__attribute__((noinline)) static char *lookup_command(void)
{
	char *p = malloc(48);
	if (p)
		memcpy(p, "/bin/true", 10);
	return p;
}

__attribute__((noinline)) static void forget_command(char *p)
{
	free(p);
}

int main(void)
{
	for (int k = 1; k <= 3; k++) {
		pid_t c = fork();
		int st;
		if (c < 0) {
			perror("fork");
			return 1;
		}
		if (c == 0) {
			char msg[64];
			long before = shared_present(), after;
			char *p = lookup_command();
			forget_command(p);
			after = shared_present();
			/* snprintf into a stack buffer: no allocation */
			int len = snprintf(msg, sizeof msg, "child %d read %ld\n", k,
					   before < 0 || after < 0 ? -1L : after - before);
			raw(SYS_write, 1, (long)msg, len, 0);
			execl("/bin/true", "true", (char *)NULL);
			_exit(127);
		}
		while (waitpid(c, &st, 0) < 0)
			if (errno != EINTR) {
				perror("waitpid");
				return 1;
			}
		if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
			fprintf(stderr, "child %d: status %d\n", k, st);
			return 1;
		}
	}
	printf("done\n");
	return 0;
}
