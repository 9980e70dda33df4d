/* SPDX-License-Identifier: MIT */
/*
 * torchlike — a CPython extension with a cache that is not thread-safe, to
 * reproduce seed 000 (PyTorch's Conv2d crashing a threaded model server with
 * "corrupted size vs. prev_size") on demand.
 *
 * conv2d_forward(n) does what the convolution did: it allocates a fresh
 * n-byte workspace, fills it, and swaps it into a global "last workspace"
 * cache, freeing the previous one — with the GIL released (as PyTorch runs
 * its kernels) and without a lock.  Two threads that read the same cached
 * pointer both free it: a double free.  The window between reading the
 * cache and freeing what it held is widened by a short sleep (window_us,
 * default 200 µs), standing in for the kernel's own work, so ten threads
 * calling in a loop meet within a second rather than an hour.
 * native_tid() returns the calling thread's kernel tid, for the tests.
 * hold_next_kernel() makes the next kernel, once it has read the cache,
 * wait (as a thread descheduled there would) until release_held();
 * wait_held() returns once one waits: a stalled request, while other
 * threads run any number of kernels, without depending on timing.
 * Without heisen glibc aborts here only sometimes, and often much later.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

static char *last_workspace;       /* the cache: no lock, that is the bug */
static long window_us = 200;

/* A stalled kernel (hold_next_kernel): armed, then holding until released. */
static pthread_mutex_t hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t hold_cv = PTHREAD_COND_INITIALIZER;
static int hold_armed, holding;

/* The kernel's pause between reading the cache and freeing what it held. */
static void kernel_runs(void)
{
	pthread_mutex_lock(&hold_mu);
	if (hold_armed) {
		hold_armed = 0;
		holding = 1;
		pthread_cond_broadcast(&hold_cv);
		while (holding)
			pthread_cond_wait(&hold_cv, &hold_mu);
		pthread_mutex_unlock(&hold_mu);
		return;
	}
	pthread_mutex_unlock(&hold_mu);
	if (window_us > 0)
		usleep((useconds_t)window_us);
}

/* Drop the cached workspace: the second of two racing callers frees it again. */
__attribute__((noinline)) static void workspace_cache_evict(char *old)
{
	free(old);
}

/* The kernel: a new workspace, then the cache swapped without a lock. */
__attribute__((noinline)) static void conv2d_kernel(size_t n)
{
	char *ws = malloc(n);
	char *old;
	if (!ws)
		return;
	memset(ws, 0x5a, n);
	old = last_workspace;        /* read the cache ... */
	kernel_runs();               /* ... the kernel runs ... */
	workspace_cache_evict(old);  /* ... free what it held (maybe twice) */
	last_workspace = ws;         /* ... and replace it */
}

static PyObject *py_conv2d_forward(PyObject *self, PyObject *args)
{
	Py_ssize_t n = 4096;
	if (!PyArg_ParseTuple(args, "|n", &n))
		return NULL;
	if (n <= 0)
		n = 1;
	Py_BEGIN_ALLOW_THREADS
	conv2d_kernel((size_t)n);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_set_window(PyObject *self, PyObject *args)
{
	long us;
	if (!PyArg_ParseTuple(args, "l", &us))
		return NULL;
	window_us = us;
	Py_RETURN_NONE;
}

static PyObject *py_hold_next_kernel(PyObject *self, PyObject *unused)
{
	pthread_mutex_lock(&hold_mu);
	hold_armed = 1;
	pthread_mutex_unlock(&hold_mu);
	Py_RETURN_NONE;
}

static PyObject *py_wait_held(PyObject *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS
	pthread_mutex_lock(&hold_mu);
	while (!holding)
		pthread_cond_wait(&hold_cv, &hold_mu);
	pthread_mutex_unlock(&hold_mu);
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_release_held(PyObject *self, PyObject *unused)
{
	pthread_mutex_lock(&hold_mu);
	holding = 0;
	pthread_cond_broadcast(&hold_cv);
	pthread_mutex_unlock(&hold_mu);
	Py_RETURN_NONE;
}

static PyObject *py_native_tid(PyObject *self, PyObject *unused)
{
	return PyLong_FromLong((long)syscall(SYS_gettid));
}

static PyMethodDef methods[] = {
	{"conv2d_forward", py_conv2d_forward, METH_VARARGS,
	 "conv2d_forward(n=4096): allocate an n-byte workspace and swap it into the (unlocked) cache."},
	{"set_window", py_set_window, METH_VARARGS, "set_window(us): the race window inside the kernel."},
	{"hold_next_kernel", py_hold_next_kernel, METH_NOARGS,
	 "hold_next_kernel(): the next kernel waits after reading the cache until release_held()."},
	{"wait_held", py_wait_held, METH_NOARGS, "wait_held(): return once a kernel is holding."},
	{"release_held", py_release_held, METH_NOARGS, "release_held(): let the holding kernel go on."},
	{"native_tid", py_native_tid, METH_NOARGS, "The calling thread's kernel tid."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "torchlike", "A workspace cache that is not thread-safe (seed 000).",
	-1, methods, NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_torchlike(void)
{
	return PyModule_Create(&module);
}
