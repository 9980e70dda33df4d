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

With "together" they run at once and deadlock for real: the library
waits half a second between two events with its mutex held, the poller
takes the GIL and blocks on the mutex meanwhile, and the callback for the
next event can never get the GIL.

Usage: py_callback_under_lock.py LIBNATIVELOCK.so [together]
Prints "pid P", "tid_notifier T", "tid_poller T", "notified N",
"count N" (never the last two with together).
"""
import ctypes
import os
import sys
import threading

path = sys.argv[1]
released = ctypes.CDLL(path)   # the GIL is released around each call
holding = ctypes.PyDLL(path)   # the GIL stays held: a binding without Py_BEGIN_ALLOW_THREADS
LISTENER = ctypes.CFUNCTYPE(None, ctypes.c_int)
released.nl_notify.argtypes = [LISTENER, ctypes.c_int, ctypes.c_int]
released.nl_notify.restype = None
holding.nl_count.restype = ctypes.c_int
seen = []
together = sys.argv[2:] == ["together"]
in_listener = threading.Event()


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def on_event(i):
    seen.append(i)  # marker: listener runs with the registry lock held
    in_listener.set()


listener = LISTENER(on_event)


def notifier():
    say("tid_notifier", threading.get_native_id())
    released.nl_notify(listener, 3, 500 if together else 0)  # marker: notify under the registry lock
    say("notified", len(seen))


def poller():
    say("tid_poller", threading.get_native_id())
    if together:
        in_listener.wait()
    say("count", holding.nl_count())  # marker: count with the GIL held


say("pid", os.getpid())
if together:
    ts = [threading.Thread(target=fn, name=fn.__name__) for fn in (notifier, poller)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    say("not", "reached")
else:
    for fn in (notifier, poller):
        t = threading.Thread(target=fn, name=fn.__name__)
        t.start()
        t.join()
