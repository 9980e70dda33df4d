# SPDX-License-Identifier: MIT
"""py_lock_timeline — a worker thread's lock timeline as a service makes it,
then killed while it holds a lock.

The worker takes "held_alone" and keeps it about HOLD seconds, nothing else
in between (a `with lock:` around pure Python work); then "outer" with
"inner" nested inside it; then takes "kept" and never lets it go.  A first
thread did the same before it, releasing "kept".  It
prints "ready" and sleeps holding "kept": the test kills the process with
SIGKILL there, so "kept" was acquired and never released.

Usage: py_lock_timeline.py
Prints "pid P", "hold_ms N", "ready 1".
"""
import os
import sys
import threading
import time

HOLD = 0.08


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


held_alone = threading.Lock()  # marker: held_alone created
outer = threading.Lock()  # marker: outer created
inner = threading.Lock()  # marker: inner created
kept = threading.Lock()  # marker: kept created


def work(last):
    with held_alone:
        end = time.monotonic() + HOLD
        while time.monotonic() < end:  # busy: no GIL switch, no call heisen records
            pass
    with outer:
        with inner:
            pass
    kept.acquire()
    if not last:
        kept.release()
        return
    os.write(1, b"ready 1\n")  # unbuffered: few events after the acquisition
    time.sleep(600)


say("pid", os.getpid())
say("hold_ms", int(HOLD * 1000))
# the same work in a first thread (the lock-order edges from a thread's own
# lock made there), so that the second thread's last events are its locks'
first = threading.Thread(target=work, args=(False,))
first.start()
first.join()
worker = threading.Thread(target=work, args=(True,), name="timeline")
worker.start()
worker.join()
