# SPDX-License-Identifier: MIT
"""queue.Queue's mutex taken many times alone, then nested into an ABBA
(README "Python locks"; docs/design.md "Lock order").

py_queue_nesting.py serves 500 rounds through two queue.Queue objects and
a counter lock in a worker thread (three Python lock classes in turn under
the thread's own thread-state lock, every put and get probing its queue's
mutex through Condition.notify), then nests the jobs queue's mutex with a
journal lock in both orders (a queue.Queue subclass whose _put journals).
These guard what the wait hooks' fast path must keep while it skips work:
the memo of held entries cleared for several classes (the edges of each
are still in the graph), a probed holding released without its edge
look-ups (no entry left behind in the held stack), a lock's class found
from its creating frames without a stack read (the class named by its
creation line).  Every case runs on each interpreter of the machine.
"""
import pytest

from conftest import fact_int, facts, findings_of, marker_line
from test_python_versions import check_process, expect_python_run, py, run_watched  # noqa: F401 (fixture)

SRC = "py_queue_nesting.py"
COUNT = 500  # rounds served alone: well past the 64 acquisitions that keep exact stacks anywhere


@pytest.fixture(autouse=True)
def python_locks_default(monkeypatch):
    monkeypatch.delenv("HEISEN_PY_LOCKS", raising=False)


def run(heisen, session, py, nest):
    src = heisen.src_targets / SRC
    p = heisen.preload([py.exe, src, str(COUNT), nest], session, timeout=120)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    assert fact_int(p.stdout, "served") == COUNT, p.stdout
    return src, fact_int(p.stdout, "pid")


def names(py, src):
    """The journal lock's class name and a check of the jobs queue's mutex's
    (made in queue.py's Queue.__init__, called from the jobs line)."""
    journal = f"{src.name}:{marker_line(src, 'journal lock created')} in {py.qualname('Journal.__init__')}"

    def is_jobs_mutex(name):
        return (name or "").startswith("queue.py:") and name.endswith(" in " + py.qualname("Queue.__init__"))
    return journal, is_jobs_mutex


def test_a_queue_mutex_taken_alone_many_times_then_nested_is_predicted(heisen, session, py):
    """The cycle jobs mutex -> journal -> jobs mutex is predicted, both
    locks named by their creation lines, each edge with its exact Python
    lines: the put's line under the override's journal line, the
    auditor's journal line and its qsize line."""
    src, pid = run(heisen, session, py, "abba")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1 and len(cycles[0]["edges"]) == 2, report["findings"]
    journal, is_jobs_mutex = names(py, src)
    edges = cycles[0]["edges"]
    out = [e for e in edges if is_jobs_mutex(e["from"].get("name")) and e["to"].get("name") == journal]
    back = [e for e in edges if e["from"].get("name") == journal and is_jobs_mutex(e["to"].get("name"))]
    assert len(out) == 1 and len(back) == 1, [(e["from"].get("name"), e["to"].get("name")) for e in edges]
    out, back = out[0], back[0]
    assert out.get("from_stack_site_only") in (False, None), out
    expect_python_run(py, out["from_stack"], [("putter", marker_line(src, "putter puts a journaled job"))], SRC)
    expect_python_run(py, out["to_stack"], [("JournalQueue._put", marker_line(src, "put journals under the queue's mutex"))],
                      SRC)
    expect_python_run(py, back["from_stack"], [("auditor", marker_line(src, "auditor takes the journal lock"))], SRC)
    expect_python_run(py, back["to_stack"],
                      [("auditor", marker_line(src, "auditor sizes the queue under the journal lock"))], SRC)
    check_process(report, pid, py)
    text = heisen.dump(session)
    assert text.returncode == 1 and "call site only" not in text.stdout, text.stdout


def test_queues_used_in_one_order_only_have_no_finding(heisen, session, py):
    """The same 500 rounds, then only the auditor (journal -> jobs mutex):
    one order, no cycle, no finding; the process recorded."""
    src, pid = run(heisen, session, py, "audit")
    report = heisen.dump_json(session, expect_rc=0)
    assert not [f for f in report["findings"] if f.get("pid") == pid], report["findings"]
    check_process(report, pid, py)


def test_a_deadlock_through_a_queue_mutex_names_both_holders(heisen, session, py):
    """Deadlocked for real under heisen-run after the 500 rounds: the putter
    holds the jobs queue's mutex (in put, its _put waiting for the journal
    lock), the auditor holds the journal lock and waits for the mutex.
    Both holders named with their exact lines; the worker that served
    (ended) and the two holders hold nothing else of the queues: the
    probed holdings of the rounds left no entry behind."""
    src = heisen.src_targets / SRC
    rc, out, err = run_watched(heisen, session, [py.exe, src, COUNT, "deadlock"])
    assert rc == 137 and "done" not in out, (rc, out, err)
    pid, putter, auditor = (fact_int(out, k) for k in ("pid", "tid_putter", "tid_auditor"))
    assert fact_int(out, "served") == COUNT, out
    report = heisen.dump_json(session, expect_rc=1)
    dls = [f for f in findings_of(report, "deadlock") if f["pid"] == pid]
    assert len(dls) == 1, report["findings"]
    by_tid = {t["tid"]: t for t in dls[0]["threads"]}
    assert set(by_tid) == {putter, auditor}, by_tid.keys()
    journal, is_jobs_mutex = names(py, src)
    p, a = by_tid[putter], by_tid[auditor]
    assert p["waits_for"]["name"] == journal, p
    assert is_jobs_mutex(a["waits_for"]["name"]), a
    assert [h.get("name") for h in p["holds"] if is_jobs_mutex(h.get("name"))], p["holds"]
    assert journal in [h.get("name") for h in a["holds"]], a["holds"]
    assert p["hold_stack_site_only"] is False and a["hold_stack_site_only"] is False, (p, a)
    expect_python_run(py, a["hold_stack"], [("auditor", marker_line(src, "auditor takes the journal lock"))], SRC)
    expect_python_run(py, p["wait_stack"], [("JournalQueue._put", marker_line(src, "put journals under the queue's mutex"))],
                      SRC)
    expect_python_run(py, a["wait_stack"],
                      [("auditor", marker_line(src, "auditor sizes the queue under the journal lock"))], SRC)
    # each holder holds one lock of the program's (its thread-state lock aside): nothing left behind
    proc = [q for q in report["processes"] if q["pid"] == pid]
    assert len(proc) == 1, [q["pid"] for q in report["processes"]]
    for tid in (putter, auditor):
        held = [h["lock"].get("name") for t in proc[0]["threads"] if t["tid"] == tid for h in t["held"]]
        mine = [n for n in held if n == journal or is_jobs_mutex(n) or (n or "").startswith(src.name)]
        assert len(mine) == 1, (tid, held)
