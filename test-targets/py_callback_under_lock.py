# SPDX-License-Identifier: MIT
"""py_callback_under_lock — a GIL inversion through ctypes, on any CPython.

libnativelock.so (nativelock.c) calls Python listeners with its registry
mutex held: the "notifier" thread goes through ctypes.CDLL (the GIL is
dropped for the call), the library locks its mutex, and the ctypes
callback takes the GIL back to run on_event(): mutex -> GIL.  The "poller"
thread calls nl_count() through ctypes.PyDLL, which keeps the GIL held
while the library takes its mutex: GIL -> mutex.  The threads run one
after the other, so the program ends; heisen predicts the deadlock they
would have run into together, with the Python lines of both calls
(marked "# marker: NAME").

Usage: py_callback_under_lock.py LIBNATIVELOCK.so
Prints "pid P", "notified N", "count N".
"""
import ctypes
import os
import sys
import threading

path = sys.argv[1]
released = ctypes.CDLL(path)   # the GIL is released around each call
holding = ctypes.PyDLL(path)   # the GIL stays held: a binding without Py_BEGIN_ALLOW_THREADS
LISTENER = ctypes.CFUNCTYPE(None, ctypes.c_int)
released.nl_notify.argtypes = [LISTENER, ctypes.c_int]
released.nl_notify.restype = None
holding.nl_count.restype = ctypes.c_int
seen = []


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def on_event(i):
    seen.append(i)


listener = LISTENER(on_event)


def notifier():
    released.nl_notify(listener, 3)  # marker: notify under the registry lock
    say("notified", len(seen))


def poller():
    say("count", holding.nl_count())  # marker: count with the GIL held


say("pid", os.getpid())
for fn in (notifier, poller):
    t = threading.Thread(target=fn, name=fn.__name__)
    t.start()
    t.join()
