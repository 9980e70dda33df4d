# SPDX-License-Identifier: MIT
"""Native locks that never nest keep their call site's stack only, and are
still checked when they nest at last (README, "Lock order: locks that
never nest"; docs/design.md "Lock order", the leaf path).

py_leaf_lock.py takes a registry lock (libnativelock.so's pthread mutex
through ctypes, or one threading.Lock shared by a Python class's
callers) hundreds of times with nothing nested under it, then nests the
journal's threading.Lock under it and takes the two in the opposite order
too.  The cycle is predicted either way.  When the native registry mutex
was nested once, the edge out of it has the call site's stack only and
the report says so; nested again, the edge has the exact stack.  A Python
lock never takes the leaf path (its call site is CPython's, shared by
every Python lock): its edge keeps the exact stack.  A program whose
registry lock never nests has no finding.  Every case runs on each
interpreter of the machine.
"""
import pytest

from conftest import fact_int, facts, findings_of, marker_line
from test_python_versions import check_process, expect_python_run, py, run_watched  # noqa: F401 (fixture)

SHAPES = ["native", "wrapper"]
SRC = "py_leaf_lock.py"
COUNT = 500  # registry acquisitions with nothing nested: well past the 64 that keep exact stacks


@pytest.fixture(autouse=True)
def python_locks_default(monkeypatch):
    monkeypatch.delenv("HEISEN_PY_LOCKS", raising=False)


def run(heisen, session, py, shape, nest, env=None):
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / SRC
    p = heisen.preload([py.exe, src, shape, lib, str(COUNT), str(nest)], session, timeout=120, env=env or {})
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    return src, fact_int(p.stdout, "pid"), p.stderr


def registry_name(py, src, shape):
    if shape == "native":
        return "registry_lock"
    return f"{src.name}:{marker_line(src, 'registry lock created')} in {py.qualname('WrapperRegistry.__init__')}"


def the_cycle(heisen, session, py, src, pid, shape):
    """The one predicted cycle, its two edges by direction."""
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(cycles) == 1 and len(cycles[0]["edges"]) == 2, report["findings"]
    journal = f"{src.name}:{marker_line(src, 'journal lock created')} in {py.qualname('Journal.__init__')}"
    registry = registry_name(py, src, shape)
    edges = {(e["from"].get("name"), e["to"].get("name")): e for e in cycles[0]["edges"]}
    assert set(edges) == {(registry, journal), (journal, registry)}, edges.keys()
    check_process(report, pid, py)
    return edges[(registry, journal)], edges[(journal, registry)]


def check_journal_edge(py, src, back):
    """journal -> registry: the journal lock was no leaf (taken with the registry
    lock held first): its exact stack, the auditor's line."""
    assert back.get("from_stack_site_only") in (False, None), back  # None: a build before the leaf path
    expect_python_run(py, back["from_stack"], [("audit", marker_line(src, "auditor takes the journal lock"))], SRC)
    expect_python_run(py, back["to_stack"], [("audit", marker_line(src, "auditor counts under the journal lock"))],
                      SRC)


def test_a_leaf_mutex_nested_once_is_predicted_with_its_call_site_said(heisen, session, py):
    """libnativelock.so's registry mutex nested once, after 500 acquisitions
    alone: the cycle is found and names both locks; the mutex's edge has
    its call site's stack only, marked in the JSON and said plainly in the
    text report; the inner acquisition's stack is exact (the listener's
    line)."""
    shape = "native"
    src, pid, err = run(heisen, session, py, shape, 1)
    out, back = the_cycle(heisen, session, py, src, pid, shape)
    assert out["from_stack_site_only"] is True and out["from_site_n"] == 64, out
    # the site's first stack: nl_notify's first call, from the poll loop (with no listener),
    # not this one from notify(): what the report warns of
    expect_python_run(py, out["from_stack"], [("NativeRegistry.touch", marker_line(src, "registry touch calls the library")),
                                             ("poll", marker_line(src, "poll touches"))], SRC)
    assert out["from_stack"]["frames"][0]["function"] == "nl_notify", out["from_stack"]["frames"][0]
    expect_python_run(py, out["to_stack"], [("on_event", marker_line(src, "listener takes the journal lock"))], SRC)
    check_journal_edge(py, src, back)
    text = heisen.dump(session)
    assert text.returncode == 1, (text.returncode, text.stderr)
    said = ("(call site only: this lock had been taken 64 times with nothing nested under it before, "
            "so only its call site's first stack was kept")
    assert text.stdout.count(said) == 1, text.stdout


@pytest.mark.parametrize("after", ["0", "255", "300"])
def test_the_leaf_path_can_be_turned_off_or_put_later(heisen, session, py, after):
    """HEISEN_LOCK_LEAF_AFTER=0 turns the leaf path off: the registry mutex,
    taken 1,000 times alone and then nested once, keeps its exact stack.
    =255: it takes the leaf path after 255 acquisitions alone, and its edge
    says so with that count.  =300 is out of range: said once on stderr, the
    default 64 used."""
    shape = "native"
    src, pid, err = run(heisen, session, py, shape, 1, env={"HEISEN_LOCK_LEAF_AFTER": after})
    out, back = the_cycle(heisen, session, py, src, pid, shape)
    if after == "0":
        check_exact_registry_edge(py, src, shape, out)
    elif after == "255":
        assert out["from_stack_site_only"] is True and out["from_site_n"] == 255, out
    else:
        # out of range: said once, the default used
        said = "heisen: ignoring HEISEN_LOCK_LEAF_AFTER=300: out of range (0 to 255); using 64"
        assert err.count(said) == 1, err
        assert out["from_stack_site_only"] is True and out["from_site_n"] == 64, out
    check_journal_edge(py, src, back)


def check_exact_registry_edge(py, src, shape, out):
    """registry -> journal with the registry lock's exact stack: taken under
    notify()'s line."""
    assert out.get("from_stack_site_only") in (False, None), out  # None: a build before the leaf path
    want = [("notify", marker_line(src, "notify under the registry lock"))]
    if shape == "wrapper":
        want.insert(0, ("WrapperRegistry.notify", marker_line(src, "registry notify takes the registry lock")))
    else:
        want.insert(0, ("NativeRegistry.notify", marker_line(src, "registry notify calls the library")))
    expect_python_run(py, out["from_stack"], want, SRC)
    expect_python_run(py, out["to_stack"], [("on_event", marker_line(src, "listener takes the journal lock"))], SRC)


def expect_exact_cycle(heisen, session, py, shape, nestings):
    """Run `shape` nesting the registry lock `nestings` times: the cycle is
    found with exact stacks on both edges and nothing is said about call
    sites."""
    src, pid, err = run(heisen, session, py, shape, nestings)
    out, back = the_cycle(heisen, session, py, src, pid, shape)
    check_exact_registry_edge(py, src, shape, out)
    check_journal_edge(py, src, back)
    text = heisen.dump(session)
    assert text.returncode == 1 and "call site only" not in text.stdout, text.stdout


@pytest.mark.parametrize("shape", SHAPES)
def test_a_leaf_lock_nested_in_a_loop_ends_with_exact_stacks(heisen, session, py, shape):
    """Nested three times: the edge made from the site's stack the first time is
    recorded again with the exact stack the second time: the registry lock
    taken under notify()'s line, nothing said about call sites."""
    expect_exact_cycle(heisen, session, py, shape, 3)


def test_a_python_lock_taken_alone_many_times_keeps_exact_stacks(heisen, session, py):
    """A threading.Lock shared by a Python class's callers, taken 500 times
    alone and nested once: no leaf path for a Python lock, the edge out of it
    has the exact stack (WrapperRegistry.notify's line and its caller's)."""
    expect_exact_cycle(heisen, session, py, "wrapper", 1)


@pytest.mark.parametrize("shape", SHAPES)
def test_a_lock_that_never_nests_has_no_finding(heisen, session, py, shape):
    """The registry lock taken 500 times alone, never nested, the journal never
    taken: no finding, and the process recorded (its locks in the graph)."""
    src, pid, err = run(heisen, session, py, shape, 0)
    report = heisen.dump_json(session, expect_rc=0)
    assert not [f for f in report["findings"] if f.get("pid") == pid], report["findings"]
    check_process(report, pid, py)


def test_a_deadlock_through_a_leaf_mutex_says_its_held_stack_is_the_call_sites(heisen, session, py):
    """Deadlocked for real under heisen-run: the notifier holds the registry
    mutex (taken on the leaf path, after 1,000 acquisitions alone) and its
    listener waits for the journal lock, which the auditor holds while it
    waits for the mutex.  Both holders named; the mutex's held stack is
    marked as its call site's only (JSON and text), the journal lock's is
    exact."""
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / SRC
    rc, out, err = run_watched(heisen, session, [py.exe, src, "native", lib, COUNT, "deadlock"])
    assert rc == 137 and "done" not in out, (rc, out, err)
    pid, notifier, auditor = (fact_int(out, k) for k in ("pid", "tid_notifier", "tid_auditor"))
    report = heisen.dump_json(session, expect_rc=1)
    dls = [f for f in findings_of(report, "deadlock") if f["pid"] == pid]
    assert len(dls) == 1, report["findings"]
    by_tid = {t["tid"]: t for t in dls[0]["threads"]}
    assert set(by_tid) == {notifier, auditor}, by_tid.keys()
    journal = f"{src.name}:{marker_line(src, 'journal lock created')} in {py.qualname('Journal.__init__')}"
    n, a = by_tid[notifier], by_tid[auditor]
    assert n["waits_for"]["name"] == journal and "registry_lock" in [h.get("name") for h in n["holds"]], n
    assert a["waits_for"]["name"] == "registry_lock" and journal in [h.get("name") for h in a["holds"]], a
    assert n["hold_stack_site_only"] is True, n
    assert a["hold_stack_site_only"] is False, a
    # the auditor's holder is the notifier, its holding of the mutex marked there too
    assert [(h["tid"], h["stack_site_only"]) for h in a["held_by"]] == [(notifier, True)], a["held_by"]
    assert [(h["tid"], h["stack_site_only"]) for h in n["held_by"]] == [(auditor, False)], n["held_by"]
    expect_python_run(py, a["hold_stack"], [("auditor", marker_line(src, "stuck auditor takes the journal lock"))],
                      SRC)
    expect_python_run(py, n["wait_stack"], [("on_event_late", marker_line(src, "stuck listener takes the journal lock"))],
                      SRC)
    text = heisen.dump(session)
    assert text.returncode == 1, (text.returncode, text.stderr)
    assert "(call site only: this lock had been taken many times with nothing nested under it" in text.stdout, \
        text.stdout


@pytest.mark.parametrize("after", ["64", "0"])
def test_a_self_deadlock_through_a_leaf_mutex_says_its_held_stack_is_the_call_sites(heisen, session, py,
                                                                                    monkeypatch, after):
    """libnativelock.so's registry mutex taken 1,000 times alone, then
    re-entered on the same thread through a callback (nl_notify calls a
    Python listener that calls nl_count): the thread waits for itself and
    heisen-run ends it.  The self-deadlock names the relock's exact stack
    (the listener's line); by default the held entry was taken on the leaf
    path, so its stack is the call site's first (the poll loop's touch, not
    this notification's line), and the finding says so (JSON and text), as
    does the thread's held entry.  With HEISEN_LOCK_LEAF_AFTER=0 the held
    stack is exact (this notification's line) and nothing is said."""
    monkeypatch.setenv("HEISEN_LOCK_LEAF_AFTER", after)
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / SRC
    rc, out, err = run_watched(heisen, session, [py.exe, src, "native", lib, COUNT, "reenter"])
    assert rc == 137 and "done" not in out, (rc, out, err)
    pid, tid = fact_int(out, "pid"), fact_int(out, "tid_reentrant")
    report = heisen.dump_json(session, expect_rc=1)
    sds = [f for f in findings_of(report, "self-deadlock") if f["pid"] == pid]
    assert len(sds) == 1, report["findings"]
    sd = sds[0]
    assert sd["tids"] == [tid] and [lk.get("name") for lk in sd["locks"]] == ["registry_lock"], sd
    relock, first = sd["stacks"]
    expect_python_run(py, relock, [("NativeRegistry.count", marker_line(src, "registry count calls the library")),
                                   ("on_event_reenter", marker_line(src, "listener counts under the registry lock"))],
                      SRC)
    assert first["frames"][0]["function"] == "nl_notify", first["frames"][0]
    proc = [p for p in report["processes"] if p["pid"] == pid]
    assert len(proc) == 1, [p["pid"] for p in report["processes"]]
    held = [h for t in proc[0]["threads"] if t["tid"] == tid for h in t["held"]
            if h["lock"].get("name") == "registry_lock"]
    assert len(held) == 1, proc[0]["threads"]
    text = heisen.dump(session)
    assert text.returncode == 1, (text.returncode, text.stderr)
    said = ("  first acquired at:\n  (call site only: this lock had been taken 64 times with nothing nested "
            "under it before, so only its call site's first stack was kept")
    if after == "0":
        assert sd["first_stack_site_only"] is False and "first_site_n" not in sd, sd
        expect_python_run(py, first, [("NativeRegistry.notify", marker_line(src, "registry notify calls the library")),
                                      ("reentrant_notify", marker_line(src, "notify for the reentrant listener"))],
                          SRC)
        assert held[0]["stack_site_only"] is False, held
        assert "call site only" not in text.stdout, text.stdout
        return
    assert sd["first_stack_site_only"] is True and sd["first_site_n"] == 64, sd
    assert first["role"].endswith("(call site only: taken 64 times with nothing nested before)"), first["role"]
    # the site's first stack: nl_notify's first call, from the poll loop, not this notification's
    expect_python_run(py, first, [("NativeRegistry.touch", marker_line(src, "registry touch calls the library")),
                                  ("poll", marker_line(src, "poll touches"))], SRC)
    assert held[0]["stack_site_only"] is True and held[0]["stack"]["role"].endswith("(call site only)"), held
    assert text.stdout.count(said) == 1, text.stdout
