# SPDX-License-Identifier: MIT
"""libunwind is loaded at heisen's first unwind (shim/unwind_load.c), not by
ld.so into every image: an image that never unwinds maps neither libunwind
nor liblzma and is still recorded; a crash before the image's first unwind
loads libunwind in the crash handler and still has its whole stack.  ld.so's
own log (LD_DEBUG=files) says which objects were loaded, and when.
"""
import os
import signal
import subprocess

from conftest import fact_int, findings_of, frame_functions, target

UNWIND_OBJECTS = ("file=libunwind.so.8 ", "file=liblzma.so.5 ")


def run_logged(heisen, session, cmd):
    """cmd under the preload with ld.so's file log; stdout and stderr in one
    stream, in the order they were written."""
    env = heisen.env(session, LD_PRELOAD=heisen.lib, LD_DEBUG="files")
    return subprocess.run([str(c) for c in cmd], env=env, timeout=60, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)


def test_an_image_that_never_unwinds_maps_neither_libunwind_nor_liblzma(heisen, session):
    p = run_logged(heisen, session, ["/bin/true"])
    assert p.returncode == 0, p.stdout
    assert "libheisen.so" in p.stdout  # the log is there, and heisen was preloaded
    for obj in UNWIND_OBJECTS:
        assert obj not in p.stdout, p.stdout
    # and the image was recorded all the same
    report = heisen.dump_json(session)
    assert [os.path.basename(pr["exe"]) for pr in report["processes"]] == ["true"], report["processes"]


def test_a_crash_before_the_first_unwind_loads_libunwind_in_the_handler_and_keeps_the_whole_stack(heisen, session):
    p = run_logged(heisen, session, [target(heisen, "segv"), "first"])
    assert p.returncode == -signal.SIGSEGV, p.stdout
    lines = p.stdout.splitlines()
    fault = next(i for i, ln in enumerate(lines) if ln.startswith("pid "))
    loads = [i for i, ln in enumerate(lines) if "file=libunwind.so.8 " in ln and " by " in ln]
    # loaded once, by libheisen, after the program's last line before the fault
    assert len(loads) == 1 and loads[0] > fault, p.stdout
    assert "dynamically loaded by" in lines[loads[0]] and "libheisen.so" in lines[loads[0]], lines[loads[0]]
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1 and crashes[0]["pid"] == pid, report["findings"]
    stack = crashes[0]["stacks"][0]
    fns = frame_functions(stack)
    assert fns[0] == "crash_first" and "main" in fns, stack
    assert not stack.get("truncated"), stack


def double_free_allocation_stack(heisen, session, name):
    """Run test target `name` (a program that double-frees one block and
    prints its pid) preloaded: it dies of SIGABRT (heisen's report of the double free), one
    double-free finding of its own pid; returns the finding's allocation
    stack."""
    p = heisen.preload([target(heisen, name)], session)
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    assert "survived" not in p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    frees = findings_of(report, "double-free")
    assert len(frees) == 1 and frees[0]["pid"] == pid, report["findings"]
    return next(s for s in frees[0]["stacks"] if s["role"] == "allocation")


def test_the_first_heap_block_made_by_libc_has_its_whole_allocation_stack(heisen, session):
    """The process's first unwind is for a block strdup allocated (the
    malloc hook's caller is libc, not the dynamic loader): libunwind is
    loaded there and the stack is whole."""
    alloc = double_free_allocation_stack(heisen, session, "heap_libc_first")
    fns = frame_functions(alloc)
    assert "copy_name" in fns and "main" in fns, alloc


def test_a_crash_over_a_corrupt_heap_before_the_first_unwind_still_dies_of_its_own_signal(heisen, session):
    """With the heap checker off (HEISEN_HEAP=0) the program's blocks are
    glibc's alone and nothing has unwound: a 24-byte block overrun into
    glibc's top chunk, then a SIGSEGV in the program's own code.  Loading
    libunwind in the crash handler would allocate from that top chunk and
    glibc would abort ("malloc(): corrupted top size"): the process would
    die of SIGABRT, not of its own SIGSEGV.  So the handler does not load
    it here; the crash is still recorded, its stack the faulting
    instruction alone, marked truncated (README "Crash handlers and
    faulthandler")."""
    p = heisen.preload([target(heisen, "segv"), "corrupt-first"], session, env={"HEISEN_HEAP": "0"})
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)
    assert "corrupted" not in p.stderr, p.stderr
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1 and crashes[0]["pid"] == pid, report["findings"]
    stack = crashes[0]["stacks"][0]
    assert stack.get("truncated") and frame_functions(stack)[:1] == ["crash_first"], stack


def test_a_site_reached_through_a_frame_that_changed_size_has_its_own_callers(heisen, session):
    """A new allocation site's stack is read through return-address
    distances learnt from earlier unwinds (shim/stacks.c site_read).  Here
    the same call instruction in with_scratch runs with 16 and then 4096
    bytes of alloca'd scratch: the distance learnt at the first call does
    not hold at the second, whose site must still get its own, whole
    allocation stack (the double free's), through second_request to main."""
    alloc = double_free_allocation_stack(heisen, session, "heap_alloca_sites")
    fns = frame_functions(alloc)
    want = ["block_large", "make_block", "with_scratch", "second_request", "main"]
    assert [f for f in fns if f in want + ["first_request", "block_small"]] == want, alloc
    assert not alloc.get("truncated"), alloc
