/* SPDX-License-Identifier: MIT */
/*
 * bench/bench_pystack.c — what a stack capture costs with Python frames
 *, measured inside a real CPython 3.11: a small extension module
 * that links the shim's core (stacks.c, python_frames.c, the segment code)
 * and times, on a private segment of the default geometry, from whatever
 * Python depth it is called at:
 *   native      unw_backtrace, the module check of every PC and
 *               hs_stack_intern: hs_stack_here() as it was before Python frames were read;
 *   interleave  hs_py_interleave alone on a captured native stack: the
 *               added work (read the frame chain, intern the Python frames);
 *   here        hs_stack_here(): the whole capture the shim makes for a new
 *               lock-order edge, Python frames included;
 *   careful     hs_py_interleave with hs_py_careful set: the signal-handler
 *               path (process_vm_readv reads).
 * Every frame is already interned after the first call (the steady state;
 * a new edge's stack is new, but its frames mostly are not).  Driven by
 * bench/run.py; results in bench/README.md.  Design: docs/design.md "Cost".
 *
 * Python: bench_pystack.measure(case, n) -> ns per capture (float);
 *         bench_pystack.frames() -> (native depth, interleaved depth, python frames).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define UNW_LOCAL_ONLY
#include <libunwind.h>
#include <string.h>
#include <sys/mman.h>

#include "../shim/shim.h"

extern __thread int hs_py_careful __attribute__((tls_model("initial-exec")));

static int ready;

static int segment_setup(void)
{
	struct hs_geometry g = HS_GEOMETRY_DEFAULT;
	struct hs_header probe, *h;
	if (ready)
		return 0;
	hs_layout(&probe, &g);
	h = mmap(NULL, probe.segment_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (h == MAP_FAILED)
		return -1;
	hs_layout(h, &g);
	/* entry 0 of these tables means "none" */
	h->tables[HS_T_STRINGS].count = 1;
	h->tables[HS_T_STACKS].count = 1;
	h->tables[HS_T_LOCKS].count = 1;
	h->tables[HS_T_EDGES].count = 1;
	h->tables[HS_T_PYFRAMES].count = 1;
	if (hs_seg_bind(&hs_seg, h, probe.segment_size) != 0)
		return -1;
	hs_modules_scan(); /* as the shim does at start: known PCs are not looked up again */
	hs_py_frames_init();
	ready = 1;
	return 0;
}

static unsigned native(uint64_t *pcs)
{
	void *buf[HS_STACK_DEPTH + 12];
	int n = unw_backtrace(buf, (int)(sizeof buf / sizeof buf[0]));
	for (int i = 0; i < n; i++)
		pcs[i] = (uint64_t)(uintptr_t)buf[i];
	return n > 0 ? (unsigned)n : 0;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static PyObject *measure(PyObject *self, PyObject *args)
{
	const char *which;
	long n;
	uint64_t pcs[2 * HS_STACK_DEPTH + 16], base[2 * HS_STACK_DEPTH + 16];
	unsigned depth = 0, nb;
	volatile uint32_t sink = 0;
	double t0;
	int python;
	(void)self;
	if (!PyArg_ParseTuple(args, "sl", &which, &n) || n <= 0)
		return NULL;
	if (segment_setup() != 0)
		return PyErr_Format(PyExc_OSError, "no segment");
	nb = native(base);
	t0 = now_ns();
	if (strcmp(which, "native") == 0) {
		for (long i = 0; i < n; i++) {
			depth = native(pcs);
			for (unsigned j = 0; j < depth; j++)
				sink += (uint32_t)hs_module_known(pcs[j]);
			sink += hs_stack_intern(&hs_seg, pcs, depth, 0);
		}
	} else if (strcmp(which, "interleave") == 0 || strcmp(which, "careful") == 0) {
		hs_py_careful = which[0] == 'c';
		for (long i = 0; i < n; i++) {
			memcpy(pcs, base, nb * sizeof *pcs);
			sink += hs_py_interleave(&hs_seg, pcs, nb, HS_STACK_DEPTH + 1, &python);
		}
		hs_py_careful = 0;
	} else if (strcmp(which, "here") == 0) {
		for (long i = 0; i < n; i++)
			sink += hs_stack_here();
	} else {
		return PyErr_Format(PyExc_ValueError, "unknown case %s", which);
	}
	(void)sink;
	return PyFloat_FromDouble((now_ns() - t0) / (double)n);
}

static PyObject *frames(PyObject *self, PyObject *unused)
{
	uint64_t pcs[2 * HS_STACK_DEPTH + 16];
	unsigned n, m, py = 0;
	int python;
	(void)self;
	(void)unused;
	if (segment_setup() != 0)
		return PyErr_Format(PyExc_OSError, "no segment");
	n = native(pcs);
	m = hs_py_interleave(&hs_seg, pcs, n, HS_STACK_DEPTH + 1, &python);
	for (unsigned i = 0; i < m; i++)
		py += HS_PC_IS_PYTHON(pcs[i]) ? 1 : 0;
	return Py_BuildValue("(III)", n, m, py);
}

static PyMethodDef methods[] = {
	{"measure", measure, METH_VARARGS, "measure(case, n) -> ns per capture"},
	{"frames", frames, METH_NOARGS, "frames() -> (native depth, interleaved depth, python frames)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "bench_pystack", NULL, -1, methods,
				    NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_bench_pystack(void)
{
	return PyModule_Create(&module);
}
