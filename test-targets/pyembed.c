/* SPDX-License-Identifier: MIT */
/*
 * pyembed — a program that embeds CPython through the shared libpython.
 *
 * Debian's /usr/bin/python3 links libpython statically, so the GIL entry
 * points live in the executable and heisen must patch GOT entries to see
 * them.  Most other Pythons (the official Docker images, pyenv, an
 * application embedding Python) call them in libpython3.X.so, where
 * LD_PRELOAD interposition reaches them.  pyembed gives CI the second kind
 * from Debian's own packages: it is linked against libpython3.11.so.1.0
 * (python3-dev's python-3.11-embed) and does what `python3 ARGS...` does.
 */
#include <Python.h>

int main(int argc, char **argv)
{
	return Py_BytesMain(argc, argv);
}
