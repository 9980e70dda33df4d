/* SPDX-License-Identifier: MIT */
/*
 * dumper/symbolize.h — offline symbolization of one process's PCs.
 *
 * The process may be gone: everything comes from the segment's module table
 * (path, load bias, address range, build-id) and the ELF files on disk, read
 * with elfutils' libdwfl.  Each file is read once per run of heisen-dump,
 * shared by every process that mapped it (keyed by its recorded build-id),
 * and each of its addresses is looked up once; results are also cached by
 * PC per process because the same stacks repeat across findings and threads.
 */
#ifndef HEISEN_DUMPER_SYMBOLIZE_H
#define HEISEN_DUMPER_SYMBOLIZE_H

#include <stdbool.h>
#include <stdint.h>

#include "segment.h"

/*
 * One symbolized PC, or one Python frame (python: a pc with HS_PC_PYTHON
 * set, format.h).  Strings are owned by the symbolizer.
 */
struct hs_frame {
	uint64_t pc;           /* as recorded */
	const char *function;  /* NULL when unknown; Python: the code object's qualified name */
	const char *file;      /* source file basename, NULL when unknown; Python: co_filename as recorded */
	int line;              /* 0 when unknown */
	const char *module;    /* module path, NULL when the pc is in no recorded module (always for Python) */
	uint64_t offset;       /* pc - module bias (the address in the file's terms); pc without a module */
	bool hook;             /* inside libheisen*: a hook frame, not shown */
	bool python;           /* a Python frame: module and offset mean nothing */
};

struct hs_sym;

/*
 * A symbolizer for the process of seg.  With debuginfo false it only maps
 * PCs to module + offset (cheap; --no-symbols).  exe names the main program
 * when its module entry has an empty path.  Modules whose files are missing
 * or whose build-id differs from the recorded one get one warning on stderr
 * each (per run of heisen-dump).  Returns NULL only when out of memory.
 */
struct hs_sym *hs_sym_new(struct hs_seg *seg, const char *exe, bool debuginfo);

/*
 * Symbolize pc.  return_address: pc is a return address, so the call site
 * is pc - 1 (format.h, struct hs_stack).  A pc with HS_PC_PYTHON set is a
 * Python frame: its hs_pyframe entry is read from the segment (a bad or
 * unpublished id gives function "?" and is complained about on the
 * segment).  Never NULL except out of memory; the frame stays valid until
 * hs_sym_free.
 */
const struct hs_frame *hs_sym_pc(struct hs_sym *s, uint64_t pc, bool return_address);

/*
 * The data symbol addr falls in ("lock_a", or "state+0x40" inside a larger
 * object), or NULL.  Valid until hs_sym_free.
 */
const char *hs_sym_data(struct hs_sym *s, uint64_t addr);

void hs_sym_free(struct hs_sym *s);

#endif
