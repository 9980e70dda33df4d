/* SPDX-License-Identifier: MIT */
/*
 * heisenlocks — a tiny CPython extension with two native mutexes.
 *
 * Python code calls a_then_b() and b_then_a(); each takes ext_lock_a and
 * ext_lock_b in that order, with the GIL released around the native work as
 * a real extension would (Py_BEGIN_ALLOW_THREADS).  Two Python threads
 * calling them one after the other never hang, but two that overlap can:
 * py_lock_order.py drives it, and heisen must predict the deadlock with
 * ext_take_a_then_b / ext_take_b_then_a in the native stacks.
 * native_tid() returns the calling thread's kernel tid, for the tests.
 * a_then_b_meet() / b_then_a_meet() do the same but meet at a barrier while
 * holding their first lock: two threads calling them deadlock for real, with
 * the GIL released (py_deadlock.py).
 * crash() writes through a NULL struct pointer in ext_crash_here() (fault
 * address 0x18): a segfault inside an extension that was dlopen'd after the
 * program started and has taken no lock, as in seed 000.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <sys/syscall.h>
#include <unistd.h>

pthread_mutex_t ext_lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t ext_lock_b = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t ext_lock_c = PTHREAD_MUTEX_INITIALIZER; /* the GIL-ordering pair below */
static long ext_counter;

__attribute__((noinline, visibility("default"))) void ext_take_a_then_b(void)
{
	pthread_mutex_lock(&ext_lock_a);
	pthread_mutex_lock(&ext_lock_b);
	ext_counter++;
	pthread_mutex_unlock(&ext_lock_b);
	pthread_mutex_unlock(&ext_lock_a);
}

__attribute__((noinline, visibility("default"))) void ext_take_b_then_a(void)
{
	pthread_mutex_lock(&ext_lock_b);
	pthread_mutex_lock(&ext_lock_a);
	ext_counter++;
	pthread_mutex_unlock(&ext_lock_a);
	pthread_mutex_unlock(&ext_lock_b);
}

static pthread_barrier_t ext_meet;
static pthread_once_t ext_meet_once = PTHREAD_ONCE_INIT;

static void ext_meet_init(void)
{
	pthread_barrier_init(&ext_meet, NULL, 2);
}

__attribute__((noinline, visibility("default"))) void ext_hold_a_want_b(void)
{
	pthread_mutex_lock(&ext_lock_a);
	pthread_barrier_wait(&ext_meet);
	pthread_mutex_lock(&ext_lock_b); /* never returns when the other thread came */
	pthread_mutex_unlock(&ext_lock_b);
	pthread_mutex_unlock(&ext_lock_a);
}

__attribute__((noinline, visibility("default"))) void ext_hold_b_want_a(void)
{
	pthread_mutex_lock(&ext_lock_b);
	pthread_barrier_wait(&ext_meet);
	pthread_mutex_lock(&ext_lock_a);
	pthread_mutex_unlock(&ext_lock_a);
	pthread_mutex_unlock(&ext_lock_b);
}

static PyObject *py_a_then_b_meet(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	pthread_once(&ext_meet_once, ext_meet_init);
	Py_BEGIN_ALLOW_THREADS
	ext_hold_a_want_b();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_b_then_a_meet(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	pthread_once(&ext_meet_once, ext_meet_init);
	Py_BEGIN_ALLOW_THREADS
	ext_hold_b_want_a();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

struct ext_record {
	long id, len, flags;
	int value; /* offset 0x18 */
};
struct ext_record *volatile ext_the_record = NULL;

__attribute__((noinline, visibility("default"))) void ext_crash_here(void)
{
	ext_the_record->value = 7;
}

static PyObject *py_crash(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	ext_crash_here();
	Py_RETURN_NONE;
}

static PyObject *py_a_then_b(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	Py_BEGIN_ALLOW_THREADS
	ext_take_a_then_b();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_b_then_a(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	Py_BEGIN_ALLOW_THREADS
	ext_take_b_then_a();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_native_tid(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyLong_FromLong((long)syscall(SYS_gettid));
}

static PyObject *py_counter(PyObject *self, PyObject *unused)
{
	(void)self;
	(void)unused;
	return PyLong_FromLong(ext_counter);
}

/*
 * ext_lock_c taken *without* the GIL (released around the lock call) and
 * kept: the caller returns to Python holding it, so the GIL was retaken
 * while holding ext_lock_c (L -> GIL).  release_c() then drops it with the
 * GIL held.  take_c_with_gil() takes it while holding the GIL (GIL -> L).
 */
__attribute__((noinline)) static void ext_take_c(void)
{
	pthread_mutex_lock(&ext_lock_c);
}

static PyObject *py_take_c_nogil(PyObject *self, PyObject *unused)
{
	Py_BEGIN_ALLOW_THREADS
	ext_take_c();
	Py_END_ALLOW_THREADS
	Py_RETURN_NONE;
}

static PyObject *py_release_c(PyObject *self, PyObject *unused)
{
	pthread_mutex_unlock(&ext_lock_c);
	Py_RETURN_NONE;
}

__attribute__((noinline)) static PyObject *py_take_c_with_gil(PyObject *self, PyObject *unused)
{
	pthread_mutex_lock(&ext_lock_c);
	pthread_mutex_unlock(&ext_lock_c);
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"take_c_nogil", py_take_c_nogil, METH_NOARGS, "Take ext_lock_c with the GIL released; return holding it."},
	{"release_c", py_release_c, METH_NOARGS, "Release ext_lock_c (GIL held)."},
	{"take_c_with_gil", py_take_c_with_gil, METH_NOARGS, "Take and release ext_lock_c while holding the GIL."},
	{"a_then_b", py_a_then_b, METH_NOARGS, "Take ext_lock_a, then ext_lock_b (GIL released)."},
	{"b_then_a", py_b_then_a, METH_NOARGS, "Take ext_lock_b, then ext_lock_a (GIL released)."},
	{"a_then_b_meet", py_a_then_b_meet, METH_NOARGS, "Take ext_lock_a, meet the other thread, take ext_lock_b."},
	{"b_then_a_meet", py_b_then_a_meet, METH_NOARGS, "Take ext_lock_b, meet the other thread, take ext_lock_a."},
	{"native_tid", py_native_tid, METH_NOARGS, "The calling thread's kernel tid."},
	{"crash", py_crash, METH_NOARGS, "Segfault in ext_crash_here() (fault address 0x18)."},
	{"counter", py_counter, METH_NOARGS, "How many a_then_b/b_then_a calls completed."},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
	PyModuleDef_HEAD_INIT, "heisenlocks", "Two native mutexes for heisen's tests.", -1, methods,
	NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit_heisenlocks(void)
{
	return PyModule_Create(&module);
}
