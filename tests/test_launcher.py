# SPDX-License-Identifier: MIT
"""End-to-end tests of heisen-run (launcher/): exit statuses, signal
forwarding (and no double SIGINT from a terminal), the child's environment,
session directories, reaping as a subreaper and as PID 1, marking the
segments of processes killed without a word, finding the library after
`meson install`, and the hang watchdog (report and kill).

Contracts: docs/interfaces.md; the launcher's own choices: launcher/main.c
and launcher/reaper.c.  Run with /usr/bin/python3 -m pytest tests/test_launcher.py
(HEISEN_BUILD names the build directory, see conftest.py).
"""
import json
import os
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON

BANNER = "==== heisen report: "
BANNER_END = "==== end of heisen report ===="


def popen(heisen, args, **kw):
    env = heisen.env()
    env.update(kw.pop("env", {}))
    return subprocess.Popen([str(heisen.run_bin)] + [str(a) for a in args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kw)


def wait_for_line(stream, needle, timeout=30):
    """Read from stream's descriptor until a line contains needle; returns all that was read.

    Reads the descriptor itself (os.read): select() on it and a buffered readline()
    would leave lines that arrived together in Python's buffer, unseen by select."""
    seen = ""
    fd = stream.fileno()
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r, _, _ = select.select([fd], [], [], 0.1)
        if r:
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            seen += chunk.decode(errors="replace")
            if any(needle in line for line in seen.splitlines()):
                return seen
    raise AssertionError(f"{needle!r} not seen in {seen!r}")


def proc_state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return None


def find_lib(name):
    for d in ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64",
              "/lib/aarch64-linux-gnu", "/usr/lib/aarch64-linux-gnu", "/usr/lib"):
        p = Path(d) / name
        if p.exists():
            return str(p)
    pytest.skip(f"{name} not found")


# ---- exit status --------------------------------------------------------


def test_exit_code_passthrough(heisen):
    p = heisen.run(["--quiet", "--rm", "--", "sh", "-c", "exit 3"])
    assert p.returncode == 3, p.stderr


def test_killed_child_gives_128_plus_signal_and_a_report(heisen, session):
    p = heisen.run(["--dir", session, "--", "sh", "-c", "kill -TERM $$"])
    assert p.returncode == 143, p.stderr
    assert "killed by signal 15" in p.stderr
    assert BANNER + str(session.resolve()) in p.stderr
    assert BANNER_END in p.stderr
    assert f"session: {session.resolve()}" in p.stderr


def test_clean_run_says_one_line_or_nothing(heisen, session):
    p = heisen.run(["--dir", session, "--", "true"])
    assert p.returncode == 0
    assert p.stderr == f"heisen-run: no findings; session: {session.resolve()}\n"
    p = heisen.run(["--quiet", "--rm", "--", "sh", "-c", "exit 0"])
    assert (p.returncode, p.stderr, p.stdout) == (0, "", "")


def test_exec_failures_are_127_and_126(heisen, tmp_path):
    p = heisen.run(["--", tmp_path / "no-such-program"])
    assert p.returncode == 127
    assert "No such file or directory" in p.stderr
    f = tmp_path / "not-executable"
    f.write_text("#!/bin/sh\n")
    f.chmod(0o644)
    p = heisen.run(["--", f])
    assert p.returncode == 126
    assert "Permission denied" in p.stderr


def test_usage_errors_are_125(heisen):
    assert heisen.run([]).returncode == 125
    assert heisen.run(["--on-hang", "maybe", "--", "true"]).returncode == 125
    assert heisen.run(["--hang-timeout", "soon", "--", "true"]).returncode == 125


def test_heisen_lib_override_must_exist(heisen, tmp_path):
    p = heisen.run(["--", "true"], env={"HEISEN_LIB": str(tmp_path / "nope.so")})
    assert p.returncode == 125
    assert "HEISEN_LIB" in p.stderr


def test_command_options_are_not_ours(heisen):
    # the first non-option ends heisen-run's options, even without "--"
    p = heisen.run(["--quiet", "--rm", "sh", "-c", "echo $0 $1", "--dir", "x"])
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["--dir", "x"]


# ---- signals ------------------------------------------------------------

# The wait is short sleeps in a loop, not one time.sleep(30): a signal that
# arrives after the interpreter last looked for signals and before the sleep's
# system call runs its Python handler only when that sleep returns (PEP 475
# retries nothing here: clock_nanosleep was never interrupted).  Natively the
# window is a few instructions; a preempted child under load, or the GIL
# release hook of a preloaded heisen, widens it.  The loop bounds the delay.
HANDLER = """
import os, signal, sys, time
def h(sig, frame):
    print("got", sig, flush=True)
    sys.exit({code})
signal.signal(signal.{sig}, h)
print("ready", os.getpid(), flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(99)
"""


@pytest.mark.parametrize("sig,code", [("SIGTERM", 42), ("SIGUSR1", 7), ("SIGHUP", 9), ("SIGINT", 11)])
def test_signal_is_forwarded(heisen, sig, code):
    proc = popen(heisen, ["--quiet", "--rm", "--", SYSTEM_PYTHON, "-c", HANDLER.format(sig=sig, code=code)])
    try:
        wait_for_line(proc.stdout, "ready")
        proc.send_signal(getattr(signal, sig))
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert proc.returncode == code, err
    assert f"got {int(getattr(signal, sig))}" in out


# A command that catches SIGUSR1 (it may be sent by kill) and exits on SIGUSR2
# with 1 when SIGUSR1 reached it first, else 0.
USR1_THEN_USR2 = """
import os, signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda *a: got.append(1))
signal.signal(signal.SIGUSR2, lambda *a: sys.exit(1 if got else 0))
print("ready", os.getpid(), flush=True)
end = time.monotonic() + 30
while time.monotonic() < end:
    time.sleep(0.05)
sys.exit(99)
"""


def test_a_signal_ignored_when_heisen_run_started_is_not_forwarded(heisen):
    """`nohup heisen-run -- CMD`, or a shell's `trap '' USR1`: heisen-run
    started with the signal ignored, as the command would have been without
    it, so a kill() of heisen-run's pid does not reach the command (which
    installed a handler of its own), while a signal heisen-run did not start
    ignoring is forwarded as always.  The signals are sent in one go and
    forwarded in order: a forwarded SIGUSR1 would run the command's handler
    before SIGUSR2 ends it."""
    for ignored, code in ((True, 0), (False, 1)):
        def start_ignoring(ignored=ignored):
            signal.signal(signal.SIGUSR1, signal.SIG_IGN if ignored else signal.SIG_DFL)
        proc = popen(heisen, ["--quiet", "--rm", "--", SYSTEM_PYTHON, "-c", USR1_THEN_USR2],
                     preexec_fn=start_ignoring)
        try:
            wait_for_line(proc.stdout, "ready")
            proc.send_signal(signal.SIGUSR1)
            time.sleep(0.2)
            proc.send_signal(signal.SIGUSR2)
            out, err = proc.communicate(timeout=30)
        finally:
            proc.kill()
        assert proc.returncode == code, (ignored, proc.returncode, err)


COUNT_SIGINT = """
import signal, sys, time
n = 0
def h(*a):
    global n
    n += 1
signal.signal(signal.SIGINT, h)
print("ready", flush=True)
t = time.time() + 20
while n == 0 and time.time() < t:
    time.sleep(0.01)
time.sleep(0.7)
print("count", n, flush=True)
sys.exit(n)
"""


def run_in_pty(argv, env, send, wait_for=b"ready", timeout=30):
    """Run argv as a session leader on a new pty; write `send` to the
    terminal once `wait_for` was printed.  Returns (output, exit code)."""
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.execve(argv[0], argv, env)
        finally:
            os._exit(126)
    out = b""
    sent = False
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            r, _, _ = select.select([fd], [], [], 0.1)
            if r:
                try:
                    chunk = os.read(fd, 4096)
                except OSError:
                    break
                if not chunk:
                    break
                out += chunk
            if not sent and wait_for in out:
                os.write(fd, send)
                sent = True
    finally:
        os.close(fd)
    _, st = os.waitpid(pid, 0)
    return out.decode(errors="replace"), os.waitstatus_to_exitcode(st)


def test_terminal_ctrl_c_reaches_the_child_once(heisen, tmp_path):
    """Ctrl-C on the terminal goes to the whole foreground process group, the
    command included: heisen-run must not forward its own copy too."""
    script = tmp_path / "count.py"
    script.write_text(COUNT_SIGINT)
    out, rc = run_in_pty([str(heisen.run_bin), "--quiet", "--rm", "--", SYSTEM_PYTHON, str(script)],
                         heisen.env(), b"\x03")
    assert "count 1" in out, out
    assert rc == 1, out


def test_kill_int_to_launcher_reaches_the_child_once(heisen, tmp_path):
    script = tmp_path / "count.py"
    script.write_text(COUNT_SIGINT)
    proc = popen(heisen, ["--quiet", "--rm", "--", SYSTEM_PYTHON, script])
    try:
        wait_for_line(proc.stdout, "ready")
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
    assert "count 1" in out, (out, err)
    assert proc.returncode == 1


def test_child_shares_our_process_group_and_stdin(heisen):
    code = ("import os,sys; print(os.getpgrp() == os.getpgid(os.getppid()), sys.stdin.read().strip())")
    p = heisen.run(["--quiet", "--rm", "--", SYSTEM_PYTHON, "-c", code], input="from stdin\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["True", "from", "stdin"]


# ---- environment and session -------------------------------------------

SHOW_ENV = 'echo "$LD_PRELOAD"; echo "$HEISEN_DIR"'


def test_ld_preload_is_absolute_and_first(heisen, tmp_path):
    # run through a relative path from another directory
    rel = os.path.relpath(heisen.run_bin, tmp_path)
    env = heisen.env()
    p = subprocess.run([rel, "--quiet", "--", "sh", "-c", SHOW_ENV], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    preload, hdir = p.stdout.splitlines()
    assert preload == str(heisen.lib.resolve())
    assert os.path.isabs(hdir)  # a clean run's default session is removed at the end
    shutil.rmtree(hdir, ignore_errors=True)


def test_ld_preload_keeps_the_users_entries(heisen):
    libm = find_lib("libm.so.6")
    ours = str(heisen.lib.resolve())
    for given in (libm, f"{libm} {ours}", f"{ours}:{libm}"):
        p = heisen.run(["--quiet", "--", "sh", "-c", SHOW_ENV], env={"LD_PRELOAD": given})
        assert p.returncode == 0, p.stderr
        entries = p.stdout.splitlines()[0].replace(" ", ":").split(":")
        assert entries == [ours, libm], given
        shutil.rmtree(p.stdout.splitlines()[1], ignore_errors=True)


def test_dir_is_created_0700_and_exported(heisen, tmp_path):
    d = tmp_path / "a" / "b" / "session"
    p = heisen.run(["--quiet", "--dir", d, "--", "sh", "-c", SHOW_ENV])
    assert p.returncode == 0, p.stderr
    assert d.is_dir()
    assert stat.S_IMODE(d.stat().st_mode) == 0o700
    assert p.stdout.splitlines()[1] == str(d.resolve())


def test_dir_relative_is_made_absolute(heisen, tmp_path):
    p = subprocess.run([str(heisen.run_bin), "--quiet", "--dir", "rel", "--", "sh", "-c",
                        'cd / && echo "$HEISEN_DIR"'], cwd=tmp_path, env=heisen.env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == str((tmp_path / "rel").resolve())


def test_default_session_under_dev_shm(heisen):
    p = heisen.run(["--", "sh", "-c", SHOW_ENV])
    assert p.returncode == 0, p.stderr
    hdir = Path(p.stdout.splitlines()[1])
    base = Path(f"/dev/shm/heisen-{os.getuid()}")
    assert hdir.parent == base
    assert hdir.name.startswith("sh-")
    st = base.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.getuid()
    shutil.rmtree(hdir, ignore_errors=True)


def test_rm_removes_a_clean_session(heisen, tmp_path):
    p = heisen.run(["--rm", "--", "sh", "-c", SHOW_ENV])
    assert p.returncode == 0, p.stderr
    hdir = Path(p.stdout.splitlines()[1])
    assert not hdir.exists(), list(hdir.iterdir())


def run_as_other_user(heisen, uid):
    setpriv = shutil.which("setpriv")
    if os.geteuid() != 0 or not setpriv:
        pytest.skip("needs root and setpriv")
    return subprocess.run([setpriv, f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
                           str(heisen.run_bin), "--", "true"], env=heisen.env(),
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def other_base():
    uid = 54321
    base = Path(f"/dev/shm/heisen-{uid}")
    if base.exists() or base.is_symlink():
        pytest.skip(f"{base} exists already")
    yield uid, base
    if base.is_symlink() or base.is_file():
        base.unlink()
    elif base.exists():
        shutil.rmtree(base)


def test_base_dir_symlink_is_refused(heisen, other_base, tmp_path):
    uid, base = other_base
    target = tmp_path / "elsewhere"
    target.mkdir()
    os.chown(target, uid, uid)
    base.symlink_to(target)
    if not os.access(heisen.run_bin, os.X_OK):
        pytest.skip("binary not reachable")
    p = run_as_other_user(heisen, uid)
    # refused, said, and the program still runs, recorded elsewhere
    assert p.returncode == 0, p.stderr
    assert f"{base} is a symbolic link; refusing to use it" in p.stderr
    assert f"recording into /tmp/heisen-{uid}/" in p.stderr
    assert list(target.iterdir()) == []


def test_base_dir_of_another_owner_is_refused(heisen, other_base):
    uid, base = other_base
    base.mkdir(mode=0o777)
    base.chmod(0o777)  # root owns it; the user could write to it, but must not trust it
    p = run_as_other_user(heisen, uid)
    assert p.returncode == 0, p.stderr
    assert f"{base} is owned by another user, not by us (uid 0)" in p.stderr
    assert f"recording into /tmp/heisen-{uid}/" in p.stderr
    assert list(base.iterdir()) == []


# ---- reaping and marking -----------------------------------------------

ORPHAN = """
import os, subprocess, sys, time
me = os.getpid()
launcher = os.getppid()
# the intermediate shell exits at once: its child is orphaned
p = subprocess.run(["sh", "-c", "sleep 0.3 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True)
orphan = int(p.stdout)
def stat(pid):
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
s = stat(orphan)
print("orphan-parent-is-launcher", s is not None and int(s[1]) == launcher, flush=True)
time.sleep(1.0)
s = stat(orphan)
print("orphan-after", "gone" if s is None else s[0], flush=True)
zombies = [d for d in os.listdir("/proc") if d.isdigit() and (stat(d) or ["?"])[0] == "Z"]
print("zombies", len(zombies), flush=True)
"""


def test_orphans_are_reparented_to_us_and_reaped(heisen):
    p = heisen.run(["--quiet", "--rm", "--", SYSTEM_PYTHON, "-c", ORPHAN])
    assert p.returncode == 0, p.stderr
    assert "orphan-parent-is-launcher True" in p.stdout, p.stdout
    assert "orphan-after gone" in p.stdout, p.stdout


def unshare_pid(heisen, args, **kw):
    unshare = shutil.which("unshare")
    if os.geteuid() != 0 or not unshare:
        pytest.skip("needs root and unshare")
    probe = subprocess.run([unshare, "--pid", "--fork", "--mount-proc", "true"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"unshare --pid does not work here: {probe.stderr!r}")
    env = heisen.env()
    env.update(kw.pop("env", {}))
    return subprocess.run([unshare, "--pid", "--fork", "--mount-proc", str(heisen.run_bin)] +
                          [str(a) for a in args], env=env, capture_output=True, text=True,
                          timeout=kw.pop("timeout", 60), **kw)


def test_pid1_reaps_orphaned_grandchildren(heisen):
    p = unshare_pid(heisen, ["--quiet", "--rm", "--", SYSTEM_PYTHON, "-c",
                             "import os; print('launcher-is-pid1', os.getppid() == 1, flush=True)\n" + ORPHAN])
    assert p.returncode == 0, p.stderr
    assert "launcher-is-pid1 True" in p.stdout
    assert "orphan-parent-is-launcher True" in p.stdout, p.stdout
    assert "orphan-after gone" in p.stdout, p.stdout
    assert "zombies 0" in p.stdout, p.stdout


def test_pid1_terminates_leftovers_when_the_command_ends(heisen, tmp_path):
    """As PID 1, heisen-run sends SIGTERM to what is left when the command
    ends.  The command ends only once the leftover has its handler (a
    leftover still starting would die of SIGTERM's default action without
    a word: under load a fixed sleep was not always long enough)."""
    mark, ready = tmp_path / "got-term", tmp_path / "ready"
    leftover = (f"import signal,sys,time\n"
                f"signal.signal(signal.SIGTERM, lambda *a: (open({str(mark)!r}, 'w').write('TERM'), sys.exit(0)))\n"
                f"open({str(ready)!r}, 'w').close()\n"
                f"end = time.monotonic() + 60\n"
                f"while time.monotonic() < end: time.sleep(0.05)\n")  # see HANDLER
    script = (f"{SYSTEM_PYTHON} -c \"$0\" & i=0; "
              f"while [ ! -e {ready} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; exit 5")
    t = time.monotonic()
    p = unshare_pid(heisen, ["--quiet", "--rm", "--", "sh", "-c", script, leftover])
    assert p.returncode == 5, p.stderr
    assert time.monotonic() - t < 30
    assert mark.read_text() == "TERM"


def test_waitpid_marks_a_silent_death_killed(heisen, session):
    """A SIGKILLed process cannot write its own end: heisen-run records what
    waitpid said, and heisen-dump shows `killed`, signal 9."""
    p = heisen.run(["--dir", session, "--", "sh", "-c", "kill -KILL $$"])
    assert p.returncode == 137, p.stderr
    rep = heisen.dump_json(session)
    killed = [pr for pr in rep["processes"] if pr["state"] == "killed"]
    assert len(killed) == 1, rep["processes"]
    assert killed[0]["signal"] == 9
    assert BANNER in p.stderr and BANNER_END in p.stderr


def test_grandchild_killed_is_marked_too(heisen, session):
    # an orphan killed after its parent left is ours to reap and to mark
    orphan = ("import os, signal, subprocess, sys, time\n"
              "p = subprocess.run(['sh', '-c', 'sleep 30 >/dev/null 2>&1 & echo $!'], capture_output=True, text=True)\n"
              "pid = int(p.stdout)\n"
              "d = os.environ['HEISEN_DIR']\n"
              "t = time.time() + 20\n"
              "while time.time() < t and not (open(f'/proc/{pid}/comm').read().strip() == 'sleep'\n"
              "        and any(f.startswith(f'{pid}.') for f in os.listdir(d))):\n"
              "    time.sleep(0.01)\n"
              "time.sleep(0.3)  # let its segment reach RUNNING\n"
              "os.kill(pid, signal.SIGKILL)\n"
              "time.sleep(0.5)\n")
    p = heisen.run(["--quiet", "--dir", session, "--", SYSTEM_PYTHON, "-c", orphan])
    assert p.returncode == 0, p.stderr
    rep = heisen.dump_json(session)
    states = sorted((pr["state"], pr.get("signal")) for pr in rep["processes"])
    assert ("killed", 9) in states, rep["processes"]
    assert not any(s == "running" or s == "vanished" for s, _ in states), states


FAKE_LATER_IMAGE = """
import os, signal, sys
d = os.environ["HEISEN_DIR"]
pid = os.getpid()
b = bytearray(open(f"{d}/{pid}.0.seg", "rb").read())
if sys.argv[1] == "abi":
    b[8:12] = (99).to_bytes(4, "little")  # abi_version: a header we must not trust
else:
    b = bytearray(b"garbage")
for name in (f"{pid}.9.seg", "expected.bin"):
    with open(f"{d}/{name}", "wb") as f:
        f.write(b)
print(pid, flush=True)
os.kill(pid, signal.SIGKILL)
"""


@pytest.mark.parametrize("kind", ["abi", "garbage"])
def test_an_invalid_segment_is_never_written(heisen, session, kind):
    """The latest image of the dead pid is not a valid segment header: heisen-run
    leaves it alone (and still exits as the command did)."""
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, "-c", FAKE_LATER_IMAGE, kind])
    assert p.returncode == 137, p.stderr
    pid = int(p.stdout)
    assert (session / f"{pid}.9.seg").read_bytes() == (session / "expected.bin").read_bytes()


def test_dir_that_is_a_file_is_refused(heisen, tmp_path):
    f = tmp_path / "file"
    f.write_text("")
    p = heisen.run(["--dir", f, "--", "sh", "-c", "exit 5"])
    # refused and said; the program runs all the same, recorded in the default place
    assert p.returncode == 5, p.stderr
    assert f"cannot record into --dir {f}: {f} is not a directory" in p.stderr


def test_missing_dumper_is_a_clear_error(heisen, tmp_path):
    p = heisen.run(["--", "true"], env={"HEISEN_DUMP": str(tmp_path / "nope")})
    assert p.returncode == 125
    assert "HEISEN_DUMP" in p.stderr


def test_dumper_runs_without_ld_preload(heisen, tmp_path, session):
    log = tmp_path / "dump-env.log"
    wrap = tmp_path / "heisen-dump"
    wrap.write_text(f"#!/bin/sh\necho \"LD_PRELOAD=${{LD_PRELOAD-unset}} HEISEN_DIR=${{HEISEN_DIR-unset}}\" >> {log}\n"
                    f"exec {heisen.dump_bin} \"$@\"\n")
    wrap.chmod(0o755)
    p = heisen.run(["--dir", session, "--", "sh", "-c", "sleep 1.2; kill -TERM $$"],
                   env={"HEISEN_DUMP": str(wrap)})
    assert p.returncode == 143, p.stderr
    lines = log.read_text().splitlines()
    assert len(lines) >= 2  # at least one watchdog tick and the final report
    assert set(lines) == {"LD_PRELOAD=unset HEISEN_DIR=unset"}


# ---- installed layout ---------------------------------------------------


def test_installed_tree_finds_its_library(heisen, tmp_path):
    if not (heisen.build / "meson-private").is_dir():
        pytest.skip("not a meson build directory")
    dest = tmp_path / "dest"
    p = subprocess.run(["meson", "install", "-C", str(heisen.build), "--destdir", str(dest),
                        "--no-rebuild", "--quiet"], capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    runs = list(dest.rglob("heisen-run"))
    assert len(runs) == 1, runs
    p = subprocess.run([str(runs[0]), "--quiet", "--", "sh", "-c", SHOW_ENV], env=heisen.env(),
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    first = p.stdout.splitlines()[0].split(":")[0]
    assert first.startswith(str(dest.resolve()) + "/"), first
    assert first.endswith("/heisen/libheisen.so") and Path(first).is_file(), first
    shutil.rmtree(p.stdout.splitlines()[1], ignore_errors=True)


# ---- the hang watchdog --------------------------------------------------


def abba(heisen):
    t = heisen.targets / "abba_deadlock"
    if not t.exists():
        pytest.skip("test-targets/abba_deadlock is not built")
    return t


def test_on_hang_kill_kills_the_tree(heisen, session):
    t = abba(heisen)
    start = time.monotonic()
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--on-hang", "kill", "--", t], timeout=90)
    assert p.returncode == 137, p.stderr
    assert time.monotonic() - start < 60
    assert "waiting" in p.stdout
    pid = int(p.stdout.split("pid ")[1].split()[0])
    assert proc_state(pid) is None
    assert "hang detected" in p.stderr and "deadlock" in p.stderr, p.stderr
    assert BANNER + str(session.resolve()) in p.stderr and BANNER_END in p.stderr
    assert f"session: {session.resolve()}" in p.stderr
    rep = heisen.dump_json(session)
    me = [pr for pr in rep["processes"] if pr["pid"] == pid]
    assert me and me[-1]["state"] == "killed" and me[-1]["signal"] == 9, rep["processes"]


def test_on_hang_kill_reaches_grandchildren(heisen, session, tmp_path):
    t = abba(heisen)
    # the deadlocked program is a grandchild behind a shell that waits for it
    p = heisen.run(["--dir", session, "--hang-timeout", "1", "--on-hang", "kill", "--",
                    "sh", "-c", f"{t} & wait; echo not reached"], timeout=90)
    assert p.returncode == 137, p.stderr
    pid = int(p.stdout.split("pid ")[1].split()[0])
    assert proc_state(pid) is None
    assert "not reached" not in p.stdout


def test_on_hang_report_reports_once_and_keeps_watching(heisen, session):
    t = abba(heisen)
    proc = popen(heisen, ["--dir", session, "--hang-timeout", "1", "--", t])
    err = []
    reader = threading.Thread(target=lambda: err.append(proc.stderr.read()))
    try:
        wait_for_line(proc.stdout, "waiting")
        reader.start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not list(session.glob("*.seg")):
            time.sleep(0.1)
        time.sleep(5)  # hang timeout 1 s, then several more watchdog ticks
        assert proc.poll() is None, "report mode must not kill"
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
        reader.join(timeout=60)
    finally:
        proc.kill()
    text = "".join(err)
    assert proc.returncode == 143, text
    assert text.count("hang detected") == 1, text
    assert "still running" in text
    assert text.count(BANNER) == 2, text  # the hang report, then the final one
    assert text.rstrip().endswith(f"session: {session.resolve()}")


# ---- privilege drops (gosu / setpriv / su-exec style) ----------------------------

SETPRIV = shutil.which("setpriv")
DROP = [SETPRIV, "--reuid=nobody", "--regid=nogroup", "--clear-groups"] if SETPRIV else []
needs_root_and_setpriv = pytest.mark.skipif(os.geteuid() != 0 or not SETPRIV,
                                            reason="needs root and setpriv (util-linux)")


def unrecorded(report, pid):
    return [f for f in report["findings"] if f["kind"] == "limit" and f["pid"] == pid
            and f.get("privilege_drop")]


@needs_root_and_setpriv
def test_a_child_that_drops_privileges_before_exec_is_said_unrecorded_not_killed(heisen, session):
    """heisen-run as root runs `sh -c 'setpriv ... python3 ...; echo sh-done'`:
    setpriv drops to nobody and execs python, which cannot write root's
    session.  The report says so for setpriv's pid — a limit finding naming
    the drop — and never that it was killed without running any code, and
    heisen-run never says "no findings"."""
    cmd = " ".join(DROP) + f" {SYSTEM_PYTHON} -c 'import os; print(\"dropped\", os.getpid())'; echo sh-done"
    p = heisen.run(["--dir", session, "--", "sh", "-c", cmd], timeout=60)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "sh-done" in p.stdout and "no findings" not in p.stderr, p.stderr
    dropped = int(p.stdout.split("dropped")[1].split()[0])
    report = heisen.dump_json(session, expect_rc=1)
    assert [f["kind"] for f in report["findings"] if f["pid"] == dropped] == ["limit"], report["findings"]
    (f,) = unrecorded(report, dropped)
    assert "changed its uid to 65534" in f["message"] and "not recorded" in f["message"], f
    assert "not recorded after a privilege drop" in p.stderr and "killed" not in p.stderr, p.stderr


@needs_root_and_setpriv
def test_the_command_itself_dropping_privileges_is_never_no_findings(heisen, session):
    p = heisen.run(["--dir", session, "--", *DROP, SYSTEM_PYTHON, "-c", "print('hello')"], timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["hello"], (p.stdout, p.stderr)
    assert "no findings" not in p.stderr and "not recorded after a privilege drop" in p.stderr, p.stderr


@needs_root_and_setpriv
def test_a_server_that_drops_privileges_after_start_keeps_its_own_record(heisen, session):
    """A server calls setgid/setuid after start: its own segment (mapped
    before the drop) still records it to its clean exit; the worker it
    forks after the drop cannot be recorded, and the report says so."""
    script = ("import os\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\n"
              "pid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)\nprint('served', os.getpid(), pid)\n")
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, "-c", script], timeout=60)
    assert p.returncode == 0, (p.stdout, p.stderr)
    pid, child = map(int, p.stdout.split()[1:3])
    report = heisen.dump_json(session, expect_rc=1)
    (me,) = [pr for pr in report["processes"] if pr["pid"] == pid]
    assert (me["state"], me["exit_status"]) == ("exited", 0)
    (f,) = unrecorded(report, pid)
    assert f"its fork children (pid {child}) are not recorded" in f["message"], f
    assert child not in [pr["pid"] for pr in report["processes"]]


@needs_root_and_setpriv
def test_a_server_that_drops_privileges_and_forks_nothing_is_clean(heisen, session):
    script = "import os\nos.setgroups([]); os.setgid(65534); os.setuid(65534)\nprint('served')\n"
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, "-c", script], timeout=60)
    assert p.returncode == 0 and p.stdout.split() == ["served"], (p.stdout, p.stderr)
    assert "no findings" in p.stderr, p.stderr
    assert heisen.dump_json(session, expect_rc=0)["findings"] == []


# ---- the watchdog's own cost ------------------------------------------------------

IDLE_WORKERS = r'''
import os, sys, time
n, secs = int(sys.argv[1]), float(sys.argv[2])
kids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        time.sleep(secs)
        os._exit(0)
    kids.append(pid)
for k in kids:
    os.waitpid(k, 0)
'''


def test_watchdog_leaves_idle_processes_alone(heisen, session, tmp_path):
    """20 forked workers sleep: once their threads have been still past the
    hang timeout (and judged idle), the watchdog asks heisen-dump again only
    when a stillness doubles, and opens no segment again on every tick."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    script = tmp_path / "idle.py"
    script.write_text(IDLE_WORKERS)
    log = tmp_path / "dump-runs"
    wrapper = tmp_path / "heisen-dump"
    wrapper.write_text(f'#!/bin/sh\necho "$(date +%s.%N) $1" >> {log}\nexec {heisen.dump_bin} "$@"\n')
    wrapper.chmod(0o755)
    trace = tmp_path / "trace"
    workers, sleep_s, timeout_s = 20, 14.0, 2
    start = time.time()
    p = subprocess.run(["strace", "-qq", "-e", "trace=openat", "-o", trace,
                        heisen.run_bin, "--dir", session, "--hang-timeout", str(timeout_s), "--",
                        SYSTEM_PYTHON, script, str(workers), str(sleep_s)],
                       env=heisen.env(HEISEN_DUMP=wrapper), capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stderr
    assert "hang" not in p.stderr, p.stderr
    checks = [float(ln.split()[0]) - start for ln in log.read_text().splitlines()
              if ln.split()[1] == "--check-hang"]
    # every worker is still past the hang timeout (+ forking, under load) by
    # half the sleep: from then to the end, checks only where a stillness
    # doubles (4x, 8x the timeout: one round of them), never one per tick
    late = [t for t in checks if sleep_s / 2 < t < sleep_s]
    assert len(late) <= 3, checks
    seg_opens = [ln for ln in trace.read_text().splitlines() if ".seg\"" in ln]
    # each segment is opened a few times (first sight, marking its end), not once per tick
    assert len(seg_opens) <= 4 * (workers + 1), len(seg_opens)


def test_watchdog_reads_long_still_processes_from_proc_less_often(heisen, session, tmp_path):
    """12 forked workers sleep 16 s under a 16 s hang timeout: once a
    process has been still a while, the watchdog reads its /proc/PID/stat
    every quarter of that stillness (at most every 2 s here, an eighth of the
    timeout), not every tick (2 a second)."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    script = tmp_path / "idle.py"
    script.write_text(IDLE_WORKERS)
    trace = tmp_path / "trace"
    workers, sleep_s = 12, 16.0
    start = time.time()
    p = subprocess.run(["strace", "-qq", "-ttt", "-e", "trace=openat", "-o", trace,
                        heisen.run_bin, "--dir", session, "--hang-timeout", "16", "--",
                        SYSTEM_PYTHON, script, str(workers), str(sleep_s)],
                       env=heisen.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "hang" not in p.stderr, p.stderr
    segs = {int(f.name.split(".")[0]) for f in session.glob("*.seg")}
    assert len(segs) == workers + 1
    reads = {}
    for ln in trace.read_text().splitlines():
        m = re.match(r'(\d+\.\d+) openat\(AT_FDCWD, "/proc/(\d+)/stat"', ln)
        if m and int(m.group(2)) in segs:
            reads.setdefault(int(m.group(2)), []).append(float(m.group(1)) - start)
    # from 10 s on (forking and starting, under load, take a few seconds), every
    # process has been still for several seconds: a read every 2 s (3 in these
    # 5 s; 5 if it has been still only 5 s), where every tick read each one (10)
    late = [len([t for t in ts if 10.0 <= t < 15.0]) for ts in reads.values()]
    assert len(late) == workers + 1 and sum(late) <= 5 * (workers + 1), sorted(late)


def test_heisen_warnings_stay_out_of_the_programs_stderr(heisen, session, tmp_path):
    """A warning of libheisen.so (a HEISEN_* value out of range) in a process
    under heisen-run goes into the session and heisen-run prints it at the
    end; the program's own stderr holds only what the program wrote."""
    own = tmp_path / "program-stderr"
    cmd = (f'exec 2>{own}; {SYSTEM_PYTHON} -c '
           '"import sys; sys.stderr.write(\'mine\\n\')"')
    p = heisen.run(["--dir", session, "--", "/bin/sh", "-c", cmd],
                   env={"HEISEN_THREADS": "99999"})
    assert p.returncode == 0, p.stderr
    assert own.read_text() == "mine\n"
    said = [ln for ln in p.stderr.splitlines() if "HEISEN_THREADS" in ln]
    assert said and all(ln.startswith("heisen-run: heisen: ignoring HEISEN_THREADS") for ln in said), p.stderr
    assert not (session / "heisen-warnings").exists()


def test_a_forwarded_sigterm_that_ends_a_clean_program_is_one_line(heisen, session):
    """docker stop: SIGTERM to heisen-run, forwarded; the program dies of it
    (its default action) with nothing found: exit 143 and one line, no report."""
    proc = subprocess.Popen([str(heisen.run_bin), "--dir", str(session), "--", SYSTEM_PYTHON, "-c",
                             "import time; print('ready', flush=True); time.sleep(60)"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=heisen.env())
    assert proc.stdout.readline().strip() == "ready"
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err
    assert err.splitlines() == [f"heisen-run: {SYSTEM_PYTHON} stopped by SIGTERM (forwarded); "
                                f"no findings; session: {session}"], err


def test_report_dir_keeps_the_text_and_json_reports(heisen, session, tmp_path):
    reports = tmp_path / "reports"
    p = heisen.run(["--dir", session, "--report-dir", reports, "--", SYSTEM_PYTHON, "-c",
                    "import os; os.abort()"])
    assert p.returncode == 128 + signal.SIGABRT, p.stderr
    txt = reports / f"{session.name}.report.txt"
    js = reports / f"{session.name}.report.json"
    assert "==== heisen: crash (SIGABRT)" in txt.read_text()
    assert txt.read_text() in p.stderr   # the same report as in the log
    report = json.loads(js.read_text())
    assert [f["kind"] for f in report["findings"]] == ["crash"]


# ---- the end of a run: a clean session needs no full reading -------------------------

MANY_WORKERS = r'''
import multiprocessing as mp, os, signal, socket, sys
KIND, N = sys.argv[1], int(sys.argv[2])
ODD = N // 2
KEPT = []

def keep(n):
    return [socket.socket() for _ in range(n)]  # leak site

def work(i):
    if i != ODD or KIND == "clean":
        return
    print("odd", os.getpid(), flush=True)
    if KIND == "crash":
        os.abort()
    elif KIND == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    elif KIND == "fd-leak":
        KEPT.extend(keep(70))   # still referenced at the fork child's os._exit
    elif KIND == "double-free":
        import ctypes
        libc = ctypes.CDLL(None)
        libc.malloc.restype = ctypes.c_void_p
        libc.free.argtypes = [ctypes.c_void_p]
        p = libc.malloc(64)
        libc.free(p)
        libc.free(p)
    elif KIND == "damaged":     # a stray write over its own segment's magic
        with open(f"{os.environ['HEISEN_DIR']}/{os.getpid()}.0.seg", "r+b") as f:
            f.write(b"\0" * 8)

if __name__ == "__main__":
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=work, args=(i,)) for i in range(N)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
        p.close()
    print("done", flush=True)
'''


def run_many(heisen, session, tmp_path, kind, workers=40, env=None):
    """MANY_WORKERS under heisen-run, heisen-dump through a wrapper that logs
    each run's options; returns the run and the logged option lists."""
    script = tmp_path / "many.py"
    script.write_text(MANY_WORKERS)
    log = tmp_path / "dump-runs"
    wrapper = tmp_path / "heisen-dump"
    wrapper.write_text(f'#!/bin/sh\necho "$*" >> {log}\nexec {heisen.dump_bin} "$@"\n')
    wrapper.chmod(0o755)
    p = heisen.run(["--dir", session, "--", SYSTEM_PYTHON, script, kind, workers],
                   env={"HEISEN_DUMP": str(wrapper), **(env or {})}, timeout=300)
    runs = [ln.split() for ln in log.read_text().splitlines()] if log.exists() else []
    return p, runs


def test_a_clean_end_of_many_processes_reads_no_more_than_headers(heisen, session, tmp_path):
    """41 processes that end cleanly: heisen-run's quick verdict (each
    segment's header, thread and fd slots) says so, and no full reading of
    the session (heisen-dump) runs at the end; the session is kept, and
    heisen-dump finds nothing in it either."""
    p, runs = run_many(heisen, session, tmp_path, "clean")
    assert p.returncode == 0 and "done" in p.stdout, p.stderr
    assert p.stderr == f"heisen-run: no findings; session: {session}\n", p.stderr
    assert [r for r in runs if "--check-hang" not in r] == [], runs
    assert len(list(session.glob("*.seg"))) == 41
    assert heisen.dump(session).returncode == 0


@pytest.mark.parametrize("kind,says", [
    ("crash", "crash (SIGABRT) in pid {odd}"),
    ("sigkill", "killed in pid {odd}"),
    ("fd-leak", "fd leak in pid {odd}"),
    ("double-free", "double free in pid {odd}"),
    ("damaged", "heisen-dump: {odd}.0.seg: zero magic"),
])
def test_one_process_among_many_with_something_to_report_is_reported(heisen, session, tmp_path, kind, says):
    """One fork worker among 40 crashes, is SIGKILLed, leaks fds, frees
    twice (and goes on), or damages its own segment; the others end
    cleanly: the end of the run reads the whole session and reports it."""
    p, runs = run_many(heisen, session, tmp_path, kind, env={"HEISEN_ON_HEAP_ERROR": "continue"})
    assert p.returncode == 0 and "done" in p.stdout, p.stderr
    odd = next(int(ln.split()[1]) for ln in p.stdout.splitlines() if ln.startswith("odd "))
    assert BANNER + str(session) in p.stderr, p.stderr
    assert says.format(odd=odd) in p.stderr, p.stderr
    assert "no findings;" not in p.stderr
    assert [r for r in runs if "--check-hang" not in r], runs
