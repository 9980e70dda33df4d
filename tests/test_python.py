# SPDX-License-Identifier: MIT
"""Python programs under heisen, with Debian's /usr/bin/python3.

- py_lock_order.py: two Python threads call into a C extension
  (heisenlocks) that takes two native mutexes in opposite orders, one after
  the other: the deadlock is predicted, with the extension's native frames.
- py_clean_threads.py: threading, queue, sqlite3, json: no finding, and the
  same output and exit status as without heisen.
- heisenlocks.crash(): a segfault inside an extension that was dlopen'd after
  start and took no lock before crashing: the stack must still be symbolized.
"""
import signal
import subprocess

import pytest

from conftest import (SYSTEM_PYTHON, all_frame_functions, edge_pairs, fact_int, findings_of,
                      frame_functions, lockname, process_of, pyext_dir)


def script(heisen, name):
    return heisen.src_targets / name


def test_python_threads_native_lock_order_is_predicted(heisen, way):
    ext = pyext_dir(heisen)
    p = way.run([SYSTEM_PYTHON, script(heisen, "py_lock_order.py"), ext])
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done" in p.stdout.split()
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))

    report = heisen.dump_json(way.session, expect_rc=1)
    pds = findings_of(report, "potential-deadlock")
    ours = [f for f in pds if {"ext_lock_a", "ext_lock_b"} <= {lockname(l) for l in f["locks"]}]
    assert len(ours) == 1, report["findings"]
    f = ours[0]
    assert f["pid"] == pid
    assert sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    assert edge_pairs(f) == {("ext_lock_a", "ext_lock_b"), ("ext_lock_b", "ext_lock_a")}
    names = all_frame_functions(f)
    assert {"ext_take_a_then_b", "ext_take_b_then_a", "py_a_then_b", "py_b_then_a"} <= set(names)
    for e in f["edges"]:
        top = e["to_stack"]["frames"][0]
        assert top["function"] in ("ext_take_a_then_b", "ext_take_b_then_a")
        assert "heisenlocks" in top["module"] and top["file"] == "heisenlocks.c"
        assert top["python"] is False
    # Nothing else in CPython itself looks like a lock-order cycle.
    assert pds == ours, pds
    proc = process_of(report, pid)
    assert proc["exe"].startswith("/usr/bin/python3") and proc["state"] == "exited"


def run_bare(cmd, heisen, timeout=120):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          env=heisen.env(), timeout=timeout)


@pytest.mark.parametrize("status", [0, 3])
def test_clean_threaded_python_is_quiet_and_unchanged(heisen, way, status):
    cmd = [SYSTEM_PYTHON, script(heisen, "py_clean_threads.py"), status]
    bare = run_bare(cmd, heisen)
    assert bare.returncode == status, bare.stderr
    assert '"all_finished": true' in bare.stdout

    p = way.run(cmd, timeout=120)
    assert p.returncode == bare.returncode, (p.returncode, p.stderr)
    assert p.stdout == bare.stdout

    report = heisen.dump_json(way.session, expect_rc=0)
    assert report["findings"] == [], report["findings"]
    assert report.get("errors", []) == []
    procs = report["processes"]
    assert procs and all(pr["state"] == "exited" and pr["exit_status"] == status for pr in procs)
    # The threads were seen: six workers at least.
    assert max(len(pr["threads"]) for pr in procs) >= 7


def test_crash_in_a_dlopened_extension_is_symbolized(heisen, way):
    ext = pyext_dir(heisen)
    code = ("import os, sys; sys.path.insert(0, sys.argv[1]); import heisenlocks; "
            "print('pid', os.getpid(), flush=True); heisenlocks.crash()")
    p = way.run([SYSTEM_PYTHON, "-c", code, ext])
    assert p.returncode == way.killed_by(signal.SIGSEGV), (p.returncode, p.stderr)
    pid = fact_int(p.stdout, "pid")

    report = heisen.dump_json(way.session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    c = crashes[0]
    assert c["pid"] == pid and c["address"] == "0x18" and c["signal"] == signal.SIGSEGV
    top = c["stacks"][0]["frames"][0]
    assert top["module"] and "heisenlocks" in top["module"], c["stacks"][0]["frames"][:3]
    assert top["function"] == "ext_crash_here"
    assert frame_functions(c["stacks"][0])[:2] == ["ext_crash_here", "py_crash"]


def test_python_program_deadlocked_in_native_code_is_named_and_killed(heisen, session):
    """Seed 001's symptom, a Python service stuck at 0% CPU: two threads
    deadlocked inside an extension, with the GIL released."""
    ext = pyext_dir(heisen)
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    SYSTEM_PYTHON, script(heisen, "py_deadlock.py"), ext], timeout=60)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "not reached" not in p.stdout
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))
    assert "deadlock" in p.stderr and "ext_hold_a_want_b" in p.stderr

    report = heisen.dump_json(session, expect_rc=1)
    dls = findings_of(report, "deadlock")
    assert len(dls) == 1, report["findings"]
    f = dls[0]
    assert f["pid"] == pid and sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    assert sorted(lockname(l) for l in f["locks"]) == ["ext_lock_a", "ext_lock_b"]
    by_tid = {t["tid"]: t for t in f["threads"]}
    for tid, holds, wants, fn in ((tid_ab, "ext_lock_a", "ext_lock_b", "ext_hold_a_want_b"),
                                  (tid_ba, "ext_lock_b", "ext_lock_a", "ext_hold_b_want_a")):
        t = by_tid[tid]
        # (a threading.Thread also holds its own thread-state lock, a Python lock, all its life)
        assert [lockname(l) for l in t["holds"] if l["kind"] != "semaphore"] == [holds]
        assert lockname(t["waits_for"]) == wants
        assert frame_functions(t["wait_stack"])[0] == fn
        assert "heisenlocks" in t["wait_stack"]["frames"][0]["module"]
    assert process_of(report, pid)["state"] == "killed"
