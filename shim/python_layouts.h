/* SPDX-License-Identifier: MIT */
/*
 * shim/python_layouts.h — where CPython 3.8 to 3.13 keep what Python frame
 * reading needs (python_frames.c), one row per minor version.
 *
 * Pure data, no dependencies: python_frames.c includes it, and so does
 * tests/pyframe_layouts.c, which is compiled by tests/test_python_versions.py
 * against each installed CPython's own headers to check the row of that
 * version field by field with offsetof().  heisen itself is never built
 * against any CPython's headers.
 */
#ifndef HEISEN_PYTHON_LAYOUTS_H
#define HEISEN_PYTHON_LAYOUTS_H

#include <stdint.h>

enum py_chain {
	CHAIN_FRAME_OBJECT, /* 3.8-3.10: PyFrameObject, one per evaluation-loop call */
	CHAIN_IS_ENTRY,     /* 3.11: _PyInterpreterFrame, the run ends at is_entry (shown) */
	CHAIN_CSTACK,       /* 3.12+: _PyInterpreterFrame, the run ends at an owner == CSTACK shim (not shown) */
};

enum py_lines {
	LINES_LNOTAB,    /* co_lnotab: (bytecode bytes, signed line) pairs */
	LINES_PEP626,    /* 3.10 co_linetable: (bytecode bytes, signed line or -128 "none") pairs */
	LINES_LOCATIONS, /* 3.11+ co_linetable: the location table, entries in code units */
};

/*
 * Where CPython keeps what frame reading needs, in bytes from the start of
 * each struct (x86-64 and aarch64 LP64, release builds).  PYL_NONE: the version
 * has no such field.  Every number is offsetof() of the named field in the
 * headers of that tag (Include/cpython/pystate.h, Include/cpython/frameobject.h
 * (3.8-3.10), Include/internal/pycore_frame.h (3.11+), Include/cpython/code.h,
 * Include/cpython/unicodeobject.h, Include/cpython/bytesobject.h,
 * Include/internal/pycore_runtime.h or pycore_pystate.h (3.8)), as compiled
 * against ~/.pyenv/versions/3.X.Y/include (and /usr/include/python3.11 for
 * Debian's 3.11.2: identical to 3.11.7).  Patch releases keep these layouts
 * (CPython's ABI rule for a minor version), so the table is keyed by minor.
 */
#define PYL_NONE 0xffff
struct py_layout {
	unsigned minor;           /* 3.<minor> */
	enum py_chain chain;
	enum py_lines lines;
	/* PyThreadState -> the current frame */
	uint16_t ts_cframe;       /* PyThreadState.cframe (3.11, 3.12), or PYL_NONE: the frame is in the thread state */
	uint16_t ts_frame;        /* PyThreadState.frame (3.8-3.10), _PyCFrame.current_frame (3.11, 3.12),
				     PyThreadState.current_frame (3.13) */
	/* the frame */
	uint16_t f_back;          /* f_back (3.8-3.10), previous (3.11+) */
	uint16_t f_code;          /* f_code (3.8-3.12), f_executable (3.13) */
	uint16_t f_instr;         /* f_lasti, an int (3.8-3.10); prev_instr (3.11, 3.12), instr_ptr (3.13), pointers */
	uint16_t f_owner;         /* owner, a char (3.11+) */
	uint16_t f_is_entry;      /* is_entry, a char (3.11) */
	uint8_t lasti_bytes;      /* 3.8-3.10: bytes of bytecode per f_lasti unit (3.8/3.9: 1, 3.10: 2) */
	uint8_t owner_generator;  /* FRAME_OWNED_BY_GENERATOR */
	uint8_t owner_cstack;     /* FRAME_OWNED_BY_CSTACK (3.12+) */
	/* the code object */
	uint16_t co_firstlineno;  /* int */
	uint16_t co_filename;
	uint16_t co_name;
	uint16_t co_qualname;     /* 3.11+ */
	uint16_t co_linetable;    /* co_lnotab (3.8, 3.9), co_linetable (3.10+): a bytes object */
	uint16_t co_firsttraceable; /* _co_firsttraceable, an int (3.11+) */
	uint16_t co_code;         /* co_code_adaptive: the instructions inline (3.11+) */
	/* str (PEP 393 compact objects) */
	uint16_t str_ascii_data;  /* sizeof(PyASCIIObject): where a compact ASCII string's bytes start */
	uint16_t str_data;        /* sizeof(PyCompactUnicodeObject): where other compact strings' units start */
	uint8_t str_ready;        /* the state word's `ready` bit (removed in 3.12: 0, always ready) */
	/* the thread state running on this thread (python_frames.c tstate_of_thread) */
	uint16_t rt_tstate_current; /* _PyRuntime.gilstate.tstate_current (3.8-3.11: the GIL holder's
				       thread state, any thread's), or PYL_NONE: 3.12+ keep it per
				       thread (_Py_tss_tstate), read through PyThreadState_GetUnchecked */
	uint16_t ts_thread_id;    /* PyThreadState.thread_id: pthread_self() of the thread that made it */
};

/* Common to all of them: PyObject.ob_type 8, PyVarObject.ob_size 16,
 * PyBytesObject.ob_sval 32, PyASCIIObject.length 16, PyASCIIObject.state 32
 * (a 32-bit word: kind bits 2-4, compact bit 5, ascii bit 6). */
#define OB_TYPE 8
#define OB_SIZE 16
#define BYTES_SVAL 32
#define STR_LENGTH 16
#define STR_STATE 32
#define STR_KIND(st) (((st) >> 2) & 7)
#define STR_COMPACT 0x20u
#define STR_ASCII 0x40u

static const struct py_layout layouts[] = {
	/* 3.8.18: PyThreadState.frame 24; PyFrameObject f_back 24, f_code 32, f_lasti 104 (bytes);
	 * PyCodeObject co_firstlineno 40, co_filename 104, co_name 112, co_lnotab 120 */
	{8, CHAIN_FRAME_OBJECT, LINES_LNOTAB, PYL_NONE, 24, 24, 32, 104, PYL_NONE, PYL_NONE, 1, 0, 0,
	 40, 104, 112, PYL_NONE, 120, PYL_NONE, PYL_NONE, 48, 72, 0x80,
	 1368, 176},
	/* 3.9.18: the same as 3.8 */
	{9, CHAIN_FRAME_OBJECT, LINES_LNOTAB, PYL_NONE, 24, 24, 32, 104, PYL_NONE, PYL_NONE, 1, 0, 0,
	 40, 104, 112, PYL_NONE, 120, PYL_NONE, PYL_NONE, 48, 72, 0x80,
	 568, 176},
	/* 3.10.13: f_lasti 96, in code units (PEP 626); co_linetable 120 */
	{10, CHAIN_FRAME_OBJECT, LINES_PEP626, PYL_NONE, 24, 24, 32, 96, PYL_NONE, PYL_NONE, 2, 0, 0,
	 40, 104, 112, PYL_NONE, 120, PYL_NONE, PYL_NONE, 48, 72, 0x80,
	 568, 176},
	/* 3.11.7 (and Debian's 3.11.2): PyThreadState.cframe 56, _PyCFrame.current_frame 8;
	 * _PyInterpreterFrame f_code 32, previous 48, prev_instr 56, is_entry 68, owner 69;
	 * FRAME_OWNED_BY_GENERATOR 1; PyCodeObject co_firstlineno 72, co_filename 112,
	 * co_name 120, co_qualname 128, co_linetable 136, _co_firsttraceable 168,
	 * co_code_adaptive 184 */
	{11, CHAIN_IS_ENTRY, LINES_LOCATIONS, 56, 8, 48, 32, 56, 69, 68, 0, 1, 0,
	 72, 112, 120, 128, 136, 168, 184, 48, 72, 0x80,
	 576, 152},
	/* 3.12.1: PyThreadState.cframe 56, _PyCFrame.current_frame 0; _PyInterpreterFrame
	 * f_code 0, previous 8, prev_instr 56, owner 70; FRAME_OWNED_BY_GENERATOR 1, CSTACK 3;
	 * PyCodeObject co_firstlineno 68, co_filename 112, co_name 120, co_qualname 128,
	 * co_linetable 136, _co_firsttraceable 176, co_code_adaptive 192; str without wstr */
	{12, CHAIN_CSTACK, LINES_LOCATIONS, 56, 0, 8, 0, 56, 70, PYL_NONE, 0, 1, 3,
	 68, 112, 120, 128, 136, 176, 192, 40, 56, 0,
	 PYL_NONE, 136},
	/* 3.13.0: PyThreadState.current_frame 72 (no _PyCFrame); _PyInterpreterFrame
	 * f_executable 0, previous 8, instr_ptr 56, owner 70; FRAME_OWNED_BY_GENERATOR 1,
	 * CSTACK 3; PyCodeObject co_firstlineno 68, co_filename 112, co_name 120,
	 * co_qualname 128, co_linetable 136, _co_firsttraceable 184, co_code_adaptive 200 */
	{13, CHAIN_CSTACK, LINES_LOCATIONS, PYL_NONE, 72, 8, 0, 56, 70, PYL_NONE, 0, 1, 3,
	 68, 112, 120, 128, 136, 184, 200, 40, 56, 0,
	 PYL_NONE, 152},
};

/* Location-table entry kinds (PY_CODE_LOCATION_INFO_* of Include/internal/pycore_code.h, 3.11+). */
enum { LOC_ONE_LINE0 = 10, LOC_ONE_LINE1 = 11, LOC_ONE_LINE2 = 12, LOC_NO_COLUMNS = 13, LOC_LONG = 14,
       LOC_NONE = 15 };

#endif
