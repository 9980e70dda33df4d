# SPDX-License-Identifier: MIT
"""py_gil_rwlock_callback — seed 003, the RAPIDS/Dask deadlock: the GIL against a native rwlock.

The extension cudalike owns cuda_ctx_lock (libcuda's context lock).  Thread
"holder" calls into it with the GIL released; the extension takes the rwlock
and, holding it, calls back into Python (on_context), which must take the
GIL.  Thread "launcher" calls cudalike.launch() holding the GIL; launch takes
the rwlock without releasing the GIL.

Usage: py_gil_rwlock_callback.py quiet|hang|hang-after-launch [capi|ctypes|ffi] [write|read] [EXT_DIR]

  quiet   the holder runs to completion, then the launcher runs: this run
          cannot hang, heisen must predict the deadlock (GIL <-> cuda_ctx_lock).
  hang    the two meet (cudalike.arm_meet / wait_held / launch(release_holder))
          and deadlock every time: run it under heisen-run --hang-timeout.
  hang-after-launch
          a thread "early" runs launch() to its end first (GIL -> cuda_ctx_lock,
          as a program that launched kernels before), then the same hang: the
          holder's callback closes the cycle when it starts waiting for the GIL,
          so the deadlock is predicted before it happens, in the run that hangs.

  capi    the callback goes through the C API (PyGILState_Ensure in cudalike)
  ctypes  through a ctypes CFUNCTYPE(None) pointer handed to cudalike as an int
          (PyGILState_Ensure in _ctypes' thunk)
  ffi     the same pointer, but the call into cudalike.cuda_occupancy itself is a
          ctypes foreign call (ctypes.CDLL), as Numba called
          cuOccupancyMaxPotentialBlockSize
  write|read  how the holder takes the rwlock (the launcher always writes)

The extension directory: EXT_DIR, else $HEISEN_PYEXT_DIR, else
$HEISEN_BUILD/test-targets, else ../build/test-targets next to this file.
Prints "pid P", ("tid_early T",) "tid_holder T", "tid_launcher T", then "callback 1" and
"done ok" (quiet), or "waiting ok" (hang; nothing after it can run).
"""
import ctypes
import os
import sys
import threading
from pathlib import Path

MODES = ("quiet", "hang", "hang-after-launch")
VIAS = ("capi", "ctypes", "ffi")
LOCKINGS = ("write", "read")


def parse(argv):
    mode, via, locking, ext = "quiet", "capi", "write", None
    rest = list(argv)
    if rest and rest[0] in MODES:
        mode = rest.pop(0)
    if rest and rest[0] in VIAS:
        via = rest.pop(0)
    if rest and rest[0] in LOCKINGS:
        locking = rest.pop(0)
    if rest:
        ext = rest.pop(0)
    if rest:
        sys.exit(f"usage: py_gil_rwlock_callback.py {'|'.join(MODES)} [{'|'.join(VIAS)}] "
                 f"[{'|'.join(LOCKINGS)}] [EXT_DIR]")
    return mode, via, locking, ext


def ext_dir(given):
    if given:
        return given
    if os.environ.get("HEISEN_PYEXT_DIR"):
        return os.environ["HEISEN_PYEXT_DIR"]
    if os.environ.get("HEISEN_BUILD"):
        return str(Path(os.environ["HEISEN_BUILD"]) / "test-targets")
    return str(Path(__file__).resolve().parent.parent / "build" / "test-targets")


MODE, VIA, LOCKING, EXT = parse(sys.argv[1:])
sys.path.insert(0, ext_dir(EXT))
import cudalike  # noqa: E402

CALLBACK = ctypes.CFUNCTYPE(None)
calls = []


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")  # one write: threads interleave
    sys.stdout.flush()


def on_context():
    """The Python callback libcuda runs while it holds its context lock."""
    calls.append(1)  # marker: on_context body


def holder():
    say("tid_holder", cudalike.native_tid())
    read = LOCKING == "read"
    if VIA == "capi":
        cudalike.with_context(on_context, read)  # marker: holder calls with_context
    elif VIA == "ctypes":
        cb = CALLBACK(on_context)
        cudalike.with_context_ctypes(ctypes.cast(cb, ctypes.c_void_p).value, read)  # marker: holder calls with_context_ctypes
    else:
        lib = ctypes.CDLL(cudalike.__file__)
        lib.cuda_occupancy.argtypes = [CALLBACK]
        lib.cuda_occupancy.restype = None
        cb = CALLBACK(on_context)
        lib.cuda_occupancy(cb)  # marker: holder calls cuda_occupancy


go = threading.Event()


def early():
    say("tid_early", cudalike.native_tid())
    cudalike.launch()  # marker: early calls launch


def launcher():
    say("tid_launcher", cudalike.native_tid())
    if MODE != "quiet":
        cudalike.wait_held()  # the holder holds cuda_ctx_lock
        go.wait()             # and main has said "waiting": from here on the GIL is ours
        cudalike.launch(release_holder=True)  # marker: launcher calls launch (hang)
    else:
        cudalike.launch()  # marker: launcher calls launch (quiet)


def main():
    say("pid", os.getpid())
    if MODE == "quiet":
        for fn in (holder, launcher):
            t = threading.Thread(target=fn, name=fn.__name__)
            t.start()
            t.join()
        say("callback", len(calls))
        assert cudalike.kernels() == 1000
        say("done", "ok")
        return
    if MODE == "hang-after-launch":
        t = threading.Thread(target=early, name="early")
        t.start()
        t.join()
    cudalike.arm_meet()
    threads = [threading.Thread(target=fn, name=fn.__name__, daemon=True)
               for fn in (holder, launcher)]
    for t in threads:
        t.start()
    say("waiting", "ok")  # the last Python line that can run: the launcher keeps the GIL
    go.set()
    for t in threads:
        t.join()
    say("not", "reached")


if __name__ == "__main__":
    main()
