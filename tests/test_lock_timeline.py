# SPDX-License-Identifier: MIT
"""A lock's acquisition and release in a thread's timeline, when the release
is folded into the acquisition's ring record (nothing of the thread came
between them: format.h HS_REC_FOLD_SHIFT, docs/design.md "Rings").

A Python service's worker takes a lock alone and holds it ~80 ms, nests two
locks, then takes a fourth and is SIGKILLed holding it.  heisen-dump's JSON
and text timelines of the killed process show every acquisition and every
release, each at its own time: the lone hold's release ~80 ms after its
acquisition and marked folded; the outer lock's release, which came after
the inner lock's records, not folded; and the lock held at the kill,
acquired and never released.  Runs on each interpreter of the machine.
"""
import signal
import subprocess

from conftest import fact_int, facts, marker_line, process_of
from test_python_versions import py  # noqa: F401 (fixture)


def lock_name(py, src, marker):
    return f"{src.name}:{marker_line(src, marker)} in <module>"


def run_and_kill(heisen, session, py, src):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([str(py.exe), str(src)], env=env, stdout=subprocess.PIPE, text=True)
    out = []
    try:
        for line in proc.stdout:
            out.append(line)
            if line.startswith("ready"):
                break
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=60)
    return "".join(out)


def test_release_folded_into_its_acquisition_keeps_both_times(heisen, session, py):
    src = heisen.src_targets / "py_lock_timeline.py"
    stdout = run_and_kill(heisen, session, py, src)
    assert facts(stdout).get("ready") == ["1"], stdout
    pid, hold_ms = fact_int(stdout, "pid"), fact_int(stdout, "hold_ms")
    names = {m: lock_name(py, src, f"{m} created") for m in ("held_alone", "outer", "inner", "kept")}
    report = heisen.dump_json(session)
    proc = process_of(report, pid)
    # the thread that was live at the kill, not the main one (the first worker has exited)
    worker = [t for t in proc["threads"] if t["tid"] != pid and t["state"] == "live"]
    assert len(worker) == 1, [(t["tid"], t["state"]) for t in proc["threads"]]
    ours = [(e["type"], e["lock"].get("name"), e["ts_ns"], e.get("folded"))
            for e in worker[0]["events"]
            if e["type"].startswith("lock-") and e.get("lock", {}).get("name") in names.values()]
    kinds = [(k, n) for k, n, _, _ in ours]
    N = names
    assert kinds == [("lock-acquired", N["held_alone"]), ("lock-released", N["held_alone"]),
                     ("lock-acquired", N["outer"]), ("lock-acquired", N["inner"]),
                     ("lock-released", N["inner"]), ("lock-released", N["outer"]),
                     ("lock-acquired", N["kept"])], worker[0]["events"]
    # the lone hold: one record in the ring, both times in the timeline
    took, gave = ours[0][2], ours[1][2]
    assert ours[1][3] is True, ours
    # the coarse clock ticks every 4 ms and may stand still ~20 ms under load
    assert hold_ms * 1e6 * 0.5 <= gave - took <= hold_ms * 1e6 * 20, (took, gave)
    # inner's release came right after its acquisition: folded; outer's came after
    # inner's records: a record of its own, never folded
    assert ours[4][3] is True and ours[5][3] is False, ours
    assert ours[2][2] <= ours[3][2] <= ours[4][2] <= ours[5][2] <= ours[6][2], ours
    # killed holding "kept": its acquisition stays, no release is made up
    assert not any(k == "lock-released" and n == N["kept"] for k, n in kinds)

    # the text timeline of the same thread: its section in the process's threads
    text = heisen.dump(session).stdout
    tid = worker[0]["tid"]
    section = text[text.index(f"  thread {tid} "):]
    section = section[:section.find("\n  thread ", 1) % (len(section) + 1)]
    lines = [ln for ln in section.splitlines() if "lock-" in ln and N["held_alone"] in ln]
    assert [ln.split()[1] for ln in lines] == ["lock-acquired", "lock-released"], section
    t0, t1 = (float(ln.split()[0].lstrip("+")) for ln in lines)
    assert hold_ms / 1e3 * 0.5 <= t1 - t0, lines
