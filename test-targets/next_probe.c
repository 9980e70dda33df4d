/* SPDX-License-Identifier: MIT */
/*
 * next_probe.so — a library preloaded after libheisen.so that looks up
 * free the two ways a wrapping library does, from its constructor:
 * dlsym(RTLD_NEXT, "free") (a malloc wrapper asking for the real one) and
 * dlsym(dlopen("libc.so.6"), "free") (a loader going to libc by name).  It
 * prints "next_is_glibc 1|0" and "handle_is_glibc 1|0", comparing each
 * with glibc's own free (its alias __libc_free): under heisen the RTLD_NEXT
 * lookup must still give glibc's (or a wrapper would recurse), the handle
 * lookup heisen's hook.
 */
#include <dlfcn.h>
#include <stdio.h>

extern void __libc_free(void *);

__attribute__((constructor)) static void probe(void)
{
	void *next = dlsym(RTLD_NEXT, "free");
	void *h = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
	void *byhandle = h ? dlsym(h, "free") : NULL;
	printf("next_is_glibc %d\n", next == (void *)&__libc_free);
	printf("handle_is_glibc %d\n", byhandle == (void *)&__libc_free);
	fflush(stdout);
}
