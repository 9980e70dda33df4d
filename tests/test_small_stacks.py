# SPDX-License-Identifier: MIT
"""Threads with small stacks under heisen: do no harm to the host program.

glibc carves a thread's static TLS out of the stack size the program asked
for, and a hook's own frames come out of what is left: a thread made with
pthread_attr_setstacksize(PTHREAD_STACK_MIN), 20 or 32 KiB (thread pools,
embedded interpreters, runtimes), or with threading.stack_size(32768) in
Python, must run exactly as it does natively, and what heisen learns there
(an ABBA) must still be predicted.  libheisen.so keeps its big per-thread
buffers in a per-thread area it maps itself (shim/area.c) and does not
unwind with less than HS_UNWIND_ROOM of stack left (the call site alone,
marked truncated).  Every test runs under bare LD_PRELOAD and heisen-run.
"""
import re
import subprocess

import pytest

from conftest import SYSTEM_PYTHON, fact_int, facts, findings_of, frame_functions, lockname, target

SIZES = {"PTHREAD_STACK_MIN": 16384, "20KiB": 20480, "32KiB": 32768}


def native(cmd, timeout=60):
    return subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=timeout)


def without_ids(stdout):
    """stdout without the pid and tids, which differ from run to run."""
    return [re.sub(r"(pid|tid_ab|tid_ba) \d+", r"\1 N", line) for line in stdout.splitlines()]


def the_abba(report, pid):
    pds = [f for f in findings_of(report, "potential-deadlock")
           if f["pid"] == pid and sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b"]]
    assert len(pds) == 1, report["findings"]
    return pds[0]


def edge(f, frm, to):
    (e,) = [e for e in f["edges"] if lockname(e["from"]) == frm and lockname(e["to"]) == to]
    return e


def test_static_tls_is_small(heisen):
    """The TLS segment of libheisen.so (taken from every thread's stack) is a
    few hundred bytes: the per-thread buffers live in the mapped area."""
    out = subprocess.run(["readelf", "-lW", str(heisen.lib)], capture_output=True, text=True,
                         check=True).stdout
    (tls,) = [l.split() for l in out.splitlines() if l.split()[:1] == ["TLS"]]
    memsiz = int(tls[5], 16)
    assert memsiz <= 1024, f"libheisen.so static TLS is {memsiz} bytes"


@pytest.mark.parametrize("size", list(SIZES), ids=list(SIZES))
def test_small_stack_threads_run_as_natively_and_abba_is_predicted(heisen, way, size):
    cmd = [target(heisen, "small_stacks"), SIZES[size]]
    want = native(cmd)
    assert want.returncode == 0, (want.returncode, want.stderr)
    p = way.run(cmd)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert without_ids(p.stdout) == without_ids(want.stdout)
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))

    report = heisen.dump_json(way.session)
    assert not findings_of(report, "crash"), report["findings"]
    f = the_abba(report, pid)
    assert sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    # with the per-thread area out of the stack there is room to unwind:
    # whole stacks, frame by frame
    for (frm, to), fn, thread_fn in ((("lock_a", "lock_b"), "take_a_then_b", "thread_ab"),
                                     (("lock_b", "lock_a"), "take_b_then_a", "thread_ba")):
        e = edge(f, frm, to)
        for st in (e["from_stack"], e["to_stack"]):
            names = frame_functions(st)
            assert names[:4] == [fn, "run_at_depth", thread_fn, "start_thread"], st
            assert not st["truncated"], st


@pytest.mark.parametrize("guard_rate", [None, "1"], ids=["default", "every-allocation-guarded"])
def test_deep_call_chain_in_small_stack_records_the_call_site(heisen, way, guard_rate):
    """Locks taken with 4 KiB of a PTHREAD_STACK_MIN stack left (natively
    enough): no room to unwind, so each stack is the call site alone, marked
    truncated, and the ABBA is still predicted.  The thread's mallocs there
    may be sampled for a guard page (at the default rate about one run in a
    hundred is; with HEISEN_GUARD_RATE=1 every one is): the sample records
    no stack rather than unwinding past the end of the thread's stack."""
    cmd = [target(heisen, "small_stacks"), 16384, 4096]
    want = native(cmd)
    assert want.returncode == 0, (want.returncode, want.stderr)
    p = way.run(cmd, env={"HEISEN_GUARD_RATE": guard_rate} if guard_rate else None)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert without_ids(p.stdout) == without_ids(want.stdout)
    report = heisen.dump_json(way.session)
    f = the_abba(report, fact_int(p.stdout, "pid"))
    for (frm, to), fn in ((("lock_a", "lock_b"), "take_a_then_b"), (("lock_b", "lock_a"), "take_b_then_a")):
        e = edge(f, frm, to)
        for st in (e["from_stack"], e["to_stack"]):
            assert frame_functions(st) == [fn] and st["truncated"], st
    text = heisen.dump(way.session).stdout
    assert "(deeper frames not recorded)" in text


def test_python_small_stack_threads_with_sqlite(heisen, way):
    """threading.stack_size(32768) workers, each querying its own sqlite3
    connection (sqlite's pthread mutexes, nested): same output as natively."""
    cmd = [SYSTEM_PYTHON, heisen.src_targets / "py_small_stacks.py", "4", "200"]
    want = native(cmd)
    assert want.returncode == 0, (want.returncode, want.stderr)
    p = way.run(cmd, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert without_ids(p.stdout) == without_ids(want.stdout)
    assert facts(p.stdout)["sum"] == ["20100"] * 4
    report = heisen.dump_json(way.session)
    assert report["findings"] == [], report["findings"]
