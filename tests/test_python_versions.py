# SPDX-License-Identifier: MIT
"""Python frames on every CPython heisen knows: 3.8 to 3.13.

The same end-to-end cases run under each interpreter of the machine:
pyenv's shared-libpython builds of 3.8 to 3.13 (~/.pyenv/versions) and
Debian's /usr/bin/python3 (3.11, libpython linked into the executable).
Each case asserts the Python file, function and line of the frames it
expects, and how they are interleaved with the native frames: on 3.8-3.10
each call of the evaluation loop runs one Python frame (so native frames of
the interpreter separate every two Python frames), on 3.11+ one call runs a
run of them (adjacent in the stack).  An interpreter that is absent is
skipped with the reason.

The cases need no extension build per version: ctypes reaches C (a read
through a NULL pointer, libc's malloc and free, and libnativelock.so, a C
library that calls Python listeners with its mutex held).

A CPython that heisen's table does not know (pyenv's 3.7 here) gets native
frames only, and heisen-dump says so in one line.
"""
import glob
import os
import shutil
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import (REPO, SYSTEM_PYTHON, fact_int, facts, find_python_frame, findings_of,
                      marker_line, native_index, process_of, python_frames)

PYENV = Path(os.environ.get("PYENV_ROOT", os.path.expanduser("~/.pyenv"))) / "versions"


def pyenv_python(minor):
    """The newest pyenv build of 3.<minor> (its bin/python3.<minor>), or None."""
    found = sorted(glob.glob(str(PYENV / f"3.{minor}.*" / "bin" / f"python3.{minor}")),
                   key=lambda p: int(Path(p).parent.parent.name.split(".")[2]))
    return Path(found[-1]) if found else None


class Py:
    """One interpreter of the matrix: its executable and 3.<minor>."""

    def __init__(self, name, exe, minor):
        self.name, self.exe, self.minor = name, exe, minor

    def qualname(self, q):
        """The name heisen shows for function q: co_qualname exists from 3.11
        on; before, a method is its bare name (what co_name holds)."""
        return q if self.minor >= 11 else q.rsplit(".", 1)[-1]

    @property
    def one_frame_per_eval(self):
        return self.minor <= 10


MATRIX = [pytest.param(("pyenv", m), id=f"3.{m}") for m in (8, 9, 10, 11, 12, 13)] + \
    [pytest.param(("debian", 11), id="debian-3.11-static")]


@pytest.fixture(params=MATRIX)
def py(request):
    kind, minor = request.param
    if kind == "debian":
        if not os.access(SYSTEM_PYTHON, os.X_OK):
            pytest.skip(f"{SYSTEM_PYTHON} is not installed")
        return Py("debian", Path(SYSTEM_PYTHON), minor)
    exe = pyenv_python(minor)
    if exe is None:
        pytest.skip(f"no CPython 3.{minor} under {PYENV}")
    return Py(f"3.{minor}", exe, minor)


def expect_python_run(py, stack, want, file_suffix, native_below=False):
    """The stack's Python frames include `want` ([(qualname, line)], innermost
    first, in a row, all in file_suffix), interleaved by py's rule; with
    native_below, the interpreter's native frames are below the outermost
    (a full stack: site stacks end at their last Python frame).  Returns
    the index in stack["frames"] of the first one."""
    frames = stack["frames"]
    pys = [(i, f) for i, f in enumerate(frames) if f.get("python") is True]
    got = [(f["function"], f["line"]) for _, f in pys]
    names = [(f["function"], f.get("line")) for f in frames]
    first = py.qualname(want[0][0])
    starts = [k for k, (_, f) in enumerate(pys) if f["function"] == first]
    assert starts, (got, names)
    k = starts[0]
    run = pys[k:k + len(want)]
    assert [(f["function"], f["line"]) for _, f in run] == [(py.qualname(q), ln) for q, ln in want], (got, names)
    for i, f in run:
        assert f["file"].endswith(file_suffix), f
        assert f["module"] is None and f["offset"] is None, f
    idx = [i for i, _ in run]
    for a, b in zip(idx, idx[1:]):
        if py.one_frame_per_eval:
            # one evaluation-loop call per Python frame: interpreter frames between
            assert b > a + 1 and not any(frames[j]["python"] for j in range(a + 1, b)), names
        else:
            # one call runs the whole run of Python-to-Python calls
            assert b == a + 1, names
    if native_below:
        assert stack.get("truncated") or not frames[-1]["python"], names
    return idx[0]


def native_in_module(stack, name):
    """Index of the first native frame of a module whose file name contains
    name (Debian's _ctypes has no symbols, so frames are named by module)."""
    for i, f in enumerate(stack["frames"]):
        if f.get("python") is False and name in (f.get("module") or ""):
            return i
    return None


def check_process(report, pid, py):
    proc = process_of(report, pid)
    assert proc["python"]["version"].startswith(f"3.{py.minor}."), proc["python"]
    assert proc["python"]["frames"] is True, proc["python"]


# ---- the layout table against each interpreter's own headers -------------------------


def test_layout_table_matches_the_interpreters_own_headers(py, tmp_path):
    """shim/python_layouts.h's row for this version, field by field, against
    offsetof() in the CPython headers the interpreter was built with
    (tests/pyframe_layouts.c; heisen itself is built without them)."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler")
    q = subprocess.run([str(py.exe), "-c", "import sysconfig; print(sysconfig.get_paths()['include'])"],
                       capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                                      if k != "LD_PRELOAD"})
    inc = Path(q.stdout.strip())
    if q.returncode != 0 or not (inc / "Python.h").exists() or not (inc / "internal").is_dir():
        pytest.skip(f"{py.exe} has no headers with the internal ones ({inc})")
    exe = tmp_path / "pyframe_layouts"
    c = subprocess.run([cc, "-std=gnu11", "-I", REPO / "shim", "-I", inc, "-I", inc / "internal",
                        REPO / "tests" / "pyframe_layouts.c", "-o", exe],
                       capture_output=True, text=True, timeout=120)
    assert c.returncode == 0, c.stderr
    r = subprocess.run([exe], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0 and "ok " in r.stdout, r.stdout


# ---- a crash in C called from Python -------------------------------------------------

CRASH = """\
import ctypes, os, sys


def read_header(address):
    return ctypes.string_at(address)  # marker: read through the pointer


class Loader:
    def load(self):
        return read_header(0)  # marker: Loader.load calls


def main():
    Loader().load()  # marker: main calls


print("pid", os.getpid(), flush=True)
main()  # marker: module calls
"""


def test_crash_in_c_called_through_ctypes_shows_python_lines(heisen, session, tmp_path, py):
    src = tmp_path / "loader.py"
    src.write_text(CRASH)
    p = heisen.preload([py.exe, src], session)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    st = crashes[0]["stacks"][0]
    first = expect_python_run(py, st, [
        ("read_header", marker_line(src, "read through the pointer")),
        ("Loader.load", marker_line(src, "Loader.load calls")),
        ("main", marker_line(src, "main calls")),
        ("<module>", marker_line(src, "module calls")),
    ], "loader.py", native_below=True)
    # ctypes' own Python frame (string_at in ctypes/__init__.py) sits between
    # the C that faulted and read_header; the native ctypes frames are above it
    ctypes_py = find_python_frame(st, "string_at", "ctypes/__init__.py")
    assert ctypes_py is not None and ctypes_py < first, [f["function"] for f in st["frames"]]
    callproc = native_in_module(st, "_ctypes")
    assert callproc is not None and callproc < ctypes_py, [f["function"] for f in st["frames"]]
    check_process(report, pid, py)
    text = heisen.dump(session).stdout
    assert f"read_header ({src}:{marker_line(src, 'read through the pointer')}) [python]" in text, text


# ---- a GIL inversion through a ctypes callback -------------------------------------


def test_gil_inversion_through_a_ctypes_callback_shows_python_lines(heisen, session, py):
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / "py_callback_under_lock.py"
    p = heisen.preload([py.exe, src, lib], session)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert facts(p.stdout)["notified"] == ["3"] and facts(p.stdout)["count"] == ["3"], p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1, report["findings"]
    edges = cycles[0]["edges"]
    names = {(e["from"].get("name"), e["to"].get("name")) for e in edges}
    assert names == {("registry_lock", "GIL"), ("GIL", "registry_lock")}, edges
    notify = marker_line(src, "notify under the registry lock")
    count = marker_line(src, "count with the GIL held")
    for e in edges:
        if e["to"].get("name") == "GIL":
            # the mutex taken in nl_notify, then the GIL taken back by the callback
            for k in ("from_stack", "to_stack"):
                i = expect_python_run(py, e[k], [("notifier", notify)], "py_callback_under_lock.py")
                assert native_index(e[k], "ffi_call") < i, k
            # the callback's GIL request comes from ctypes' closure, above the ffi call
            assert native_in_module(e["to_stack"], "_ctypes") < native_index(e["to_stack"], "ffi_call")
        else:
            # the mutex taken in nl_count while the GIL was held (PyDLL)
            i = expect_python_run(py, e["to_stack"], [("poller", count)], "py_callback_under_lock.py")
            assert native_index(e["to_stack"], "ffi_call") < i
    check_process(report, pid, py)


def run_watched(heisen, session, cmd):
    """heisen-run --hang-timeout 2 --on-hang kill -- cmd; (returncode, stdout, stderr).
    Everything of the session is killed if heisen-run has not ended in 60 s."""
    args = [str(heisen.run_bin), "--dir", str(session), "--hang-timeout", "2", "--on-hang", "kill",
            "--", *map(str, cmd)]
    proc = subprocess.Popen(args, env=heisen.env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("heisen-run did not report the hang within 60 s")
    return proc.returncode, out, err


def test_gil_inversion_deadlock_shows_python_lines_of_both_threads(heisen, session, py):
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / "py_callback_under_lock.py"
    rc, out, err = run_watched(heisen, session, [py.exe, src, lib, "together"])
    assert rc == 137 and "notified" not in out and "not reached" not in out, (rc, out, err)
    pid, notifier, poller = (fact_int(out, k) for k in ("pid", "tid_notifier", "tid_poller"))
    report = heisen.dump_json(session, expect_rc=1)
    dls = [f for f in findings_of(report, "deadlock") if f["pid"] == pid]
    assert len(dls) == 1, report["findings"]
    by_tid = {t["tid"]: t for t in dls[0]["threads"]}
    assert set(by_tid) == {notifier, poller}, by_tid.keys()
    notify = marker_line(src, "notify under the registry lock")
    count = marker_line(src, "count with the GIL held")
    # the hook's wait stacks and the snapshot taken in each thread (a signal, no ptrace)
    for k in ("wait_stack", "stack"):
        st = by_tid[notifier][k]
        # the callback for the next event asks for the GIL: ctypes' closure,
        # called by the library with its mutex held, called through ctypes
        i = expect_python_run(py, st, [("notifier", notify)], "py_callback_under_lock.py")
        assert native_in_module(st, "_ctypes") < native_index(st, "nl_notify") < \
            native_index(st, "ffi_call") < i, (k, [f["function"] for f in st["frames"]])
        st = by_tid[poller][k]
        i = expect_python_run(py, st, [("poller", count)], "py_callback_under_lock.py")
        assert native_index(st, "ffi_call") < i, k
    check_process(report, pid, py)


# ---- a hang: a thread blocked in os.read -------------------------------------------


def test_thread_blocked_in_os_read_hang_shows_python_lines(heisen, session, py):
    src = heisen.src_targets / "py_blocked_read.py"
    rc, out, err = run_watched(heisen, session, [py.exe, src])
    assert rc == 137, (rc, out, err)
    pid, tid_reader, tid_main = (fact_int(out, k) for k in ("pid", "tid_reader", "tid_main"))
    report = heisen.dump_json(session, expect_rc=1)
    hangs = [f for f in findings_of(report, "hang") if f["pid"] == pid]
    assert len(hangs) == 1, report["findings"]
    by_tid = {t["tid"]: t for t in hangs[0]["threads"]}
    reader = by_tid[tid_reader]["stack"]
    i = expect_python_run(py, reader, [("wait_for_reply", marker_line(src, "wait_for_reply reads"))],
                          "py_blocked_read.py")
    assert any(not f["python"] and f["function"] in ("read", "__libc_read", "_Py_read")
               for f in reader["frames"][:i]), [f["function"] for f in reader["frames"]]
    main = by_tid[tid_main]["stack"]
    expect_python_run(py, main, [("main", marker_line(src, "main joins the reader"))], "py_blocked_read.py")
    check_process(report, pid, py)


# ---- a double free through ctypes ----------------------------------------------------


def test_ctypes_double_free_shows_python_lines(heisen, session, py):
    src = heisen.src_targets / "py_ctypes_double_free.py"
    p = heisen.preload([py.exe, src], session, env={"HEISEN_HEAP": "1"})
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    frees = [f for f in findings_of(report, "double-free") if f["pid"] == pid]
    assert len(frees) == 1, report["findings"]
    f = frees[0]
    assert f["size"] == 4096 and int(f["address"], 16) == int(facts(p.stdout)["pointer"][0], 16)
    want = {"second free": ("release_again", "second free"), "first free": ("release", "first free"),
            "allocation": ("make_buffer", "alloc")}
    for role, (fn, marker) in want.items():
        st = [s for s in f["stacks"] if s["role"] == role]
        assert len(st) == 1, [s["role"] for s in f["stacks"]]
        i = expect_python_run(py, st[0], [(fn, marker_line(src, marker))], "py_ctypes_double_free.py")
        assert native_index(st[0], "ffi_call") < i, role
    check_process(report, pid, py)


# ---- a stale close through file objects ------------------------------------------------


def test_stale_close_through_file_objects_shows_python_lines(heisen, session, py):
    src = heisen.src_targets / "py_fd_stale.py"
    p = heisen.preload([py.exe, src], session)
    assert p.returncode == 0, (p.returncode, p.stderr)
    out = facts(p.stdout)
    assert out["writer_write"] == ["9"] and out["writer_close"] == ["9"], p.stdout
    pid, fd = fact_int(p.stdout, "pid"), fact_int(p.stdout, "fd")
    report = heisen.dump_json(session, expect_rc=1)
    stale = [f for f in findings_of(report, "stale-close") if f["pid"] == pid]
    assert len(stale) == 1, report["findings"]
    f = stale[0]
    assert f["fd"] == fd
    want = {"stale close": ("evaluate", "stale close"),
            "stale owner's generation": ("evaluate", "evaluator opens"),
            "rightful owner's creation": ("writer", "writer opens"),
            "rightful owner's failed close": ("writer", "writer closes")}
    for role, (fn, marker) in want.items():
        st = [s for s in f["stacks"] if s["role"] == role]
        assert len(st) == 1, [s["role"] for s in f["stacks"]]
        expect_python_run(py, st[0], [(fn, marker_line(src, marker))], "py_fd_stale.py")
    check_process(report, pid, py)


# ---- what must not be reported, and a version heisen does not know ---------------------

CLEAN = """\
import threading
lock = threading.Lock()
def work():
    for _ in range(1000):
        with lock:
            pass
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts: t.start()
for t in ts: t.join()
print("ok")
"""


def test_correct_threaded_program_has_no_finding_and_frames_are_read(heisen, session, py):
    p = heisen.preload([py.exe, "-c", CLEAN], session)
    assert p.returncode == 0 and p.stdout.strip() == "ok", (p.returncode, p.stderr)
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == [], report["findings"]
    procs = [x for x in report["processes"] if x.get("python")]
    assert len(procs) == 1 and procs[0]["python"]["frames"] is True, procs
    assert "python frames: not read" not in heisen.dump(session).stdout


def test_unknown_cpython_version_says_python_frames_are_not_read(heisen, session, tmp_path):
    exe = pyenv_python(7)
    if exe is None:
        pytest.skip(f"no CPython 3.7 (a version heisen does not know) under {PYENV}")
    src = tmp_path / "loader.py"
    src.write_text(CRASH)
    p = heisen.preload([exe, src], session)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    st = crashes[0]["stacks"][0]
    # native frames only, the evaluation loop's among them
    assert not python_frames(st) and native_index(st, "_PyEval_EvalFrameDefault") is not None, st
    proc = process_of(report, pid)
    assert proc["python"]["version"].startswith("3.7.") and proc["python"]["frames"] is False
    text = heisen.dump(session).stdout
    assert "python frames: not read (CPython 3.7 is not known to this heisen)" in text, text
