# SPDX-License-Identifier: MIT
"""py_deadlock — a Python program that hangs at 0% CPU in native code.

Two Python threads call into heisenlocks: one takes ext_lock_a and then
wants ext_lock_b, the other takes ext_lock_b and then wants ext_lock_a; they
meet at a barrier in between, so this deadlocks every time, with the GIL
released (the interpreter itself stays responsive, as in a real service).
Run it under `heisen-run --hang-timeout 2 --on-hang kill`: the report must
name both threads, both locks and the extension's frames.

The extension directory: argv[1], else as in py_lock_order.py.
Prints "pid P", "tid_ab T", "tid_ba T", then "waiting".
"""
import os
import sys
import threading
import time
from pathlib import Path


def ext_dir():
    if len(sys.argv) > 1:
        return sys.argv[1]
    if os.environ.get("HEISEN_PYEXT_DIR"):
        return os.environ["HEISEN_PYEXT_DIR"]
    if os.environ.get("HEISEN_BUILD"):
        return str(Path(os.environ["HEISEN_BUILD"]) / "test-targets")
    return str(Path(__file__).resolve().parent.parent / "build" / "test-targets")


sys.path.insert(0, ext_dir())
import heisenlocks  # noqa: E402


def worker(label, fn):
    sys.stdout.write(f"{label} {heisenlocks.native_tid()}\n")  # one write: threads interleave
    sys.stdout.flush()
    fn()


def main():
    print("pid", os.getpid(), flush=True)
    threads = [threading.Thread(target=worker, args=(label, fn), name=label, daemon=True)
               for label, fn in (("tid_ab", heisenlocks.a_then_b_meet),
                                 ("tid_ba", heisenlocks.b_then_a_meet))]
    for t in threads:
        t.start()
    time.sleep(0.2)
    print("waiting", flush=True)
    for t in threads:
        t.join()
    print("not reached", flush=True)


if __name__ == "__main__":
    main()
