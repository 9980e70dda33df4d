/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/got_user.c — a library whose GOT test_got patches.  Built
 * several times (-DGOTUSER=now, lazy, late, tramp) with different binding
 * and RELRO.  It calls hs_test_target (defined by the test executable)
 * through its PLT: a JUMP_SLOT.  It takes the address of hs_test_addr_target
 * and calls it too: a GLOB_DAT, which GNU ld makes the call go through as
 * well (.plt.got, no JUMP_SLOT) — the usual shape when a library both calls
 * a function and passes it as a callback.
 */
#define GOTUSER_CAT_(a, b, c) a##b##c
#define GOTUSER_CAT(a, b, c) GOTUSER_CAT_(a, b, c)
#define GOTUSER_FN(suffix) GOTUSER_CAT(gotuser_, GOTUSER, suffix)

int hs_test_target(int x);
int hs_test_addr_target(int x);

int GOTUSER_FN(_call)(int x);
int GOTUSER_FN(_call_addr)(int x);
void *GOTUSER_FN(_addr)(void);

int GOTUSER_FN(_call)(int x)
{
	return hs_test_target(x);
}

int GOTUSER_FN(_call_addr)(int x)
{
	return hs_test_addr_target(x);
}

void *GOTUSER_FN(_addr)(void)
{
	return (void *)&hs_test_addr_target;
}
