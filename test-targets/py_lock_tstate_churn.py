# SPDX-License-Identifier: MIT
"""py_lock_tstate_churn — Python locks taken in ctypes callbacks that a C
library calls on threads of its own, where thread states come and go.

libnativelock.so (nativelock.c, nl_run_threads) calls a Python listener
n times on each of two threads it makes.  Those threads have no Python
thread state: every call's ctypes callback makes one (PyGILState_Ensure)
and deletes it on return (PyGILState_Release), so the thread state a
thread runs on changes from call to call, and a new one may take the
address one of the other thread had a moment before, while that thread
runs on without the GIL (CPython's own locks are taken then: the
interpreter's thread-state list lock in PyThreadState_New).  In the first
round one thread takes the ledger's lock and, in its last call only,
the journal's inside it ("forward"), while the other only takes the
counter lock ("tally"); in the second round one thread nests them the
other way in its last call ("backward").  The nesting calls are the
last, so the thread state they run on is not the one their thread ran
its first call on.  The rounds run
one after the other, so the program ends; heisen predicts the deadlock,
and each edge of it must carry the listener's own Python lines (marked
"# marker: NAME"), read from the thread state that ran it.

Usage: py_lock_tstate_churn.py LIBNATIVELOCK.so [N]
Prints "pid P", "forward N", "backward N", "tally N", "done".
"""
import ctypes
import os
import sys
import threading

lib = ctypes.CDLL(sys.argv[1])   # the GIL is released around the call
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200
LISTENER = ctypes.CFUNCTYPE(None, ctypes.c_int)
lib.nl_run_threads.argtypes = [LISTENER, LISTENER, ctypes.c_int]
lib.nl_run_threads.restype = ctypes.c_int

ledger_lock = threading.Lock()   # marker: ledger lock created
journal_lock = threading.Lock()  # marker: journal lock created
counter_lock = threading.Lock()  # marker: counter lock created
seen = {"forward": 0, "backward": 0, "tally": 0}


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def forward(event):
    with ledger_lock:  # marker: forward takes the ledger lock
        if event == n - 1:  # the last call nests: its thread state is not the first one's
            with journal_lock:  # marker: forward takes the journal lock
                seen["forward"] += 1


def backward(event):
    with journal_lock:  # marker: backward takes the journal lock
        if event == n - 1:
            with ledger_lock:  # marker: backward takes the ledger lock
                seen["backward"] += 1


def tally(event):
    with counter_lock:  # marker: tally takes the counter lock
        seen["tally"] += 1


# the callbacks stay referenced while the library may call them
callbacks = [LISTENER(forward), LISTENER(tally), LISTENER(backward)]
say("pid", os.getpid())
assert lib.nl_run_threads(callbacks[0], callbacks[1], n) == 0
assert lib.nl_run_threads(callbacks[2], LISTENER(), n) == 0
for k in ("forward", "backward", "tally"):
    say(k, seen[k])
say("done", 1)
