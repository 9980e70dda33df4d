/* SPDX-License-Identifier: MIT */
/*
 * shim/hooks.h — pointers to the real functions behind every hook, generated
 * from hooks.def, and HS_REAL(name), which resolves them on first use (a hook
 * can run before the shim's constructor: other libraries' constructors take
 * locks too).  A function that cannot be resolved is fatal, loudly.
 */
#ifndef HEISEN_HOOKS_H
#define HEISEN_HOOKS_H

#include <dirent.h>
#include <pthread.h>
#include <semaphore.h>
#include <signal.h>
#include <stdio.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <time.h>

#define HS_HOOK(ret, name, params) extern ret(*hs_real_##name) params;
#define HS_HOOK_V(ret, name, params, version) HS_HOOK(ret, name, params)
#include "hooks.def"
#undef HS_HOOK
#undef HS_HOOK_V

/* Resolve every real function. Idempotent; aborts when one is missing. */
void hs_resolve_all(void);

#define HS_REAL(name) (__builtin_expect(hs_real_##name == NULL, 0) ? hs_resolve_all() : (void)0, hs_real_##name)

#endif
