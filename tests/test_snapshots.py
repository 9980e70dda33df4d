# SPDX-License-Identifier: MIT
"""Hang snapshots and crash snapshots, without ptrace.

- A process blocked in something that is not a lock (read() on a pipe) makes
  no progress: under `heisen-run --hang-timeout 2 --on-hang kill` it is a
  `hang` of every thread, each with the stack it recorded itself when the
  snapshot signal asked; the run is killed (137).
- `heisen-dump --snapshot` finds the same on a live process by itself.
- A process busy on the CPU longer than the timeout is not a hang.
- A crash in one thread carries the other threads' stacks, taken at the crash.
- The program's own use of the snapshot signal (SIGRTMAX-3) still reaches the
  program's handler: the magic in si_value tells the two apart.

Contracts: docs/interfaces.md "Python and the GIL"; design: docs/design.md "Hangs".
"""
import json
import os
import signal
import subprocess
import time

from conftest import SYSTEM_PYTHON, fact_int, findings_of, frame_functions, process_of, target

SNAPSHOT_SIGNAL = signal.SIGRTMAX - 3


def start_preloaded(heisen, session, cmd):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    return subprocess.Popen([str(c) for c in cmd], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_until(proc, word, limit=30):
    lines = []
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        lines.append(line)
        if line.split() and line.split()[0] == word:
            return "".join(lines)
    raise AssertionError(f"target never printed {word!r}: {lines!r}")


def report_hang(report):
    (h,) = findings_of(report, "hang")
    return h


def check_blocked_read_hang(report, pid, reader):
    hangs = findings_of(report, "hang")
    assert len(hangs) == 1, report["findings"]
    h = hangs[0]
    assert h["pid"] == pid and sorted(h["tids"]) == sorted([pid, reader])
    assert h["stalled_seconds"] > 0
    by_tid = {t["tid"]: t for t in h["threads"]}
    assert sorted(by_tid) == sorted([pid, reader])
    for t in by_tid.values():
        assert t["stack"] and t["stack"]["frames"], t
        assert t["waiting"] is None and t["holds_gil"] is False
    fns = frame_functions(by_tid[reader]["stack"])
    assert "read_forever" in fns, fns
    assert any(f and "read" in f for f in fns[:fns.index("read_forever")] or fns[:1]), fns
    assert "main" in frame_functions(by_tid[pid]["stack"])
    # every stack the finding shows has frames, and the context shows the snapshot too
    for st in h["stacks"]:
        assert st["frames"], st
    thr = {t["tid"]: t for t in process_of(report, pid)["threads"]}
    snap = thr[reader]["snapshot"]
    assert snap and snap["why"] == "hang" and "read_forever" in frame_functions(snap["stack"])


def test_a_thread_blocked_in_read_is_a_hang_of_every_thread(heisen, session):
    t0 = time.monotonic()
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    target(heisen, "blocked_read")], timeout=60)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert time.monotonic() - t0 >= 2
    pid, reader = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_reader")
    assert "hang detected" in p.stderr and "heisen: hang" in p.stderr, p.stderr
    assert f"stalled {pid}" in p.stderr
    assert "read_forever" in p.stderr and str(reader) in p.stderr
    assert "deadlock" not in p.stderr

    # The snapshots stay in the segments, and heisen-run noted the stall
    # next to it: a later heisen-dump shows the hang the process was killed in.
    report = heisen.dump_json(session, expect_rc=1)
    check_blocked_read_hang(report, pid, reader)
    assert report_hang(report)["stalled_seconds"] >= 2
    assert process_of(report, pid)["state"] == "killed"
    # Without the note nothing blocks on a lock: no hang finding, but the
    # snapshots are still in each thread's context.
    for note in session.glob("*.stall"):
        note.unlink()
    report = heisen.dump_json(session)
    assert findings_of(report, "hang") == []
    thr = {t["tid"]: t for t in process_of(report, pid)["threads"]}
    assert "read_forever" in frame_functions(thr[reader]["snapshot"]["stack"])


def test_heisen_dump_snapshot_finds_the_hang_itself(heisen, session):
    proc = start_preloaded(heisen, session, [target(heisen, "blocked_read")])
    try:
        out = read_until(proc, "blocked")
        pid, reader = fact_int(out, "pid"), fact_int(out, "tid_reader")
        time.sleep(0.3)
        report = heisen.dump_json(session, "--snapshot", expect_rc=1)
        check_blocked_read_hang(report, pid, reader)
        assert process_of(report, pid)["state"] == "running"
    finally:
        proc.kill()
        proc.wait(timeout=10)


def test_busy_on_the_cpu_is_not_a_hang(heisen, session):
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--on-hang", "kill", "--",
                    target(heisen, "blocked_read"), "busy", "3000"], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done" in p.stdout.split()
    assert "hang detected" not in p.stderr and "heisen: hang" not in p.stderr, p.stderr


def test_a_crash_shows_the_other_threads(heisen, way):
    p = way.run([target(heisen, "crash_threads")])
    assert p.returncode == way.killed_by(signal.SIGSEGV), (p.returncode, p.stdout, p.stderr)
    pid, crashed = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_crash")
    one, two = fact_int(p.stdout, "tid_one"), fact_int(p.stdout, "tid_two")
    report = heisen.dump_json(way.session, expect_rc=1)
    (c,) = [f for f in findings_of(report, "crash") if f["pid"] == pid]
    assert c["tids"] == [crashed]
    assert "crash_now" in frame_functions(c["stacks"][0])
    by_tid = {t["tid"]: t for t in c["threads"]}
    assert sorted(by_tid) == sorted([one, two]), c["threads"]
    assert "sleeper_one" in frame_functions(by_tid[one]["stack"])
    assert "sleeper_two" in frame_functions(by_tid[two]["stack"])
    assert all(t["why"] == "crash" for t in c["threads"])
    if way.name == "heisen-run":
        assert "sleeper_one" in p.stderr and "sleeper_two" in p.stderr


def test_the_programs_own_use_of_the_snapshot_signal_still_reaches_it(heisen, session):
    proc = start_preloaded(heisen, session, [target(heisen, "crash_threads"), "own-signal"])
    try:
        out = read_until(proc, "ready")
        pid = fact_int(out, "pid")
        for _ in range(3):
            os.kill(pid, SNAPSHOT_SIGNAL)
            time.sleep(0.05)
        # heisen's own request (rt_tgsigqueueinfo + magic) is not the program's
        snap = heisen.dump(session, "--snapshot", "--json")
        assert snap.returncode in (0, 1), snap.stderr
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert proc.returncode == 0, err
    assert fact_int(out + rest, "own") == 3, out + rest


# ---- a program that takes its signals itself -----------------------------------


def sigwait_service(heisen):
    return [SYSTEM_PYTHON, heisen.src_targets / "py_sigwait_service.py"]


def test_a_thread_that_takes_its_own_signals_is_never_sent_the_snapshot_request(heisen, session):
    """heisen-run watching a stuck service whose signals thread blocks every
    signal and waits in sigtimedwait: the hang is reported, the worker's
    stack is there, the signals thread is not asked (its stack is unknown, and
    the report says why), and the only signal the program ever dequeues is
    the SIGTERM that ends it.  (With Python locks tracked, the default, the
    main thread's join is a wait for the worker's thread-state lock: the
    report of that wait still shows every other thread of the process.)"""
    env = heisen.env()
    proc = subprocess.Popen([str(heisen.run_bin), "--dir", str(session), "--hang-timeout", "1",
                             "--on-hang", "report", "--", *map(str, sigwait_service(heisen))],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        out = read_until(proc, "ready")
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not list(session.glob("*.stall")):
            time.sleep(0.2)
        time.sleep(1.5)  # the snapshot wait and the report
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=60)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    out += rest
    main = fact_int(out, "tid_signals")
    assert "hang detected" in err, err
    got = [l.split()[1:] for l in out.splitlines() if l.startswith("got ")]
    assert got == [[str(int(signal.SIGTERM)), "0"]], (out, err)
    assert f"thread {main} " in err and "it waits for signals itself" in err, err
    assert "done" in out.split()


def test_dump_snapshot_skips_a_thread_that_blocks_the_signal_and_says_why(heisen, session):
    proc = start_preloaded(heisen, session, sigwait_service(heisen))
    try:
        out = read_until(proc, "ready")
        time.sleep(0.3)
        snap = heisen.dump(session, "--snapshot", "--json")
        assert snap.returncode in (1, 3), snap.stderr
        proc.send_signal(signal.SIGTERM)
        rest, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    out += rest
    report = json.loads(snap.stdout)
    pid, sigs = fact_int(out, "pid"), fact_int(out, "tid_signals")
    (h,) = [f for f in findings_of(report, "hang") if f["pid"] == pid]
    by_tid = {t["tid"]: t for t in h["threads"]}
    assert by_tid[sigs]["stack"] is None
    assert "waits for signals itself" in by_tid[sigs]["no_snapshot"], by_tid[sigs]
    for k in ("tid_main", "tid_worker"):
        t = by_tid[fact_int(out, k)]
        assert t["stack"] and t["stack"]["frames"], t
    got = [l.split()[1:] for l in out.splitlines() if l.startswith("got ")]
    assert got == [[str(int(signal.SIGTERM)), "0"]], out


def test_the_bare_magic_from_another_program_still_kills_as_natively(heisen, session):
    """SIGRTMAX-3 left at its default action (terminate) and queued by
    another program with heisen's public magic: without heisen the process
    dies of it, and it must under heisen too (heisen's own requests carry
    bits only a reader of the segment knows)."""
    import ctypes
    libc = ctypes.CDLL(None, use_errno=True)
    libc.sigqueue.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_void_p]
    env = {**heisen.env(session), "LD_PRELOAD": str(heisen.lib)}
    proc = subprocess.Popen(["/bin/sleep", "30"], env=env)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not list(session.glob(f"{proc.pid}.*.seg")):
            time.sleep(0.01)
        time.sleep(0.2)  # past the constructor: the snapshot handler is installed
        assert libc.sigqueue(proc.pid, SNAPSHOT_SIGNAL, ctypes.c_void_p(0x6865697365)) == 0, ctypes.get_errno()
        rc = proc.wait(timeout=10)
    finally:
        proc.kill()
        proc.wait(timeout=10)
    assert rc == -SNAPSHOT_SIGNAL, rc
