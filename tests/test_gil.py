# SPDX-License-Identifier: MIT
"""The GIL is a lock: seed 003, Python stacks in crashes and hangs.

Every test runs on each kind of CPython (conftest.INTERPRETER_KINDS): Debian's
/usr/bin/python3, whose libpython is linked into the executable (the GIL
entry points are reached by GOT patching), pyembed, the same interpreter
through Debian's libpython3.11.so (reached by LD_PRELOAD interposition), and
the python3 on PATH when it is another shared build.

- py_gil_rwlock_callback.py quiet: a native rwlock (cudalike's cuda_ctx_lock) held
  across a Python callback, and taken elsewhere with the GIL held, at
  different times: a `potential-deadlock` GIL <-> cuda_ctx_lock, with the
  Python line of each caller and the native frame that holds the rwlock.
  The callback goes through the C API, through a ctypes CFUNCTYPE pointer,
  and through a ctypes foreign call as Numba made it.
- py_gil_rwlock_callback.py hang: the same two calls meet and deadlock: heisen-run names
  the `deadlock` (the GIL's waiter and the GIL's holder), kills, exits 137.
- py_gil_rwlock_callback.py hang-after-launch: an earlier thread launched, then the
  same deadlock: the run that hangs also carries the `potential-deadlock`, whose
  edge cuda_ctx_lock -> GIL was added before the callback's take blocked.
- py_crash_nested.py: a segfault in native code two Python calls deep: the
  crash stack shows the Python functions; the other threads' Python stacks
  are in the report too.
- py_blocked_read.py: a thread blocked in os.read (not a lock) and the main
  thread joining it: a `hang` with the reader's Python line.
- py_gil_busy.py: sqlite3, zlib, hashlib, time.sleep and queue in threads:
  no finding, same output, same exit status.
- A program without Python: no GIL node, "python": null.
- `python3` as typed, through pyenv's wrapper scripts: the bash/env images
  are untouched, the prediction is made in the interpreter's image.
"""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (SYSTEM_PYTHON, all_stacks, edge_pairs, fact_int, find_python_frame,
                      findings_of, frame_functions, interpreter, lockname, lockrefs_in,
                      marker_line, native_index, process_of, pyext_dir, python_frames, target)

SEED = "py_gil_rwlock_callback.py"


def script(heisen, name):
    return heisen.src_targets / name


def kill_session_processes(session):
    """SIGKILL every process whose HEISEN_DIR is this test's session (ours alone)."""
    want = f"HEISEN_DIR={session}".encode()
    for d in Path("/proc").iterdir():
        if not d.name.isdigit() or int(d.name) == os.getpid():
            continue
        try:
            env = (d / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if want in env:
            try:
                os.kill(int(d.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def run_watched(heisen, session, cmd, timeout=45):
    """heisen-run --hang-timeout 2 --on-hang kill -- cmd; never leaves a process behind.

    When heisen-run has not ended after `timeout` seconds (its watchdog saw
    nothing), everything of the session is killed and the test fails.
    """
    args = [str(heisen.run_bin), "--dir", str(session), "--hang-timeout", "2",
            "--on-hang", "kill", "--", *map(str, cmd)]
    proc = subprocess.Popen(args, env=heisen.env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        kill_session_processes(session)
        out, err = proc.communicate()
        pytest.fail(f"heisen-run did not end {timeout} s after a hang of 2 s: "
                    f"stdout={out!r} stderr={err!r}")
    finally:
        kill_session_processes(session)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def cudalike_dir(heisen):
    d = pyext_dir(heisen)
    if not list(d.glob("cudalike*.so")):
        pytest.fail(f"cudalike extension not built in {d}: ninja -C {heisen.build}")
    return d


def check_python_process(proc, interp, extension=True):
    """The process record says which Python it ran and how the GIL was reached.

    extension: the program loaded an extension module that calls the GIL
    entry points (cudalike, heisenlocks, _ctypes); in Debian's python3 only
    GOT patching reaches them there.  A program that loads none has nothing
    to patch.
    """
    py = proc.get("python")
    assert isinstance(py, dict), f"process {proc['pid']} has no python record: {py!r}"
    assert py["version"].startswith("3.11"), py
    assert py["frames"] is True, py
    if extension and not interp.shared:
        assert py["got_patched"] is True, py


def check_python_frame(fr, script_name):
    assert fr["python"] is True
    assert fr["file"] and fr["file"].endswith(script_name), fr
    assert isinstance(fr["line"], int) and fr["line"] > 0, fr
    assert fr.get("module") is None and fr.get("offset") is None, fr


def is_gil(ref):
    return ref["kind"] == "gil" and ref["name"] == "GIL"


# ---- seed 003, quiet: predicted ----------------------------------------------------

# via -> (native frames expected between the GIL's acquisition and the holder's
#         Python frame, innermost first; the holder's marker)
VIAS = {
    "capi": (["ctx_call_python", "cuda_ctx_call", "py_with_context"],
             "holder calls with_context"),
    "ctypes": (["ctx_call_cfunc", "cuda_ctx_call", "py_with_context_ctypes"],
               "holder calls with_context_ctypes"),
    "ffi": (["ctx_call_cfunc", "cuda_ctx_call", "cuda_occupancy"],
            "holder calls cuda_occupancy"),
}


def in_order(stack, indexes, what):
    present = [i for i in indexes if i is not None]
    assert len(present) == len(indexes), (what, indexes, frame_functions(stack))
    assert present == sorted(present), (what, indexes, frame_functions(stack))


def check_callback_gil_edge(by_to, tid_holder, via, src, what):
    """The edge cuda_ctx_lock -> GIL: made by the holder's thread, its GIL
    stack the callback's native frames (by `via`) then the holder's Python
    line. Returns the edge and that line."""
    e = by_to["GIL"]
    assert e["tid"] == tid_holder
    natives, marker = VIAS[via]
    line = marker_line(src, marker)
    st = e["to_stack"]
    in_order(st, [native_index(st, fn) for fn in natives]
             + [find_python_frame(st, "holder", SEED, line)], what)
    return e, line


def check_gil_rwlock_prediction(heisen, report, stdout, interp, via):
    pid, tid_holder, tid_launcher = (fact_int(stdout, k)
                                     for k in ("pid", "tid_holder", "tid_launcher"))
    src = script(heisen, SEED)
    pds = findings_of(report, "potential-deadlock")
    ours = [f for f in pds if {"GIL", "cuda_ctx_lock"} <= {lockname(l) for l in f["locks"]}]
    assert len(ours) == 1, report["findings"]
    f = ours[0]
    assert pds == ours, pds                       # nothing else, in CPython or in ctypes
    assert report["findings"] == ours, report["findings"]
    assert f["pid"] == pid
    assert sorted(f["tids"]) == sorted([tid_holder, tid_launcher])
    gil = [l for l in f["locks"] if lockname(l) == "GIL"][0]
    ctx = [l for l in f["locks"] if lockname(l) == "cuda_ctx_lock"][0]
    assert is_gil(gil), gil
    assert ctx["kind"] == "rwlock", ctx
    assert edge_pairs(f) == {("GIL", "cuda_ctx_lock"), ("cuda_ctx_lock", "GIL")}
    assert "GIL" in f["message"] and "cuda_ctx_lock" in f["message"], f["message"]

    by_to = {lockname(e["to"]): e for e in f["edges"]}
    # GIL -> cuda_ctx_lock: the launcher took the rwlock holding the GIL.
    e = by_to["cuda_ctx_lock"]
    assert e["tid"] == tid_launcher
    st = e["to_stack"]
    assert st["frames"][0]["function"] == "cuda_launch_kernel", frame_functions(st)
    assert "cudalike" in st["frames"][0]["module"] and st["frames"][0]["file"] == "cudalike.c"
    line = marker_line(src, "launcher calls launch (quiet)")
    in_order(st, [native_index(st, "cuda_launch_kernel"), native_index(st, "py_launch"),
                  find_python_frame(st, "launcher", SEED, line)], "launcher's wrlock")
    for fr in python_frames(st):
        check_python_frame(fr, fr["file"].rsplit("/", 1)[-1])

    # cuda_ctx_lock -> GIL: the holder's callback took the GIL holding the rwlock.
    e, line = check_callback_gil_edge(by_to, tid_holder, via, src, "the callback's GIL")
    st = e["to_stack"]
    check_python_frame(st["frames"][find_python_frame(st, "holder", SEED, line)], SEED)
    # ... and the rwlock's acquisition in the same thread, where it is held.
    st = e["from_stack"]
    assert st["frames"][0]["function"] == "cuda_ctx_call", frame_functions(st)
    assert find_python_frame(st, "holder", SEED, line) is not None, frame_functions(st)

    proc = process_of(report, pid)
    assert proc["state"] == "exited" and proc["exit_status"] == 0
    check_python_process(proc, interp)
    return f


@pytest.mark.parametrize("via", list(VIAS))
def test_gil_rwlock_inversion_is_predicted(heisen, way, interp, via):
    ext = cudalike_dir(heisen)
    p = way.run(interp.cmd(script(heisen, SEED), "quiet", via, "write", ext))
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "callback 1" in p.stdout and "done ok" in p.stdout, p.stdout
    report = heisen.dump_json(way.session, expect_rc=1)
    check_gil_rwlock_prediction(heisen, report, p.stdout, interp, via)


def test_gil_rwlock_inversion_predicted_when_the_holder_only_reads(heisen, session, interp):
    """A read hold of the rwlock across the callback is as deadly: the launcher writes."""
    ext = cudalike_dir(heisen)
    p = heisen.preload(interp.cmd(script(heisen, SEED), "quiet", "capi", "read", ext), session)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    report = heisen.dump_json(session, expect_rc=1)
    check_gil_rwlock_prediction(heisen, report, p.stdout, interp, "capi")


def test_gil_rwlock_text_report_shows_python_lines(heisen, session, interp):
    """The text report (docs/interfaces.md): `#N  function (file:line) [python]`."""
    ext = cudalike_dir(heisen)
    src = script(heisen, SEED)
    p = heisen.preload(interp.cmd(src, "quiet", "capi", "write", ext), session)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    text = heisen.dump(session)
    assert text.returncode == 1, text.stderr
    assert "potential deadlock" in text.stdout and "GIL" in text.stdout
    for fn, marker in (("holder", "holder calls with_context"),
                       ("launcher", "launcher calls launch (quiet)")):
        want = f"{fn} ({src}:{marker_line(src, marker)}) [python]"
        assert re.search(r"#\d+\s+" + re.escape(want), text.stdout), (want, text.stdout)
    for fn in ("cuda_ctx_call", "ctx_call_python", "cuda_launch_kernel"):
        assert re.search(r"#\d+\s+" + fn + r" \(cudalike\.c:\d+\)", text.stdout), fn


# ---- seed 003, for real: the deadlock -----------------------------------------------

@pytest.mark.parametrize("via", list(VIAS))
def test_gil_rwlock_deadlock_is_named_and_killed(heisen, session, interp, via):
    ext = cudalike_dir(heisen)
    src = script(heisen, SEED)
    t0 = time.monotonic()
    p = run_watched(heisen, session, interp.cmd(src, "hang", via, "write", ext))
    elapsed = time.monotonic() - t0
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "waiting ok" in p.stdout and "not reached" not in p.stdout, p.stdout
    assert 2 <= elapsed < 45, elapsed
    pid, tid_holder, tid_launcher = (fact_int(p.stdout, k)
                                     for k in ("pid", "tid_holder", "tid_launcher"))
    for word in ("deadlock", "GIL", "cuda_ctx_lock", str(tid_holder), str(tid_launcher),
                 f"launcher ({src}:{marker_line(src, 'launcher calls launch (hang)')}) [python]"):
        assert word in p.stderr, (word, p.stderr)

    report = heisen.dump_json(session, expect_rc=1)
    dls = findings_of(report, "deadlock")
    assert len(dls) == 1, report["findings"]
    f = dls[0]
    assert f["pid"] == pid
    assert sorted(f["tids"]) == sorted([tid_holder, tid_launcher])
    assert sorted(lockname(l) for l in f["locks"]) == ["GIL", "cuda_ctx_lock"]
    assert any(is_gil(l) for l in f["locks"]), f["locks"]
    by_tid = {t["tid"]: t for t in f["threads"]}
    assert set(by_tid) == {tid_holder, tid_launcher}

    # The holder: holds cuda_ctx_lock, waits for the GIL in its callback.
    t = by_tid[tid_holder]
    # (a threading.Thread also holds its own thread-state lock, a Python lock, all its life)
    assert [lockname(l) for l in t["holds"] if l["kind"] != "semaphore"] == ["cuda_ctx_lock"], t["holds"]
    assert is_gil(t["waits_for"]), t["waits_for"]
    assert t.get("holds_gil") is not True
    natives, marker = VIAS[via]
    st = t["wait_stack"]
    in_order(st, [native_index(st, fn) for fn in natives]
             + [find_python_frame(st, "holder", SEED, marker_line(src, marker))],
             "holder waiting for the GIL")
    assert t["hold_stack"]["frames"][0]["function"] == "cuda_ctx_call"

    # The launcher: holds the GIL, waits for cuda_ctx_lock in launch().
    t = by_tid[tid_launcher]
    assert t.get("holds_gil") is True, t
    assert any(is_gil(l) for l in t["holds"]), t["holds"]
    assert lockname(t["waits_for"]) == "cuda_ctx_lock", t["waits_for"]
    st = t["wait_stack"]
    assert st["frames"][0]["function"] == "cuda_launch_kernel", frame_functions(st)
    in_order(st, [native_index(st, "cuda_launch_kernel"), native_index(st, "py_launch"),
                  find_python_frame(st, "launcher", SEED,
                                    marker_line(src, "launcher calls launch (hang)"))],
             "launcher waiting for cuda_ctx_lock")

    proc = process_of(report, pid)
    assert proc["state"] == "killed"
    check_python_process(proc, interp)


@pytest.mark.parametrize("via", list(VIAS))
def test_gil_deadlock_is_predicted_by_the_take_that_then_hangs(heisen, session, interp, via):
    """The edge cuda_ctx_lock -> GIL is added before the callback's take blocks.

    A thread that ran launch() to its end earlier made GIL -> cuda_ctx_lock;
    the holder then takes the rwlock and its callback waits for the GIL for
    ever (the launcher holds it, waiting for the rwlock).  The take never
    returns, so the cycle is predicted only if its edge was added before the
    real take: the run that hangs carries the potential-deadlock (both edges,
    the callback's Python line) next to the live deadlock.  Guards the order
    of python.c's take hooks (bench/README.md "GIL hand-offs: where heisen's
    work sits around the GIL does not matter").
    """
    ext = cudalike_dir(heisen)
    src = script(heisen, SEED)
    p = run_watched(heisen, session, interp.cmd(src, "hang-after-launch", via, "write", ext))
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "waiting ok" in p.stdout and "not reached" not in p.stdout, p.stdout
    pid, tid_early, tid_holder, tid_launcher = (fact_int(p.stdout, k) for k in
                                                ("pid", "tid_early", "tid_holder", "tid_launcher"))
    report = heisen.dump_json(session, expect_rc=1)

    dls = findings_of(report, "deadlock")
    assert len(dls) == 1 and sorted(dls[0]["tids"]) == sorted([tid_holder, tid_launcher]), report["findings"]

    pds = findings_of(report, "potential-deadlock")
    assert len(pds) == 1, report["findings"]
    f = pds[0]
    assert f["pid"] == pid
    assert sorted(f["tids"]) == sorted([tid_early, tid_holder]), f["tids"]
    assert edge_pairs(f) == {("GIL", "cuda_ctx_lock"), ("cuda_ctx_lock", "GIL")}
    by_to = {lockname(e["to"]): e for e in f["edges"]}
    # GIL -> cuda_ctx_lock: the early thread's launch, taken with the GIL held.
    e = by_to["cuda_ctx_lock"]
    assert e["tid"] == tid_early
    st = e["to_stack"]
    in_order(st, [native_index(st, "cuda_launch_kernel"), native_index(st, "py_launch"),
                  find_python_frame(st, "early", SEED, marker_line(src, "early calls launch"))],
             "the early thread's wrlock")
    # cuda_ctx_lock -> GIL: the holder's callback, whose take of the GIL never returned.
    e, _ = check_callback_gil_edge(by_to, tid_holder, via, src, "the callback's GIL take")
    st = e["from_stack"]
    assert st["frames"][0]["function"] == "cuda_ctx_call", frame_functions(st)

    proc = process_of(report, pid)
    assert proc["state"] == "killed"
    check_python_process(proc, interp)


# ---- crashes and hangs outside locks --------------------------------------------------

def thread_stack_in_finding_or_snapshot(report, finding, tid):
    """The stack a report gives for thread tid: the finding's threads[], else its snapshot."""
    for t in finding.get("threads", []):
        if t.get("tid") == tid and t.get("stack"):
            return t["stack"]
    for pr in report["processes"]:
        if pr["pid"] != finding["pid"]:
            continue
        for t in pr["threads"]:
            if t["tid"] == tid and t.get("snapshot"):
                return t["snapshot"]["stack"]
    return None


def run_crash(heisen, way, interp):
    ext = pyext_dir(heisen)
    p = way.run(interp.cmd(script(heisen, "py_crash_nested.py"), ext))
    assert p.returncode == way.killed_by(signal.SIGSEGV), (p.returncode, p.stdout, p.stderr)
    assert "crashing now" in p.stdout and "not reached" not in p.stdout
    report = heisen.dump_json(way.session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    return p, report, crashes[0]


def test_crash_stack_shows_the_python_functions(heisen, way, interp):
    p, report, c = run_crash(heisen, way, interp)
    pid, tid = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_crasher")
    src = script(heisen, "py_crash_nested.py")
    assert c["pid"] == pid and c["signal"] == signal.SIGSEGV and c["address"] == "0x18"
    assert tid in c["tids"], c["tids"]
    st = c["stacks"][0]
    assert frame_functions(st)[:2] == ["ext_crash_here", "py_crash"], frame_functions(st)
    in_order(st, [native_index(st, "ext_crash_here"), native_index(st, "py_crash"),
                  find_python_frame(st, "parse_payload", "py_crash_nested.py",
                                    marker_line(src, "parse_payload crashes")),
                  find_python_frame(st, "handle_request", "py_crash_nested.py",
                                    marker_line(src, "handle_request calls parse_payload"))],
             "crash stack")
    for fr in python_frames(st):
        assert fr["file"] and isinstance(fr["line"], int), fr
    proc = process_of(report, pid)
    assert proc["state"] == "crashed" and proc["signal"] == signal.SIGSEGV
    check_python_process(proc, interp)


def test_crash_report_has_the_other_threads_python_stacks(heisen, way, interp):
    p, report, c = run_crash(heisen, way, interp)
    tid_idler = fact_int(p.stdout, "tid_idler")
    src = script(heisen, "py_crash_nested.py")
    st = thread_stack_in_finding_or_snapshot(report, c, tid_idler)
    assert st is not None, (c.get("threads"), report["processes"])
    assert find_python_frame(st, "idle_worker", "py_crash_nested.py",
                             marker_line(src, "idle_worker reads")) is not None, st["frames"]


def test_python_thread_blocked_in_read_is_a_hang(heisen, session, interp):
    src = script(heisen, "py_blocked_read.py")
    t0 = time.monotonic()
    p = run_watched(heisen, session, interp.cmd(src))
    elapsed = time.monotonic() - t0
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr)
    assert "waiting ok" in p.stdout and "not reached" not in p.stdout
    assert 2 <= elapsed < 45, elapsed
    pid, tid_reader, tid_main = (fact_int(p.stdout, k) for k in ("pid", "tid_reader", "tid_main"))
    assert "hang" in p.stderr and "wait_for_reply" in p.stderr, p.stderr

    report = heisen.dump_json(session, expect_rc=1)
    hangs = [f for f in findings_of(report, "hang") if f["pid"] == pid]
    assert len(hangs) == 1, report["findings"]
    assert not findings_of(report, "deadlock"), report["findings"]
    f = hangs[0]
    assert {tid_reader, tid_main} <= set(f["tids"]), f["tids"]
    assert f["stalled_seconds"] >= 2, f
    by_tid = {t["tid"]: t for t in f["threads"]}
    reader = by_tid[tid_reader]
    assert reader.get("holds_gil") is False, reader
    assert find_python_frame(reader["stack"], "wait_for_reply", "py_blocked_read.py",
                             marker_line(src, "wait_for_reply reads")) is not None, \
        reader["stack"]["frames"]
    main = by_tid[tid_main]
    assert find_python_frame(main["stack"], "main", "py_blocked_read.py",
                             marker_line(src, "main joins the reader")) is not None, \
        main["stack"]["frames"]
    proc = process_of(report, pid)
    assert proc["state"] == "killed"
    check_python_process(proc, interp, extension=False)


# ---- what must not be reported -----------------------------------------------------

def test_busy_python_with_well_behaved_extensions_is_quiet(heisen, way, interp):
    cmd = interp.cmd(script(heisen, "py_gil_busy.py"), "3", "1.0")
    bare = subprocess.run([str(c) for c in cmd], capture_output=True, text=True,
                          env=heisen.env(), timeout=120)
    assert bare.returncode == 3, (bare.stdout, bare.stderr)
    assert "WRONG" not in bare.stdout and "zlib ok" in bare.stdout, bare.stdout

    p = way.run(cmd, timeout=120)
    assert p.returncode == bare.returncode, (p.returncode, p.stderr)
    assert p.stdout == bare.stdout

    report = heisen.dump_json(way.session, expect_rc=0)
    assert report["findings"] == [], report["findings"]
    assert report.get("errors", []) == []
    procs = report["processes"]
    assert procs and all(pr["state"] == "exited" and pr["exit_status"] == 3 for pr in procs)
    py = [pr for pr in procs if pr.get("python")]
    assert len(py) == 1, [(pr["pid"], pr["exe"], pr.get("python")) for pr in procs]
    check_python_process(py[0], interp)
    # Quiet because the GIL's edges close no cycle, not because none was seen.
    dot = heisen.dump(way.session, "--dot")
    assert dot.returncode in (0, 1), dot.stderr
    gil_nodes = re.findall(r'^\s*("[^"]+") \[label="GIL\\n', dot.stdout, re.M)
    assert gil_nodes, dot.stdout[:2000]
    assert any(f"{n} -> " in dot.stdout for n in gil_nodes), dot.stdout[:2000]


def test_program_without_python_has_no_gil(heisen, way):
    p = way.run([target(heisen, "abba_sequential")])
    assert p.returncode == 0, (p.returncode, p.stderr)
    report = heisen.dump_json(way.session, expect_rc=1)
    assert findings_of(report, "potential-deadlock"), report["findings"]
    refs = lockrefs_in(report)
    assert refs and not [r for r in refs if r["kind"] == "gil" or r.get("name") == "GIL"], refs
    for pr in report["processes"]:
        assert "python" in pr and pr["python"] is None, (pr["pid"], pr.get("python"))
        for t in pr["threads"]:
            assert not t.get("holds_gil"), t
    for f in report["findings"]:
        for st in all_stacks(f):
            assert not python_frames(st), st


def test_gil_interpreters_are_what_they_claim(heisen, interp):
    """The shared kinds really load libpython3.11.so; Debian's python3 really does not."""
    from conftest import _ldd_libpython
    lib = _ldd_libpython(interp.exe)
    if interp.shared:
        assert lib and "libpython3.11.so" in lib, (interp, lib)
    else:
        assert lib is None, (interp, lib)
    out = subprocess.run([str(interp.exe), "-c", "import sys, sysconfig; "
                          "print(sys.version_info[:2] == (3, 11), "
                          "sysconfig.get_config_var('Py_ENABLE_SHARED'))"],
                         capture_output=True, text=True, env=heisen.env(), timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[0] == "True", out.stdout
    assert SYSTEM_PYTHON != str(interp.exe) or not interp.shared


def test_gil_rwlock_inversion_through_the_version_managers_wrapper(heisen, session):
    """`python3` as typed: the PATH entry may be a wrapper script (pyenv's shim runs
    bash, env, readlink … and finally execs the interpreter).  The preload goes
    through all of them harmlessly and the prediction is made in the last image."""
    import shutil
    interp = interpreter(heisen, "path-shared")
    wrapper = shutil.which("python3")
    if wrapper is None or Path(wrapper).resolve() == interp.exe:
        pytest.skip(f"python3 on PATH ({wrapper}) is the interpreter itself, no wrapper")
    ext = cudalike_dir(heisen)
    p = heisen.run(["--dir", session, "--", "python3", script(heisen, SEED),
                    "quiet", "capi", "write", ext], timeout=120)
    assert p.returncode == 0, (p.returncode, p.stdout, p.stderr)
    assert "done ok" in p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    assert report.get("errors", []) == [], report["errors"]
    images = [pr for pr in report["processes"] if pr["pid"] == pid]
    last = max(images, key=lambda pr: pr["image"])
    assert Path(last["exe"]).resolve() == interp.exe, [pr["exe"] for pr in images]
    check_python_process(last, interp)
    assert [f["kind"] for f in report["findings"]] == ["potential-deadlock"], report["findings"]
    f = report["findings"][0]
    assert f["pid"] == pid and edge_pairs(f) == {("GIL", "cuda_ctx_lock"),
                                                 ("cuda_ctx_lock", "GIL")}
    others = [pr for pr in report["processes"] if pr is not last]
    assert others, "the wrapper ran no process of its own"
    for pr in others:
        assert pr["python"] is None, (pr["pid"], pr["image"], pr["exe"], pr["python"])
        assert pr["state"] in ("exited", "execed"), (pr["pid"], pr["exe"], pr["state"])
