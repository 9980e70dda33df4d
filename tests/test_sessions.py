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
import shutil
import subprocess
import time
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


def test_fork_and_exec_reserve_only_the_pages_they_use(heisen, tmp_path):
    # a shell starting a program and a subshell: two fork children (one execs)
    # and an image, each its own segment.  The hash indexes and the fd table
    # get their pages when first touched, so none of these holds more than a
    # few hundred KiB (reserving them at start was 0.66 MiB a segment), and
    # nothing is lost: every process is in the tree with its end, and an fd
    # made in a part of the fd table nothing touched before is recorded.
    d = Path("/dev/shm") / f"heisen-test-{os.getpid()}-{tmp_path.name}"
    try:
        p = heisen.preload(["/bin/bash", "-c", "/bin/true; (exec 700</dev/null; exit 3); echo $?"], d)
        assert p.returncode == 0 and p.stdout == "3\n", p.stderr
        segs = sorted(d.glob("*.seg"))
        assert len(segs) == 4, segs  # bash, its fork child and the image it became, the subshell
        for seg in segs:
            assert allocated(seg) <= 320 * 1024, (seg, allocated(seg))
        report = heisen.dump_json(d)
        assert report["errors"] == [] and report["findings"] == []
        ends = sorted((pr["state"], pr.get("exit_status")) for pr in report["processes"])
        assert ends == [("execed", None), ("exited", 0), ("exited", 0), ("exited", 3)], ends
        [sub] = [pr for pr in report["processes"] if pr.get("exit_status") == 3]
        [fd700] = [f for f in sub["fds"]["open"] if f["fd"] == 700]
        assert fd700["call"] == "dup2" and not fd700["inherited"] and fd700["stack"] is not None, fd700
        assert "/dev/null" in fd700["path"]
    finally:
        subprocess.run(["rm", "-rf", str(d)])


def test_shell_children_that_exec_at_once_make_no_segment_of_their_own(heisen, tmp_path):
    # a shell script starting 20 programs: each fork child execs before any
    # event of its own, so its segment is never made; only the first child,
    # which meets sites its parent never met (bash's command lookup between
    # fork and exec), makes one, and the parent learns those sites from it for
    # the next children.  Every image is still in the tree under the shell,
    # with its end; and a bare run's session is still removed at the end (each
    # image gives back the reference its fork child held).
    loop = "for ((i = 0; i < 20; i++)); do /bin/true; done; echo $HEISEN_DIR"
    d = Path("/dev/shm") / f"heisen-test-{os.getpid()}-{tmp_path.name}"
    try:
        p = heisen.preload(["/bin/bash", "-c", loop], d)
        assert p.returncode == 0, p.stderr
        segs = sorted(d.glob("*.seg"))
        assert 21 <= len(segs) <= 22, [s.name for s in segs]  # bash, at most one child, 20 images
        report = heisen.dump_json(d)
        assert report["errors"] == [] and report["findings"] == []
        [sh] = [pr for pr in report["processes"] if pr["exe"].endswith("bash") and pr["image"] == 0
                and not pr["environment"]["inherited"]]
        trues = [pr for pr in report["processes"] if pr["exe"].endswith("true")]
        assert len(trues) == 20, [(pr["pid"], pr["exe"]) for pr in report["processes"]]
        assert all(pr["state"] == "exited" and pr["exit_status"] == 0 for pr in trues), trues
        assert all(pr["ppid"] == sh["pid"] for pr in trues), [(pr["pid"], pr["ppid"]) for pr in trues]
    finally:
        subprocess.run(["rm", "-rf", str(d)])
    p = subprocess.run(["/bin/bash", "-c", loop], env=bare_env(heisen), capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    bare = Path(p.stdout.strip())
    assert bare.parent == Path(f"/dev/shm/heisen-{os.getuid()}")
    assert not bare.exists(), sorted(x.name for x in bare.iterdir())


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



def written(path: Path) -> int:
    """Bytes of a tmpfs file that hold data (SEEK_DATA): pages written or
    mapped; a page given backing store by fallocate and never touched is a
    hole.  Each such page a fork child writes costs it a page fault or a copy."""
    n, pos = 0, 0
    with open(path, "rb") as f:
        fd, end = f.fileno(), os.fstat(f.fileno()).st_size
        while pos < end:
            try:
                lo = os.lseek(fd, pos, os.SEEK_DATA)
            except OSError:
                break
            hi = os.lseek(fd, lo, os.SEEK_HOLE)
            n += hi - lo
            pos = hi
    return n


def test_forked_shell_writes_about_what_a_fresh_shell_does(heisen, tmp_path):
    # a shell's subshell: bash forks a bash.  The forked bash starts with its
    # parent's stacks and index tables, id for id, but it must not pay for
    # the index pages its parent never wrote (no Python frames here: a whole
    # index of them is empty), nor read its parent's pages through the
    # mapping (each is a page fault in the child, and makes the parent's
    # untouched pages data).  So the shell that forks, and the forked shell,
    # write about what a shell that forks nothing writes.
    d = Path("/dev/shm") / f"heisen-test-{os.getpid()}-{tmp_path.name}"
    try:
        p = heisen.preload(["bash", "-c", "echo top"], d / "plain")
        assert p.returncode == 0 and p.stdout == "top\n", p.stderr
        [plain] = (d / "plain").glob("*.seg")
        p = heisen.preload(["bash", "-c", "(echo sub); echo top"], d / "sub")
        assert p.returncode == 0 and p.stdout == "sub\ntop\n", p.stderr
        report = heisen.dump_json(d / "sub")
        assert report["errors"] == []
        assert sorted(pr["via"] for pr in report["processes"]) == ["exec", "fork"], report["processes"]
        for pr in report["processes"]:
            assert pr["exe"].endswith("bash") and pr["state"] == "exited"
            seg = d / "sub" / pr["segment"]
            assert written(seg) <= written(plain) + 64 * 1024, (pr["via"], written(seg) >> 10, written(plain) >> 10)
            assert allocated(seg) <= MIB
    finally:
        subprocess.run(["rm", "-rf", str(d)])

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


# ---- clean sessions do not pile up ------------------------------------------

CLEAN_SCRIPT = """\
import os, subprocess, threading
t = threading.Thread(target=lambda: None); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os._exit(0)
os.waitpid(pid, 0)
subprocess.run(["/bin/true"], check=True)
subprocess.run(["sh", "-c", "exit 1"])  # a child's non-zero status is a normal end
print(os.environ["HEISEN_DIR"])
"""


def bare_env(heisen, **extra):
    """A bare LD_PRELOAD run in the default place; the cap out of the way."""
    env = heisen.env(HEISEN_SESSIONS_MAX_MB=1 << 20, **extra)
    env.pop("HEISEN_SESSION_AUTO", None)
    env["LD_PRELOAD"] = str(heisen.lib)
    return env


def test_clean_bare_run_leaves_no_session(heisen, tmp_path):
    script = tmp_path / "clean.py"
    script.write_text(CLEAN_SCRIPT)
    p = subprocess.run([SYSTEM_PYTHON, str(script)], env=bare_env(heisen), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    d = Path(p.stdout.strip())
    assert d.parent == Path(f"/dev/shm/heisen-{os.getuid()}")
    assert not d.exists(), sorted(x.name for x in d.iterdir())
    assert not list(d.parent.glob(d.name + ".removing-*"))


def test_crashing_bare_run_keeps_its_session(heisen, tmp_path):
    # the parent ends cleanly, the forked child crashes: the session stays
    script = tmp_path / "crash.py"
    script.write_text(CLEAN_SCRIPT.replace("    os._exit(0)\n", "    os.abort()\n"))
    p = subprocess.run([SYSTEM_PYTHON, str(script)], env=bare_env(heisen), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    d = Path(p.stdout.strip())
    try:
        assert d.is_dir()
        report = heisen.dump_json(d)
        assert [f["kind"] for f in report["findings"]] == ["crash"]
    finally:
        subprocess.run(["rm", "-rf", str(d)])


def test_session_named_with_heisen_dir_is_kept(heisen, tmp_path, session):
    script = tmp_path / "clean.py"
    script.write_text(CLEAN_SCRIPT)
    env = bare_env(heisen, HEISEN_DIR=session)
    p = subprocess.run([SYSTEM_PYTHON, str(script)], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert len(list(session.glob("*.seg"))) >= 4
    assert not (session / "session.refs").exists()


def test_heisen_run_removes_a_clean_default_session(heisen):
    p = heisen.run(["--", "sh", "-c", 'echo "$HEISEN_DIR"'])
    assert p.returncode == 0, p.stderr
    d = Path(p.stdout.strip())
    assert d.parent == Path(f"/dev/shm/heisen-{os.getuid()}")
    assert not d.exists()
    assert "no findings; session removed" in p.stderr


# "pad": a session's ordinary file; ".frames": the session's table of learnt
# frame distances (shim/unwind_share.c), a dot-file that counts all the same
@pytest.mark.parametrize("pad", ["pad", ".frames"])
def test_cap_removes_oldest_finished_sessions_and_says_so(heisen, tmp_path, pad):
    # a private base: another user's /dev/shm/heisen-$UID
    uid = 54000 + os.getpid() % 1000 + (500 if pad.startswith(".") else 0)
    base = Path(f"/dev/shm/heisen-{uid}")
    if os.geteuid() != 0 or not shutil.which("setpriv"):
        pytest.skip("needs root and setpriv")
    if base.exists():
        pytest.skip(f"{base} exists already")
    try:
        base.mkdir(mode=0o700)
        # four finished sessions of 2 MiB each, oldest first; the second oldest crashed
        now = time.time()
        for i, name in enumerate(["a-1-1", "b-2-2", "c-3-3", "d-4-4"]):
            d = base / name
            d.mkdir(mode=0o700)
            with open(d / pad, "wb") as f:
                f.write(b"x" * (2 << 20))
            os.utime(d, (now - 1000 + i, now - 1000 + i))
        crashed = base / "b-2-2"
        p = subprocess.run([SYSTEM_PYTHON, "-c", "import os; os.abort()"],
                           env=heisen.env(crashed, LD_PRELOAD=heisen.lib), capture_output=True, timeout=60)
        assert p.returncode < 0
        os.utime(crashed, (now - 999, now - 999))
        subprocess.run(["chown", "-R", f"{uid}:{uid}", str(base)], check=True)

        def run_as_user(cap_mb):
            # only the user's shell is preloaded, never setpriv (it starts as root)
            env = heisen.env()
            env.pop("HEISEN_SESSION_AUTO", None)
            return subprocess.run(["setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                                   "env", f"LD_PRELOAD={heisen.lib}", f"HEISEN_SESSIONS_MAX_MB={cap_mb}",
                                   "/bin/sh", "-c", 'echo "$HEISEN_DIR"; exit 0'],
                                  env=env, capture_output=True, text=True, timeout=60, cwd="/")

        # 8 MiB and more held, cap 5: the two oldest without findings go, the crashed one stays
        p = run_as_user(5)
        assert p.returncode == 0, p.stderr
        assert sorted(x.name for x in base.iterdir()) == ["b-2-2", "d-4-4"], p.stderr
        assert p.stderr.count("over the cap of 5 MiB") == 1, p.stderr
        assert "removed the 2 oldest finished ones" in p.stderr
        # cap 0: the session with findings goes too, and is named
        p = run_as_user(0)
        assert f"removed session {crashed} (it has findings)" in p.stderr, p.stderr
        assert not crashed.exists()
    finally:
        subprocess.run(["rm", "-rf", str(base)])
