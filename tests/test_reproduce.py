# SPDX-License-Identifier: MIT
"""Reproducing flaky failures with heisen-run: --repeat, --until-fail,
--parallel, --ramp (launcher/repeat.c), the seed of a run and the command
that replays it, fault injection (--fail, --fail-after, --heap-limit:
shim/faults.c) and chaos schedules (--chaos: shim/chaos.c).

Rates and timings are never asserted here: bench/ measures them.
"""
import os
import pty
import re
import select
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON, pyext_dir

SUMMARY = "==== heisen-run summary: "
SUMMARY_END = "==== end of heisen-run summary ===="


def summary_of(stderr):
    assert SUMMARY in stderr and SUMMARY_END in stderr, stderr[-3000:]
    return stderr[stderr.index(SUMMARY):stderr.index(SUMMARY_END)]


def parent_of(summary):
    return Path(summary.splitlines()[0][len(SUMMARY):].rstrip(" ="))


def replay_of(summary):
    m = re.search(r"^replay: (.*)$", summary, re.M)
    assert m, summary
    return shlex.split(m.group(1))


# A program that fails by its seed: run k of a driver gets seed base+k, so
# which runs fail is known in advance (a stand-in for heisen's own seeded
# decisions, which the fault and chaos tests below exercise for real).
SEEDED = r"""
import ctypes, os, sys
seed = int(os.environ["HEISEN_SEED"])
print("seed", seed, flush=True)
if seed % 4 == 1:
    ctypes.string_at(0)          # a real SIGSEGV inside libc's strlen
if seed % 4 == 2:
    sys.exit(3)
"""


def test_until_fail_stops_at_first_failing_run_and_prints_replay(heisen, tmp_path):
    prog = tmp_path / "seeded.py"
    prog.write_text(SEEDED)
    p = heisen.run(["--repeat", "10", "--until-fail", "--seed", "100", "--", SYSTEM_PYTHON, prog], timeout=120)
    s = summary_of(p.stderr)
    # seeds 100, 101: run 2 (seed 101) is the first to fail, with SIGSEGV
    assert p.returncode == 128 + signal.SIGSEGV, (p.returncode, p.stderr[-2000:])
    assert "runs: 2 of 10, failed: 1" in s, s
    assert "first failure: run 2, seed 101: signal SIGSEGV" in s, s
    assert "failures by kind: signal SIGSEGV: 1" in s, s
    # the crash, deduplicated by its stack, names the Python line too
    m = re.search(r"^  1 run \(first: run 2\)  crash: (.*)$", s, re.M)
    assert m and "strlen" in m.group(1).split(" < ")[0], s
    assert m.group(1).endswith("| string_at (__init__.py)"), s
    assert "0x" not in m.group(1), "a signature never holds addresses"
    # the clean run's session is gone, the failing one's is kept with its output
    parent = parent_of(s)
    assert sorted(x.name for x in parent.iterdir()) == ["run-0002", "run-0002.log"]
    assert "seed 101" in (parent / "run-0002.log").read_text()
    assert any(x.name.endswith(".seg") for x in (parent / "run-0002").iterdir())
    # the replay command is one plain run with that seed, and fails the same way
    cmd = replay_of(s)
    assert cmd[0] == str(heisen.run_bin) and "--seed" in cmd and cmd[cmd.index("--seed") + 1] == "101"
    assert "--repeat" not in cmd and "--until-fail" not in cmd
    r = subprocess.run(cmd, env=heisen.env(), capture_output=True, text=True, timeout=60)
    assert r.returncode == 128 + signal.SIGSEGV and "seed 101" in r.stdout, (r.returncode, r.stderr[-1000:])


def test_repeat_counts_failures_by_kind_and_deduplicates_findings(heisen, tmp_path):
    prog = tmp_path / "seeded.py"
    prog.write_text(SEEDED)
    p = heisen.run(["--repeat", "8", "--seed", "200", "--dir", tmp_path / "runs", "--", SYSTEM_PYTHON, prog],
                   timeout=120)
    s = summary_of(p.stderr)
    # seeds 200..207: %4 == 1 at 201, 205 (SIGSEGV); == 2 at 202, 206 (exit 3)
    assert "runs: 8 of 8, failed: 4" in s, s
    assert "signal SIGSEGV: 2" in s and "exit 3: 2" in s, s
    assert "distinct findings: 1\n" in s, s
    assert re.search(r"^  2 runs \(first: run 2\)  crash: ", s, re.M), s
    assert "first failure: run 2, seed 201" in s
    assert p.returncode == 128 + signal.SIGSEGV
    assert parent_of(s) == (tmp_path / "runs").resolve()
    kept = sorted(x.name for x in (tmp_path / "runs").iterdir() if not x.name.endswith(".log"))
    assert kept == ["run-0002", "run-0003", "run-0006", "run-0007"], kept


def test_repeat_of_a_clean_program_leaves_nothing_unless_kept(heisen, tmp_path):
    p = heisen.run(["--repeat", "3", "--dir", tmp_path / "a", "--", SYSTEM_PYTHON, "-c", "pass"], timeout=120)
    s = summary_of(p.stderr)
    assert p.returncode == 0 and "runs: 3 of 3, failed: 0" in s and "no run failed" in s, s
    assert not (tmp_path / "a").exists()
    p = heisen.run(["--repeat", "3", "--keep-sessions", "--dir", tmp_path / "b", "--", SYSTEM_PYTHON, "-c", "pass"],
                   timeout=120)
    assert p.returncode == 0
    assert sorted(x.name for x in (tmp_path / "b").iterdir() if x.is_dir()) == ["run-0001", "run-0002", "run-0003"]


def test_findings_of_a_run_that_exits_zero_make_it_fail(heisen, tmp_path):
    """A double free that the program survives (HEISEN_ON_HEAP_ERROR=continue)
    is still an abnormal run: the finding counts, not only the exit code."""
    prog = tmp_path / "ctypes_df.py"
    prog.write_text("import ctypes\nlibc = ctypes.CDLL(None)\nlibc.malloc.restype = ctypes.c_void_p\n"
                    "libc.free.argtypes = [ctypes.c_void_p]\np = libc.malloc(64)\nlibc.free(p)\nlibc.free(p)\n")
    p = heisen.run(["--repeat", "2", "--until-fail", "--", SYSTEM_PYTHON, prog], timeout=120,
                   env={"HEISEN_ON_HEAP_ERROR": "continue"})
    s = summary_of(p.stderr)
    assert "first failure: run 1" in s and ": finding" in s, s
    assert re.search(r"double-free: ", s), s
    assert p.returncode == 1, p.returncode


def test_progress_line_only_on_a_terminal(heisen, tmp_path):
    cmd = [str(heisen.run_bin), "--repeat", "2", "--dir", str(tmp_path / "t"), "--", SYSTEM_PYTHON, "-c",
           "import time; time.sleep(0.5)"]
    master, slave = pty.openpty()
    proc = subprocess.Popen(cmd, env=heisen.env(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=slave)
    os.close(slave)
    out = b""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        r, _, _ = select.select([master], [], [], 1)
        if r:
            try:
                chunk = os.read(master, 4096)
            except OSError:
                break
            if not chunk:
                break
            out += chunk
        elif proc.poll() is not None:
            break
    proc.wait(timeout=30)
    os.close(master)
    text = out.decode(errors="replace")
    assert re.search(r"run \d of 2, 0 failed, \d+ s", text), text
    p = heisen.run(["--repeat", "2", "--dir", tmp_path / "n", "--", SYSTEM_PYTHON, "-c", "pass"])
    assert "\r" not in p.stderr and "0 failed," not in p.stderr, p.stderr


# ---- parallel pressure ------------------------------------------------------


def test_parallel_until_fail_finds_the_concurrent_double_free(heisen):
    """Seed 000's shape: request threads race on an extension's cache, the
    crash shows only when callers overlap; copies at once until one fails."""
    ext = pyext_dir(heisen)
    if not list(ext.glob("torchlike*.so")):
        pytest.fail(f"torchlike extension not built in {ext}")
    script = heisen.src_targets / "py_seed000.py"
    p = heisen.run(["--parallel", "4", "--until-fail", "--repeat", "200", "--", SYSTEM_PYTHON, script, "2", "0.5",
                    ext], timeout=60)
    s = summary_of(p.stderr)
    assert p.returncode == 128 + signal.SIGABRT, (p.returncode, s)
    assert "(4 at once)" in s
    m = re.search(r"^  1 run \(first: run \d+\)  double-free: (.*)$", s, re.M)
    assert m, s
    assert m.group(1).startswith("workspace_cache_evict < conv2d_kernel < "), m.group(1)
    assert m.group(1).endswith("| forward_pass (py_seed000.py)"), m.group(1)
    assert "add --parallel 4 --until-fail to replay that too" in s


SEATS = r"""
import os, sys, time
# a service with two seats: a third concurrent caller gets none and fails
d = os.environ["SEATS_DIR"]
for i in range(2):
    try:
        fd = os.open(os.path.join(d, f"seat{i}"), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        break
    except FileExistsError:
        continue
else:
    raise SystemExit("no free seat")
time.sleep(1.5)
os.unlink(os.path.join(d, f"seat{i}"))
"""


def test_ramp_raises_the_copies_until_one_fails(heisen, tmp_path):
    prog = tmp_path / "seats.py"
    prog.write_text(SEATS)
    seats = tmp_path / "seats"
    seats.mkdir()
    p = heisen.run(["--ramp", "1..5", "--", SYSTEM_PYTHON, prog], timeout=120, env={"SEATS_DIR": str(seats)})
    s = summary_of(p.stderr)
    assert "(ramp 1..5)" in s, s
    # levels 1 and 2 (3 runs) pass; level 3 has a run with no seat
    assert re.search(r"first failure: run [4-6], seed \d+: exit 1", s), s
    assert "failed with 3 runs at once" in s, s
    assert p.returncode == 1
