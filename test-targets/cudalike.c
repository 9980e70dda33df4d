/* SPDX-License-Identifier: MIT */
/*
 * cudalike — a CPython extension that owns a native rwlock the way libcuda
 * does, to reproduce seed 003 (the RAPIDS/Dask deadlock) on demand.
 *
 * cuda_ctx_lock stands in for libcuda's context lock.  Two calls touch it:
 *
 *   launch()        called by a Python thread that holds the GIL; takes the
 *                   rwlock for writing *without* releasing the GIL
 *                   (cuda_launch_kernel), as CuPy's kernel launch did:
 *                   the edge GIL -> cuda_ctx_lock.
 *   with_context(callable[, read])
 *                   releases the GIL, takes the rwlock (cuda_ctx_call), and
 *                   runs the Python callable through the C API
 *                   (PyGILState_Ensure, PyObject_CallNoArgs,
 *                   PyGILState_Release) while still holding it, as
 *                   cuOccupancyMaxPotentialBlockSize ran Numba's lambda:
 *                   the edge cuda_ctx_lock -> GIL.
 *   with_context_ctypes(address[, read])
 *                   the same, but the callback is a ctypes CFUNCTYPE(None)
 *                   function pointer given as an integer address: _ctypes'
 *                   thunk takes the GIL itself (PyGILState_Ensure inside
 *                   _ctypes.so, an object dlopen'ed after start).
 *   cuda_occupancy(cb)
 *                   an exported plain C function, for ctypes.CDLL: Python
 *                   calls it through ctypes' foreign-function call (which
 *                   releases the GIL), exactly as Numba called libcuda.
 *
 * A run that calls with_context() and later launch() never hangs; heisen
 * must predict the deadlock.  For the real deadlock, arm_meet() makes the
 * next cuda_ctx_call wait, holding the rwlock and before calling back, until
 * launch(release_holder=True) says go; wait_held() (GIL released) returns
 * once the holder holds the rwlock.  The thread calling launch() holds the
 * GIL from the "go" to the wrlock without a gap, so the holder's
 * PyGILState_Ensure and the launcher's wrlock meet every time.  The
 * hand-shake uses atomics and sleeps, no lock, so that the only locks in the
 * report are the GIL and cuda_ctx_lock.
 * native_tid() returns the calling thread's kernel tid, for the tests.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdatomic.h>
#include <sys/syscall.h>
#include <unistd.h>

#define CL_EXPORT __attribute__((noinline, visibility("default")))

pthread_rwlock_t cuda_ctx_lock = PTHREAD_RWLOCK_INITIALIZER;
static volatile long cuda_kernels; /* work done under the lock */
static atomic_int ctx_meet;        /* the next cuda_ctx_call waits for ctx_go */
static atomic_int ctx_held;        /* the waiting holder holds cuda_ctx_lock */
static atomic_int ctx_go;          /* the launcher is about to take it */

typedef void (*ctx_cb)(void *arg);

static void ctx_wait_for(atomic_int *flag)
{
	while (!atomic_load(flag))
		usleep(1000);
}

/* Take cuda_ctx_lock (for reading when read != 0) and run cb(arg) under it. */
CL_EXPORT void cuda_ctx_call(ctx_cb cb, void *arg, int read)
{
	if (read)
		pthread_rwlock_rdlock(&cuda_ctx_lock);
	else
		pthread_rwlock_wrlock(&cuda_ctx_lock);
	if (atomic_exchange(&ctx_meet, 0)) {
		atomic_store(&ctx_held, 1);
		ctx_wait_for(&ctx_go);
	}
	cb(arg); /* with ctx_meet: blocks for ever in PyGILState_Ensure */
	pthread_rwlock_unlock(&cuda_ctx_lock);
}

/* Take cuda_ctx_lock for writing with whatever the caller holds (the GIL). */
CL_EXPORT void cuda_launch_kernel(void)
{
	pthread_rwlock_wrlock(&cuda_ctx_lock); /* never returns when the holder waits */
	for (int i = 0; i < 1000; i++)
		cuda_kernels++;
	pthread_rwlock_unlock(&cuda_ctx_lock);
}

/* A callback into Python through the C API, from a thread without the GIL. */
CL_EXPORT void ctx_call_python(void *callable)
{
	PyGILState_STATE st = PyGILState_Ensure();
	PyObject *r = PyObject_CallNoArgs((PyObject *)callable);
	if (r == NULL)
		PyErr_Print();
	Py_XDECREF(r);
	PyGILState_Release(st);
}

/* A callback through a plain C function pointer (a ctypes thunk). */
CL_EXPORT void ctx_call_cfunc(void *fn)
{
	((void (*)(void))fn)();
}

/* For ctypes.CDLL(cudalike.__file__).cuda_occupancy(CFUNCTYPE(None)(f)). */
CL_EXPORT void cuda_occupancy(void (*cb)(void))
{
	cuda_ctx_call(ctx_call_cfunc, (void *)cb, 0);
}

static PyObject *py_with_context(PyObject *self, PyObject *args)
{
	PyObject *callable;
	int read = 0;
	(void)self;
	if (!PyArg_ParseTuple(args, "O|p:with_context", &callable, &read))
		return NULL;
	if (!PyCallable_Check(callable)) {
		PyErr_SetString(PyExc_TypeError, "with_context: not callable");
		return NULL;
	}
	Py_INCREF(callable);
	Py_BEGIN_ALLOW_THREADS
	cuda_ctx_call(ctx_call_python, callable, read);
	Py_END_ALLOW_THREADS
	Py_DECREF(callable);
	Py_RETURN_NONE;
}

static PyObject *py_with_context_ctypes(PyObject *self, PyObject *args)
{
	PyObject *address;
	int read = 0;
	(void)self;
	if (!PyArg_ParseTuple(args, "O|p:with_context_ctypes", &address, &read))
		return NULL;
	void *fn = PyLong_AsVoidPtr(address);
	if (fn == NULL) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "with_context_ctypes: NULL address");
		return NULL;
	}
	Py_BEGIN_ALLOW_THREADS
	cuda_ctx_call(ctx_call_cfunc, fn, read);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_launch(PyObject *self, PyObject *args, PyObject *kw)
{
	static char *names[] = {"release_holder", NULL};
	int release_holder = 0;
	(void)self;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|p:launch", names, &release_holder))
		return NULL;
	if (release_holder)
		atomic_store(&ctx_go, 1); /* the holder now wants the GIL, which we keep */
	cuda_launch_kernel();             /* the GIL is held: this is the bug */
	Py_RETURN_NONE;
}

static PyObject *py_arm_meet(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	atomic_store(&ctx_held, 0);
	atomic_store(&ctx_go, 0);
	atomic_store(&ctx_meet, 1);
	Py_RETURN_NONE;
}

static PyObject *py_wait_held(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	Py_BEGIN_ALLOW_THREADS
	ctx_wait_for(&ctx_held);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_native_tid(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyLong_FromLong((long)syscall(SYS_gettid));
}

static PyObject *py_kernels(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyLong_FromLong(cuda_kernels);
}

static PyMethodDef methods[] = {
	{"launch", (PyCFunction)(void (*)(void))py_launch, METH_VARARGS | METH_KEYWORDS,
	 "launch(release_holder=False): take cuda_ctx_lock for writing, keeping the GIL."},
	{"with_context", py_with_context, METH_VARARGS,
	 "with_context(callable, read=False): release the GIL, take cuda_ctx_lock, call back."},
	{"with_context_ctypes", py_with_context_ctypes, METH_VARARGS,
	 "with_context_ctypes(address, read=False): the same with a CFUNCTYPE(None) pointer."},
	{"arm_meet", py_arm_meet, METH_NOARGS,
	 "The next holder of cuda_ctx_lock waits for launch(release_holder=True) before calling back."},
	{"wait_held", py_wait_held, METH_NOARGS,
	 "Wait (GIL released) until the armed holder holds cuda_ctx_lock."},
	{"native_tid", py_native_tid, METH_NOARGS, "The calling thread's kernel tid."},
	{"kernels", py_kernels, METH_NOARGS, "Work done under cuda_ctx_lock so far."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "cudalike", "A native rwlock held across Python callbacks (seed 003).",
	-1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_cudalike(void)
{
	return PyModule_Create(&module);
}
