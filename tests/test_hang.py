# SPDX-License-Identifier: MIT
"""Hangs and real deadlocks: the wait-for graph, seen from outside the process.

- abba_deadlock really deadlocks: heisen-run's watchdog must name both
  threads, both locks and both stacks, kill the tree and exit 137; the
  dumper must say the same of a live process, and of one killed without a
  word (SIGKILL, as the OOM killer would).
- slow_holder blocks one thread on a lock held by a sleeping thread: a
  `hang` past the timeout, nothing below it.
"""
import re
import signal
from pathlib import Path
import subprocess
import time

import pytest

from conftest import (SYSTEM_PYTHON, all_frame_functions, fact_int, facts, findings_of, lockname, marker_line,
                      process_of, target)


def start_preloaded(heisen, session, cmd):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    return subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_until(proc, word, timeout=20):
    """Lines of proc's stdout up to the one that is `word`; returns them joined."""
    lines = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.strip() == word:
            return "".join(lines)
    raise AssertionError(f"{word!r} never printed: {lines!r}")


def check_deadlock(report, pid, tid_ab, tid_ba):
    dls = findings_of(report, "deadlock")
    assert len(dls) == 1, report["findings"]
    f = dls[0]
    assert f["pid"] == pid
    assert sorted(f["tids"]) == sorted([tid_ab, tid_ba])
    assert sorted(lockname(l) for l in f["locks"]) == ["lock_a", "lock_b"]
    by_tid = {t["tid"]: t for t in f["threads"]}
    assert set(by_tid) == {tid_ab, tid_ba}
    for tid, holds, wants, fn in ((tid_ab, "lock_a", "lock_b", "hold_a_want_b"),
                                  (tid_ba, "lock_b", "lock_a", "hold_b_want_a")):
        t = by_tid[tid]
        assert [lockname(l) for l in t["holds"]] == [holds]
        assert lockname(t["waits_for"]) == wants
        assert t["wait_stack"]["frames"][0]["function"] == fn
        assert t["hold_stack"]["frames"][0]["function"] == fn
        assert t["seconds"] >= 0
    return f


def test_abba_deadlock_is_named_and_killed_by_heisen_run(heisen, session):
    t0 = time.monotonic()
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    target(heisen, "abba_deadlock")], timeout=60)
    elapsed = time.monotonic() - t0
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert elapsed >= 2, "killed before the hang timeout"
    assert elapsed < 30, "the watchdog took far longer than its timeout"
    pid, tid_ab, tid_ba = (fact_int(p.stdout, k) for k in ("pid", "tid_ab", "tid_ba"))
    assert "waiting" in p.stdout.split()

    # The report went to stderr: it names the deadlock, the threads and the locks.
    assert "deadlock" in p.stderr
    for word in (str(tid_ab), str(tid_ba), "lock_a", "lock_b", "hold_a_want_b", "hold_b_want_a"):
        assert word in p.stderr, word
    assert str(session) in p.stderr

    report = heisen.dump_json(session)
    check_deadlock(report, pid, tid_ab, tid_ba)
    proc = process_of(report, pid)
    assert proc["state"] == "killed" and proc["signal"] == signal.SIGKILL
    # The cycle was also predicted before the threads blocked.
    pds = findings_of(report, "potential-deadlock")
    assert len(pds) == 1 and sorted(pds[0]["tids"]) == sorted([tid_ab, tid_ba])


def test_live_deadlock_seen_by_the_dumper_then_after_sigkill(heisen, session):
    """No launcher: the dumper reads a live deadlocked process, then the
    segment of the same process after a SIGKILL that ran none of its code."""
    proc = start_preloaded(heisen, session, [target(heisen, "abba_deadlock")])
    try:
        out = read_until(proc, "waiting")
        pid, tid_ab, tid_ba = (fact_int(out, k) for k in ("pid", "tid_ab", "tid_ba"))
        time.sleep(1.6)

        chk = heisen.dump(session, "--check-hang", "1")
        assert chk.returncode == 3, (chk.returncode, chk.stdout, chk.stderr)
        line = [ln for ln in chk.stdout.splitlines() if ln.startswith("deadlock")]
        assert len(line) == 1, chk.stdout
        sig = line[0].split()
        assert int(sig[1]) == pid and sorted(map(int, sig[2].split(","))) == sorted([tid_ab, tid_ba])

        # Below the blocking time: not yet a hang.
        assert heisen.dump(session, "--check-hang", "60").returncode == 0

        live = heisen.dump_json(session, "--hang-timeout", "1", expect_rc=1)
        check_deadlock(live, pid, tid_ab, tid_ba)
        assert process_of(live, pid)["state"] == "running"
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL

    dead = heisen.dump_json(session, expect_rc=1)
    assert process_of(dead, pid)["state"] == "vanished"
    check_deadlock(dead, pid, tid_ab, tid_ba)


def test_blocked_past_the_timeout_without_a_cycle_is_a_hang(heisen, session):
    proc = start_preloaded(heisen, session, [target(heisen, "slow_holder"), "4000"])
    try:
        out = read_until(proc, "waiting")
        pid = fact_int(out, "pid")
        holder, waiter = fact_int(out, "tid_holder"), fact_int(out, "tid_waiter")
        time.sleep(1.5)
        report = heisen.dump_json(session, "--hang-timeout", "1", expect_rc=1)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert findings_of(report, "deadlock") == []
    hangs = findings_of(report, "hang")
    assert len(hangs) == 1, report["findings"]
    h = hangs[0]
    assert h["pid"] == pid and h["tids"] == [waiter]
    assert [lockname(l) for l in h["locks"]] == ["lock_a"]
    (t,) = h["threads"]
    assert t["tid"] == waiter and lockname(t["waits_for"]) == "lock_a" and t["holds"] == []
    assert t["seconds"] >= 1
    assert "wait_for_holder" in all_frame_functions(h)
    # The report says who holds it, and where it was taken.
    if "held_by" in t:
        assert [x["tid"] for x in t["held_by"]] == [holder]
        assert t["held_by"][0]["stack"]["frames"][0]["function"] == "hold_for_a_while"


def test_hang_is_reported_by_heisen_run_and_the_program_still_finishes(heisen, session):
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--", target(heisen, "slow_holder"),
                    "3000"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done" in p.stdout.split()
    waiter = fact_int(p.stdout, "tid_waiter")
    assert "heisen: hang" in p.stderr, p.stderr
    assert str(waiter) in p.stderr and "wait_for_holder" in p.stderr
    assert "deadlock" not in p.stderr.replace("potential deadlock", "")


def test_short_waits_are_not_hangs(heisen, session):
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--", target(heisen, "slow_holder"),
                    "300"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr
    report = heisen.dump_json(session, expect_rc=0)
    assert report["findings"] == []


@pytest.mark.parametrize("name", ["condvar", "consistent_order"])
def test_busy_correct_programs_are_not_hangs(heisen, session, name):
    """Condition-variable waits and short lock contention under a 1 s watchdog."""
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--on-hang", "kill", "--",
                    target(heisen, name)], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr


GIL_SHARING_WORKERS = r'''
import hashlib, threading, time
def work():
    end = time.monotonic() + 5
    x = b"a" * 64
    while time.monotonic() < end:
        for _ in range(200):
            x = hashlib.sha256(x).digest() + x[:32]
ts = [threading.Thread(target=work) for _ in range(4)]
for t in ts:
    t.start()
for t in ts:
    t.join()
print("done", flush=True)
'''


def test_main_thread_joining_workers_that_share_the_gil_is_not_a_hang(heisen, session, tmp_path):
    """The main thread waits in join() (a futex with no timeout: with Python
    locks off it is not a lock wait) for 5 s, past the 2 s hang timeout,
    while four workers compute in turns on the GIL: each worker is runnable
    about a quarter of the time, but one of them nearly always, so the
    process is busy and its main thread's wait may still end.  (A rule that
    asked each worker alone to be runnable half of the time called this a
    hang about one run in three.)"""
    prog = tmp_path / "workers.py"
    prog.write_text(GIL_SHARING_WORKERS)
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--", SYSTEM_PYTHON, prog],
                   timeout=120, env={"HEISEN_PY_LOCKS": "0"})
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert "done" in p.stdout.split()
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr[-3000:]


IDLE_THEN_DEADLOCKED = r'''
import os, threading, time
print("pid", os.getpid(), flush=True)
time.sleep(12)                  # idle: the watchdog reads it from /proc less often
a, b = threading.Lock(), threading.Lock()
def other():
    with b:
        time.sleep(0.2)
        with a:
            pass
t = threading.Thread(target=other)
with a:
    t.start()
    time.sleep(0.2)
    print("stuck", time.time(), flush=True)
    with b:
        pass
'''


def test_a_process_long_idle_then_deadlocked_is_found(heisen, session, tmp_path):
    """A process sleeps 12 s (the watchdog then reads it from /proc only
    every 1-2 s), then deadlocks its two threads under an 8 s timeout: the
    hang is found all the same, per thread, and the tree killed, at most an
    eighth of the timeout later than when every tick read it (and a margin
    for a loaded machine)."""
    script = tmp_path / "idle_then_deadlocked.py"
    script.write_text(IDLE_THEN_DEADLOCKED)
    p = heisen.run(["--dir", session, "--hang-timeout", "8", "--on-hang", "kill", "--",
                    "/usr/bin/python3", script], timeout=120)
    ended = time.time()
    assert p.returncode == 137, (p.returncode, p.stderr[-3000:])
    pid = fact_int(p.stdout, "pid")
    stuck = float(p.stdout.split("stuck", 1)[1].split()[0])
    assert "hang detected" in p.stderr and f"in pid {pid}" in p.stderr, p.stderr[-3000:]
    assert 8.0 <= ended - stuck < 8.0 + 1.0 + 10.0, (ended - stuck, p.stderr[-2000:])


# ---- per-thread rule: busy background threads, idle services ---------------

def py_script(heisen, name):
    return heisen.src_targets / name


def test_zmq_client_of_a_dead_server_hangs_in_term_despite_the_io_thread(heisen, session):
    """The server is gone: the main thread waits forever in Context.term()
    while libzmq's I/O thread retries the connection every 100 ms.  The
    process is never quiet as a whole; its main thread is stuck: a hang
    naming term() with Python lines, plus the fd-leak of the sockets the
    raising constructor left behind, with the constructor's lines."""
    script = py_script(heisen, "py_zmq_dead_server.py")
    p = heisen.run(["--dir", session, "--hang-timeout", "3", "--on-hang", "kill", "--",
                    "/usr/bin/python3", script], timeout=90)
    assert p.returncode == 137, (p.returncode, p.stderr[-3000:])
    pid = fact_int(p.stdout, "pid")
    err = p.stderr
    assert "hang detected" in err and f"heisen: hang in pid {pid}" in err, err[-3000:]
    assert f"  thread {pid} (main): STUCK" in err, err[-3000:]
    # the main thread's snapshot: libzmq's term under pyzmq's Context.term, called from main()
    hang = err[err.index(f"heisen: hang in pid {pid}"):err.index("heisen: fd leak")]
    assert "zmq_ctx_term" in hang and "Context.term" in hang, hang
    assert f"main ({script}:{marker_line(script, 'term waits')})" in hang, hang
    leak = err[err.index(f"heisen: fd leak in pid {pid}"):]
    assert "still open at the hang" in leak, leak
    for marker in ("constructor opens sender", "constructor opens receiver"):
        assert f"EmbeddingClient.__init__ ({script}:{marker_line(script, marker)})" in leak, leak


@pytest.mark.parametrize("mode", ["asyncio", "socketserver", "executor"])
def test_idle_services_waiting_for_the_outside_world_are_not_hangs(heisen, session, mode):
    """An idle asyncio server (epoll with no timeout), a socketserver in
    serve_forever, and an idle ThreadPoolExecutor (workers blocked on their
    queue) beside a main thread in accept(): 8 s with nothing to do under a
    2 s watchdog is waiting, not a hang."""
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    "/usr/bin/python3", py_script(heisen, "py_idle_services.py"), mode, "8"], timeout=90)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert f"done {mode}" in p.stdout
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr


def pool_semaphores(stdout):
    """The named semaphores py_forkserver_pool.py's queues made ("semaphores" line)."""
    return facts(stdout)["semaphores"][0].split()


def remove_pool_semaphores(stdout):
    """A run killed with its resource tracker leaves its queues' semaphores
    in /dev/shm (Python's own behaviour): remove exactly those, so killed
    runs do not pile up files."""
    for n in pool_semaphores(stdout):
        (Path("/dev/shm") / ("sem." + n)).unlink(missing_ok=True)


def test_forkserver_pool_with_its_resource_tracker_is_not_killed(heisen, session):
    """multiprocessing with forkserver: the forkserver waits in select and
    the resource tracker in read() on a pipe whose other end is the parent,
    a live process, for the whole run; the pool works 6 s under a 2 s
    watchdog with --on-hang kill.  Waiting on another live process is not a
    hang: the run exits 0 with no report."""
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    "/usr/bin/python3", py_script(heisen, "py_forkserver_pool.py"), "6"], timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert fact_int(p.stdout, "results") > 0
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr
    # the pool's own named semaphores are gone: its resource tracker lived to unlink them (nothing was killed)
    sems = pool_semaphores(p.stdout)
    assert sems and [n for n in sems if (Path("/dev/shm") / ("sem." + n)).exists()] == [], sems


@pytest.mark.parametrize("py_locks", ["0", "1"], ids=["python-locks-off", "python-locks-on"])
def test_forkserver_worker_deadlocked_on_locks_is_reported_and_killed(heisen, session, py_locks):
    """The same pool, but one task deadlocks two threads of its worker on
    two locks taken in opposite orders: the worker's main thread waits in
    join() forever.  That hang is sure — a report naming the worker, its
    stuck main thread at the join line, then --on-hang kill (exit 137) —
    while the forkserver and the resource tracker stay mere waiters.  With
    Python locks tracked (the default) the two threads are a deadlock named
    with both holders, and the main thread's join a wait for the thread's
    thread-state lock; without, the stall judgment finds the main thread
    stuck."""
    script = py_script(heisen, "py_forkserver_pool.py")
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    "/usr/bin/python3", script, "30", "deadlock"], timeout=120, env={"HEISEN_PY_LOCKS": py_locks})
    remove_pool_semaphores(p.stdout)
    assert p.returncode == 137, (p.returncode, p.stderr[-3000:])
    worker, parent = fact_int(p.stdout, "worker"), fact_int(p.stdout, "pid")
    err = p.stderr
    assert f"heisen: hang in pid {worker}" in err, err[-3000:]
    # the parent may be reported too (its main thread waits past the timeout
    # for the worker's result, which never comes); the forkserver and the
    # resource tracker never are
    hung = {int(x) for x in re.findall(r"==== heisen: hang in pid (\d+) ", err)}
    assert hung <= {worker, parent}, (hung, err[-3000:])
    hang = err[err.index(f"heisen: hang in pid {worker}"):]
    assert f"deadlock ({script}:{marker_line(script, 'the worker waits forever')})" in hang, hang[:3000]
    take_both = f"take_both ({script}:{marker_line(script, 'the worker' + chr(39) + 's threads deadlock')})"
    if py_locks == "0":
        assert f"  thread {worker} (main): STUCK" in err, err[-3000:]
        assert take_both in hang
    else:
        # the two threads: a deadlock of the worker, each at its inner `with`, no false cycle
        dl = err[err.index(f"==== heisen: deadlock (wait-for cycle) in pid {worker} "):]
        dl = dl[:dl.index("==== heisen:", 10)]
        assert dl.count(take_both) >= 2, dl[:3000]
        assert "potential deadlock" not in err, err[-3000:]
        # the main thread waits in join() for a thread of that deadlock
        main = hang[:hang.index("it waits at:")]
        assert f" thread {worker} (" in main and "in Thread._set_tstate_lock" in main, main[:3000]
    assert "--on-hang kill: killed" in err


def test_heisen_dump_on_its_own_judges_the_zmq_client_stuck_in_term(heisen, session):
    """No launcher: heisen-dump --hang-timeout on the live process watches
    its threads itself, says the main thread is stuck in term() (a poll on
    libzmq's eventfd, which only this process can make ready) while the
    I/O thread keeps moving, and carries the fd-leak of the constructor."""
    script = py_script(heisen, "py_zmq_dead_server.py")
    proc = start_preloaded(heisen, session, ["/usr/bin/python3", script])
    try:
        out = read_until(proc, "terminating now")
        pid = fact_int(out, "pid")
        time.sleep(0.5)
        report = heisen.dump_json(session, "--hang-timeout", "2", expect_rc=1)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    hangs = [f for f in findings_of(report, "hang") if f["pid"] == pid]
    assert len(hangs) == 1, report["findings"]
    judged = {t["tid"]: t for t in hangs[0]["judged_threads"]}
    assert judged[pid]["main"] and judged[pid]["verdict"] == "stuck", judged
    assert "eventfd" in judged[pid]["wait"] and judged[pid]["still_seconds"] >= 2, judged[pid]
    assert any(t["verdict"] == "active" for t in judged.values()), judged  # the I/O thread retrying
    assert "Context.term" in all_frame_functions(hangs[0]), all_frame_functions(hangs[0])
    leaks = [f for f in findings_of(report, "fd-leak") if f["pid"] == pid]
    assert len(leaks) == 1 and leaks[0]["at"] == "hang", leaks


# One judge of progress: heisen-run's watchdog and heisen-dump on its own
# (--hang-timeout without --still) measure a thread's progress the same way
# (internal/still.h: its ring records, its CPU time, the system call it is
# in) and heisen-dump alone judges.  event_queue's two threads sit in the
# same system call between items with next to no CPU: only their ring
# records move.  Both programs must call the working loop no hang and the
# loop whose producer left a hang.

def test_event_loop_fed_by_a_sleeping_producer_is_no_hang_to_either_program(heisen, session, tmp_path):
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    target(heisen, "event_queue"), "feed", "5000"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr
    assert "done" in p.stdout.split()
    alone = tmp_path / "alone"
    alone.mkdir()
    proc = start_preloaded(heisen, alone, [target(heisen, "event_queue"), "feed", "8000"])
    try:
        out = read_until(proc, "fed 2")
        pid = fact_int(out, "pid")
        report = heisen.dump_json(alone, "--hang-timeout", "2", expect_rc=0)
        assert proc.poll() is None, "the loop ended before heisen-dump judged it"
    finally:
        rest, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0 and "done" in rest.split(), rest
    assert [f for f in findings_of(report, "hang") if f["pid"] == pid] == [], report["findings"]


def test_event_loop_whose_producer_left_is_a_hang_to_both_programs(heisen, session, tmp_path):
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    target(heisen, "event_queue"), "stop", "3"], timeout=60)
    assert p.returncode == 137, (p.returncode, p.stderr)
    pid = fact_int(p.stdout, "pid")
    assert "hang detected" in p.stderr and f"hang {pid} " in p.stderr, p.stderr
    assert "event_loop" in p.stderr, p.stderr
    alone = tmp_path / "alone"
    alone.mkdir()
    proc = start_preloaded(heisen, alone, [target(heisen, "event_queue"), "stop", "3"])
    try:
        out = read_until(proc, "fed 2")
        pid = fact_int(out, "pid")
        time.sleep(0.5)
        report = heisen.dump_json(alone, "--hang-timeout", "2", expect_rc=1)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    hangs = [f for f in findings_of(report, "hang") if f["pid"] == pid]
    assert len(hangs) == 1, report["findings"]
    judged = {t["tid"]: t for t in hangs[0]["judged_threads"]}
    assert judged[pid]["main"] and judged[pid]["verdict"] == "stuck", judged
    assert "eventfd" in judged[pid]["wait"] and judged[pid]["still_seconds"] >= 2, judged[pid]
