# SPDX-License-Identifier: MIT
"""py_crash_nested — a segfault in native code, two Python calls deep.

Thread "crasher" runs handle_request(), which calls parse_payload(), which
calls heisenlocks.crash(): a write through a NULL struct pointer in
ext_crash_here() (fault address 0x18).  Meanwhile thread "idler" sits in
idle_worker(), blocked in os.read on a pipe nobody writes, and the main
thread joins the crasher.  heisen's crash report must show the Python
functions that led to the crash (handle_request, parse_payload), and the
Python stacks of the other threads at the time of the crash.

The extension directory: argv[1], else as in py_lock_order.py.
Prints "pid P", "tid_crasher T", "tid_idler T", "crashing".
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

idler_ready = threading.Event()


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")  # one write: threads interleave
    sys.stdout.flush()


def idle_worker(fd):
    say("tid_idler", heisenlocks.native_tid())
    idler_ready.set()
    os.read(fd, 1)  # marker: idle_worker reads


def parse_payload(payload):
    if payload:
        heisenlocks.crash()  # marker: parse_payload crashes
    return payload


def handle_request():
    say("tid_crasher", heisenlocks.native_tid())
    idler_ready.wait()
    say("crashing", "now")
    return parse_payload(b"{}")  # marker: handle_request calls parse_payload


def main():
    say("pid", os.getpid())
    r, w = os.pipe()
    threading.Thread(target=idle_worker, args=(r,), name="idler", daemon=True).start()
    t = threading.Thread(target=handle_request, name="crasher")
    t.start()
    t.join()
    say("not", "reached")


if __name__ == "__main__":
    main()
