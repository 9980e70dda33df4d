/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/got_next.c — two libraries (-DGOTNEXT_A, -DGOTNEXT_B) that both
 * define hs_next_fn, loaded in that order, to check that libheisen's dlsym
 * trampoline keeps dlsym(RTLD_NEXT, …) relative to its real caller: from A,
 * the next hs_next_fn is B's.  A C wrapper would make the shim the caller
 * and find A's.
 */
#include <dlfcn.h>

#ifdef GOTNEXT_A
int hs_next_fn(void);
void *gotnext_lookup(void);

int hs_next_fn(void)
{
	return 'A';
}

/* Not a tail call: glibc must see a return address inside this library. */
void *gotnext_lookup(void)
{
	void *p = dlsym(RTLD_NEXT, "hs_next_fn");
	__asm__ volatile("" : "+r"(p) : : "memory");
	return p;
}
#else
int hs_next_fn(void);
int gotnext_b_tag(void);

int hs_next_fn(void)
{
	return 'B';
}

int gotnext_b_tag(void)
{
	return 'b';
}
#endif
