# SPDX-License-Identifier: MIT
"""py_lock_gil_native — a cycle through a Python lock, the GIL and a C mutex.

libnativelock.so (nativelock.c) calls Python listeners with its registry
mutex held.  Three threads, one after the other:
  "holder"   keeps a threading.Lock across a sleep: it gets the GIL back
             while holding the lock (Python lock -> GIL);
  "poller"   calls nl_count() through ctypes.PyDLL, which keeps the GIL
             held while the library takes its mutex (GIL -> mutex);
  "notifier" calls nl_notify() through ctypes.CDLL; the listener runs with
             the registry mutex held and takes the Python lock
             (mutex -> Python lock).
Run together they deadlock: the holder waits for the GIL, the poller holds
it and waits for the mutex, the notifier's listener holds the mutex and
waits for the lock.  Here they run one after the other and the program
ends; heisen predicts the three-lock cycle (and the GIL inversion of the
callback itself: mutex -> GIL, GIL -> mutex).

Usage: py_lock_gil_native.py LIBNATIVELOCK.so
Prints "pid P", "tid_holder T", "tid_poller T", "tid_notifier T", "done 1".
"""
import ctypes
import os
import sys
import threading
import time

path = sys.argv[1]
released = ctypes.CDLL(path)   # the GIL is released around each call
holding = ctypes.PyDLL(path)   # the GIL stays held
LISTENER = ctypes.CFUNCTYPE(None, ctypes.c_int)
released.nl_notify.argtypes = [LISTENER, ctypes.c_int, ctypes.c_int]
released.nl_notify.restype = None
holding.nl_count.restype = ctypes.c_int


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Journal:
    def __init__(self):
        self.lock = threading.Lock()  # marker: journal lock created
        self.lines = []


journal = Journal()


def on_event(i):
    with journal.lock:  # marker: listener takes the journal lock
        journal.lines.append(i)


listener = LISTENER(on_event)


def holder():
    say("tid_holder", threading.get_native_id())
    with journal.lock:  # marker: holder takes the journal lock
        time.sleep(0.01)  # the GIL is dropped and taken back with the lock held


def poller():
    say("tid_poller", threading.get_native_id())
    holding.nl_count()  # marker: count with the GIL held


def notifier():
    say("tid_notifier", threading.get_native_id())
    released.nl_notify(listener, 2, 0)  # marker: notify under the registry lock


say("pid", os.getpid())
for fn in (holder, poller, notifier):
    t = threading.Thread(target=fn, name=fn.__name__)
    t.start()
    t.join()
say("done", 1)
