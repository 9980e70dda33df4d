# SPDX-License-Identifier: MIT
"""py_leaf_lock — a lock taken many times with nothing nested under it, then nested.

A registry lock that a service takes from everywhere and under which it
never takes another lock (a "leaf"): heisen keeps only the call site's
stack of such a lock's acquisitions once it has seen enough of them
(README, "Lock order: locks that never nest").  Then, late in the run,
the registry lock is held while another lock is taken after all, and the
opposite order is taken too: an ABBA that heisen must still predict.

Two shapes of the registry:
  native   libnativelock.so's registry mutex (a pthread mutex in C,
           reached through ctypes.CDLL, the GIL released around each
           call): nl_count() takes it alone, nl_notify() calls a Python
           listener with it held (touch(): with no listener, alone);
  wrapper  a Python class sharing one threading.Lock between its
           callers: count() takes it alone, notify() calls a listener
           with it held (touch(): alone).
In both, the listener takes the journal's threading.Lock under the
registry lock (registry -> journal), and an auditor counts under the
journal lock (journal -> registry).  One thread, in turn: the program
ends.

With NEST "deadlock" (native only), after the poll two threads deadlock
for real: "notifier" holds the registry mutex (nl_notify) and its
listener waits for the journal lock, which "auditor" holds while it
counts (waiting for the registry mutex); heisen-run's watchdog ends it.

With NEST "reenter" (native only), after the poll the main thread is
notified by the library and its listener counts the registry's events:
nl_count() locks the registry mutex that nl_notify() holds on the same
thread, a non-recursive mutex re-entered through a callback (the library
documents no such rule): the thread waits for itself, and heisen-run's
watchdog ends it.

Usage: py_leaf_lock.py native|wrapper LIBNATIVELOCK.so COUNT NEST|deadlock|reenter
  COUNT  rounds of count() and touch(), first (from one loop): the registry
         lock taken 2 * COUNT times with nothing nested
  NEST   notifications under the registry lock, then the audit; 0: none,
         and no audit (a program whose registry lock never nests)
Prints "pid P", "counted N", "done 1".
"""
import ctypes
import os
import sys
import threading

shape, path, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
deadlock = sys.argv[4] == "deadlock"
reenter = sys.argv[4] == "reenter"
nest = 0 if deadlock or reenter else int(sys.argv[4])


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Journal:
    def __init__(self):
        self.lock = threading.Lock()  # marker: journal lock created
        self.lines = []


class NativeRegistry:
    """libnativelock.so's registry: its mutex is the registry lock."""

    def __init__(self):
        self.lib = ctypes.CDLL(path)  # the GIL is released around each call
        self.listener_type = ctypes.CFUNCTYPE(None, ctypes.c_int)
        self.lib.nl_notify.argtypes = [self.listener_type, ctypes.c_int, ctypes.c_int]
        self.lib.nl_notify.restype = None
        self.lib.nl_count.restype = ctypes.c_int
        self.listeners = []

    def count(self):
        return self.lib.nl_count()  # marker: registry count calls the library

    def notify(self, fn):
        cb = self.listener_type(fn)
        self.listeners.append(cb)  # kept alive
        self.lib.nl_notify(cb, 1, 0)  # marker: registry notify calls the library

    def touch(self):
        if not self.listeners:
            self.listeners.append(self.listener_type(lambda event: None))
        self.lib.nl_notify(self.listeners[0], 0, 0)  # marker: registry touch calls the library


class WrapperRegistry:
    """A Python registry: one threading.Lock shared by every caller."""

    def __init__(self):
        self.lock = threading.Lock()  # marker: registry lock created
        self.events = 0

    def count(self):
        with self.lock:  # marker: registry count takes the registry lock
            return self.events

    def notify(self, fn):
        with self.lock:  # marker: registry notify takes the registry lock
            self.events += 1
            fn(self.events)

    def touch(self):
        with self.lock:  # marker: registry touch takes the registry lock
            pass


journal = Journal()
registry = NativeRegistry() if shape == "native" else WrapperRegistry()


def on_event(i):
    with journal.lock:  # marker: listener takes the journal lock
        journal.lines.append(i)


def poll():
    total = 0
    for _ in range(count):
        total += registry.count()  # marker: poll counts
        registry.touch()  # marker: poll touches
    return total


def notify():
    registry.notify(on_event)  # marker: notify under the registry lock


def audit():
    with journal.lock:  # marker: auditor takes the journal lock
        return registry.count()  # marker: auditor counts under the journal lock


journal_held, registry_held = threading.Event(), threading.Event()


def on_event_late(i):
    journal_held.wait()
    registry_held.set()
    with journal.lock:  # marker: stuck listener takes the journal lock
        journal.lines.append(i)


def notifier():
    say("tid_notifier", threading.get_native_id())
    registry.notify(on_event_late)  # marker: notifier notifies


def auditor():
    say("tid_auditor", threading.get_native_id())
    with journal.lock:  # marker: stuck auditor takes the journal lock
        journal_held.set()
        registry_held.wait()
        registry.count()  # marker: stuck auditor counts


def on_event_reenter(i):
    say("tid_reentrant", threading.get_native_id())
    journal.lines.append(registry.count())  # marker: listener counts under the registry lock


def reentrant_notify():
    registry.notify(on_event_reenter)  # marker: notify for the reentrant listener


say("pid", os.getpid())
say("counted", poll())
for _ in range(nest):
    notify()
if nest:
    audit()
if reenter:
    reentrant_notify()
if deadlock:
    threads = [threading.Thread(target=fn, name=fn.__name__) for fn in (notifier, auditor)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
say("done", 1)
