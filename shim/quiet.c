/* SPDX-License-Identifier: MIT */
/*
 * shim/quiet.c — the recorder goes quiet.  When the shim finds its own
 * state inconsistent — an invariant HS_ASSERT guards is false, an index
 * that cannot fill (hs_index_may_fill) ran out, an fd slot stayed claimed
 * by a writer that never finished — what it would record next may be
 * wrong, and the user's program must not pay for the recorder's trouble.
 * So it stops recording (hs_recording = 0: every hook calls straight
 * through, shim.h hs_enter), marks the segment HS_HDR_SUSPECT, which both
 * reports read ("the recorder found its own state inconsistent and went
 * quiet", dumper/report_text.c; "suspect" in the JSON; heisen-run's quick
 * verdict reads the session in full, internal/seg_verdict.h), and says so
 * once on stderr (under heisen-run, its warnings file).  What was recorded
 * before stays; the process's end is still written (hs_segment_end).
 * Never aborts: SQLite's ALWAYS/NEVER, not assert(3).
 * Design: docs/design.md "Promises kept in code" (under "Rules of the code").
 */
#include <string.h>

#include "shim.h"

static int said; /* [atomic] the stderr line was written */

int hs_go_quiet(struct hs_seg *s, const char *what)
{
	if (s && s->hdr)
		__atomic_or_fetch(&s->hdr->flags, HS_HDR_SUSPECT, __ATOMIC_RELEASE);
	__atomic_store_n(&hs_recording, 0, __ATOMIC_RELEASE);
	if (__atomic_exchange_n(&said, 1, __ATOMIC_ACQ_REL) == 0 && !hs_quiet) {
		hs_write_err("heisen: the recorder found its own state inconsistent (");
		hs_write_err(what);
		hs_write_err(") and went quiet: nothing more is recorded in this process\n");
	}
	return 0;
}

int hs_assert_fail(struct hs_seg *s, const char *expr, const char *file, int line)
{
	char where[320], num[24];
	size_t n = 0, k;
	const char *base = strrchr(file, '/');
	base = base ? base + 1 : file;
	hs_fmt_u64(num, (uint64_t)line);
	/* "EXPR at FILE:LINE", cut to the buffer: no stdio in a hook or a handler */
	for (const char *part[] = {expr, " at ", base, ":", num}, **p = part; p < part + 5; p++) {
		k = strlen(*p);
		if (k > sizeof where - 1 - n)
			k = sizeof where - 1 - n;
		memcpy(where + n, *p, k);
		n += k;
	}
	where[n] = '\0';
	return hs_go_quiet(s, where);
}
