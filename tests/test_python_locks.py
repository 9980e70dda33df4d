# SPDX-License-Identifier: MIT
"""CPython's own locks are locks: threading.Lock (a POSIX semaphore used as
a binary lock) in the lock-order graph, in hang reports, in cycles with
native mutexes and the GIL; and the primitives built on it used correctly
give no finding.  Every case runs on each interpreter of the machine
(pyenv's 3.8 to 3.13, Debian's static 3.11).

A Python lock is named where it was created ("py_lock_abba.py:29 in
Cache.__init__"; before 3.11 the function is its bare name).

Python locks are tracked by default; HEISEN_PY_LOCKS=0 turns them off (the
last test shows that nothing about them is recorded then).
"""
import os

import pytest

from conftest import fact_int, facts, findings_of, marker_line, process_of
from test_python_versions import check_process, expect_python_run, py, run_watched  # noqa: F401 (fixture)


@pytest.fixture(autouse=True)
def python_locks_default(monkeypatch):
    monkeypatch.delenv("HEISEN_PY_LOCKS", raising=False)


def lock_label(py, src, marker, qualname):
    return f"{src.name}:{marker_line(src, marker)} in {py.qualname(qualname)}"


def edge_names(finding):
    return {(e["from"].get("name"), e["to"].get("name")) for e in finding["edges"]}


@pytest.mark.parametrize("mode", [[], ["churn", "40000"], ["warm"], ["warm", "cond"]],
                         ids=["fresh", "after-40000-short-lived-locks", "each-lock-taken-before-alone",
                              "outer-lock-through-a-condition"])
def test_two_python_locks_in_opposite_orders_are_predicted(heisen, session, py, mode):
    """The cycle's edges carry both acquisitions' Python lines.  "warm": each
    lock was taken alone before, so the outer acquisition of each nesting is
    one that added no edge (its stack was kept lazily and read when the
    inner one made the edge); "cond": the outer lock was taken through
    Condition.__enter__, which returned before the edge was made."""
    src = heisen.src_targets / "py_lock_abba.py"
    p = heisen.preload([py.exe, src] + mode, session, timeout=120)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1, report["findings"]
    cache = lock_label(py, src, "cache lock created", "Cache.__init__")
    store = lock_label(py, src, "store lock created", "Store.__init__")
    assert edge_names(cycles[0]) == {(cache, store), (store, cache)}, cycles[0]["edges"]
    for e in cycles[0]["edges"]:
        assert e["from"]["kind"] == "semaphore" and e["to"]["kind"] == "semaphore", e
        who = "reader" if e["from"]["name"] == cache else "writer"
        first, then = ("cache", "store") if who == "reader" else ("store", "cache")
        for k, lock in (("from_stack", first), ("to_stack", then)):
            line = marker_line(src, f"{who} takes the {lock} lock")
            at = expect_python_run(py, e[k], [(who, line)], "py_lock_abba.py")
            frames = e[k]["frames"]
            # the whole stack: the thread's start in threading.py further out
            assert not e[k].get("truncated"), e[k]
            assert any(f.get("python") and f["function"] == py.qualname("Thread.run")
                       for f in frames[at + 1:]), [(f["function"], f.get("line")) for f in frames]
            if "cond" in mode and who == "reader" and k == "from_stack":
                # taken inside Condition.__enter__: that frame first, then the reader's line
                pys = [f for f in frames if f.get("python")]
                assert pys[0]["function"] == py.qualname("Condition.__enter__"), pys
                assert pys[0]["file"].endswith("threading.py"), pys[0]
    # a lock per Condition.wait / Queue.get: classes by creation site, the tables never fill
    assert not any(v for v in process_of(report, pid)["dropped"].values()), process_of(report, pid)["dropped"]
    check_process(report, pid, py)


@pytest.mark.parametrize("mode", [["together"], ["together", "warm"]],
                         ids=["first-nesting", "after-each-thread-nested-its-locks-once"])
def test_two_python_locks_deadlock_names_the_locks_and_their_holders(heisen, session, py, mode):
    """Deadlocked for real: both holders named, each held lock with the
    line that took it.  "warm": every edge was made before, so the held
    locks' stacks were kept lazily and read when the hang's snapshot was
    taken (in the signal handler)."""
    src = heisen.src_targets / "py_lock_abba.py"
    rc, out, err = run_watched(heisen, session, [py.exe, src] + mode)
    assert rc == 137 and "done" not in out, (rc, out, err)
    pid, reader, writer = (fact_int(out, k) for k in ("pid", "tid_reader", "tid_writer"))
    report = heisen.dump_json(session, expect_rc=1)
    dls = [f for f in findings_of(report, "deadlock") if f["pid"] == pid]
    assert len(dls) == 1, report["findings"]
    by_tid = {t["tid"]: t for t in dls[0]["threads"]}
    assert set(by_tid) == {reader, writer}, by_tid.keys()
    cache = lock_label(py, src, "cache lock created", "Cache.__init__")
    store = lock_label(py, src, "store lock created", "Store.__init__")
    for tid, who, mine, other in ((reader, "reader", cache, store), (writer, "writer", store, cache)):
        t = by_tid[tid]
        assert t["wait_kind"] == "lock", t["wait_kind"]
        assert t["waits_for"]["name"] == other and t["waits_for"]["kind"] == "semaphore", t["waits_for"]
        assert mine in [h.get("name") for h in t["holds"]], t["holds"]
        assert [h["tid"] for h in t["held_by"]] == [writer if tid == reader else reader], t["held_by"]
        first, then = ("cache", "store") if who == "reader" else ("store", "cache")
        expect_python_run(py, t["wait_stack"], [(who, marker_line(src, f"{who} takes the {then} lock"))],
                          "py_lock_abba.py")
        expect_python_run(py, t["hold_stack"], [(who, marker_line(src, f"{who} takes the {first} lock"))],
                          "py_lock_abba.py")
    check_process(report, pid, py)


def test_cycle_through_a_python_lock_the_gil_and_a_c_mutex(heisen, session, py):
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / "py_lock_gil_native.py"
    p = heisen.preload([py.exe, src, lib], session)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    journal = lock_label(py, src, "journal lock created", "Journal.__init__")
    cycles = [f for f in findings_of(report, "potential-deadlock")
              if f["pid"] == pid and len(f["edges"]) == 3]
    assert len(cycles) == 1, report["findings"]
    edges = {(e["from"].get("name"), e["to"].get("name")): e for e in cycles[0]["edges"]}
    assert set(edges) == {(journal, "GIL"), ("GIL", "registry_lock"), ("registry_lock", journal)}, edges.keys()
    # the holder: the journal lock taken, the GIL taken back while holding it
    expect_python_run(py, edges[(journal, "GIL")]["from_stack"],
                      [("holder", marker_line(src, "holder takes the journal lock"))], "py_lock_gil_native.py")
    # the poller: the registry mutex taken with the GIL held
    expect_python_run(py, edges[("GIL", "registry_lock")]["to_stack"],
                      [("poller", marker_line(src, "count with the GIL held"))], "py_lock_gil_native.py")
    # the notifier's listener: the journal lock taken under the registry mutex
    e = edges[("registry_lock", journal)]
    expect_python_run(py, e["from_stack"], [("notifier", marker_line(src, "notify under the registry lock"))],
                      "py_lock_gil_native.py")
    expect_python_run(py, e["to_stack"], [("on_event", marker_line(src, "listener takes the journal lock"))],
                      "py_lock_gil_native.py")
    check_process(report, pid, py)


def test_locks_in_callbacks_on_a_librarys_threads_keep_their_python_lines(heisen, session, py):
    """A C library (libnativelock.so) calls Python listeners on threads it
    made: each ctypes callback makes a thread state and deletes it again,
    so thread states come and go and one may take the address another
    thread's had, while that thread runs on without the GIL.  The lock
    token reads the thread state through a per-thread cache checked
    against the one running (python_frames.c tstate_of_thread); the edges
    of the predicted cycle, made in each thread's last call, carry the
    listener's own lines.  (A cache trusted without that check keeps the
    first call's thread state: these edges then have no Python frame.)"""
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / "py_lock_tstate_churn.py"
    p = heisen.preload([py.exe, src, lib, "200"], session, timeout=120)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    assert facts(p.stdout)["tally"] == ["200"] and facts(p.stdout)["forward"] == ["1"], p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1 and len(cycles[0]["edges"]) == 2, report["findings"]
    ledger = lock_label(py, src, "ledger lock created", "<module>")
    journal = lock_label(py, src, "journal lock created", "<module>")
    assert edge_names(cycles[0]) == {(ledger, journal), (journal, ledger)}, cycles[0]["edges"]
    for e in cycles[0]["edges"]:
        who = "forward" if e["from"]["name"] == ledger else "backward"
        first, then = ("ledger", "journal") if who == "forward" else ("journal", "ledger")
        for k, lock in (("from_stack", first), ("to_stack", then)):
            expect_python_run(py, e[k], [(who, marker_line(src, f"{who} takes the {lock} lock"))],
                              "py_lock_tstate_churn.py")
    check_process(report, pid, py)


def test_helper_nesting_its_arguments_locks_from_one_line_keeps_the_held_lock_stack(heisen, session, py):
    """transfer(src, dst, fee) nests the locks of the accounts it is given,
    called from one line: its destination lock is taken on the same native
    stack each time, first by an acquisition that orders nothing new (its
    stack kept lazily: the frames to the evaluation loop and a token of the
    Python frame), then by one under a new source that makes a new edge
    (the whole chain read).  The fee lock taken then makes an edge from the
    destination lock, whose stack must be that second acquisition's, with
    transfer's line and its caller's (a lazy chain taken for the whole one
    lost transfer's frame)."""
    src = heisen.src_targets / "py_lock_transfer.py"
    p = heisen.preload([py.exe, src], session, timeout=120)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1 and len(cycles[0]["edges"]) == 2, report["findings"]
    fee_line = marker_line(src, "transfer takes the fee lock")
    teller = [e for e in cycles[0]["edges"]
              if any(f.get("python") and f.get("line") == fee_line for f in e["to_stack"]["frames"])]
    assert len(teller) == 1, cycles[0]["edges"]
    e = teller[0]
    expect_python_run(py, e["to_stack"], [("transfer", fee_line),
                                          ("teller", marker_line(src, "teller transfers"))], "py_lock_transfer.py")
    at = expect_python_run(py, e["from_stack"],
                           [("transfer", marker_line(src, "transfer takes the destination lock")),
                            ("teller", marker_line(src, "teller transfers"))], "py_lock_transfer.py")
    frames = e["from_stack"]["frames"]
    assert not e["from_stack"].get("truncated"), e["from_stack"]
    assert any(f.get("python") and f["function"] == py.qualname("Thread.run") for f in frames[at + 1:]), \
        [(f["function"], f.get("line")) for f in frames]
    check_process(report, pid, py)


def test_correct_use_of_the_threading_primitives_has_no_finding(heisen, session, py):
    src = heisen.src_targets / "py_threading_clean.py"
    # a ring long enough that the nested locks' events are still there at the end
    p = heisen.preload([py.exe, src], session, env={"HEISEN_RING": "65536"})
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    assert facts(p.stdout)["squares"] == [str(sum(x * x for x in range(100)))], p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == [], report["findings"]
    # heisen did see the Python locks: the nested pair among the locks acquired
    nested = f"{src.name}:{marker_line(src, 'nested locks created')} in <module>"
    proc = process_of(report, pid)
    seen = {e["lock"].get("name") for t in proc["threads"] for e in t.get("events", [])
            if e.get("type") == "lock-acquired" and e.get("lock")}
    assert nested in seen, sorted(n for n in seen if n)
    check_process(report, pid, py)


def test_imports_in_two_threads_stay_within_the_tables(heisen, session, py):
    """Two threads importing a few dozen modules (the start-up of a real
    service): every import makes a module lock at one line of importlib,
    reached through a different chain each time, and nested imports take
    them inside each other.  One lock class per creation place, not per
    creation stack: no table fills (with a class per stack the 2,048-entry
    stack table overflowed: "limit reached"), and no finding."""
    src = heisen.src_targets / "py_many_imports.py"
    p = heisen.preload([py.exe, src], session, timeout=120)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    assert fact_int(p.stdout, "modules") > 150, p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == [], [f.get("message") for f in report["findings"]]
    assert not any(v for v in process_of(report, pid)["dropped"].values()), process_of(report, pid)["dropped"]
    check_process(report, pid, py)


def test_python_locks_off_records_nothing_of_them(heisen, session):
    """With HEISEN_PY_LOCKS=0 the semaphore hooks only pass the call on:
    the same ABBA of two threading.Locks gives no lock node and no finding."""
    assert "HEISEN_PY_LOCKS" not in os.environ
    src = heisen.src_targets / "py_lock_abba.py"
    p = heisen.preload(["/usr/bin/python3", src], session, timeout=120, env={"HEISEN_PY_LOCKS": "0"})
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    r = heisen.dump_json(session, expect_rc=0)
    assert r["findings"] == [], [f["message"] for f in r["findings"]]
