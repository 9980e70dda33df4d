/* SPDX-License-Identifier: MIT */
/*
 * pyframe_layouts.c — check shim/python_layouts.h against a CPython's own
 * headers.  Compiled by tests/test_python_versions.py once per installed
 * interpreter, with that interpreter's include directory (Py_BUILD_CORE for
 * the internal frame headers); never part of heisen's build.  Prints one
 * line per field that differs and "ok N fields"; exits 0 when the row of
 * this PY_MINOR_VERSION matches, 1 when a field differs, 2 when the table
 * has no row for it.
 */
#define Py_BUILD_CORE 1
#include <Python.h>
#if PY_VERSION_HEX >= 0x030b0000
#include <internal/pycore_code.h>
#include <internal/pycore_frame.h>
#else
#include <frameobject.h>
#endif
#if PY_VERSION_HEX < 0x030c0000 && PY_VERSION_HEX >= 0x03090000
#include <internal/pycore_runtime.h> /* _PyRuntimeState */
#elif PY_VERSION_HEX < 0x03090000
#include <internal/pycore_pystate.h> /* _PyRuntimeState (3.8) */
#endif
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "python_layouts.h"

static int bad, checked;

static void check(const char *what, unsigned table, unsigned headers)
{
	checked++;
	if (table != headers) {
		printf("MISMATCH %s: table %u, headers %u\n", what, table, headers);
		bad++;
	}
}

#define CHECK(what, table, headers) check(what, (unsigned)(table), (unsigned)(headers))

/* The state word of a str with one bit-field set, as the 32-bit word heisen reads. */
#define STATE_WITH(field, value)                                        \
	({                                                              \
		PyASCIIObject a_;                                       \
		uint32_t w_ = 0;                                        \
		memset(&a_, 0, sizeof a_);                              \
		a_.state.field = (value);                               \
		memcpy(&w_, (char *)&a_ + STR_STATE, sizeof w_);        \
		w_;                                                     \
	})

int main(void)
{
	const struct py_layout *L = NULL;
	for (size_t i = 0; i < sizeof layouts / sizeof layouts[0]; i++)
		if (PY_MAJOR_VERSION == 3 && layouts[i].minor == PY_MINOR_VERSION)
			L = &layouts[i];
	if (!L) {
		printf("no row for CPython %s\n", PY_VERSION);
		return 2;
	}
	printf("CPython %s\n", PY_VERSION);

	CHECK("PyObject.ob_type", OB_TYPE, offsetof(PyObject, ob_type));
	CHECK("PyVarObject.ob_size", OB_SIZE, offsetof(PyVarObject, ob_size));
	CHECK("PyBytesObject.ob_sval", BYTES_SVAL, offsetof(PyBytesObject, ob_sval));
	CHECK("PyASCIIObject.length", STR_LENGTH, offsetof(PyASCIIObject, length));
	CHECK("PyASCIIObject.state", STR_STATE, offsetof(PyASCIIObject, state));
	CHECK("sizeof(PyASCIIObject)", L->str_ascii_data, sizeof(PyASCIIObject));
	CHECK("sizeof(PyCompactUnicodeObject)", L->str_data, sizeof(PyCompactUnicodeObject));
	CHECK("state.kind", STR_KIND(STATE_WITH(kind, PyUnicode_4BYTE_KIND)), PyUnicode_4BYTE_KIND);
	CHECK("state.compact", STR_COMPACT, STATE_WITH(compact, 1));
	CHECK("state.ascii", STR_ASCII, STATE_WITH(ascii, 1));
#if PY_VERSION_HEX < 0x030c0000
	CHECK("state.ready", L->str_ready, STATE_WITH(ready, 1));
#else
	CHECK("state.ready (none)", L->str_ready, 0);
#endif
	CHECK("co_firstlineno", L->co_firstlineno, offsetof(PyCodeObject, co_firstlineno));
	CHECK("co_filename", L->co_filename, offsetof(PyCodeObject, co_filename));
	CHECK("co_name", L->co_name, offsetof(PyCodeObject, co_name));
	CHECK("PyThreadState.thread_id", L->ts_thread_id, offsetof(PyThreadState, thread_id));
#if PY_VERSION_HEX < 0x030c0000
	CHECK("_PyRuntimeState.gilstate.tstate_current", L->rt_tstate_current,
	      offsetof(_PyRuntimeState, gilstate.tstate_current));
#else
	CHECK("rt_tstate_current (none: _Py_tss_tstate)", L->rt_tstate_current, PYL_NONE);
#endif

#if PY_VERSION_HEX < 0x030b0000
	CHECK("chain", L->chain, CHAIN_FRAME_OBJECT);
	CHECK("ts_cframe (none)", L->ts_cframe, PYL_NONE);
	CHECK("PyThreadState.frame", L->ts_frame, offsetof(PyThreadState, frame));
	CHECK("PyFrameObject.f_back", L->f_back, offsetof(PyFrameObject, f_back));
	CHECK("PyFrameObject.f_code", L->f_code, offsetof(PyFrameObject, f_code));
	CHECK("PyFrameObject.f_lasti", L->f_instr, offsetof(PyFrameObject, f_lasti));
	CHECK("co_qualname (none)", L->co_qualname, PYL_NONE);
#if PY_VERSION_HEX < 0x030a0000
	CHECK("lines", L->lines, LINES_LNOTAB);
	CHECK("co_lnotab", L->co_linetable, offsetof(PyCodeObject, co_lnotab));
	CHECK("f_lasti unit (bytes)", L->lasti_bytes, 1);
#else
	CHECK("lines", L->lines, LINES_PEP626);
	CHECK("co_linetable", L->co_linetable, offsetof(PyCodeObject, co_linetable));
	CHECK("f_lasti unit (code units)", L->lasti_bytes, sizeof(_Py_CODEUNIT));
#endif
#else
	CHECK("lines", L->lines, LINES_LOCATIONS);
	CHECK("co_qualname", L->co_qualname, offsetof(PyCodeObject, co_qualname));
	CHECK("co_linetable", L->co_linetable, offsetof(PyCodeObject, co_linetable));
	CHECK("_co_firsttraceable", L->co_firsttraceable, offsetof(PyCodeObject, _co_firsttraceable));
	CHECK("co_code_adaptive", L->co_code, offsetof(PyCodeObject, co_code_adaptive));
	CHECK("sizeof(_Py_CODEUNIT)", 2, sizeof(_Py_CODEUNIT));
	CHECK("_PyInterpreterFrame.previous", L->f_back, offsetof(_PyInterpreterFrame, previous));
	CHECK("_PyInterpreterFrame.owner", L->f_owner, offsetof(_PyInterpreterFrame, owner));
	CHECK("FRAME_OWNED_BY_GENERATOR", L->owner_generator, FRAME_OWNED_BY_GENERATOR);
	CHECK("PY_CODE_LOCATION_INFO_ONE_LINE0", LOC_ONE_LINE0, PY_CODE_LOCATION_INFO_ONE_LINE0);
	CHECK("PY_CODE_LOCATION_INFO_ONE_LINE2", LOC_ONE_LINE2, PY_CODE_LOCATION_INFO_ONE_LINE2);
	CHECK("PY_CODE_LOCATION_INFO_NO_COLUMNS", LOC_NO_COLUMNS, PY_CODE_LOCATION_INFO_NO_COLUMNS);
	CHECK("PY_CODE_LOCATION_INFO_LONG", LOC_LONG, PY_CODE_LOCATION_INFO_LONG);
	CHECK("PY_CODE_LOCATION_INFO_NONE", LOC_NONE, PY_CODE_LOCATION_INFO_NONE);
#if PY_VERSION_HEX < 0x030d0000
	CHECK("PyThreadState.cframe", L->ts_cframe, offsetof(PyThreadState, cframe));
	CHECK("_PyCFrame.current_frame", L->ts_frame, offsetof(_PyCFrame, current_frame));
	CHECK("_PyInterpreterFrame.f_code", L->f_code, offsetof(_PyInterpreterFrame, f_code));
	CHECK("_PyInterpreterFrame.prev_instr", L->f_instr, offsetof(_PyInterpreterFrame, prev_instr));
#else
	CHECK("ts_cframe (none)", L->ts_cframe, PYL_NONE);
	CHECK("PyThreadState.current_frame", L->ts_frame, offsetof(PyThreadState, current_frame));
	CHECK("_PyInterpreterFrame.f_executable", L->f_code, offsetof(_PyInterpreterFrame, f_executable));
	CHECK("_PyInterpreterFrame.instr_ptr", L->f_instr, offsetof(_PyInterpreterFrame, instr_ptr));
#endif
#if PY_VERSION_HEX < 0x030c0000
	CHECK("chain", L->chain, CHAIN_IS_ENTRY);
	CHECK("_PyInterpreterFrame.is_entry", L->f_is_entry, offsetof(_PyInterpreterFrame, is_entry));
#else
	CHECK("chain", L->chain, CHAIN_CSTACK);
	CHECK("is_entry (none)", L->f_is_entry, PYL_NONE);
	CHECK("FRAME_OWNED_BY_CSTACK", L->owner_cstack, FRAME_OWNED_BY_CSTACK);
#endif
#endif
	printf("%s %d fields\n", bad ? "bad" : "ok", checked);
	return bad ? 1 : 0;
}
