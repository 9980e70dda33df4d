/* SPDX-License-Identifier: MIT */
/*
 * shim/env.c — the one parser of every HEISEN_* setting.
 *
 * Each variable is a number with a range, a boolean or one of a few words.
 * A value that is not one of those is never taken in part (no "first
 * character", no strtoul stopping at the junk, no negative number wrapping
 * to a huge one): the variable's documented default is used and one line
 * says so on stderr, "heisen: ignoring NAME=VALUE: not a number|out of range
 * (LO to HI)|not 0 or 1|not one of A, B; using DEFAULT", once per variable
 * and process.  It runs in the constructor, before the shim is ready: no
 * malloc, no stdio, no locale (getenv and a raw write only).
 */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "shim.h"

#define WARNED_MAX 32

static const char *warned[WARNED_MAX]; /* names already warned about (string literals) */
static unsigned nwarned;

static size_t put(char *dst, size_t len, size_t cap, const char *src)
{
	while (*src && len + 1 < cap)
		dst[len++] = *src++;
	dst[len] = '\0';
	return len;
}

static size_t put_u64(char *dst, size_t len, size_t cap, uint64_t v)
{
	char num[24];
	hs_fmt_u64(num, v);
	return put(dst, len, cap, num);
}

/* HEISEN_QUIET=1 silences every warning, whichever variable is read first. */
static int quiet(void)
{
	const char *q = getenv("HEISEN_QUIET");
	return hs_quiet || (q && strcmp(q, "1") == 0);
}

/* "heisen: ignoring NAME=VALUE: <why>; using <dflt>" once per name. */
static void ignoring(const char *name, const char *value, const char *why, const char *dflt)
{
	char buf[512];
	size_t n = 0, i;
	if (quiet())
		return;
	for (i = 0; i < nwarned; i++)
		if (strcmp(warned[i], name) == 0)
			return;
	if (nwarned < WARNED_MAX)
		warned[nwarned++] = name;
	n = put(buf, n, sizeof buf, "heisen: ignoring ");
	n = put(buf, n, sizeof buf, name);
	n = put(buf, n, sizeof buf, "=");
	/* the value as given, at most 64 bytes, control characters shown as '?' */
	for (i = 0; value[i] && i < 64 && n + 1 < sizeof buf; i++)
		buf[n++] = (unsigned char)value[i] < 0x20 || value[i] == 0x7f ? '?' : value[i];
	if (value[i])
		n = put(buf, n, sizeof buf, "...");
	n = put(buf, n, sizeof buf, ": ");
	n = put(buf, n, sizeof buf, why);
	n = put(buf, n, sizeof buf, "; using ");
	n = put(buf, n, sizeof buf, dflt);
	put(buf, n, sizeof buf, "\n");
	hs_write_err(buf);
}

uint64_t hs_getenv_num(const char *name, uint64_t dflt, uint64_t lo, uint64_t hi, int *given)
{
	const char *v = getenv(name), *p;
	char why[96], d[24];
	uint64_t x = 0;
	int over = 0;
	size_t n = 0;
	if (given)
		*given = 0;
	if (!v || !*v)
		return dflt;
	p = v + (*v == '-' || *v == '+');
	if (!*p || strspn(p, "0123456789") != strlen(p)) {
		hs_fmt_u64(d, dflt);
		ignoring(name, v, "not a number", d);
		return dflt;
	}
	for (; *p; p++) {
		unsigned digit = (unsigned)(*p - '0');
		if (x > (UINT64_MAX - digit) / 10)
			over = 1;
		else
			x = x * 10 + digit;
	}
	if (over || (*v == '-' && x != 0) || x < lo || x > hi) {
		n = put(why, n, sizeof why, "out of range (");
		n = put_u64(why, n, sizeof why, lo);
		n = put(why, n, sizeof why, " to ");
		n = put_u64(why, n, sizeof why, hi);
		put(why, n, sizeof why, ")");
		hs_fmt_u64(d, dflt);
		ignoring(name, v, why, d);
		return dflt;
	}
	if (given)
		*given = 1;
	return x;
}

int hs_getenv_bool(const char *name, int dflt)
{
	static const char *const yes[] = {"1", "yes", "true", "on"};
	static const char *const no[] = {"0", "no", "false", "off"};
	const char *v = getenv(name);
	if (!v || !*v)
		return dflt;
	for (unsigned i = 0; i < sizeof yes / sizeof yes[0]; i++) {
		if (strcmp(v, yes[i]) == 0)
			return 1;
		if (strcmp(v, no[i]) == 0)
			return 0;
	}
	ignoring(name, v, "not 0 or 1", dflt ? "1" : "0");
	return dflt;
}

int hs_getenv_enum(const char *name, const char *const *words, int nwords, int dflt)
{
	const char *v = getenv(name);
	char why[160];
	size_t n = 0;
	if (!v || !*v)
		return dflt;
	for (int i = 0; i < nwords; i++)
		if (strcmp(v, words[i]) == 0)
			return i;
	n = put(why, n, sizeof why, "not one of ");
	for (int i = 0; i < nwords; i++) {
		n = put(why, n, sizeof why, words[i]);
		if (i + 1 < nwords)
			n = put(why, n, sizeof why, ", ");
	}
	ignoring(name, v, why, words[dflt]);
	return dflt;
}
