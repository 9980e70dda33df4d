# SPDX-License-Identifier: MIT
"""Process trees, OOM kills and the environment, end to end.

Seed 002 for real: a ProcessPoolExecutor worker that allocates without bound
in a memory-limited cgroup dies of the OOM killer, the pool breaks, and
heisen names the worker, `oom-kill`, its peak and the limit, with the
evidence it used.  A worker SIGKILLed by the test is `killed`, with its last
events.  multiprocessing's spawn and forkserver, subprocess and fork make a
tree where every process has its parent and its end.  The environment each
process saw is recorded; an affinity or CPU quota below the CPU count, a
memory limit at the peak, and a low open-files limit are warned about; and
`heisen-dump diff` compares two sessions without anything spurious.
Contracts: docs/interfaces.md "Processes and environment" and "heisen-dump
diff".  Cgroups are made below the test's own and removed, even on failure;
a test that needs one skips, saying why, only where none can be made.
"""
import contextlib
import json
import os
import platform
import resource
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON, fact_int, facts, findings_of, interpreter, process_of, pyext_dir, target

MIB = 1 << 20


def script(heisen, name):
    return heisen.src_targets / name


def pool_script(heisen, *args):
    return [SYSTEM_PYTHON, script(heisen, "py_process_pool.py"), *map(str, args)]


# ---- cgroups -------------------------------------------------------------------


def _own_cgroup(controller):
    """(version, directory) of this process's cgroup for controller, or (None, why not)."""
    lines = Path("/proc/self/cgroup").read_text().splitlines()
    if Path("/sys/fs/cgroup/cgroup.controllers").exists():
        path = next((ln.split(":", 2)[2] for ln in lines if ln.startswith("0::")), None)
        if path is None:
            return None, "cgroup v2 without a 0:: line in /proc/self/cgroup"
        return 2, Path("/sys/fs/cgroup" + (path if path != "/" else ""))
    for ln in lines:
        _, ctls, path = ln.split(":", 2)
        if controller in ctls.split(","):
            for mount in (f"/sys/fs/cgroup/{controller}", "/sys/fs/cgroup/cpu,cpuacct"):
                d = Path(mount + (path if path != "/" else ""))
                if d.is_dir():
                    return 1, d
            return None, f"the {controller} controller's directory for {path} is not mounted under /sys/fs/cgroup"
    return None, f"no {controller} cgroup controller on this machine"


def _kill_all_in(d):
    procs = d / "cgroup.procs"
    for _ in range(100):
        try:
            pids = [int(x) for x in procs.read_text().split()]
        except OSError:
            return
        if not pids:
            return
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)


@contextlib.contextmanager
def cgroup(controller, settings):
    """A new cgroup of `controller` below ours with settings {v1 file: value} /
    {v2 file: value} chosen by version; removed (its processes killed first)
    on the way out, whatever happened.  Yields (version, directory)."""
    version, parent = _own_cgroup(controller)
    if version is None:
        pytest.skip(f"no {controller} cgroup can be made: {parent}")
    if version == 2:
        sub = parent / "cgroup.subtree_control"
        try:
            if controller not in sub.read_text().split():
                sub.write_text(f"+{controller}")
        except OSError as e:
            pytest.skip(f"no {controller} cgroup can be made: enabling +{controller} in {sub}: {e}")
    d = parent / f"heisen-test-{os.getpid()}-{time.monotonic_ns()}"
    try:
        d.mkdir()
    except OSError as e:
        pytest.skip(f"no {controller} cgroup can be made: mkdir {d}: {e}")
    try:
        for name, value in settings[version].items():
            (d / name).write_text(str(value))
        yield version, d
    finally:
        _kill_all_in(d)
        for _ in range(100):
            try:
                d.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                time.sleep(0.05)
        assert not d.exists(), f"could not remove the test cgroup {d}"


def memory_cgroup(limit):
    return cgroup("memory", {1: {"memory.limit_in_bytes": limit},
                             2: {"memory.max": limit, "memory.swap.max": 0}})


def cpu_cgroup(quota_us, period_us):
    return cgroup("cpu", {1: {"cpu.cfs_period_us": period_us, "cpu.cfs_quota_us": quota_us},
                          2: {"cpu.max": f"{quota_us} {period_us}"}})


def join(d):
    """A preexec_fn that moves the child into cgroup directory d."""
    procs = str(d / "cgroup.procs")

    def enter():
        with open(procs, "w") as f:
            f.write(str(os.getpid()))
    return enter


# ---- helpers ----------------------------------------------------------------------


def proc_by_pid(report, pid):
    """The last image of pid (the one that ended)."""
    ps = [p for p in report["processes"] if p["pid"] == pid]
    assert ps, f"pid {pid} not in {[p['pid'] for p in report['processes']]}"
    return max(ps, key=lambda p: p["image"])


def settle(heisen, session, timeout=20):
    """heisen-dump --json once no process of the session is still running
    (multiprocessing's forkserver and resource tracker leave just after main)."""
    end = time.monotonic() + timeout
    while True:
        r = heisen.dump_json(session)
        running = [p["pid"] for p in r["processes"] if p["state"] == "running"]
        if not running or time.monotonic() > end:
            assert not running, f"still running after {timeout} s: {running}"
            return r
        time.sleep(0.1)


def evidence(finding):
    return {e["kind"]: e for e in finding["evidence"]}


def warnings_of(report, kind):
    return [w for w in report["warnings"] if w["kind"] == kind]


def event_types(thread):
    return [e["type"] for e in thread["events"]]


# ---- seed 002: the OOM-killed pool worker -------------------------------------------


LIMIT = 200 * MIB


def test_pool_worker_oom_killed_in_a_memory_cgroup(heisen, way):
    with memory_cgroup(LIMIT) as (_, cg):
        t0 = time.monotonic()
        p = way.run(pool_script(heisen, "oom"), timeout=120, preexec_fn=join(cg))
        took = time.monotonic() - t0
        assert p.returncode == 1, (p.returncode, p.stdout, p.stderr[-3000:])
        assert "broken BrokenProcessPool" in p.stdout, p.stdout
        assert took < 30, f"the OOM kill took {took:.1f} s"
        main, hog = fact_int(p.stdout, "main"), fact_int(p.stdout, "hog")
        r = heisen.dump_json(way.session, expect_rc=1)
        text = heisen.dump(way.session).stdout

    ooms = findings_of(r, "oom-kill")
    assert [f["pid"] for f in ooms] == [hog], r["findings"]
    assert findings_of(r, "killed") == [], findings_of(r, "killed")
    f = ooms[0]
    ev = evidence(f)
    counter = ev["oom-kill-counter"]
    assert counter["after"] > counter["before"] and counter["cgroup"] == str(cg)
    # its peak and the limit
    assert f["memory"]["limit_bytes"] == LIMIT
    assert 100 * MIB < f["memory"]["peak_rss_bytes"] <= LIMIT, f["memory"]
    assert f["memory"]["rss_bytes"] > 100 * MIB
    assert f["parent"] == main and f["tids"] == [hog] and f["ran_seconds"] > 0
    assert f"pid {hog} " in f["message"] and "OOM killer" in f["message"] and "200.0 MiB" in f["message"]
    # the memory trail that led there survived the SIGKILL
    (t,) = f["threads"]
    mem = [e for e in t["events"] if e["type"] == "memory"]
    assert len(mem) >= 3 and mem[-1]["rss_bytes"] == f["memory"]["rss_bytes"]
    assert mem[-1]["rss_bytes"] > mem[0]["rss_bytes"]
    # the pool terminated the other worker: a SIGTERM from main, seen by the worker itself
    others = [pr for pr in r["processes"] if pr["parent"] == main and pr["pid"] != hog]
    assert others and all(pr["state"] == "killed" and pr["signal"] == signal.SIGTERM and
                          pr["sent_by"]["pid"] == main for pr in others), others
    assert proc_by_pid(r, main)["state"] == "exited" and proc_by_pid(r, main)["exit_status"] == 1
    assert proc_by_pid(r, hog)["state"] == "vanished"
    assert [w["kind"] for w in r["warnings"]] == ["memory-limit"], r["warnings"]
    assert f"OOM kill in pid {hog}" in text and "<== oom-kill" in text
    if way.name == "heisen-run":
        assert f"OOM kill in pid {hog}" in p.stderr

    # The cgroup is gone: the evidence survives, read by main at its exit.
    r2 = heisen.dump_json(way.session, expect_rc=1)
    (f2,) = findings_of(r2, "oom-kill")
    c2 = evidence(f2)["oom-kill-counter"]
    assert f2["pid"] == hog and c2["read_by"] == "exit" and c2["read_by_pid"] == main
    assert c2["after"] == counter["after"]


@pytest.mark.parametrize("kind,ctx", [("path-shared", "spawn"), ("debian-static", "forkserver")])
def test_oom_kill_with_spawn_and_forkserver_workers(heisen, session, kind, ctx):
    """The same on the shared python3 first on PATH (spawn: the worker is an
    exec of python) and with a forkserver (the worker's real parent is the
    forkserver; the one it worked for is main)."""
    py = interpreter(heisen, kind)
    with memory_cgroup(LIMIT) as (_, cg):
        p = heisen.preload([py.exe, script(heisen, "py_process_pool.py"), "oom", ctx], session, timeout=120,
                           preexec_fn=join(cg))
        assert p.returncode == 1 and "broken BrokenProcessPool" in p.stdout, (p.returncode, p.stdout, p.stderr[-3000:])
        main, hog = fact_int(p.stdout, "main"), fact_int(p.stdout, "hog")
        r = heisen.dump_json(session, expect_rc=1)
    (f,) = findings_of(r, "oom-kill")
    c = evidence(f)["oom-kill-counter"]
    assert f["pid"] == hog and f["parent"] == main and c["after"] > c["before"]
    assert 100 * MIB < f["memory"]["peak_rss_bytes"] <= LIMIT and f["memory"]["limit_bytes"] == LIMIT
    pr = proc_by_pid(r, hog)
    assert pr["parent"] == main and pr["via"] == ("exec" if ctx == "spawn" else "forkserver")
    if ctx == "forkserver":
        fs = proc_by_pid(r, pr["real_parent"])
        assert pr["real_parent"] != main and fs["parent"] == main and any("forkserver" in a for a in fs["argv"])


def test_worker_sigkilled_by_the_test_is_killed_with_its_last_events(heisen, session):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([str(c) for c in pool_script(heisen, "sigkill", pyext_dir(heisen))], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("victim") and line.split()[-1] == "ready":
                break
        out = "".join(lines)
        main, victim = fact_int(out, "main"), int(facts(out)["victim"][0].split()[0])
        time.sleep(0.2)
        os.kill(victim, signal.SIGKILL)
        rest, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, (proc.returncode, err[-2000:])
    assert "broken BrokenProcessPool" in rest
    r = heisen.dump_json(session, expect_rc=1)
    assert findings_of(r, "oom-kill") == []
    (f,) = findings_of(r, "killed")
    assert f["pid"] == victim and f["parent"] == main
    assert "oom-kill-counter" not in evidence(f)
    assert f["memory"]["rss_bytes"] > 4 * MIB and f["memory"]["peak_rss_bytes"] >= f["memory"]["rss_bytes"]
    assert f["ran_seconds"] > 0 and f["ran_at_least"] is True
    (t,) = [t for t in f["threads"] if t["tid"] == victim]
    types = event_types(t)
    assert "lock-acquired" in types and "lock-released" in types and "memory" in types, types
    locks = {e["lock"]["name"] for e in t["events"] if e["type"] == "lock-acquired"}
    assert {"ext_lock_a", "ext_lock_b"} <= locks, locks
    assert proc_by_pid(r, victim)["state"] == "vanished"
    text = heisen.dump(session).stdout
    assert f"killed in pid {victim}" in text and "its last events" in text and "ext_lock_b" in text


def sigkilled_after_a_burst(heisen, session, mode):
    """Run py_alloc_burst.py MODE, SIGKILL it once ready: (its resident set before
    the first allocation, the killed finding, the memory records in its last events)."""
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([SYSTEM_PYTHON, str(script(heisen, "py_alloc_burst.py")), mode], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("burst") and line.split()[-1] == "ready":
                break
        out = "".join(lines)
        tick = fact_int(out, "tick")
        if "burst" not in facts(out):
            proc.wait(timeout=60)
            if mode == "tick" and tick < 2_000_000:
                pytest.skip(f"the coarse clock ticks every {tick} ns: never 1.5 ms between its ticks")
            pytest.fail(f"no try met its timing (exit {proc.returncode}): {out}")
        pid = int(facts(out)["burst"][0].split()[0])
        assert pid == proc.pid
        os.kill(pid, signal.SIGKILL)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == -signal.SIGKILL
    r = heisen.dump_json(session, expect_rc=1)
    (f,) = findings_of(r, "killed")
    assert f["pid"] == pid
    (t,) = [t for t in f["threads"] if t["tid"] == pid]
    return fact_int(out, "rss_before"), f, [e for e in t["events"] if e["type"] == "memory"]


def test_allocation_burst_right_after_a_sample_is_in_the_sigkilled_process_last_sample(heisen, session):
    # a 4 MiB buffer 1.5 ms (precise clock) after a 1 MiB one, within one tick of the
    # coarse clock heisen reads first for "is a sample due": the killed process's last
    # sample and last memory record are the 4 MiB allocation's, not the 1 MiB one's
    before, f, mem = sigkilled_after_a_burst(heisen, session, "tick")
    # bytearray(n) asks for n + 1 bytes; a sample is taken before its allocation is made
    assert mem, f["threads"]
    last, first = mem[-1], [e for e in mem if MIB <= e["alloc_bytes"] < MIB + 4096]
    assert last["why"] == "allocation" and 4 * MIB <= last["alloc_bytes"] < 4 * MIB + 4096, mem
    assert first and last["rss_bytes"] >= first[-1]["rss_bytes"] + 3 * MIB // 4, mem  # the 1 MiB, written
    assert f["memory"]["rss_bytes"] == last["rss_bytes"] >= before + MIB


def test_allocation_burst_inside_the_sample_gap_is_sampled_at_the_next_event(heisen, session):
    # a 4 MiB mapping made less than 1 ms after a 1 MiB one's sample (inside the gap between
    # allocation-driven samples: py_alloc_burst.py checks that on the precise clock and tries
    # again when the scheduler stretched it), both written, then a threading.Lock taken and
    # released, and a sleep until the SIGKILL: the sample the gap held back is taken at the
    # lock, after both buffers are written (the report's "resident at the last sample")
    before, f, mem = sigkilled_after_a_burst(heisen, session, "gap")
    assert f["memory"]["rss_bytes"] >= before + 4 * MIB, (before, f["memory"], mem)  # 1 + 4 MiB written


# ---- the tree ------------------------------------------------------------------------


def test_spawn_forkserver_subprocess_and_fork_make_one_tree(heisen, session):
    p = heisen.preload(pool_script(heisen, "tree"), session, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    out = facts(p.stdout)
    main = fact_int(p.stdout, "main")
    spawned = {int(x) for x in out["spawn_worker"]}
    served = {int(x) for x in out["forkserver_worker"]}
    fserver = fact_int(p.stdout, "forkserver")
    child, forked = fact_int(p.stdout, "subprocess_child"), fact_int(p.stdout, "fork_child")
    r = settle(heisen, session)
    assert r["findings"] == [], r["findings"]
    for pr in r["processes"]:
        assert pr["state"] in ("exited", "execed"), (pr["pid"], pr["state"], pr["argv"])
        if pr["state"] == "exited":
            assert pr["exit_status"] == 0, (pr["pid"], pr["argv"])
    assert proc_by_pid(r, main)["parent"] is None
    for pid in spawned:
        pr = proc_by_pid(r, pid)
        assert (pr["parent"], pr["real_parent"], pr["via"]) == (main, main, "exec"), pr["argv"]
        assert "--multiprocessing-fork" in pr["argv"]
    fs = proc_by_pid(r, fserver)
    assert (fs["parent"], fs["via"]) == (main, "exec") and any("forkserver" in a for a in fs["argv"])
    for pid in served:
        pr = proc_by_pid(r, pid)
        assert (pr["parent"], pr["real_parent"], pr["via"]) == (main, fserver, "forkserver"), pr
    pr = proc_by_pid(r, child)
    assert (pr["parent"], pr["via"], pr["argv"][1]) == (main, "exec", "-c")
    pr = proc_by_pid(r, forked)
    assert (pr["parent"], pr["via"]) == (main, "fork")
    # main's children, in the JSON tree too
    kids = set(proc_by_pid(r, main)["children"])
    assert spawned | served | {fserver, child, forked} <= kids
    (root,) = [n for n in r["tree"] if n["pid"] == main]
    assert {c["pid"] for c in root["children"]} == kids
    text = heisen.dump(session, "--all").stdout   # a clean session's tree is behind --all
    assert "---- process tree:" in text and f"[forkserver by {fserver} for {main}]" in text


def test_clean_pool_every_worker_exited_0_and_no_finding(heisen, way):
    p = way.run(pool_script(heisen, "clean", 3), timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    main = fact_int(p.stdout, "main")
    # the pool starts a worker only when none is idle: one worker may take two of the three tasks
    workers = {int(x) for x in facts(p.stdout)["worker"]}
    assert 1 <= len(workers) <= 3, workers
    r = settle(heisen, way.session)
    assert r["findings"] == [] and heisen.dump(way.session).returncode == 0
    forked = {pr["pid"] for pr in r["processes"] if pr["parent"] == main and pr["via"] == "fork"}
    assert workers <= forked and len(forked) <= 3, (workers, forked)
    for pid in forked:
        pr = proc_by_pid(r, pid)
        assert (pr["state"], pr["exit_status"], pr["parent"], pr["via"]) == ("exited", 0, main, "fork")
        assert pr["memory"]["samples"] >= 2 and pr["memory"]["peak_rss_bytes"] > 0
        assert pr["environment"]["inherited"] is True
    env = proc_by_pid(r, main)["environment"]
    if env["cpu_online"] < 2 * env["cpu_allowed"]:
        assert r["warnings"] == [], r["warnings"]
    if way.name == "heisen-run":
        assert "no findings" in p.stderr


# ---- the environment ------------------------------------------------------------------


ENV_PROBE = """
import json, os, platform, resource, sys
st = os.statvfs('/dev/shm')
lim = lambda r: [None if v == resource.RLIM_INFINITY else v for v in resource.getrlimit(r)]
print(json.dumps({"pid": os.getpid(), "cpu_count": os.cpu_count(),
                  "affinity": len(os.sched_getaffinity(0)), "kernel": platform.release(),
                  "libc": os.confstr('CS_GNU_LIBC_VERSION').split()[1],
                  "shm": st.f_blocks * st.f_frsize, "nofile": lim(resource.RLIMIT_NOFILE),
                  "as": lim(resource.RLIMIT_AS)[0], "core": lim(resource.RLIMIT_CORE)[0],
                  "python": platform.python_version(),
                  "extensions": sorted(m.__file__ for m in list(sys.modules.values())
                                       if (getattr(m, "__file__", None) or "").endswith(".so")),
                  "ram": os.sysconf('SC_PAGE_SIZE') * os.sysconf('SC_PHYS_PAGES')}))
"""


def test_each_segment_records_the_environment_it_saw(heisen, session):
    p = heisen.preload([SYSTEM_PYTHON, "-c", ENV_PROBE], session)
    assert p.returncode == 0, p.stderr
    want = json.loads(p.stdout)
    r = heisen.dump_json(session, expect_rc=0)
    pr = proc_by_pid(r, want["pid"])
    e = pr["environment"]
    assert e["inherited"] is False
    assert (e["cpu_online"], e["cpu_affinity"]) == (want["cpu_count"], want["affinity"])
    assert (e["kernel"], e["libc"], e["shm_bytes"]) == (want["kernel"], want["libc"], want["shm"])
    assert [e["rlimits"]["nofile"], e["rlimits"]["nofile_hard"]] == want["nofile"]
    assert (e["rlimits"]["as"], e["rlimits"]["core"]) == (want["as"], want["core"])
    assert abs(e["memory_total_bytes"] - want["ram"]) < 64 * MIB
    assert pr["python"]["version"] == want["python"]
    mods = {Path(m["path"]).name: m for m in pr["modules"]}
    assert mods["libc.so.6"]["build_id"] and len(mods["libc.so.6"]["build_id"]) == 40
    assert "libheisen.so" in mods
    # every extension module the probe imported (json's _json, resource), listed from its
    # load on, whether or not a recorded stack ever passed through it: what diff compares
    assert want["extensions"], want
    for ext in want["extensions"]:
        m = mods.get(Path(ext).name)
        assert m and m["dlopen"] is True and Path(m["path"]).resolve() == Path(ext).resolve(), (ext, pr["modules"])
    version, cg = _own_cgroup("memory")
    if version is not None:
        assert e["cgroup"]["version"] == version and e["cgroup"]["memory"] == str(cg)


ENV_FACTS = ("cpu_online", "cpu_quota_us", "cpu_period_us", "memory_limit_bytes", "cgroup")


def test_images_of_one_cgroup_share_its_facts_and_a_moved_image_reads_its_own(heisen, session, tmp_path):
    """A shell's images started back to back in one cgroup read the cgroup
    and CPU files of /sys once per cache period between them (the session's
    environment cache, shim/proc.c: 0.1 s), and each records what the reader
    recorded; an image
    moved into a memory-limited cgroup between its fork and its exec (as a
    container runtime does) right after them records its own limit."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", str(trace),
                        "-E", f"LD_PRELOAD={heisen.lib}", "-E", f"HEISEN_DIR={session}",
                        "sh", "-c", "i=0; while [ $i -lt 16 ]; do /bin/true; i=$((i+1)); done"],
                       env=heisen.env(), capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    r = heisen.dump_json(session, expect_rc=0)
    images = [pr for pr in r["processes"] if pr["argv"] == ["/bin/true"]]
    (shell,) = [pr for pr in r["processes"] if pr["argv"][:1] == ["sh"]]
    assert len(images) == 16
    readers = {int(ln.split()[0]) for ln in trace.read_text().splitlines() if "/sys/devices/system/cpu/online" in ln}
    # without the cache all 17 processes read /sys; with it, one per 0.1 s
    # (two or three when the machine is quiet: 16 starts under strace take
    # well under a second even at load 7, so at most half of them read)
    assert readers and len(readers) <= len(images) // 2, (sorted(readers), [pr["pid"] for pr in images])
    for pr in images:
        assert {k: pr["environment"][k] for k in ENV_FACTS} == {k: shell["environment"][k] for k in ENV_FACTS}
        assert pr["environment"]["inherited"] is False
    assert shell["environment"]["memory_limit_bytes"] != LIMIT
    with memory_cgroup(LIMIT) as (_, cg):
        first = heisen.preload(["/bin/true"], session)
        moved = heisen.preload([SYSTEM_PYTHON, "-c", "import os; print(os.getpid())"], session, preexec_fn=join(cg))
    assert first.returncode == 0 and moved.returncode == 0, moved.stderr
    e = proc_by_pid(heisen.dump_json(session, expect_rc=0), int(moved.stdout))["environment"]
    assert e["memory_limit_bytes"] == LIMIT
    assert e["cgroup"]["memory"] == str(cg)


def test_cpu_affinity_below_the_cpu_count_is_warned_about(heisen, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if os.cpu_count() < 2 or len(cpus) < 2:
        pytest.skip("one CPU: no affinity can be below the CPU count")
    one, full = tmp_path / "one", tmp_path / "all"
    probe = [SYSTEM_PYTHON, "-c", "import os; print(os.getpid(), os.cpu_count())"]
    p = heisen.preload(probe, one, preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}))
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout.split()[0])
    r = heisen.dump_json(one, expect_rc=0)
    (w,) = warnings_of(r, "cpu-oversubscription")
    assert w["pids"] == [pid] and (w["cpu_online"], w["cpu_affinity"]) == (os.cpu_count(), 1)
    assert "affinity 1 CPU" in w["message"] and "oversubscribed" in w["message"]
    assert "cpu-oversubscription" in heisen.dump(one).stdout
    p = heisen.preload(probe, full)
    r = heisen.dump_json(full, expect_rc=0)
    e = proc_by_pid(r, int(p.stdout.split()[0]))["environment"]
    if e["cpu_online"] < 2 * e["cpu_allowed"]:
        assert warnings_of(r, "cpu-oversubscription") == []


def test_cpu_quota_below_the_cpu_count_is_warned_about(heisen, session):
    with cpu_cgroup(50000, 100000) as (_, cg):
        p = heisen.preload([SYSTEM_PYTHON, "-c", "import os; print(os.getpid())"], session, preexec_fn=join(cg))
    assert p.returncode == 0, p.stderr
    pid = int(p.stdout)
    r = heisen.dump_json(session, expect_rc=0)
    e = proc_by_pid(r, pid)["environment"]
    assert (e["cpu_quota_us"], e["cpu_period_us"], e["cpu_allowed"]) == (50000, 100000, 0.5)
    (w,) = warnings_of(r, "cpu-oversubscription")
    assert w["pids"] == [pid] and w["cpu_allowed"] == 0.5
    assert "CPU quota of 0.50 CPUs" in w["message"]


def test_memory_limit_at_the_observed_peak_is_warned_about(heisen, tmp_path):
    with memory_cgroup(LIMIT) as (_, cg):
        hi, lo = tmp_path / "hi", tmp_path / "lo"
        p = heisen.preload(pool_script(heisen, "peak", 176), hi, preexec_fn=join(cg))
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
        r = heisen.dump_json(hi, expect_rc=0)
        (w,) = warnings_of(r, "memory-limit")
        assert w["limit_bytes"] == LIMIT and w["peak_bytes"] >= 0.9 * LIMIT
        assert fact_int(p.stdout, "main") in w["pids"]
        p = heisen.preload(pool_script(heisen, "peak", 40), lo, preexec_fn=join(cg))
        assert p.returncode == 0, p.stderr
        assert warnings_of(heisen.dump_json(lo, expect_rc=0), "memory-limit") == []


def test_heap_quarantine_is_capped_by_the_memory_limit(heisen, tmp_path):
    """The quarantine is memory the program did not ask for: under a memory
    limit its default is 1/32 of it (64 MiB without one); an explicit
    HEISEN_QUARANTINE_MB is taken as it is."""
    def quarantine(session, **kw):
        p = heisen.preload(pool_script(heisen, "peak", 1), session, **kw)
        assert p.returncode == 0, (p.returncode, p.stderr[-2000:])
        return proc_by_pid(heisen.dump_json(session, expect_rc=0), fact_int(p.stdout, "main"))["heap"][
            "quarantine_bytes"]
    assert quarantine(tmp_path / "free") == 64 << 20
    with memory_cgroup(LIMIT) as (_, cg):
        assert quarantine(tmp_path / "limited", preexec_fn=join(cg)) == LIMIT // 32
        assert quarantine(tmp_path / "explicit", preexec_fn=join(cg), env={"HEISEN_QUARANTINE_MB": "20"}) == 20 << 20


def _nofile(n):
    return lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (n, n))


def test_low_open_files_limit_with_many_fds_open_is_warned_about(heisen, tmp_path):
    many, few = tmp_path / "many", tmp_path / "few"
    p = heisen.preload(pool_script(heisen, "fds", 56), many, preexec_fn=_nofile(64))
    assert p.returncode == 0, p.stderr
    r = heisen.dump_json(many, expect_rc=0)
    (w,) = warnings_of(r, "open-files")
    pid = fact_int(p.stdout, "main")
    assert w["pids"] == [pid] and w["nofile"] == 64 and w["fds"] >= 56
    assert proc_by_pid(r, pid)["environment"]["rlimits"]["nofile"] == 64
    p = heisen.preload(pool_script(heisen, "fds", 8), few, preexec_fn=_nofile(64))
    assert p.returncode == 0, p.stderr
    assert warnings_of(heisen.dump_json(few, expect_rc=0), "open-files") == []


# ---- heisen-dump diff -----------------------------------------------------------------------


def diff(heisen, a, b, *opts):
    return subprocess.run([str(heisen.dump_bin), "diff", *opts, str(a), str(b)], capture_output=True,
                          text=True, timeout=120, env=heisen.env())


def test_diff_of_two_runs_differing_in_affinity_lists_that_and_nothing_else(heisen, tmp_path):
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        pytest.skip("one CPU: no two affinities to compare")
    a, b = tmp_path / "a", tmp_path / "b"
    pa = heisen.preload(pool_script(heisen, "clean", 2), a, preexec_fn=lambda: os.sched_setaffinity(0, {cpus[0]}))
    pb = heisen.preload(pool_script(heisen, "clean", 2), b)
    assert pa.returncode == 0 and pb.returncode == 0, (pa.stderr, pb.stderr)
    settle(heisen, a), settle(heisen, b)
    d = diff(heisen, a, b, "--json")
    assert d.returncode == 1, (d.returncode, d.stderr)
    r = json.loads(d.stdout)
    assert r["same"] is False and r["errors"] == []
    assert r["environment"] == [{"field": "cpu_affinity", "a": "1", "b": str(len(cpus))}], r["environment"]
    for part in ("modules", "tree", "findings", "peaks"):
        assert r[part] == [], (part, r[part])
    assert [w["kind"] for w in r["warnings"]] == ["cpu-oversubscription"] and r["warnings"][0]["b"] is None
    t = diff(heisen, a, b)
    assert t.returncode == 1 and "cpu_affinity" in t.stdout and "process tree (by command line): same" in t.stdout
    # a session against itself, and against another run of the same: the same
    assert diff(heisen, a, a).returncode == 0
    c = tmp_path / "c"
    heisen.preload(pool_script(heisen, "clean", 2), c)
    settle(heisen, c)
    same = diff(heisen, b, c, "--json")
    assert same.returncode == 0, same.stdout
    assert json.loads(same.stdout)["same"] is True


def test_diff_lists_tree_modules_findings_and_peaks(heisen, tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    ext = pyext_dir(heisen)
    pa = heisen.preload(pool_script(heisen, "clean", 2), a)
    pb = heisen.preload(pool_script(heisen, "clean", 2), b,
                        env={"POOL_WORKERS": "3", "POOL_SQLITE": "1", "POOL_GROW_MIB": "96",
                             "POOL_EXT": str(ext)})
    assert pa.returncode == 0 and pb.returncode == 0, (pa.stderr, pb.stderr)
    settle(heisen, a), settle(heisen, b)
    d = diff(heisen, a, b, "--json")
    assert d.returncode == 1, d.stderr
    r = json.loads(d.stdout)
    assert r["environment"] == []
    only_b = {Path(m["path"]).name for m in r["modules"] if m["a"] is None}
    assert any(n.startswith("_sqlite3") for n in only_b) and any(n.startswith("heisenlocks") for n in only_b), r["modules"]
    assert all(m["a"] is None for m in r["modules"]), r["modules"]
    (t,) = r["tree"]
    assert t["key"].endswith("clean 2 [fork]") and (t["a"]["count"], t["b"]["count"]) == (2, 3), r["tree"]
    (f,) = r["findings"]
    assert f["key"].startswith("potential-deadlock in ") and f["a"] is None and "ext_lock_a" in f["b"]["values"]
    # the main process grew; its fork children may show what they inherited too
    (pk,) = [pk for pk in r["peaks"] if pk["key"].endswith("clean 2")]
    assert pk["b"] > pk["a"] + 64 * MIB, r["peaks"]


# ---- heisen-run with many processes ----------------------------------------------------


def test_heisen_run_watchdog_sees_a_hang_in_a_grandchild(heisen, session):
    ext = pyext_dir(heisen)
    child = ("import subprocess, sys\n"
             f"subprocess.run([sys.executable, {str(script(heisen, 'py_deadlock.py'))!r}, {str(ext)!r}])\n")
    t0 = time.monotonic()
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    "sh", "-c", f"{SYSTEM_PYTHON} -c \"$0\"; echo after", child], timeout=90)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr[-3000:])
    assert time.monotonic() - t0 < 60
    grandchild = fact_int(p.stdout, "pid")
    assert "after" not in p.stdout
    r = heisen.dump_json(session, expect_rc=1)
    (dl,) = findings_of(r, "deadlock")
    assert dl["pid"] == grandchild
    assert f"deadlock" in p.stderr and str(grandchild) in p.stderr
    gc = proc_by_pid(r, grandchild)
    assert gc["state"] == "killed" and gc["signal"] == signal.SIGKILL
    # the three generations: sh -> python3 -c -> py_deadlock.py, every one ended
    assert gc["parent"] is not None
    mid = proc_by_pid(r, gc["parent"])
    assert mid["argv"][1] == "-c" and mid["parent"] is not None
    assert all(pr["state"] != "running" for pr in r["processes"]), [(pr["pid"], pr["state"]) for pr in r["processes"]]


def test_heisen_run_watchdog_sees_a_grandchild_stalled_outside_any_lock(heisen, session):
    """A grandchild blocked in os.read: every process of the chain made no
    progress; each hang names the stalled descendant it may only wait for,
    and the grandchild's names its Python line."""
    child = ("import subprocess, sys\n"
             f"subprocess.run([sys.executable, {str(script(heisen, 'py_blocked_read.py'))!r}])\n")
    p = heisen.run(["--dir", session, "--hang-timeout", "2", "--on-hang", "kill", "--",
                    "sh", "-c", f"{SYSTEM_PYTHON} -c \"$0\"; echo after", child], timeout=90)
    assert p.returncode == 137, (p.returncode, p.stdout, p.stderr[-3000:])
    grandchild = fact_int(p.stdout, "pid")
    r = heisen.dump_json(session, expect_rc=1)
    hangs = {f["pid"]: f for f in findings_of(r, "hang")}
    mid = proc_by_pid(r, grandchild)["parent"]
    top = proc_by_pid(r, mid)["parent"]
    assert set(hangs) == {top, mid, grandchild}, hangs.keys()
    assert hangs[grandchild]["stalled_descendant"] is None
    assert hangs[mid]["stalled_descendant"] == grandchild and hangs[top]["stalled_descendant"] == mid
    assert any(fr.get("function") == "wait_for_reply" for t in hangs[grandchild]["threads"] if t["stack"]
               for fr in t["stack"]["frames"])
    assert f"its descendant {grandchild} is stalled too" in hangs[mid]["message"]


# ---- terminating signals and the do-no-harm promises -----------------------------------


def test_a_sigterm_at_sig_dfl_is_recorded_with_its_sender(heisen, session):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([SYSTEM_PYTHON, "-c", "import os, time; print(os.getpid(), flush=True); time.sleep(60)"],
                            env=env, stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline())
    time.sleep(0.3)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == -signal.SIGTERM
    r = heisen.dump_json(session, expect_rc=0)
    pr = proc_by_pid(r, pid)
    assert (pr["state"], pr["signal"], pr["sent_by"]["pid"]) == ("killed", signal.SIGTERM, os.getpid())
    assert r["findings"] == []
    types = event_types(pr["threads"][0])
    assert "term-signal" in types


def test_fork_children_take_learnt_sites_without_reading_the_parents_segment(heisen, session):
    # a shell's shape: three children one after the other, each allocating and
    # freeing at sites only the children meet, then exec.  The first makes its
    # segment for them and its parent learns them; the next children find
    # their stacks in the site cache they inherit, and read no page of their
    # parent's segment (through the shared mapping: a page fault each) before
    # their exec.  The target counts the pages of its shared mappings that
    # come into its page table around the heap operations (/proc/self/pagemap;
    # fork copies no page table entry of a shared mapping): the first child's
    # count shows the measure sees a segment being read.
    p = heisen.preload([target(heisen, "fork_learnt_sites")], session, env={"HEISEN_GUARD_RATE": "0"})
    assert p.returncode == 0, p.stderr
    read = {int(w[1]): int(w[3]) for w in (line.split() for line in p.stdout.splitlines()) if w[0] == "child"}
    assert sorted(read) == [1, 2, 3] and p.stdout.endswith("done\n"), p.stdout
    assert read[1] > 0, read  # the first child made its segment from its parent's
    assert read[2] == 0 and read[3] == 0, read
    r = heisen.dump_json(session, expect_rc=0)
    assert r["errors"] == [] and r["findings"] == []
    assert len([pr for pr in r["processes"] if pr["exe"].endswith("true")]) == 3, r["processes"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_fork_child_ended_before_its_first_event(heisen, session, sig):
    # a C fork child waiting in pause(), which heisen does not hook: it has
    # no segment of its own while it waits (made at its first recorded
    # event).  A SIGTERM at SIG_DFL is such an event: the child is in the
    # tree, killed by SIGTERM with its sender.  A SIGKILL runs nothing in the
    # child: what is left is the parent's fork record of its pid.
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    proc = subprocess.Popen([target(heisen, "fork_quiet_child")], env=env, stdout=subprocess.PIPE, text=True)
    pid = int(proc.stdout.readline().split()[1])
    child = int(proc.stdout.readline().split()[1])
    time.sleep(0.3)
    assert not list(session.glob(f"{child}.*.seg")), sorted(x.name for x in session.iterdir())
    os.kill(child, sig)
    out = proc.communicate(timeout=30)[0]
    assert proc.returncode == 0, out
    assert f"status {sig}" in out, out  # killed by sig, no core
    r = heisen.dump_json(session, expect_rc=0)
    assert r["errors"] == [] and r["findings"] == []
    parent = proc_by_pid(r, pid)
    forks = [e for th in parent["threads"] for e in th["events"] if e["type"] == "fork"]
    assert [e["child"] for e in forks] == [child], forks
    kids = [p for p in r["processes"] if p["pid"] == child]
    if sig == signal.SIGKILL:
        assert kids == [], kids
    else:
        [pr] = kids
        assert (pr["state"], pr["signal"], pr["sent_by"]["pid"]) == ("killed", signal.SIGTERM, os.getpid())
        assert pr["ppid"] == pid and pr["via"] == "fork"
        assert "term-signal" in event_types(pr["threads"][0])


SIGNAL_VIEW = ("import signal; print([int(signal.getsignal(s)) for s in "
               "(signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE, signal.SIGUSR1)])")


def test_programs_see_the_signal_dispositions_they_would_have(heisen, tmp_path):
    """SIG_DFL looks like SIG_DFL, an ignored signal stays ignored across exec
    (nohup, `trap '' HUP; exec`), and a default signal still kills with the
    same status."""
    for i, cmd in enumerate((
            [SYSTEM_PYTHON, "-c", SIGNAL_VIEW],
            ["sh", "-c", f"trap '' HUP USR1; exec {SYSTEM_PYTHON} -c \"$0\"", SIGNAL_VIEW],
            ["nohup", SYSTEM_PYTHON, "-c", SIGNAL_VIEW],
            [SYSTEM_PYTHON, "-c", "import os, signal, subprocess, sys\n"
             "signal.signal(signal.SIGUSR1, signal.SIG_IGN)\n"
             f"subprocess.run([sys.executable, '-c', {SIGNAL_VIEW!r}], restore_signals=False)"],
            ["sh", "-c", "kill -TERM $$"],
            [SYSTEM_PYTHON, "-c", "import os, signal\n"
             "signal.signal(signal.SIGTERM, lambda *a: None)\n"
             "signal.signal(signal.SIGTERM, signal.SIG_DFL)\n"
             "os.kill(os.getpid(), signal.SIGTERM)"])):
        native = subprocess.run(cmd, capture_output=True, text=True, timeout=60, env=heisen.env(),
                                cwd=tmp_path)
        shim = heisen.preload(cmd, tmp_path / f"s{i}", cwd=tmp_path)
        assert (shim.returncode, shim.stdout) == (native.returncode, native.stdout), (cmd, shim.stderr)
        (tmp_path / "nohup.out").unlink(missing_ok=True)


def test_a_vfork_child_failing_to_exec_does_not_end_its_parent(heisen, session):
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    code = ("import os, subprocess, sys, time\n"
            "try:\n    subprocess.run(['/nonexistent/program'])\nexcept FileNotFoundError:\n    print('enoent')\n"
            "print(os.getpid(), flush=True)\nsys.stdin.read()\n")
    proc = subprocess.Popen([SYSTEM_PYTHON, "-c", code], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "enoent"
        pid = int(proc.stdout.readline())
        r = heisen.dump_json(session)
        assert [pr["state"] for pr in r["processes"] if pr["pid"] == pid] == ["running"], r["processes"]
    finally:
        proc.stdin.close()
        assert proc.wait(timeout=30) == 0
    assert proc_by_pid(heisen.dump_json(session), pid)["state"] == "exited"


def test_a_command_that_never_allocates_starts_without_setenv_or_libunwind_start_up(heisen, session):
    """A shell script's short commands pay only for what they use: an image
    whose environment already names its session (every process but a
    session's first) leaves HEISEN_DIR as the kernel laid it out (setenv
    would copy it to the heap: a malloc in a program that never calls it),
    and libunwind, which such a command never calls, is not even loaded
    (heisen loads it at its first unwind: shim/unwind_load.c), nor the
    liblzma it needs.  The process is still recorded, exited 0."""
    env = heisen.env(session)
    env.pop("HEISEN_SESSION_AUTO", None)
    env["LD_PRELOAD"] = str(heisen.lib)
    p = subprocess.Popen([str(target(heisen, "start_footprint"))], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        said = p.stdout.readline().strip()
        smaps = Path(f"/proc/{p.pid}/smaps").read_text()
    finally:
        p.stdin.close()
        assert p.wait(timeout=60) == 0
    assert said == "HEISEN_DIR: as started"
    assert "libheisen.so" in smaps
    assert "libunwind" not in smaps and "liblzma" not in smaps, "libunwind loaded at start"
    r = heisen.dump_json(session, expect_rc=0)
    pr = proc_by_pid(r, p.pid)
    assert pr["state"] == "exited" and pr["exit_status"] == 0, pr


def test_a_command_that_never_allocates_gets_no_heap_from_the_python_probe(heisen, session):
    """The constructor asks whether the process is a CPython (is there a
    Py_IsInitialized?) in every image; in a command that is not, a failed
    dlsym would format its error message with malloc, and glibc's first
    malloc makes the heap (getrandom, brk, its pages) in a program that
    never allocates.  The probe reads the loaded objects' hash tables
    instead: such a command has no [heap] mapping, as without heisen, and is
    still recorded, exited 0."""
    env = heisen.env(session)
    env.pop("HEISEN_SESSION_AUTO", None)
    env["LD_PRELOAD"] = str(heisen.lib)
    native = subprocess.Popen([str(target(heisen, "start_footprint"))], env=heisen.env(), stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    p = subprocess.Popen([str(target(heisen, "start_footprint"))], env=env, stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    try:
        native.stdout.readline()
        p.stdout.readline()
        native_maps = Path(f"/proc/{native.pid}/maps").read_text()
        maps = Path(f"/proc/{p.pid}/maps").read_text()
    finally:
        for q in (native, p):
            q.stdin.close()
            assert q.wait(timeout=60) == 0
    assert "libheisen.so" in maps
    assert "[heap]" not in native_maps, "the target itself allocates: it cannot show the probe's heap"
    heap = [ln for ln in maps.splitlines() if ln.endswith("[heap]")]
    assert not heap, f"a heap was made in a program that never allocates: {heap}"
    r = heisen.dump_json(session, expect_rc=0)
    pr = proc_by_pid(r, p.pid)
    assert pr["state"] == "exited" and pr["exit_status"] == 0, pr


KEEPS_FDS_OPEN = r"""
import os, socket, sys
kept = [os.open("/dev/null", os.O_RDONLY) for _ in range(5)] + list(os.pipe())
kept.append(socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).detach())
print("main", os.getpid(), flush=True)
print("open", len(os.listdir("/proc/self/fd")) - 1, flush=True)
"""


def test_a_short_process_counts_its_open_fds_at_exit_from_the_fd_table(heisen, session, tmp_path):
    """A process that ends within a second of its last count takes the count
    at exit from heisen's fd table (each descriptor it says is open checked
    with the kernel just before) instead of reading /proc/self/fd a second
    time (a Python program lives longer than that under load: then the
    directory is read): either way the count at exit is the process's own
    count of its open descriptors (files, a pipe and a socket kept open to
    the end)."""
    script = tmp_path / "keep.py"
    script.write_text(KEEPS_FDS_OPEN)
    p = heisen.preload([SYSTEM_PYTHON, script], session)
    assert p.returncode == 0, p.stderr[-2000:]
    pid, said = fact_int(p.stdout, "main"), fact_int(p.stdout, "open")
    pr = proc_by_pid(heisen.dump_json(session, expect_rc=0), pid)
    assert pr["state"] == "exited" and pr["exit_status"] == 0, pr
    assert pr["memory"]["fds_open"] == said >= 11, (pr["memory"], said)


def test_a_short_command_reads_statm_and_its_fd_directory_once_and_keeps_its_memory_figures(heisen, session,
                                                                                             tmp_path):
    """A shell's short command (/bin/true) pays one /proc read for each of its
    figures: its start sample takes the resident set from the /proc/self/stat
    read that gives its segment its start time, its exit counts its fds from
    the fd table the start scan filled.  So /proc/self/statm is read once
    (the exit's) and /proc/self/fd once (the start's scan); the record still
    has a resident set and a peak at least as large.  (Under load a
    time-driven sample can come in between: one more statm read for each,
    one more directory read if a second passed.)"""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    env = heisen.env(session)
    env["LD_PRELOAD"] = str(heisen.lib)
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=openat", "-o", trace, "/bin/true"],
                       capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    lines = trace.read_text().splitlines()
    pid = int(lines[0].split()[0])
    mine = [ln for ln in lines if ln.split()[0] == str(pid)]
    pr = proc_by_pid(heisen.dump_json(session, expect_rc=0), pid)
    assert pr["state"] == "exited" and pr["exit_status"] == 0, pr
    m = pr["memory"]
    assert m["samples"] >= 2 and m["rss_bytes"] > 0 and m["peak_rss_bytes"] >= m["rss_bytes"], m
    # every sample but the start's reads statm
    assert len([ln for ln in mine if '"/proc/self/statm"' in ln]) == m["samples"] - 1, (mine, m)
    # the start's scan; a time-driven count only after a second
    assert len([ln for ln in mine if '"/proc/self/fd"' in ln]) <= 1 + (m["samples"] - 2), (mine, m)
    assert m["fds_open"] >= 3, m


def test_an_interposer_preloaded_after_heisen_still_gets_the_calls_heisen_passes_on(heisen, session, tmp_path):
    """heisen finds the functions its hooks wrap in the loaded objects' hash
    tables instead of asking dlsym(RTLD_NEXT) ~90 times at every start; the
    answer must stay RTLD_NEXT's: with another library preloaded after
    heisen that wraps close and open (a sandbox's, a tracer's, a test
    double's), heisen's hooks call that library's definitions, which call
    libc's; the program's calls reach it, and heisen still records them."""
    src = tmp_path / "counter.c"
    src.write_text(r'''
#define _GNU_SOURCE
#include <dlfcn.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <unistd.h>
static int closes, opens;
int close(int fd) { static int (*real)(int); if (!real) real = (int (*)(int))dlsym(RTLD_NEXT, "close");
                    closes++; return real(fd); }
int open(const char *p, int fl, ...) { static int (*real)(const char *, int, ...);
    va_list ap; int mode; va_start(ap, fl); mode = va_arg(ap, int); va_end(ap);
    if (!real) real = (int (*)(const char *, int, ...))dlsym(RTLD_NEXT, "open");
    opens++; return real(p, fl, mode); }
__attribute__((destructor)) static void said(void) {
    char b[64]; int n = snprintf(b, sizeof b, "counter: open %d close %d\n", opens, closes);
    (void)!write(2, b, (size_t)n); }
''')
    lib = tmp_path / "counter.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O2", "-o", str(lib), str(src), "-ldl"], check=True, timeout=60)
    prog = tmp_path / "opener.c"
    prog.write_text(r'''
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
int main(void) { for (int i = 0; i < 3; i++) { int fd = open("/dev/null", O_RDONLY); if (fd < 0 || close(fd) != 0) return 1; }
                 puts("done"); return 0; }
''')
    exe = tmp_path / "opener"
    subprocess.run(["cc", "-O0", "-o", str(exe), str(prog)], check=True, timeout=60)
    env = heisen.env(session)
    env["LD_PRELOAD"] = f"{heisen.lib}:{lib}"
    p = subprocess.run([str(exe)], env=env, capture_output=True, text=True, timeout=60)
    assert (p.returncode, p.stdout) == (0, "done\n"), (p.returncode, p.stdout, p.stderr)
    opens, closes = (int(x) for x in p.stderr.split("counter: open ")[1].split()[0:3:2])
    assert opens >= 3 and closes >= 3, p.stderr
    r = heisen.dump_json(session, expect_rc=0)
    events = [(e["type"], e["call"]) for proc in r["processes"] for t in proc["threads"] for e in t["events"]
              if e["type"] in ("fd-created", "fd-closed")]
    assert events.count(("fd-created", "open")) >= 3 and events.count(("fd-closed", "close")) >= 3, events
