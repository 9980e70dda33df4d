# SPDX-License-Identifier: MIT
"""Sampled guard-page allocations (shim/guarded.c) and calls through a
library handle (shim/dl_trampoline.S, elf_got_surgery.c).

Guard pages: with HEISEN_GUARD_RATE=1 every allocation of at most a page
that finds a free slot lives in a page of its own between two inaccessible
pages, and its page becomes inaccessible when it is freed, so a
use-after-free or an overflow faults and becomes a finding with the
access, free and allocation stacks.  Contracts: docs/interfaces.md "Guard
pages"; the findings' fields: format.h "guard findings".

Library handles: ctypes.CDLL(find_library("c")), cffi's ffi.dlopen("c") and
dlopen("libc.so.6") + dlsym hand out glibc's own functions unless heisen's
dlsym answers with its hooks; README.md "Calls through a library handle".
"""
import shutil
import signal
import subprocess
import time

import pytest

from conftest import (fact_int, facts, findings_of, frame_functions, marker_line, native_index, process_of,
                      python_frames, target)

GUARD = {"HEISEN_GUARD_RATE": "1"}
# CPython keeps hundreds of blocks of at most a page alive from its start:
# enough slots that the one the test is about still finds a free one.
PY_GUARD = {"HEISEN_GUARD_RATE": "1", "HEISEN_GUARD_SLOTS": "1024"}


def one(report, kind):
    fs = findings_of(report, kind)
    assert len(fs) == 1, f"want one {kind}, have {[(f['kind'], f.get('message')) for f in report['findings']]}"
    return fs[0]


def stack_by_role(finding, role):
    st = [s for s in finding["stacks"] if s["role"] == role]
    assert len(st) == 1, f"want one {role!r} stack, have {[s['role'] for s in finding['stacks']]}"
    return st[0]


def hexint(s):
    return int(s, 16)


# ---- C: use after free, overflow, underflow, double free ---------------------

CASES = {
    # mode: kind, access, offset from the block, size, access frame, freed?
    "uaf-read": ("use-after-free", "read", 8, 40, "read_field", True),
    "uaf-write": ("use-after-free", "write", 16, 40, "write_field", True),
    "overflow": ("heap-buffer-overflow", "write", 32, 32, "write_field", False),
    "underflow": ("heap-buffer-overflow", "read", -8, 32, "read_header", False),
}


def run_guard_faults(heisen, way, mode, env, dies_of):
    """guard_faults MODE under way with env: it dies of dies_of (as it would
    without heisen, or of heisen's abort); returns (pid, tid_main, the block's
    address, the report)."""
    p = way.run([target(heisen, "guard_faults"), mode], env=env)
    assert p.returncode == way.killed_by(dies_of), (p.returncode, p.stderr)
    assert "done ok" not in p.stdout
    pid, tid = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_main")
    block = int(facts(p.stdout)["block"][0], 16)
    return pid, tid, block, heisen.dump_json(way.session, expect_rc=1)


@pytest.mark.parametrize("mode", list(CASES))
def test_guard_fault_found(heisen, way, mode):
    kind, access, offset, size, access_fn, freed = CASES[mode]
    # the process dies of the fault as it would have without heisen
    pid, tid, block, r = run_guard_faults(heisen, way, mode, GUARD, signal.SIGSEGV)
    f = one(r, kind)
    assert f["pid"] == pid and set(f["tids"]) == {tid}
    assert f["access"] == access and f["offset"] == offset and f["size"] == size
    assert hexint(f["address"]) == block + offset
    assert f["block"] == {"address": hex(block), "size": size}
    assert f["where"] == ("inside" if freed else "after" if offset >= 0 else "before")
    roles = ["access", "free", "allocation"] if freed else ["access", "allocation"]
    assert [s["role"] for s in f["stacks"]] == roles
    acc = stack_by_role(f, "access")
    assert frame_functions(acc)[:2] == [access_fn, "main"]
    assert acc["frames"][0]["line"] is not None
    if freed:
        assert frame_functions(stack_by_role(f, "free"))[:2] == ["drop_record", "main"]
    assert frame_functions(stack_by_role(f, "allocation"))[:2] == ["make_record", "main"]
    what = {"use-after-free": f"{offset} bytes inside", "heap-buffer-overflow":
            f"{offset - size} bytes after" if offset >= 0 else f"{-offset} bytes before"}[kind]
    assert f["message"].startswith(f"{kind} {access.upper()} of size ? at {f['address']} in thread {tid}: "
                                   f"{what} a {size}-byte block at {hex(block)}"), f["message"]
    # and the crash itself, with the same faulting frame
    crash = [c for c in findings_of(r, "crash") if c["pid"] == pid]
    assert len(crash) == 1 and crash[0]["signal_name"] == "SIGSEGV"
    # the text report: ASan's shape
    t = heisen.dump(way.session).stdout
    assert f"{kind} {access.upper()} of size ? at {f['address']}" in t
    assert f" {access.upper()} by thread {tid}" in t and "previously allocated by thread" in t
    assert ("freed by thread" in t) == freed


def test_guard_double_free(heisen, way):
    """With the heap checker off (HEISEN_HEAP=0), the guard pages alone find it."""
    pid, tid, block, r = run_guard_faults(heisen, way, "double-free", {**GUARD, "HEISEN_HEAP": "0"}, signal.SIGABRT)
    f = one(r, "double-free")
    assert hexint(f["address"]) == block and f["size"] == 40 and f["tids"] == [tid, tid, tid]
    assert frame_functions(stack_by_role(f, "second free"))[:2] == ["drop_again", "main"]
    assert frame_functions(stack_by_role(f, "first free"))[:2] == ["drop_record", "main"]
    assert frame_functions(stack_by_role(f, "allocation"))[:2] == ["make_record", "main"]
    assert [c for c in findings_of(r, "crash") if c["pid"] == pid][0]["heap_abort"] is True


def test_guard_slack_overflow_found_at_the_free(heisen, way):
    """One byte past a sampled 40-byte record: it lands in the alignment
    slack, which no guard page covers (GWP-ASan misses it there).  With the
    heap checker off, the guard pages alone find it at the free, as the
    canary of an unsampled block would: a heap-overflow with the free's and
    the allocation's stacks, then heisen's abort."""
    pid, tid, block, r = run_guard_faults(heisen, way, "slack", {**GUARD, "HEISEN_HEAP": "0"}, signal.SIGABRT)
    f = one(r, "heap-overflow")
    assert hexint(f["address"]) == block and f["size"] == 40 and f["tids"] == [tid, tid]
    assert [s["role"] for s in f["stacks"]] == ["free", "allocation"]
    assert frame_functions(stack_by_role(f, "free"))[:2] == ["drop_record", "main"]
    assert frame_functions(stack_by_role(f, "allocation"))[:2] == ["make_record", "main"]
    assert [c for c in findings_of(r, "crash") if c["pid"] == pid][0]["heap_abort"] is True


def test_guard_interior_free(heisen, session):
    p = heisen.preload([target(heisen, "guard_faults"), "interior"], session, env={**GUARD, "HEISEN_HEAP": "0"})
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    block = int(facts(p.stdout)["block"][0], 16)
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, "invalid-free")
    assert hexint(f["address"]) == block + 8
    assert f["block"] == {"address": hex(block), "size": 40, "offset": 8}
    assert frame_functions(stack_by_role(f, "free"))[:2] == ["drop_record", "main"]
    assert frame_functions(stack_by_role(f, "allocation"))[:2] == ["make_record", "main"]


@pytest.mark.parametrize("mode", ["uaf-write", "overflow"])
def test_guard_continue_goes_on(heisen, session, mode):
    kind = CASES[mode][0]
    p = heisen.preload([target(heisen, "guard_faults"), mode], session,
                       env={**GUARD, "HEISEN_ON_HEAP_ERROR": "continue"})
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done ok" in p.stdout
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, kind)
    assert f["access"] == "write" and findings_of(r, "crash") == []
    assert f"heisen: {kind} write at {f['address']}" in p.stderr


def test_guard_continue_reads_the_freed_bytes(heisen, session):
    """HEISEN_ON_HEAP_ERROR=continue after a use-after-free read: the read
    goes on and sees the bytes the record held ('r'), as an allocator that
    leaves a freed block's bytes where they were would show them; the
    sampled block's page was only made inaccessible at its free, not
    replaced by a fresh zeroed one."""
    p = heisen.preload([target(heisen, "guard_faults"), "uaf-read"], session,
                       env={**GUARD, "HEISEN_ON_HEAP_ERROR": "continue"})
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done ok" in p.stdout
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, "use-after-free")
    assert f["access"] == "read" and f["offset"] == 8 and findings_of(r, "crash") == []
    assert fact_int(p.stdout, "read") == ord("r"), p.stdout


# ---- Python: a ctypes buffer read after its free -------------------------------


def test_python_use_after_free_lines(heisen, session):
    script = heisen.src_targets / "py_guard_uaf.py"
    p = heisen.preload(["/usr/bin/python3", script], session, env=PY_GUARD)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)
    pid, tid = fact_int(p.stdout, "pid"), fact_int(p.stdout, "tid_main")
    ptr = int(facts(p.stdout)["pointer"][0], 16)
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, "use-after-free")
    assert f["pid"] == pid and f["tids"] == [tid, tid, tid]
    assert f["access"] == "read" and f["size"] == 96 and f["offset"] == 8
    assert hexint(f["address"]) == ptr + 8
    want = {"access": ("Frame.payload", "read"), "free": ("Frame.close", "free"),
            "allocation": ("Frame.__init__", "alloc")}
    for role, (fn, marker) in want.items():
        st = stack_by_role(f, role)
        py = [x for x in python_frames(st) if x["file"].endswith("py_guard_uaf.py")]
        assert py and py[0]["function"] == fn, (role, [(x["function"], x["line"]) for x in python_frames(st)])
        assert py[0]["line"] == marker_line(script, marker), (role, py[0])
        assert native_index(st, "ffi_call") is not None
    # the read is ctypes.string_at's copy: the faulting frame is libc's memmove, exact
    acc = stack_by_role(f, "access")
    assert "memmove" in (acc["frames"][0]["function"] or ""), acc["frames"][0]
    assert python_frames(acc)[0]["function"] == "string_at"


# ---- correct programs: nothing to report ---------------------------------------


def test_guard_every_alignment_no_finding(heisen, way):
    """Every malloc, calloc, realloc and memalign shape, each block written
    whole and checked (heap_aligned), in guard pages."""
    p = way.run([target(heisen, "heap_aligned")], env=GUARD)
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done ok" in p.stdout
    r = heisen.dump_json(way.session, expect_rc=0)
    assert r["findings"] == [] and r["errors"] == []
    # sampled blocks count in the heap checker's numbers like any other
    h = process_of(r, fact_int(p.stdout, "pid"))["heap"]
    assert h["allocs"] >= fact_int(p.stdout, "blocks") and h["peak_bytes"] >= 10000


@pytest.mark.parametrize("rate", ["1", "default"])
def test_guard_threaded_workload_no_finding(heisen, session, rate):
    """Eight threads of json, sqlite3, zlib and re, every allocation (rate 1,
    PYTHONMALLOC=malloc: CPython's small objects too) or the default rate."""
    script = heisen.src_targets / "py_heap_workload.py"
    env = {**PY_GUARD} if rate == "1" else {}
    opts = ["--python-malloc"] if rate == "1" else []
    p = heisen.run(["--dir", session, *opts, "--", "/usr/bin/python3", script, "30" if rate == "1" else "100"],
                   env=env, timeout=300)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    assert "done ok" in p.stdout
    r = heisen.dump_json(session, expect_rc=0)
    assert r["findings"] == [], r["findings"]


# ---- the default rate's sample budget ------------------------------------------


def guard_closes(heisen, session, tmp_path, env, n):
    """heap_alloc_loop n (an allocation-bound loop) under heisen, traced by
    strace (the loop process only: -E sets LD_PRELOAD for it alone): how
    many pages it made inaccessible one at a time (mprotect of 4096 bytes
    to PROT_NONE: a sampled block's free closing its guard page), and an
    upper bound on how long it ran, seconds."""
    if not shutil.which("strace"):
        pytest.skip("strace is not installed")
    trace = tmp_path / "trace"
    run_env = {**heisen.env(session), **env}
    t0 = time.monotonic()
    p = subprocess.run(["strace", "-f", "-qq", "-e", "trace=mprotect", "-o", str(trace),
                        "-E", f"LD_PRELOAD={heisen.lib}", str(target(heisen, "heap_alloc_loop")), str(n)],
                       env=run_env, capture_output=True, text=True, timeout=300)
    seconds = time.monotonic() - t0
    assert p.returncode == 0 and f"done {n}" in p.stdout, (p.returncode, p.stderr[-2000:])
    closes = [ln for ln in trace.read_text().splitlines() if ", 4096, PROT_NONE) = 0" in ln]
    return len(closes), seconds


def test_guard_default_rate_within_its_sample_budget(heisen, session, tmp_path):
    """At the default rate a program that allocates millions of blocks a
    second is sampled within the budget (at most 250 samples a second after
    a burst of 8; docs/design.md "Guard pages"), not once in 5000 of its
    allocations: 10 million pairs would be ~2,000 samples.  The bound
    holds by construction, whatever the machine's speed: the budget cannot
    have let more through in the time the process lived (the slack is for
    other single pages a loader may protect)."""
    closes, seconds = guard_closes(heisen, session, tmp_path, {}, 10_000_000)
    assert closes <= 8 + 1 + 250 * seconds + 16, (closes, seconds)


def test_guard_explicit_rate_is_exact(heisen, session, tmp_path):
    """A rate set explicitly has no budget: the same loop at
    HEISEN_GUARD_RATE=5000 is sampled about once in 5000 allocations
    (2,000 expected; each countdown is drawn from 1 to 9,999, so the count
    lies within a few percent of that)."""
    closes, seconds = guard_closes(heisen, session, tmp_path, {"HEISEN_GUARD_RATE": "5000"}, 10_000_000)
    assert closes >= 1000, (closes, seconds)


# ---- calls through a library handle ---------------------------------------------


@pytest.mark.parametrize("how", ["find_library", "soname"])
def test_ctypes_double_free_through_libc_handle(heisen, session, how):
    script = heisen.src_targets / "py_ctypes_double_free.py"
    p = heisen.preload(["/usr/bin/python3", script, how], session, env={"HEISEN_HEAP": "1"})
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    assert "done ok" not in p.stdout
    tid = fact_int(p.stdout, "tid_main")
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, "double-free")
    assert f["tids"] == [tid, tid, tid] and f["size"] == 4096
    assert hexint(f["address"]) == int(facts(p.stdout)["pointer"][0], 16)
    want = {"second free": ("release_again", "second free"), "first free": ("release", "first free"),
            "allocation": ("make_buffer", "alloc")}
    for role, (fn, marker) in want.items():
        py = python_frames(stack_by_role(f, role))
        assert py and py[0]["function"] == fn and py[0]["line"] == marker_line(script, marker), (role, py[:1])


def test_cffi_double_free_through_dlopen(heisen, session):
    pytest.importorskip("cffi", reason="Debian's python3-cffi is not installed (./dev installs it)")
    script = heisen.src_targets / "py_cffi_double_free.py"
    p = heisen.preload(["/usr/bin/python3", script], session, env={"HEISEN_HEAP": "1"})
    if p.returncode == 1 and "No module named 'cffi'" in p.stderr:
        pytest.skip("Debian's python3-cffi is not installed for /usr/bin/python3 (./dev installs it)")
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    tid = fact_int(p.stdout, "tid_main")
    r = heisen.dump_json(session, expect_rc=1)
    f = one(r, "double-free")
    assert f["tids"] == [tid, tid, tid] and f["size"] == 4096
    for role, (fn, marker) in {"second free": ("release_again", "second free"),
                               "first free": ("release", "first free"),
                               "allocation": ("make_buffer", "alloc")}.items():
        py = python_frames(stack_by_role(f, role))
        assert py and py[0]["function"] == fn and py[0]["line"] == marker_line(script, marker), (role, py[:1])


def test_dlopen_dlsym_double_free(heisen, way):
    p = way.run([target(heisen, "dl_handle_calls"), "double-free"], env={"HEISEN_HEAP": "1"})
    assert p.returncode == way.killed_by(signal.SIGABRT), (p.returncode, p.stderr)
    r = heisen.dump_json(way.session, expect_rc=1)
    f = one(r, "double-free")
    assert f["size"] == 4096
    assert frame_functions(stack_by_role(f, "second free"))[:2] == ["release_again", "main"]
    assert frame_functions(stack_by_role(f, "first free"))[:2] == ["release_buffer", "main"]


def test_dlopen_dlsym_double_close(heisen, way):
    p = way.run([target(heisen, "dl_handle_calls"), "double-close"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    r = heisen.dump_json(way.session, expect_rc=1)
    f = one(r, "double-close")
    st = [s for s in f["stacks"] if frame_functions(s)[:1] == ["close_reader_again"]]
    assert st, [frame_functions(s)[:2] for s in f["stacks"]]


def test_dlopen_dlsym_lock_order(heisen, way):
    p = way.run([target(heisen, "dl_handle_calls"), "abba"])
    assert p.returncode == 0, (p.returncode, p.stderr)
    r = heisen.dump_json(way.session, expect_rc=1)
    f = one(r, "potential-deadlock")
    assert "accounts" in f["message"] and "ledger" in f["message"]


def test_dlopen_dlsym_clean(heisen, way):
    p = way.run([target(heisen, "dl_handle_calls"), "clean"], env={"HEISEN_HEAP": "1"})
    assert p.returncode == 0, (p.returncode, p.stderr)
    assert "done ok" in p.stdout
    r = heisen.dump_json(way.session, expect_rc=0)
    assert r["findings"] == [] and r["errors"] == []


def test_rtld_next_left_alone_handle_mapped(heisen, session):
    """A library preloaded after heisen (next_probe.so): its dlsym(RTLD_NEXT,
    "free") still gets glibc's free — a malloc wrapper asking for the real
    one must not be handed a hook — while dlsym on a libc handle gets
    heisen's."""
    env = heisen.env(session)
    env["LD_PRELOAD"] = f"{heisen.lib}:{heisen.targets / 'next_probe.so'}"
    p = subprocess.run(["/bin/true"], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert facts(p.stdout)["next_is_glibc"] == ["1"]
    assert facts(p.stdout)["handle_is_glibc"] == ["0"]
