# SPDX-License-Identifier: MIT
"""A frame whose size changes between calls (alloca) has no learnt distance
(shim/stacks.c "frame-pointer frames"): a new site's stack through it is
read through its frame pointer, %rbp carried from the hook's caller through
the %rbp rules learnt from libunwind and shared in <session>/.frames.

The program (built here at -O2, so that only the alloca'd frame keeps a
frame pointer) calls the same call instruction of `with_scratch` with 16
and 4096 bytes of scratch, each time allocating at a new site through
`relay`, which uses %rbp as a general register (its caller's %rbp saved in
its frame, another value in the register at its call).  The first
processes of a session learn; a later one reads both sites' stacks without
loading libunwind (it loads only for the double free's own report, after
the program's last line), and they are the frames libunwind reads.
"""
import signal
import subprocess

from conftest import fact_int, findings_of

PROG = r"""
#include <alloca.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

__attribute__((noinline)) static char *block_small(void)
{
	return malloc(48);
}

__attribute__((noinline)) static char *block_large(void)
{
	return malloc(96);
}

/* %rbp holds something else than its caller's frame pointer at the call:
 * the caller's is saved in this frame */
__attribute__((noinline)) static char *relay(int large)
{
	char *p;
	__asm__ volatile("mov %0, %%rbp" : : "r"((long)large * 7 + 3) : "rbp");
	p = large ? block_large() : block_small();
	__asm__ volatile("" : : : "memory");
	return p;
}

__attribute__((noinline)) static char *with_scratch(size_t n)
{
	char *scratch = alloca(n);
	char *volatile keep = scratch;
	memset(scratch, 0, n);
	(void)keep;
	return relay(n > 1024); /* one call instruction, two frame sizes */
}

__attribute__((noinline)) char *first_request(void)
{
	return with_scratch(16);
}

__attribute__((noinline)) char *second_request(void)
{
	return with_scratch(4096);
}

int main(void)
{
	char *a = first_request();
	char *volatile b = second_request();
	free(a);
	free(b);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	free(b); /* the double free */
	puts("survived");
	return 0;
}
"""


def build(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "alloca_fp.c").write_text(PROG)
    exe = d / "alloca_fp"
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-o", str(exe), str(d / "alloca_fp.c")],
                   check=True, timeout=120)
    return exe


def run(heisen, session, exe, **env):
    """exe under the preload in session with ld.so's file log (stdout and
    stderr in one stream, in the order written); (libunwind loaded before
    the program's "pid" line, the last before its double free, whose
    report unwinds; the double free's allocation stack as (module, offset)
    frames; its function names)."""
    e = heisen.env(session, LD_PRELOAD=heisen.lib, LD_DEBUG="files")
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.run([str(exe)], env=e, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stdout)
    pid = fact_int(p.stdout, "pid")
    lines = p.stdout.splitlines()
    before = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("pid "))]
    loaded = any("file=libunwind.so.8 " in ln for ln in before)
    report = heisen.dump_json(session, expect_rc=1)
    frees = [f for f in findings_of(report, "double-free") if f["pid"] == pid]
    assert len(frees) == 1, report["findings"]
    alloc = next(s for s in frees[0]["stacks"] if s["role"] == "allocation")
    assert not alloc.get("truncated"), alloc
    return (loaded, [(fr["module"], fr["offset"]) for fr in alloc["frames"]],
            [fr.get("function") for fr in alloc["frames"]])


def test_a_site_under_an_alloca_frame_is_read_through_its_frame_pointer_without_libunwind(heisen, session, tmp_path):
    exe = build(tmp_path / "prog")
    # the reference: libunwind alone (sharing off, its own session)
    _, want, fns = run(heisen, tmp_path / "ref", exe, HEISEN_UNWIND_SHARE=0)
    named = ["block_large", "relay", "with_scratch", "second_request", "main"]
    assert [f for f in fns if f in named + ["first_request", "block_small"]] == named, fns
    # the session's first processes learn (the distance of with_scratch's call
    # turns to doubt at the second call; the rules come with the unwinds after)
    for _ in range(2):
        assert run(heisen, session, exe)[1] == want
    loaded, got, _ = run(heisen, session, exe)
    assert got == want  # frame for frame what libunwind reads
    assert not loaded  # every site's stack read without libunwind
