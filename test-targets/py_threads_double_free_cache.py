# SPDX-License-Identifier: MIT
"""py_threads_double_free_cache — seed 000: a model server's threads race on a native cache.

Ten "request" threads call torchlike.conv2d_forward() in a loop at once, as
the story's ten parallel test harnesses did; the extension frees its cached
workspace without a lock, so two threads free the same block (a double
free).  Under HEISEN_HEAP=1 heisen reports it at the second free, naming
both threads and both frees.

Usage: py_threads_double_free_cache.py [THREADS [SECONDS [EXT_DIR]]]   (default 10 threads, 20 s)
       py_threads_double_free_cache.py stalled WARM LATER [EXT_DIR]

Prints "pid P", "tid_request_<i> T" for each thread, then "done ok" when
the time ran out without the process dying (a run without the bug, or with
HEISEN_ON_HEAP_ERROR=continue).

"stalled": the same race as one order of events, the one a loaded machine
makes (a request thread descheduled inside the kernel while another serves
on): a busy request thread runs WARM forward passes; a stalled one reads the
cache (the busy thread's last workspace) and stops there
(torchlike.hold_next_kernel); the busy thread runs LATER passes, the first
of which frees that workspace; then the stalled one goes on and frees it
again.  Prints "pid", "tid_busy", "tid_stalled", then "done ok" if nothing
stopped it.
"""
import os
import sys
import threading
import time
from pathlib import Path


def ext_dir(given):
    if given:
        return given
    if os.environ.get("HEISEN_PYEXT_DIR"):
        return os.environ["HEISEN_PYEXT_DIR"]
    if os.environ.get("HEISEN_BUILD"):
        return str(Path(os.environ["HEISEN_BUILD"]) / "test-targets")
    return str(Path(__file__).resolve().parent.parent / "build" / "test-targets")


STALLED = len(sys.argv) > 1 and sys.argv[1] == "stalled"
args = sys.argv[2:] if STALLED else sys.argv[1:]
THREADS = int(args[0]) if len(args) > 0 else 10
SECONDS = float(args[1]) if len(args) > 1 else 20.0
sys.path.insert(0, ext_dir(args[2] if len(args) > 2 else None))
import torchlike  # noqa: E402


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")  # one write: threads interleave
    sys.stdout.flush()


start = threading.Barrier(THREADS)


def classify(i):
    say(f"tid_request_{i}", torchlike.native_tid())
    start.wait()
    end = time.monotonic() + SECONDS
    while time.monotonic() < end:
        forward_pass()


def forward_pass():
    torchlike.conv2d_forward(64 * 1024)  # marker: forward


def stalled_request():
    say("tid_stalled", torchlike.native_tid())
    forward_pass()


def busy_request(warm, later, warmed, held):
    say("tid_busy", torchlike.native_tid())
    for _ in range(warm):
        forward_pass()
    warmed.set()
    held.wait()
    for _ in range(later):
        forward_pass()


def stalled(warm, later):
    torchlike.set_window(0)
    warmed, held = threading.Event(), threading.Event()
    busy = threading.Thread(target=busy_request, args=(warm, later, warmed, held), name="request-busy")
    busy.start()
    warmed.wait()
    torchlike.hold_next_kernel()
    slow = threading.Thread(target=stalled_request, name="request-stalled")
    slow.start()
    torchlike.wait_held()
    held.set()
    busy.join()
    torchlike.release_held()
    slow.join()


say("pid", os.getpid())
if STALLED:
    stalled(int(args[0]), int(args[1]))  # WARM, LATER
    say("done", "ok")
    sys.exit(0)
workers = [threading.Thread(target=classify, args=(i,), name=f"request-{i}") for i in range(THREADS)]
for w in workers:
    w.start()
for w in workers:
    w.join()
say("done", "ok")
