# SPDX-License-Identifier: MIT
"""The flight recorder's promises to the host program, end to end.

- A full session directory (a real, tiny tmpfs: Docker's /dev/shm is 64 MiB)
  gives a warning and a fallback, never a SIGBUS: the program's output and
  exit status are unchanged.
- Without HEISEN_DIR the session goes under /dev/shm/heisen-$UID/, private,
  and the whole process tree shares it.
- Segments are private files (0600) and say how each image ended.
- A state the recorder cannot be in (its own edge index written over by a
  stray memset of the program) makes it go quiet: it stops recording,
  marks the segment suspect, says so once on stderr, and the program ends
  as it would have; both reports say the recorder went quiet.
"""
import json
import os
import signal
import stat
import subprocess
import uuid
from pathlib import Path

import pytest

from conftest import target


def _mount_tmpfs(path: Path, size: str):
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "heisen-test", str(path)],
                       capture_output=True, text=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); needs root")


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mounts = []

    def make(size):
        p = tmp_path / f"tmpfs-{size}"
        _mount_tmpfs(p, size)
        mounts.append(p)
        return p

    yield make
    for p in mounts:
        subprocess.run(["umount", "-l", str(p)], capture_output=True)


def test_short_of_space_falls_back_to_a_small_segment(heisen, tiny_tmpfs):
    # room for a small segment's start (16-24 KiB with the session's files) but
    # not a default one's (28 KiB: the modules, the hash indexes, the fd table
    # and the reserved entries of stacks, locks, edges and Python frames get
    # their store later, a page at a time)
    d = tiny_tmpfs("20k") / "session"
    p = heisen.preload(["/bin/sh", "-c", "echo out; exit 7"], d)
    assert p.returncode == 7
    assert p.stdout == "out\n"
    assert "short of space" in p.stderr
    segs = list(d.glob("*.seg"))
    assert len(segs) == 1
    report = heisen.dump_json(d)
    assert report["errors"] == []
    [proc] = report["processes"]
    assert proc["state"] == "exited" and proc["exit_status"] == 7


def test_no_space_at_all_records_nothing_and_harms_nothing(heisen, tiny_tmpfs):
    d = tiny_tmpfs("8k") / "session"  # below a small segment's start (16 KiB)
    # threads and locks, so that every hook runs while nothing is recorded
    code = ("import threading, sqlite3\n"
            "def w():\n"
            "    db = sqlite3.connect(':memory:'); db.execute('create table t(x)')\n"
            "    db.executemany('insert into t values (?)', [(i,) for i in range(500)])\n"
            "ts = [threading.Thread(target=w) for _ in range(4)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print('done')\n")
    p = heisen.preload(["/usr/bin/python3", "-c", code], d)
    assert p.returncode == 0, p.stderr
    assert p.stdout == "done\n"
    assert "no space for a segment" in p.stderr
    assert list(d.glob("*.seg")) == []  # no half-made segment left behind


def test_default_session_is_private_and_shared_by_the_tree(heisen, tmp_path):
    tag = "heisen-default-" + uuid.uuid4().hex[:8]
    script = tmp_path / tag
    script.write_text("#!/bin/sh\necho \"$HEISEN_DIR\"\n/bin/true\n")
    script.chmod(0o755)
    # a clean run's default session is kept only when asked; the cap out of the way
    env = heisen.env(HEISEN_KEEP_SESSION=1, HEISEN_SESSIONS_MAX_MB=1 << 20)
    env["LD_PRELOAD"] = str(heisen.lib)
    p = subprocess.run([str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    session = Path(p.stdout.strip())
    base = Path(f"/dev/shm/heisen-{os.getuid()}")
    assert session.parent == base
    # <progname>-<pid>-<time>; the kernel runs the script as "/bin/sh script"
    name, pid, secs = session.name.rsplit("-", 2)
    assert name == "sh" and pid.isdigit() and secs.isdigit()
    assert stat.S_IMODE(base.stat().st_mode) == 0o700
    assert stat.S_IMODE(session.stat().st_mode) == 0o700
    segs = sorted(session.glob("*.seg"))
    # the shell and /bin/true (forked child, then exec'd) share the session
    assert len(segs) >= 2
    for s in segs:
        assert stat.S_IMODE(s.stat().st_mode) == 0o600
    report = heisen.dump_json(session)
    exes = {pr["exe"] for pr in report["processes"]}
    assert "/usr/bin/true" in exes
    subprocess.run(["rm", "-rf", str(session)])


def test_thread_table_overflow_is_counted_not_fatal(heisen, session):
    code = ("import threading\n"
            "l = threading.Lock()\n"
            "def w():\n"
            "    for _ in range(100):\n"
            "        with l: pass\n"
            "ts = [threading.Thread(target=w) for _ in range(12)]\n"
            "[t.start() for t in ts]; [t.join() for t in ts]\n"
            "print('ok')\n")
    env = {"HEISEN_THREADS": "4"}
    p = heisen.preload(["/usr/bin/python3", "-c", code], session, env=env)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
    report = heisen.dump_json(session)
    [proc] = report["processes"]
    assert len(proc["threads"]) <= 4


QUIET_LINE = "the recorder found its own state inconsistent"


@pytest.mark.parametrize("mode", ["stray", "clean", "term"])
def test_a_stray_write_over_the_edge_index_makes_the_recorder_go_quiet(heisen, session, mode):
    args = [target(heisen, "stray_write")] + ([mode] if mode != "stray" else [])
    p = heisen.preload(args, session)
    want_rc = -signal.SIGTERM if mode == "term" else 0
    assert p.returncode == want_rc and "done" in p.stdout.split(), (p.returncode, p.stdout, p.stderr)
    pid = int(p.stdout.split()[1])
    report = heisen.dump_json(session, expect_rc=0 if mode == "clean" else 1)
    proc = [x for x in report["processes"] if x["pid"] == pid]
    limits = [f for f in report["findings"] if f["kind"] == "limit" and f["pid"] == pid]
    assert len(proc) == 1, report["processes"]
    # the end is still written by a recorder that went quiet
    if mode == "term":
        assert proc[0]["state"] == "killed" and proc[0]["signal"] == signal.SIGTERM, proc[0]
    else:
        assert proc[0]["state"] == "exited" and proc[0]["exit_status"] == 0, proc[0]
    text = heisen.dump(session, "--all").stdout
    if mode == "clean":
        assert QUIET_LINE not in p.stderr, p.stderr
        assert proc[0]["suspect"] is False
        assert "went quiet" not in text
        assert report["findings"] == [], report["findings"]
        return
    assert int(p.stdout.split()[3]) > 0  # "wrote N"
    lines = [l for l in p.stderr.splitlines() if QUIET_LINE in l]
    assert len(lines) == 1, p.stderr  # said once
    assert "went quiet" in lines[0] and "lockgraph.c" in lines[0], lines
    assert proc[0]["suspect"] is True, proc[0]
    # a limit of its own (loud, exit status 1), not a full table: no table was full
    assert len(limits) == 1 and "went quiet" in json.dumps(limits[0]), report["findings"]
    assert "full" not in json.dumps(limits[0]), limits
    assert "the recorder found its own state inconsistent and went quiet" in text, text


def test_heisen_run_says_the_recorder_went_quiet(heisen, session):
    p = heisen.run(["--dir", session, "--", target(heisen, "stray_write")], timeout=60)
    assert p.returncode == 0 and "done" in p.stdout.split(), (p.returncode, p.stderr)
    # a suspect segment is never a clean end (internal/seg_verdict.h): the report is printed
    assert "went quiet" in p.stderr, p.stderr
