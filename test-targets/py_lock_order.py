# SPDX-License-Identifier: MIT
"""py_lock_order — a native lock-order inversion driven from Python threads.

Thread "ab" calls heisenlocks.a_then_b() (ext_lock_a, then ext_lock_b); when
it has finished, thread "ba" calls heisenlocks.b_then_a().  This run cannot
hang, but heisen must predict the deadlock of a run where they overlap.

The built extension is found through sys.path: the directory is argv[1], else
$HEISEN_PYEXT_DIR, else $HEISEN_BUILD/test-targets, else ../build/test-targets
next to this file.  Prints "pid P", "tid_ab T", "tid_ba T", "done".
"""
import os
import sys
import threading
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
    for label, fn in (("tid_ab", heisenlocks.a_then_b), ("tid_ba", heisenlocks.b_then_a)):
        t = threading.Thread(target=worker, args=(label, fn), name=label)
        t.start()
        t.join()
    assert heisenlocks.counter() == 2
    print("done", flush=True)


if __name__ == "__main__":
    main()
