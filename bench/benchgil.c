/* SPDX-License-Identifier: MIT */
/*
 * bench/benchgil.c — what the GIL check costs a lock acquisition:
 * a tiny CPython extension that knows nothing of heisen, so bench/run.py can
 * import it natively, under LD_PRELOAD=libheisen.so and with HEISEN_DISABLE=1
 * and compare.  Under heisen every blocking acquisition asks
 * hs_py_holds_gil() (Py_IsInitialized + PyGILState_Check, shim/python.c) and,
 * when the answer is yes, looks up the GIL -> L edge (shim/locks.c); with the
 * GIL released the check answers no and there is no edge.
 *
 * Python:
 *   benchgil.pairs_gil(n)   n uncontended pthread_mutex_lock/unlock pairs of
 *                           one static mutex, the GIL held throughout;
 *   benchgil.pairs_nogil(n) the same inside Py_BEGIN_ALLOW_THREADS (the GIL
 *                           released, so the check answers no);
 *   benchgil.check_gil(n)   n calls of PyGILState_Check with the GIL held:
 *                           the interpreter's half of the check, alone;
 *   benchgil.mutex_addr()   the mutex's address (int), to find its node in
 *                           heisen-dump's output.
 * Each timing function first runs an untimed warm-up of n/10 (a new call
 * site and the edge's creation are not counted) and returns the elapsed ns
 * of the n iterations (int), measured with CLOCK_MONOTONIC around the loop
 * only, so interpreter start-up is never in the number.  n < 1 raises
 * ValueError; a failing pthread call raises OSError (the mutex is left
 * unlocked).  Driven by bench/run.py part 5; results in bench/README.md.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <time.h>

static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* n lock+unlock pairs; 0, or the first error number (the mutex unlocked). */
static int pairs(long n)
{
	for (long i = 0; i < n; i++) {
		int rc = pthread_mutex_lock(&mu);
		if (rc)
			return rc;
		rc = pthread_mutex_unlock(&mu);
		if (rc)
			return rc;
	}
	return 0;
}

static int arg_n(PyObject *arg, long *n)
{
	*n = PyLong_AsLong(arg);
	if (*n == -1 && PyErr_Occurred())
		return -1;
	if (*n < 1) {
		PyErr_SetString(PyExc_ValueError, "n must be at least 1");
		return -1;
	}
	return 0;
}

static PyObject *result(int rc, uint64_t ns)
{
	if (rc) {
		errno = rc;
		return PyErr_SetFromErrno(PyExc_OSError);
	}
	return PyLong_FromUnsignedLongLong(ns);
}

static PyObject *pairs_gil(PyObject *self, PyObject *arg)
{
	long n;
	uint64_t t0, t1;
	int rc;
	(void)self;
	if (arg_n(arg, &n))
		return NULL;
	rc = pairs(n / 10);
	t0 = now_ns();
	if (!rc)
		rc = pairs(n);
	t1 = now_ns();
	return result(rc, t1 - t0);
}

static PyObject *pairs_nogil(PyObject *self, PyObject *arg)
{
	long n;
	uint64_t t0 = 0, t1 = 0;
	int rc;
	(void)self;
	if (arg_n(arg, &n))
		return NULL;
	Py_BEGIN_ALLOW_THREADS
	rc = pairs(n / 10);
	t0 = now_ns();
	if (!rc)
		rc = pairs(n);
	t1 = now_ns();
	Py_END_ALLOW_THREADS
	return result(rc, t1 - t0);
}

static PyObject *check_gil(PyObject *self, PyObject *arg)
{
	long n;
	uint64_t t0, t1;
	volatile int sink = 0;
	(void)self;
	if (arg_n(arg, &n))
		return NULL;
	for (long i = 0; i < n / 10; i++)
		sink += PyGILState_Check();
	t0 = now_ns();
	for (long i = 0; i < n; i++)
		sink += PyGILState_Check();
	t1 = now_ns();
	if (sink != n + n / 10) {
		PyErr_SetString(PyExc_RuntimeError, "PyGILState_Check said no with the GIL held");
		return NULL;
	}
	return result(0, t1 - t0);
}

static PyObject *mutex_addr(PyObject *self, PyObject *unused)
{
	(void)self, (void)unused;
	return PyLong_FromVoidPtr(&mu);
}

static PyMethodDef methods[] = {
	{"pairs_gil", pairs_gil, METH_O, "pairs_gil(n) -> ns for n lock/unlock pairs with the GIL held"},
	{"pairs_nogil", pairs_nogil, METH_O, "pairs_nogil(n) -> ns for n lock/unlock pairs without the GIL"},
	{"check_gil", check_gil, METH_O, "check_gil(n) -> ns for n PyGILState_Check calls with the GIL held"},
	{"mutex_addr", mutex_addr, METH_NOARGS, "mutex_addr() -> the benchmarked mutex's address"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "benchgil", "GIL-check cost of a lock acquisition (bench/benchgil.c)", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_benchgil(void)
{
	return PyModule_Create(&module);
}
