/* SPDX-License-Identifier: MIT */
/*
 * nativelock — a C library that notifies its listeners with its own lock
 * held, loaded from Python with ctypes (py_callback_under_lock.py).
 *
 * The shape of many real bindings: a registry guarded by a pthread mutex,
 * listeners registered from Python as ctypes callbacks.  nl_notify() calls
 * every listener with the mutex held, and a ctypes callback takes the GIL
 * (PyGILState_Ensure) to run its Python function: mutex -> GIL.  A caller
 * that reaches nl_count() through ctypes.PyDLL keeps the GIL across the
 * call and takes the mutex: GIL -> mutex.  Two threads doing both at once
 * deadlock; one after the other they only predict it.  No Python headers:
 * the same library serves every CPython.
 */
#include <pthread.h>
#include <time.h>

static pthread_mutex_t registry_lock = PTHREAD_MUTEX_INITIALIZER;
static int registry_events;

/* A listener: called with the event number, registry_lock held. */
typedef void (*nl_listener)(int event);

/*
 * Call listener for events 0..n-1, each with registry_lock held; gap_ms
 * milliseconds pass between two events (what fetching the next one from a
 * device or a socket takes in a real library), the lock still held.
 */
void nl_notify(nl_listener listener, int n, int gap_ms)
{
	struct timespec gap = {gap_ms / 1000, (long)(gap_ms % 1000) * 1000000L};
	pthread_mutex_lock(&registry_lock);
	for (int i = 0; i < n; i++) {
		if (i > 0 && gap_ms > 0)
			nanosleep(&gap, NULL);
		registry_events++;
		listener(i);
	}
	pthread_mutex_unlock(&registry_lock);
}

/* The number of events notified so far, read under registry_lock. */
int nl_count(void)
{
	pthread_mutex_lock(&registry_lock);
	int n = registry_events;
	pthread_mutex_unlock(&registry_lock);
	return n;
}

/* What nl_run_threads gives each of its threads: a listener and how often to call it. */
struct nl_run {
	nl_listener listener;
	int n;
};

static void *nl_run_one(void *arg)
{
	const struct nl_run *r = arg;
	for (int i = 0; i < r->n; i++)
		r->listener(i);
	return NULL;
}

/*
 * Call first n times from a thread of the library's own and, at the same
 * time, second n times from another (second may be NULL: one thread), and
 * wait for both: a library that delivers events on threads it made, as
 * device and network libraries do.  Such a thread has no Python thread
 * state: each ctypes callback makes one (PyGILState_Ensure) and deletes it
 * again (PyGILState_Release), so thread states come and go, and one may
 * get the address another thread's had a moment before.  Returns 0, or
 * -1 when a thread could not be made.
 */
int nl_run_threads(nl_listener first, nl_listener second, int n)
{
	struct nl_run runs[2] = {{first, n}, {second, n}};
	pthread_t t[2];
	int k = 0, rc = 0;
	for (int i = 0; i < 2; i++) {
		if (!runs[i].listener)
			continue;
		if (pthread_create(&t[k], NULL, nl_run_one, &runs[i]) != 0) {
			rc = -1;
			break;
		}
		k++;
	}
	while (k > 0)
		pthread_join(t[--k], NULL);
	return rc;
}
