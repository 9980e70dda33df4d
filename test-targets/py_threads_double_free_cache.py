# SPDX-License-Identifier: MIT
"""py_threads_double_free_cache — seed 000: a model server's threads race on a native cache.

Ten "request" threads call torchlike.conv2d_forward() in a loop at once, as
the story's ten parallel test harnesses did; the extension frees its cached
workspace without a lock, so two threads free the same block (a double
free).  Under HEISEN_HEAP=1 heisen reports it at the second free, naming
both threads and both frees.

Usage: py_threads_double_free_cache.py [THREADS [SECONDS [EXT_DIR]]]   (default 10 threads, 20 s)

Prints "pid P", "tid_request_<i> T" for each thread, then "done ok" when
the time ran out without the process dying (a run without the bug, or with
HEISEN_ON_HEAP_ERROR=continue).
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


THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 10
SECONDS = float(sys.argv[2]) if len(sys.argv) > 2 else 20.0
sys.path.insert(0, ext_dir(sys.argv[3] if len(sys.argv) > 3 else None))
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


say("pid", os.getpid())
workers = [threading.Thread(target=classify, args=(i,), name=f"request-{i}") for i in range(THREADS)]
for w in workers:
    w.start()
for w in workers:
    w.join()
say("done", "ok")
