# SPDX-License-Identifier: MIT
"""What a session costs in /dev/shm, end to end.

- A segment is a sparse file laid out at full geometry: a small process
  (/bin/true, a small Python script with threads, a fork and a subprocess)
  has at most 1 MiB of tmpfs pages allocated per segment, yet every thread
  still gets its ring.
- A tmpfs that fills up while the program runs gives one warning, the tables
  that could not grow count as full, and the program's output and exit status
  are unchanged: never a SIGBUS.  heisen-dump reads a sparse segment without
  allocating its holes.
Contracts: include/heisen/format.h (HS_HDR_SPARSE), docs/interfaces.md
"Session directory".
"""
import os
import subprocess
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON

MIB = 1 << 20


def allocated(path: Path) -> int:
    """Bytes of backing store a file holds (tmpfs pages), not its size."""
    return path.stat().st_blocks * 512


SMALL_SCRIPT = """\
import json, os, subprocess, sys, threading
ts = [threading.Thread(target=lambda: json.dumps(list(range(100)))) for _ in range(3)]
[t.start() for t in ts]; [t.join() for t in ts]
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
subprocess.run(["/bin/true"], check=True)
print("small done")
"""


@pytest.fixture
def tiny_tmpfs(tmp_path):
    mounts = []

    def make(size):
        p = tmp_path / f"tmpfs-{size}"
        p.mkdir(parents=True, exist_ok=True)
        r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "heisen-test", str(p)],
                           capture_output=True, text=True)
        if r.returncode != 0:
            pytest.skip(f"cannot mount a tmpfs here ({r.stderr.strip()}); needs root")
        mounts.append(p)
        return p

    yield make
    for p in mounts:
        subprocess.run(["umount", "-l", str(p)], capture_output=True)


def test_small_process_segment_allocates_at_most_one_mib(heisen, tmp_path):
    # on a tmpfs, like /dev/shm: allocated blocks are RAM
    d = Path("/dev/shm") / f"heisen-test-{os.getpid()}-{tmp_path.name}"
    try:
        p = heisen.preload(["/bin/true"], d / "true")
        assert p.returncode == 0, p.stderr
        script = tmp_path / "small.py"
        script.write_text(SMALL_SCRIPT)
        p = heisen.preload([SYSTEM_PYTHON, str(script)], d / "py")
        assert p.returncode == 0 and p.stdout == "small done\n", p.stderr
        segs = sorted(d.glob("*/*.seg"))
        assert len(segs) >= 4  # /bin/true, python, its fork child, the subprocess
        for s in segs:
            assert s.stat().st_size > 4 * MIB  # laid out at full geometry...
            assert allocated(s) <= MIB, (s, allocated(s))  # ...but only what is used is allocated
        report = heisen.dump_json(d / "py")
        assert report["errors"] == []
        assert all(pr["state"] == "exited" and pr["exit_status"] == 0 for pr in report["processes"])
    finally:
        subprocess.run(["rm", "-rf", str(d)])


def test_many_threads_each_get_a_ring(heisen, session):
    # 100 threads alive at once: each claims a slot and commits its ring
    code = ("import threading\n"
            "b = threading.Barrier(101)\n"
            "def w():\n"
            "    l = threading.Lock()\n"
            "    with l: pass\n"
            "    b.wait()\n"
            "ts = [threading.Thread(target=w) for _ in range(100)]\n"
            "[t.start() for t in ts]; b.wait(); [t.join() for t in ts]\n"
            "print('ok')\n")
    p = heisen.preload([SYSTEM_PYTHON, "-c", code], session)
    assert p.returncode == 0 and p.stdout == "ok\n", p.stderr
    report = heisen.dump_json(session)
    [proc] = report["processes"]
    assert len(proc["threads"]) >= 101
    assert all(th["events"] for th in proc["threads"]), [th for th in proc["threads"] if not th["events"]][:3]
    [seg] = session.glob("*.seg")
    assert allocated(seg) < seg.stat().st_size


FILLER = """\
import sys, threading
out = []
def work(i):
    l = threading.Lock()
    with l:
        out.append(i)
ts = [threading.Thread(target=work, args=(i,)) for i in range(100)]
for t in ts: t.start()
for t in ts: t.join()
print("threads", len(out), sum(out))
sys.exit(3)
"""


def test_full_tmpfs_mid_run_warns_and_never_sigbus(heisen, tiny_tmpfs, tmp_path):
    # room for the segment's start but not for 100 threads' rings and locks
    d = tiny_tmpfs("1000k") / "session"
    script = tmp_path / "filler.py"
    script.write_text(FILLER)
    p = heisen.preload([SYSTEM_PYTHON, str(script)], d)
    assert p.returncode == 3, p.stderr
    assert p.stdout == "threads 100 4950\n"
    assert p.stderr.count("out of space in") == 1, p.stderr
    [seg] = d.glob("*.seg")
    before = allocated(seg)
    r = heisen.dump(d)
    assert "ran out of space while recording" in r.stdout, r.stdout
    report = heisen.dump_json(d)
    assert report["errors"] == []
    [proc] = report["processes"]
    assert proc["state"] == "exited" and proc["exit_status"] == 3
    # reading holes did not allocate them (nor raise SIGBUS in the reader)
    assert allocated(seg) == before


def test_dump_reads_a_live_sparse_segment_without_allocating(heisen, session):
    code = ("import sys, time\n"
            "print('up', flush=True)\n"
            "sys.stdin.read()\n")
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    p = subprocess.Popen([SYSTEM_PYTHON, "-c", code], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline() == "up\n"
        [seg] = session.glob("*.seg")
        before = allocated(seg)
        assert before < seg.stat().st_size  # sparse
        report = heisen.dump_json(session)
        [proc] = report["processes"]
        assert proc["state"] == "running"
        # the dump asks the live process for a snapshot, which may commit a
        # page or two; touching the holes would allocate the ~4 MiB rest
        assert allocated(seg) <= before + 64 * 1024, (before, allocated(seg))
    finally:
        p.communicate("", timeout=30)
