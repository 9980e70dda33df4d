/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/got_shim.c — what libgotshim.so (a test copy of
 * elf_got_surgery.c and dl_trampoline.S with their API exported) needs from
 * the rest of the shim, and one call of its own to hs_test_target: the
 * patcher must never patch the object it lives in.
 */
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "../../shim/shim.h"

__thread struct hs_tls hs_tls __attribute__((tls_model("initial-exec")));
int hs_quiet;

void hs_write_err(const char *msg)
{
	(void)!syscall(SYS_write, 2, msg, strlen(msg));
}

int hs_test_target(int x);
int gotshim_call(int x);

int gotshim_call(int x)
{
	return hs_test_target(x);
}
