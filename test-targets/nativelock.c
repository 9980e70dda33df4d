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
