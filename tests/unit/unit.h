/* SPDX-License-Identifier: MIT */
/*
 * tests/unit/unit.h — the few helpers heisen's C unit tests share: a check
 * macro that reports file:line and keeps going, and a private in-memory
 * segment laid out with hs_layout() for the shim's core to work on.
 */
#ifndef HEISEN_UNIT_H
#define HEISEN_UNIT_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "../../shim/shim.h"

static int unit_failures, unit_checks;

#define CHECK(cond)                                                                              \
	do {                                                                                     \
		unit_checks++;                                                                   \
		if (!(cond)) {                                                                   \
			unit_failures++;                                                         \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #cond); \
		}                                                                                \
	} while (0)

/* Map an anonymous segment of geometry g and bind s to it. */
static inline void unit_segment(struct hs_seg *s, const struct hs_geometry *g)
{
	struct hs_header probe;
	struct hs_header *h;
	hs_layout(&probe, g);
	h = mmap(NULL, probe.segment_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED) {
		perror("mmap");
		exit(2);
	}
	hs_layout(h, g);
	h->tables[HS_T_STRINGS].count = 1;
	h->tables[HS_T_STACKS].count = 1;
	h->tables[HS_T_LOCKS].count = 1;
	h->tables[HS_T_EDGES].count = 1;
	h->tables[HS_T_PYFRAMES].count = 1;
	if (hs_seg_bind(s, h, probe.segment_size) != 0) {
		perror("bind");
		exit(2);
	}
}

/* "N passed, N failed" alone on a line, and the exit status meson expects. */
static inline int unit_done(const char *name)
{
	printf("%s: %d passed, %d failed\n", name, unit_checks - unit_failures, unit_failures);
	return unit_failures ? 1 : 0;
}

#endif
