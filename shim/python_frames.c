/* SPDX-License-Identifier: MIT */
/* shim/python_frames.c — Python frames in native stacks (issue 3): being written. */
#include "shim.h"

unsigned hs_py_interleave(struct hs_seg *s, uint64_t *pcs, unsigned n, unsigned max, int *python)
{
	(void)s;
	(void)pcs;
	(void)max;
	*python = 0;
	return n;
}

void hs_py_frames_init(void)
{
}
