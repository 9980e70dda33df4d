/* SPDX-License-Identifier: MIT */
/* shim/python.c — the Python bridge (issue 3): being written. */
#include "shim.h"

void hs_py_init(void)
{
}

int hs_py_holds_gil(void)
{
	return 0;
}

uint32_t hs_py_gil_lock(void)
{
	return 0;
}
