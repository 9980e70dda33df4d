# SPDX-License-Identifier: MIT
"""Crashes: the signal, the fault address and the faulting thread's stack are
recorded, and then the process dies exactly as it would have without heisen
(same exit status, same core dump).  A program that handles its own SIGSEGV
and goes on has not crashed.  Python's faulthandler keeps working.
"""
import os
import resource
import signal
import subprocess
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON, fact_int, facts, findings_of, frame_functions, process_of, target

CASES = [
    # mode, signal, function at the top of the faulting stack
    ("segv", signal.SIGSEGV, "write_through_null"),
    ("thread", signal.SIGSEGV, "write_through_null"),
    ("abort", signal.SIGABRT, "abort_here"),
    ("fpe", signal.SIGFPE, "divide_by_zero"),
    ("ill", signal.SIGILL, "illegal_instruction"),
    ("bus", signal.SIGBUS, "touch_past_eof"),
]


@pytest.mark.parametrize("mode, signo, fn", CASES, ids=[c[0] for c in CASES])
def test_crash_is_recorded_and_the_signal_still_kills(heisen, way, mode, signo, fn):
    p = way.run([target(heisen, "segv"), mode])
    assert p.returncode == way.killed_by(signo), (p.returncode, p.stdout, p.stderr)
    assert "survived" not in p.stdout
    pid, tid = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid")

    report = heisen.dump_json(way.session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    c = crashes[0]
    assert c["pid"] == pid and c["tids"] == [tid]
    assert c["signal"] == signo and c["signal_name"] == signal.Signals(signo).name
    if mode in ("segv", "thread", "bus"):
        assert int(c["address"], 16) == int(facts(p.stdout)["fault_addr"][0], 16)
    if mode == "segv":
        assert c["address"] == "0x10"  # the field's offset in a NULL struct pointer
    frames = [f for st in c["stacks"] for f in frame_functions(st)]
    # The faulting function is on top, under at most libc's abort/raise frames.
    assert fn in frame_functions(c["stacks"][0])[:6], c["stacks"][0]
    if mode == "thread":
        assert "crash_thread" in frames and "main" not in frame_functions(c["stacks"][0])
    else:
        assert "main" in frames

    proc = process_of(report, pid)
    assert proc["state"] == "crashed" and proc["signal"] == signo
    if way.name == "heisen-run":
        assert "crash" in p.stderr and fn in p.stderr and str(way.session) in p.stderr


def test_a_handled_sigsegv_is_not_a_crash(heisen, way):
    p = way.run([target(heisen, "segv"), "recover"])
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "recovered" in p.stdout.split()
    report = heisen.dump_json(way.session, expect_rc=0)
    assert findings_of(report, "crash") == [] and report["findings"] == []
    proc = process_of(report, fact_int(p.stdout, "pid"))
    assert proc["state"] == "exited" and proc["exit_status"] == 0


def test_clean_exit_is_not_a_crash(heisen, way):
    p = way.run([target(heisen, "exec_chain"), "stop"])
    assert p.returncode == 0
    report = heisen.dump_json(way.session, expect_rc=0)
    assert findings_of(report, "crash") == []
    assert process_of(report, fact_int(p.stdout, "pid"))["state"] == "exited"


# ---- core dumps are what they would have been --------------------------------


def run_for_core(cmd, cwd, env):
    """Run cmd with an unlimited core size in cwd; (wait status, core files)."""
    def unlimited():
        resource.setrlimit(resource.RLIMIT_CORE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
    proc = subprocess.Popen([str(c) for c in cmd], cwd=cwd, env=env, preexec_fn=unlimited,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status = os.waitpid(proc.pid, 0)
    proc.returncode = 0  # reaped here; keep Popen from waiting again
    cores = sorted(p.name for p in Path(cwd).iterdir() if p.name.startswith("core"))
    return status, cores


def test_core_dump_is_unchanged(heisen, session, tmp_path):
    pattern = Path("/proc/sys/kernel/core_pattern").read_text().strip()
    if pattern.startswith("|") or "/" in pattern:
        pytest.skip(f"core_pattern {pattern!r} does not write cores in the cwd")
    if resource.getrlimit(resource.RLIMIT_CORE)[1] != resource.RLIM_INFINITY:
        pytest.skip("hard RLIMIT_CORE is limited")
    bare_dir, shim_dir = tmp_path / "bare", tmp_path / "shim"
    bare_dir.mkdir()
    shim_dir.mkdir()
    cmd = [target(heisen, "segv"), "segv"]

    bare_status, bare_cores = run_for_core(cmd, bare_dir, heisen.env())
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    shim_status, shim_cores = run_for_core(cmd, shim_dir, env)

    assert os.WIFSIGNALED(bare_status) and os.WTERMSIG(bare_status) == signal.SIGSEGV
    assert os.WIFSIGNALED(shim_status) and os.WTERMSIG(shim_status) == signal.SIGSEGV
    assert os.WCOREDUMP(shim_status) == os.WCOREDUMP(bare_status)
    assert len(shim_cores) == len(bare_cores), (bare_cores, shim_cores)
    assert findings_of(heisen.dump_json(session), "crash")


# ---- Python's faulthandler ------------------------------------------------------


def test_python_faulthandler_still_prints_and_heisen_records_the_crash(heisen, way):
    code = "import ctypes, os; print('pid', os.getpid(), flush=True); ctypes.string_at(0)"
    p = way.run([SYSTEM_PYTHON, "-X", "faulthandler", "-c", code])
    assert p.returncode == way.killed_by(signal.SIGSEGV), (p.returncode, p.stderr)
    # faulthandler ran: its banner and the Python traceback are on stderr.
    assert "Fatal Python error: Segmentation fault" in p.stderr, p.stderr
    assert 'File "<string>", line 1' in p.stderr, p.stderr
    pid = fact_int(p.stdout, "pid")

    report = heisen.dump_json(way.session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    c = crashes[0]
    assert c["pid"] == pid and c["signal"] == signal.SIGSEGV and int(c["address"], 16) == 0
    # ctypes.string_at(0) is strlen(NULL): libc's strlen faults.
    top = c["stacks"][0]["frames"][0]
    assert "strlen" in (top["function"] or ""), c["stacks"][0]["frames"][:3]
    assert "libc" in (top["module"] or "")
    proc = process_of(report, pid)
    assert proc["state"] == "crashed" and proc["signal"] == signal.SIGSEGV


def test_python_faulthandler_without_heisen_is_the_baseline(heisen):
    """The same command without heisen: what the test above must still match."""
    p = subprocess.run([SYSTEM_PYTHON, "-X", "faulthandler", "-c",
                        "import ctypes; ctypes.string_at(0)"], capture_output=True, text=True,
                       env=heisen.env(), timeout=60)
    assert p.returncode == -signal.SIGSEGV
    assert "Fatal Python error: Segmentation fault" in p.stderr
