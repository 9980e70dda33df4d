# SPDX-License-Identifier: MIT
"""The lock-order graph, end to end: potential deadlocks predicted in runs
that did not hang, and the lockdep rules that keep correct programs quiet.

Each target (test-targets/*.c) prints its pid and the tids of its workers;
the tests check the report of `heisen-dump --json` against them: the kind,
the pid, the tids, the lock names (named globals) and the functions in the
acquisition stacks.  Every test runs twice: under a bare LD_PRELOAD +
HEISEN_DIR and under heisen-run (the `way` fixture).
"""
import subprocess

import pytest

from conftest import (SYSTEM_PYTHON, all_frame_functions, edge_pairs, fact_int, facts, findings_of,
                      frame_functions, lockname, process_of, pyext_dir, target)


def run_target(heisen, way, name, *args, timeout=60):
    p = way.run([target(heisen, name), *args], timeout=timeout)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done" in p.stdout.split(), p.stdout
    return p, heisen.dump_json(way.session)


def one_potential_deadlock(report, pid):
    pds = findings_of(report, "potential-deadlock")
    assert len(pds) == 1, f"want exactly one potential-deadlock, have {report['findings']}"
    f = pds[0]
    assert f["pid"] == pid
    return f


def assert_cycle_is_closed(f):
    """edges[i].to == edges[i+1].from, and the last one leads back to the first."""
    es = f["edges"]
    for i, e in enumerate(es):
        nxt = es[(i + 1) % len(es)]
        assert e["to"]["address"] == nxt["from"]["address"], es


def edge(f, frm, to):
    es = [e for e in f["edges"] if lockname(e["from"]) == frm and lockname(e["to"]) == to]
    assert len(es) == 1, f"edge {frm}->{to} not in {edge_pairs(f)}"
    return es[0]


# ---- (a) ABBA on two mutexes, one thread after the other ---------------------


def test_abba_sequential_is_predicted(heisen, way):
    p, report = run_target(heisen, way, "abba_sequential")
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))

    f = one_potential_deadlock(report, pid)
    assert sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    assert sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b"]
    assert all(l["kind"] == "mutex" for l in f["locks"])
    assert len(f["edges"]) == 2
    assert_cycle_is_closed(f)

    ab, ba = edge(f, "lock_a", "lock_b"), edge(f, "lock_b", "lock_a")
    assert ab["tid"] == tid_ab and ba["tid"] == tid_ba
    # Both stacks of each edge were taken in the function that took the locks.
    for e, fn in ((ab, "take_a_then_b"), (ba, "take_b_then_a")):
        assert frame_functions(e["from_stack"])[0] == fn, e["from_stack"]
        assert frame_functions(e["to_stack"])[0] == fn, e["to_stack"]
    assert "take_b_then_a" not in frame_functions(ab["to_stack"])
    # The finding's own stacks name both functions, and the hooks are hidden.
    names = all_frame_functions(f)
    assert {"take_a_then_b", "take_b_then_a"} <= set(names)
    assert not any(n and n.startswith("pthread_mutex_lock") for n in names), names
    top = f["edges"][0]["to_stack"]["frames"][0]
    assert top["file"] == "abba_sequential.c" and isinstance(top["line"], int) and top["line"] > 0
    assert top["module"].endswith("/abba_sequential") and top["python"] is False

    proc = process_of(report, pid)
    assert proc["state"] == "exited" and proc["exit_status"] == 0
    assert {tid_ab, tid_ba} <= {t["tid"] for t in proc["threads"]}
    # The flight recorder kept each thread's acquisitions, in order.
    for tid, order in ((tid_ab, ["lock_a", "lock_b"]), (tid_ba, ["lock_b", "lock_a"])):
        (t,) = [t for t in proc["threads"] if t["tid"] == tid]
        acquired = [lockname(e["lock"]) for e in t["events"] if e["type"] == "lock-acquired"]
        assert acquired == order, t["events"]
        released = [lockname(e["lock"]) for e in t["events"] if e["type"] == "lock-released"]
        assert released == order[::-1], t["events"]
    # heisen-run prints the report when a run has a finding, even with status 0.
    if way.name == "heisen-run":
        assert "==== heisen: potential deadlock" in p.stderr, p.stderr
        assert "take_b_then_a" in p.stderr and str(way.session) in p.stderr


def the_take_a_then_b_abba(p, report):
    """The ABBA of a target whose take_a_then_b and take_b_then_a threads
    (tid_ab, tid_ba in its facts) take lock_a and lock_b in opposite orders:
    predicted once, closed, each edge by its thread with its function on top
    of both stacks.  Returns (pid, tid_ab, tid_ba)."""
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))
    f = one_potential_deadlock(report, pid)
    assert sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    assert sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b"]
    assert_cycle_is_closed(f)
    ab, ba = edge(f, "lock_a", "lock_b"), edge(f, "lock_b", "lock_a")
    assert ab["tid"] == tid_ab and ba["tid"] == tid_ba
    for e, fn in ((ab, "take_a_then_b"), (ba, "take_b_then_a")):
        assert frame_functions(e["from_stack"])[0] == fn, e["from_stack"]
        assert frame_functions(e["to_stack"])[0] == fn, e["to_stack"]
    return pid, tid_ab, tid_ba


def test_foreign_unlock_refused_by_an_error_checking_mutex_keeps_its_owner_holding_it(heisen, way):
    """A completion callback on a worker thread unlocks the request lock its
    dispatcher took; the error-checking mutex refuses (EPERM), so the
    dispatcher still holds it when it takes lock_b: the lock_a -> lock_b
    edge is there, and with the later lock_b -> lock_a the ABBA is predicted.
    The refused unlock is in the worker's ring as a lock error, not a release."""
    p, report = run_target(heisen, way, "errcheck_foreign_unlock")
    assert "refused" in p.stdout.split(), p.stdout
    pid, tid_ab, tid_ba = the_take_a_then_b_abba(p, report)

    proc = process_of(report, pid)
    (disp,) = [t for t in proc["threads"] if t["tid"] == tid_ab]
    released = [lockname(e["lock"]) for e in disp["events"] if e["type"] == "lock-released"]
    assert released == ["lock_b", "lock_a"], disp["events"]
    errors = [(lockname(e["lock"]), e["errno"]) for t in proc["threads"] if t["tid"] not in (tid_ab, tid_ba)
              for e in t["events"] if e["type"] == "lock-error"]
    assert errors == [("lock_a", 1)], errors  # EPERM, from the worker
    assert not any(e["type"] == "lock-released" and lockname(e["lock"]) == "lock_a"
                   for t in proc["threads"] if t["tid"] not in (tid_ab, tid_ba) for e in t["events"])


def test_robust_mutex_taken_over_from_a_dead_owner_is_held_and_ordered(heisen, way):
    """A loader thread ends holding a robust mutex; the recovery thread, holding
    nothing (and past its first lock: the common acquisition path), locks it
    and gets EOWNERDEAD with the lock acquired: it holds lock_a when it takes
    lock_b, so with the later lock_b -> lock_a the ABBA is predicted, and its
    ring shows lock_a acquired and released, not a lock error."""
    p, report = run_target(heisen, way, "robust_owner_died")
    assert "died" in p.stdout.split(), p.stdout
    pid, tid_ab, tid_ba = the_take_a_then_b_abba(p, report)

    proc = process_of(report, pid)
    (rec,) = [t for t in proc["threads"] if t["tid"] == tid_ab]
    kinds = [(e["type"], lockname(e["lock"])) for e in rec["events"]
             if e["type"].startswith("lock-") and e.get("lock")]
    assert ("lock-acquired", "lock_a") in kinds and ("lock-released", "lock_a") in kinds, rec["events"]
    assert not any(k == "lock-error" for k, _ in kinds), rec["events"]


def test_heisen_disable_records_nothing(heisen, session):
    p = heisen.preload([target(heisen, "abba_sequential")], session,
                       env={"HEISEN_DISABLE": "1"})
    assert p.returncode == 0 and "done" in p.stdout.split()
    if session.exists() and list(session.glob("*.seg")):
        report = heisen.dump_json(session)
        assert report["findings"] == []


# ---- (c) three locks -----------------------------------------------------------


def test_three_lock_cycle_is_one_finding_with_three_edges(heisen, way):
    p, report = run_target(heisen, way, "three_lock_cycle")
    pid = fact_int(p.stdout, "pid")
    tids = {k: fact_int(p.stdout, k) for k in ("tid_ab", "tid_bc", "tid_ca")}

    f = one_potential_deadlock(report, pid)
    assert len(f["edges"]) == 3
    assert edge_pairs(f) == {("lock_a", "lock_b"), ("lock_b", "lock_c"), ("lock_c", "lock_a")}
    assert_cycle_is_closed(f)
    assert sorted(f["tids"]) == sorted(tids.values())
    assert sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b", "lock_c"]
    for (frm, to), key, fn in ((("lock_a", "lock_b"), "tid_ab", "take_a_then_b"),
                               (("lock_b", "lock_c"), "tid_bc", "take_b_then_c"),
                               (("lock_c", "lock_a"), "tid_ca", "take_c_then_a")):
        e = edge(f, frm, to)
        assert e["tid"] == tids[key]
        assert frame_functions(e["to_stack"])[0] == fn


def test_three_lock_chain_without_the_closing_edge_is_quiet(heisen, way):
    p, report = run_target(heisen, way, "three_lock_cycle", "chain")
    assert report["findings"] == []
    # The locks were seen and ordered: the graph has a->b, b->c, a->c, no red edge.
    dot = heisen.dump(way.session, "--dot").stdout
    assert dot.count("->") == 3, dot
    assert "color=red" not in dot


# ---- (b) a rwlock and a mutex --------------------------------------------------


@pytest.mark.parametrize("mode, first_mode, second_mode", [
    ("write", "write", "write"),
    ("read-write", "read", "write"),
    ("read-wpref", "read", "read"),
])
def test_rwlock_mutex_cycle_is_predicted(heisen, way, mode, first_mode, second_mode):
    p, report = run_target(heisen, way, "rwlock_mutex_cycle", mode)
    pid = fact_int(p.stdout, "pid")
    tid_rw_m, tid_m_rw = fact_int(p.stdout, "tid_rw_m"), fact_int(p.stdout, "tid_m_rw")

    f = one_potential_deadlock(report, pid)
    assert edge_pairs(f) == {("rw_lock", "lock_m"), ("lock_m", "rw_lock")}
    kinds = {lockname(l): l["kind"] for l in f["locks"]}
    assert kinds == {"rw_lock": "rwlock", "lock_m": "mutex"}
    assert sorted(f["tids"]) == sorted([tid_rw_m, tid_m_rw])
    e1, e2 = edge(f, "rw_lock", "lock_m"), edge(f, "lock_m", "rw_lock")
    assert e1["tid"] == tid_rw_m and e2["tid"] == tid_m_rw
    assert "take_rw_then_m" in frame_functions(e1["from_stack"])[:2]
    assert "take_m_then_rw" in frame_functions(e2["to_stack"])[:2]
    if "from_mode" in e1:  # the rwlock's mode is shown where the schema gives it
        assert e1["from_mode"] == first_mode and e2["to_mode"] == second_mode


def test_read_read_on_a_reader_preferring_rwlock_is_not_a_deadlock(heisen, way):
    """lockdep's recursive-read rule: thread 1 holds rw_lock for reading and
    waits for lock_m; thread 2 holds lock_m and asks rw_lock for reading: a
    default glibc rwlock prefers readers, so thread 2 is never blocked."""
    p, report = run_target(heisen, way, "rwlock_mutex_cycle", "read")
    assert findings_of(report, "potential-deadlock") == [], report["findings"]
    assert report["findings"] == []
    # Not vacuous: both edges are in the graph, just not a deadlock.
    dot = heisen.dump(way.session, "--dot").stdout
    assert dot.count("->") == 2, dot
    assert "color=red" not in dot


# ---- negatives: consistent order + trylock, recursive mutex, condvars ---------


def test_consistent_order_with_reverse_trylock_is_quiet(heisen, way):
    p, report = run_target(heisen, way, "consistent_order")
    assert report["findings"] == [], report["findings"]
    if way.name == "heisen-run":  # a clean run prints no report
        assert "==== heisen" not in p.stderr, p.stderr
    assert fact_int(p.stdout, "trylock_ok") > 0  # the reverse-order trylocks happened
    proc = process_of(report, fact_int(p.stdout, "pid"))
    assert len(proc["threads"]) >= 2
    dot = heisen.dump(way.session, "--dot").stdout
    assert dot.count("->") == 1, dot  # a->b only: a trylock adds no edge into its lock


def test_reverse_order_with_a_blocking_lock_is_predicted(heisen, way):
    """The positive twin of the trylock test: the same code with a blocking lock."""
    p, report = run_target(heisen, way, "consistent_order", "blocking")
    f = one_potential_deadlock(report, fact_int(p.stdout, "pid"))
    assert edge_pairs(f) == {("lock_a", "lock_b"), ("lock_b", "lock_a")}
    assert frame_functions(edge(f, "lock_b", "lock_a")["to_stack"])[0] == "take_b_then_try_a"


def test_recursive_mutex_reentry_is_quiet(heisen, way):
    p, report = run_target(heisen, way, "recursive_mutex")
    assert report["findings"] == [], report["findings"]
    proc = process_of(report, fact_int(p.stdout, "pid"))
    for t in proc["threads"]:
        assert t["held"] == [], t  # every re-entry was matched by its unlock
    dot = heisen.dump(way.session, "--dot").stdout
    assert dot.count("->") == 1, dot  # lock_r -> lock_a, and no lock_a -> lock_r


def test_condition_variables_are_quiet(heisen, way):
    p, report = run_target(heisen, way, "condvar")
    assert fact_int(p.stdout, "consumed") == 500
    assert report["findings"] == [], report["findings"]
    proc = process_of(report, fact_int(p.stdout, "pid"))
    for t in proc["threads"]:
        assert t["held"] == [] and t["waiting"] is None, t
    dot = heisen.dump(way.session, "--dot").stdout
    assert "color=red" not in dot
    # lock_stats -> lock_q is the only order; lock_q -> lock_stats would mean the
    # wait's release of lock_q was missed.
    assert dot.count("->") == 1, dot


# ---- lock identity: address + generation, and spin locks -----------------------


def test_destroyed_and_reinitialized_locks_are_new_locks(heisen, way):
    p, report = run_target(heisen, way, "lock_generations", "destroy")
    assert report["findings"] == [], report["findings"]
    proc = process_of(report, fact_int(p.stdout, "pid"))
    (t2,) = [t for t in proc["threads"] if t["tid"] == fact_int(p.stdout, "tid_ba")]
    gens = {(lockname(e["lock"]), e["lock"]["generation"]) for e in t2["events"]
            if e["type"] == "lock-acquired"}
    assert gens == {("lock_a", 2), ("lock_b", 2)}, t2["events"]
    dot = heisen.dump(way.session, "--dot").stdout
    assert dot.count("->") == 2 and "color=red" not in dot, dot


def test_same_locks_without_destroy_are_the_same_locks(heisen, way):
    p, report = run_target(heisen, way, "lock_generations", "keep")
    f = one_potential_deadlock(report, fact_int(p.stdout, "pid"))
    assert {(lockname(l), l["generation"]) for l in f["locks"]} == {("lock_a", 1), ("lock_b", 1)}


def test_spin_lock_cycle_is_predicted(heisen, way):
    p, report = run_target(heisen, way, "lock_generations", "spin")
    f = one_potential_deadlock(report, fact_int(p.stdout, "pid"))
    assert {lockname(l): l["kind"] for l in f["locks"]} == {"spin_a": "spin", "spin_b": "spin"}
    assert sorted(f["tids"]) == sorted([fact_int(p.stdout, "tid_ab"), fact_int(p.stdout, "tid_ba")])
    assert {"take_a_then_b", "take_b_then_a"} <= set(all_frame_functions(f))


# ---- fork and exec ---------------------------------------------------------------


def test_fork_child_has_its_own_segment_and_finding(heisen, way):
    p, report = run_target(heisen, way, "fork_child")
    pid, child = fact_int(p.stdout, "pid"), fact_int(p.stdout, "child")
    assert fact_int(p.stdout, "child_status") == 0

    parent_p, child_p = process_of(report, pid), process_of(report, child)
    assert child_p["ppid"] == pid
    assert child_p["segment"] == f"{child}.0.seg" and parent_p["segment"] == f"{pid}.0.seg"
    assert (way.session / f"{child}.0.seg").exists()
    assert child_p["state"] == "exited" and child_p["exit_status"] == 0
    assert parent_p["state"] == "exited" and parent_p["exit_status"] == 0

    pds = findings_of(report, "potential-deadlock")
    assert [f["pid"] for f in pds] == [child], report["findings"]
    f = pds[0]
    assert edge_pairs(f) == {("lock_a", "lock_b"), ("lock_b", "lock_a")}
    assert "child_take_b_then_a" in all_frame_functions(f)
    # The child's threads are the child's, not the parent's.
    assert pid not in f["tids"]
    assert set(f["tids"]) <= {t["tid"] for t in child_p["threads"]}
    assert not any(f["pid"] == pid for f in report["findings"])


def test_fork_child_holds_what_its_parent_held_at_the_fork_not_after(heisen, way):
    """The parent takes log_lock right after each fork(): each child takes its
    own copy, which was free at the fork.  No child holds it, no finding."""
    p, report = run_target(heisen, way, "fork_held_lock", "lock-after", "12")
    kids = [int(c) for c in facts(p.stdout)["child"]]
    assert len(kids) == 12 and facts(p.stdout)["child_status"] == ["0"] * 12, p.stdout
    assert findings_of(report, "self-deadlock") == [], report["findings"]
    for c in kids:
        assert process_of(report, c)["state"] == "exited"


def test_fork_child_of_a_parent_holding_a_lock_deadlocks_on_it_and_is_told(heisen, way):
    """The parent forks holding log_lock and releases it at once; each child
    then takes its copy, locked at the fork for ever: a self-deadlock in
    every child, the first acquisition being the parent's, before the fork."""
    p, report = run_target(heisen, way, "fork_held_lock", "fork-holding", "16")
    kids = [int(c) for c in facts(p.stdout)["child"]]
    assert len(kids) == 16
    sds = findings_of(report, "self-deadlock")
    assert sorted(f["pid"] for f in sds) == sorted(kids), report["findings"]
    for f in sds:
        assert [lockname(l) for l in f["locks"]] == ["log_lock"]
        relock, first = f["stacks"]
        assert frame_functions(relock)[0] == "child_logs", relock
        assert frame_functions(first)[0] == "fork_while_logging", first


def test_exec_chain_keeps_the_session_one_segment_per_image(heisen, way):
    p = way.run([target(heisen, "exec_chain")])
    assert p.returncode == 0, (p.stdout, p.stderr)
    pids = {int(v) for v in facts(p.stdout)["pid"]}
    assert len(pids) == 1, p.stdout  # exec keeps the pid
    pid = pids.pop()
    report = heisen.dump_json(way.session)

    for image in (0, 1, 2):
        assert (way.session / f"{pid}.{image}.seg").exists(), sorted(way.session.iterdir())
    i0, i1, i2 = (process_of(report, pid, image) for image in (0, 1, 2))
    assert i0["state"] == "execed" and i1["state"] == "execed"
    assert i2["state"] == "exited" and i2["exit_status"] == 0
    assert i0["argv"][1:] == [] and i1["argv"][1:] == ["second"]
    assert i2["exe"].endswith("/true") and i2["argv"] == ["true"]
    assert i0["exe"] == i1["exe"] and i0["exe"].endswith("/exec_chain")
    # a->b in image 0, b->a in image 1: different images, different locks.
    assert report["findings"] == [], report["findings"]


def test_exec_chain_without_exec_has_one_image(heisen, way):
    """The negative twin: no exec, one segment, state exited."""
    p = way.run([target(heisen, "exec_chain"), "stop"])
    assert p.returncode == 0
    pid = fact_int(p.stdout, "pid")
    segs = sorted(x.name for x in way.session.glob(f"{pid}.*.seg"))
    assert segs == [f"{pid}.0.seg"]
    assert process_of(heisen.dump_json(way.session), pid)["state"] == "exited"


# ---- self-deadlock -------------------------------------------------------------


def test_relocking_an_errorcheck_mutex_is_a_self_deadlock(heisen, way):
    p = way.run([target(heisen, "self_deadlock"), "errorcheck"])
    # Behaviour unchanged: glibc still answers EDEADLK and the program goes on.
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert facts(p.stdout)["relock"] == ["EDEADLK"]
    report = heisen.dump_json(way.session, expect_rc=1)
    pid, tid = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid")

    sds = findings_of(report, "self-deadlock")
    assert len(sds) == 1, report["findings"]
    f = sds[0]
    assert f["pid"] == pid and f["tids"] == [tid]
    assert [lockname(l) for l in f["locks"]] == ["lock_e"]
    assert "relock_held_mutex" in all_frame_functions(f)
    assert findings_of(report, "potential-deadlock") == []


def test_trylock_of_a_held_mutex_and_clean_relocks_are_quiet(heisen, way):
    p = way.run([target(heisen, "self_deadlock"), "clean"])
    assert p.returncode == 0, (p.stdout, p.stderr)
    assert facts(p.stdout)["relock"] == ["EBUSY"]
    report = heisen.dump_json(way.session, expect_rc=0)
    assert report["findings"] == []


def test_relocking_a_normal_mutex_hangs_and_is_explained(heisen, session):
    """A default mutex relocked by its owner hangs for ever: the finding is
    recorded before the real lock, so the report still names it."""
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--on-hang", "kill", "--",
                    target(heisen, "self_deadlock"), "normal"], timeout=60)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "relock" not in facts(p.stdout)
    report = heisen.dump_json(session)
    sds = findings_of(report, "self-deadlock")
    assert len(sds) == 1, report["findings"]
    assert [lockname(l) for l in sds[0]["locks"]] == ["lock_n"]
    assert sds[0]["tids"] == [fact_int(p.stdout, "tid")]
    assert "relock_held_mutex" in all_frame_functions(sds[0])
    assert process_of(report, fact_int(p.stdout, "pid"))["state"] == "killed"


# ---- stacks of this call, not of the call site's first call ------------------


def test_shared_wrapper_edges_name_the_callers_of_this_acquisition(heisen, way):
    """ThreadSanitizer's Test16/Test17 shape: every lock is taken through one
    non-inlined Acquire(lock), called from a different function per order.
    Each stack of each edge is Acquire, then the function that took that
    order, then the thread function, frame by frame."""
    p, report = run_target(heisen, way, "wrapper_sites")
    pid, tid_fwd, tid_rev = (fact_int(p.stdout, k) for k in ("pid", "tid_fwd", "tid_rev"))
    pds = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(pds) == 2, report["findings"]
    want = {("lock_0", "lock_1"): ("Acquire_0_then_1", "thread_fwd", tid_fwd),
            ("lock_1", "lock_0"): ("Acquire_1_then_0", "thread_rev", tid_rev),
            ("lock_2", "lock_3"): ("Acquire_2_then_3", "thread_fwd", tid_fwd),
            ("lock_3", "lock_2"): ("Acquire_3_then_2", "thread_rev", tid_rev)}
    seen = set()
    for f in pds:
        assert len(f["edges"]) == 2
        for e in f["edges"]:
            key = (lockname(e["from"]), lockname(e["to"]))
            caller, thread_fn, tid = want[key]
            assert e["tid"] == tid
            for st in (e["from_stack"], e["to_stack"]):
                assert frame_functions(st)[:3] == ["Acquire", caller, thread_fn], (key, st)
            seen.add(key)
    assert seen == set(want)


def test_shared_frame_reached_along_two_paths_keeps_each_callers_frames(heisen, way):
    """A thread's chain of return addresses is reused where it is provably
    the same: one shared frame, Through(fn, lock), reached at the same stack
    address with the same return address under two different callers, below
    it either the same call (thread rev) or a path one frame deeper (thread
    fwd: fn = Inner after fn = Acquire).  Each edge's stacks must still be
    its own call's, frame by frame: the frames above the shared one are
    checked, not reused."""
    p, report = run_target(heisen, way, "wrapper_depths")
    pid, tid_fwd, tid_rev = (fact_int(p.stdout, k) for k in ("pid", "tid_fwd", "tid_rev"))
    pds = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(pds) == 2, report["findings"]
    direct, deeper = ["Acquire", "Through"], ["Acquire", "Inner", "Through"]
    want = {("lock_0", "lock_1"): (direct, "Take_0_then_1", "thread_fwd", tid_fwd),
            ("lock_1", "lock_0"): (direct, "Take_1_then_0", "thread_rev", tid_rev),
            ("lock_2", "lock_3"): (deeper, "Take_2_then_3", "thread_fwd", tid_fwd),
            ("lock_3", "lock_2"): (direct, "Take_3_then_2", "thread_rev", tid_rev)}
    seen = set()
    for f in pds:
        assert len(f["edges"]) == 2
        for e in f["edges"]:
            key = (lockname(e["from"]), lockname(e["to"]))
            inner, caller, thread_fn, tid = want[key]
            assert e["tid"] == tid
            for st in (e["from_stack"], e["to_stack"]):
                assert frame_functions(st)[:len(inner) + 2] == inner + [caller, thread_fn], (key, st)
            seen.add(key)
    assert seen == set(want)


# ---- no silent limits: long cycles, locks that come and go, a full table ------


@pytest.mark.parametrize("nlocks", [17, 20])
def test_ring_of_locks_longer_than_the_inline_cycle_is_predicted_whole(heisen, way, nlocks):
    """A ring of N workers, worker i taking ring[i] then ring[i+1]: one
    potential deadlock with all N edges, each from its own thread."""
    p, report = run_target(heisen, way, "long_cycle", str(nlocks))
    f = one_potential_deadlock(report, fact_int(p.stdout, "pid"))
    assert len(f["edges"]) == nlocks
    assert_cycle_is_closed(f)
    assert len({e["from"]["address"] for e in f["edges"]}) == nlocks
    assert len(set(f["tids"])) == nlocks
    for e in f["edges"]:
        assert frame_functions(e["from_stack"])[:2] == ["take_pair", "worker"], e["from_stack"]
        assert frame_functions(e["to_stack"])[:2] == ["take_pair", "worker"], e["to_stack"]
    assert not findings_of(report, "limit")


def test_ring_of_locks_without_the_closing_edge_is_quiet(heisen, way):
    p, report = run_target(heisen, way, "long_cycle", "20", "chain")
    assert report["findings"] == [], report["findings"]


def test_abba_after_twenty_thousand_short_lived_locks_is_predicted(heisen, way):
    """20,000 heap objects with their own mutex, each init/lock/unlock/destroy/
    free, then a real ABBA: the churn is one lock class, the ABBA is found."""
    p, report = run_target(heisen, way, "lock_churn", "20000")
    pid = fact_int(p.stdout, "pid")
    f = one_potential_deadlock(report, pid)
    assert sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b"]
    assert sorted(f["tids"]) == sorted([fact_int(p.stdout, "tid_ab"), fact_int(p.stdout, "tid_ba")])
    assert not findings_of(report, "limit"), report["findings"]
    assert {x["kind"] for x in report["findings"]} == {"potential-deadlock"}


def test_full_lock_table_is_a_limit_finding_never_no_findings(heisen, way):
    """6,000 mutexes alive at once outgrow the lock table (4,096): the report
    says which table was full and how much was dropped, heisen-dump exits 1
    and heisen-run does not say "no findings"."""
    p = way.run([target(heisen, "lock_churn"), "6000", "live"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    report = heisen.dump_json(way.session)
    (lim,) = findings_of(report, "limit")
    assert lim["pid"] == fact_int(p.stdout, "pid")
    assert "table locks full" in lim["message"] and "dropped" in lim["message"], lim
    text = heisen.dump(way.session)
    assert text.returncode == 1, text.returncode
    assert "limit reached" in text.stdout and "no findings" not in text.stdout
    if way.name == "heisen-run":
        assert "no findings" not in p.stderr, p.stderr
        assert "limit reached" in p.stderr, p.stderr


def test_abba_after_three_thousand_sqlite3_connections_is_predicted(heisen, way):
    """A Python service opening and closing 3,000 sqlite3 connections from four
    threads, then a native ABBA: found, and no table of the graph filled."""
    p = way.run([SYSTEM_PYTHON, heisen.src_targets / "py_sqlite_churn.py", pyext_dir(heisen), "3000"],
                timeout=180)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done" in p.stdout.split()
    report = heisen.dump_json(way.session, expect_rc=1)
    assert not findings_of(report, "limit"), findings_of(report, "limit")
    pds = [f for f in findings_of(report, "potential-deadlock")
           if {"ext_lock_a", "ext_lock_b"} <= {lockname(l) for l in f["locks"]}]
    assert len(pds) == 1, report["findings"]
    assert sorted(pds[0]["tids"]) == sorted([fact_int(p.stdout, "tid_ab"), fact_int(p.stdout, "tid_ba")])


# ---- a lock that ends while held: no false finding ----------------------------


@pytest.mark.parametrize("mode", ["reinit", "handoff"])
def test_lock_ended_or_released_by_another_thread_is_not_held(heisen, way, mode):
    """A mutex initialised again while locked, or unlocked by a thread that did
    not lock it (a handoff), is no longer held: relocking it is not a
    self-deadlock."""
    p, report = run_target(heisen, way, "lock_reuse", mode)
    assert report["findings"] == [], report["findings"]


@pytest.mark.parametrize("heap", ["0", "1"])
def test_lock_in_freed_memory_is_gone(heisen, way, heap):
    """Helgrind's tc04_free_lock: a heap mutex freed while locked, its memory
    handed out again as a new mutex (glibc reuses it at once with the heap
    checker off; the checker's quarantine keeps it back): no self-deadlock."""
    p = way.run([target(heisen, "lock_reuse"), "free"], env={"HEISEN_HEAP": heap})
    assert p.returncode == 0, (p.returncode, p.stderr)
    if heap == "0":
        assert "reused 1" in p.stdout, p.stdout
    report = heisen.dump_json(way.session)
    assert report["findings"] == [], report["findings"]


@pytest.mark.parametrize("heap", ["0", "1"])
def test_locks_in_freed_blocks_among_sqlite_blocks_are_forgotten(heisen, way, heap):
    """Zeroed mutexes 72 and 136 bytes into a malloc'd block (past its first
    64-byte granule), freed among the blocks of sqlite3 connections opened
    and closed in a loop; the same memory (glibc hands it back at once with the heap checker
    off) holds two new mutexes taken in the other order.  The free filter
    (shim.h hs_lock_mem_seen) must still forget both: no cycle from the
    reused addresses, only the real ABBA of the last live pair.  Guards
    behaviour (it passes on the page filter too)."""
    script = heisen.src_targets / "py_sqlite_lock_reuse.py"
    p = way.run([SYSTEM_PYTHON, script, "40"], env={"HEISEN_HEAP": heap}, timeout=180)
    assert p.returncode == 0 and "done" in p.stdout.split(), (p.returncode, p.stdout, p.stderr)
    if heap == "0":
        # glibc's tcache hands the block back at once (40 of 40 in every run seen)
        assert fact_int(p.stdout, "reused") >= 20, p.stdout
    report = heisen.dump_json(way.session)
    f = one_potential_deadlock(report, fact_int(p.stdout, "pid"))
    live = {facts(p.stdout)["a"][0], facts(p.stdout)["b"][0]}
    assert {l["address"] for l in f["locks"]} == live, f["locks"]


def test_relock_after_reinit_is_still_a_self_deadlock(heisen, way):
    p, report = run_target(heisen, way, "lock_reuse", "relock")
    (f,) = findings_of(report, "self-deadlock")
    assert f["pid"] == fact_int(p.stdout, "pid")


# ---- one lock taken at one held depth under other locks in turn --------------

SAME_DEPTH_C = r"""
#include <pthread.h>
#include <stdio.h>
pthread_mutex_t depth_a = PTHREAD_MUTEX_INITIALIZER, depth_b = PTHREAD_MUTEX_INITIALIZER,
		depth_c = PTHREAD_MUTEX_INITIALIZER, depth_d = PTHREAD_MUTEX_INITIALIZER,
		depth_l1 = PTHREAD_MUTEX_INITIALIZER, depth_l2 = PTHREAD_MUTEX_INITIALIZER;
static void take(pthread_mutex_t *m) { pthread_mutex_lock(m); }
static void drop(pthread_mutex_t *m) { pthread_mutex_unlock(m); }
static void *first(void *arg)
{
	(void)arg;
	for (int i = 0; i < 3; i++) { /* depth_l1 at depth 1 under depth_a, known from the second time */
		take(&depth_a); take(&depth_l1); drop(&depth_l1); drop(&depth_a);
	}
	take(&depth_b); take(&depth_l1); drop(&depth_l1); drop(&depth_b); /* under depth_b: a new edge */
	for (int i = 0; i < 3; i++) { /* depth_l2 at depth 2 under depth_a, depth_c */
		take(&depth_a); take(&depth_c); take(&depth_l2); drop(&depth_l2); drop(&depth_c); drop(&depth_a);
	}
	take(&depth_a); take(&depth_d); take(&depth_l2); drop(&depth_l2); drop(&depth_d); drop(&depth_a);
	return NULL;
}
static void *second(void *arg)
{
	(void)arg;
	take(&depth_l1); take(&depth_b); drop(&depth_b); drop(&depth_l1);
	take(&depth_l2); take(&depth_d); drop(&depth_d); drop(&depth_l2);
	return NULL;
}
int main(void)
{
	pthread_t t;
	pthread_create(&t, NULL, first, NULL);
	pthread_join(t, NULL);
	pthread_create(&t, NULL, second, NULL);
	pthread_join(t, NULL);
	printf("done\n");
	return 0;
}
"""


def test_one_lock_at_one_depth_under_other_locks_in_turn_orders_each(heisen, way, tmp_path):
    """depth_l1 is taken at held depth 1 under depth_a three times (its
    chain known from the second), then under depth_b; depth_l2 at depth 2
    under depth_a and depth_c three times, then under depth_a and depth_d.
    The same lock at the same depth under other held locks is another
    chain: depth_b -> depth_l1 and depth_d -> depth_l2 are edges, and a
    second thread's reverse orders close two cycles."""
    src, exe = tmp_path / "same_depth.c", tmp_path / "same_depth"
    src.write_text(SAME_DEPTH_C)
    subprocess.run(["cc", "-O1", "-g", "-pthread", "-o", str(exe), str(src)], check=True)
    p = way.run([exe])
    assert p.returncode == 0 and "done" in p.stdout.split(), (p.returncode, p.stdout, p.stderr)
    report = heisen.dump_json(way.session)
    pairs = sorted(sorted(lockname(l) for l in f["locks"]) for f in findings_of(report, "potential-deadlock"))
    assert pairs == [["depth_b", "depth_l1"], ["depth_d", "depth_l2"]], report["findings"]
