# SPDX-License-Identifier: MIT
"""Learnt frame distances shared by a session's processes (shim/unwind_share.c,
the table <session>/.frames; docs/interfaces.md "The learnt frame distances").

A program that double-frees a block made deep inside a shared library of its
own is run twice in one session: the second process takes the distances the
first one learnt instead of unwinding, and its double-free report still has
the exact allocation and free stacks -- the same frames, frame for frame, as
a run that unwinds everything with libunwind (HEISEN_UNWIND_SHARE=0).  A
table whose entries were corrupted, and a library rebuilt at the same path
with other frame sizes, still give exact stacks.
"""
import signal
import struct
import subprocess

from conftest import fact_int, findings_of

HDR = struct.Struct("<QII6Q")  # magic, version, capacity, hits, published, doubts, full, rejected, pad
MAGIC = 0x53454D4152465348  # "HSFRAMES"
ENTRY = struct.Struct("<QQ")
ENTRIES_AT = 4096  # the header's page, then the entries

LIB = r"""
#include <stdlib.h>
#ifndef PAD
#define PAD 256
#endif
/* frames without frame pointers (-O1), each of its own size: the distances
 * come from the CFI, and a rebuild with another PAD changes every one */
__attribute__((noinline)) static void *make_block(int n)
{
	volatile char pad[PAD];
	void *p;
	pad[0] = (char)n;
	p = malloc(48 + (size_t)n);
	pad[PAD - 1] = 1;
	return p;
}
__attribute__((noinline)) static void *make_layer(int n)
{
	volatile char pad[PAD + 32];
	void *p;
	pad[0] = (char)n;
	p = make_block(n);
	pad[PAD - 1] = 2;
	return p;
}
__attribute__((noinline)) void *lib_make(int depth)
{
	volatile char pad[PAD + 64];
	void *p;
	pad[0] = (char)depth;
	p = depth > 0 ? lib_make(depth - 1) : make_layer(depth);
	pad[PAD - 1] = 3;
	return p;
}
__attribute__((noinline)) static void drop_block(void *p)
{
	volatile char pad[PAD + 96];
	pad[0] = 1;
	free(p);
	pad[PAD - 1] = 4;
}
__attribute__((noinline)) void lib_drop(void *p)
{
	volatile char pad[PAD + 128];
	pad[0] = 1;
	drop_block(p);
	pad[PAD - 1] = 5;
}
"""

MAIN = r"""
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
void *lib_make(int depth);
void lib_drop(void *p);
int main(void)
{
	void *volatile p;
	/* a few sites of the program's own first: their stacks through the same frames */
	for (int i = 0; i < 8; i++)
		free(lib_make(i % 3));
	p = lib_make(3);
	lib_drop(p);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	lib_drop(p); /* the double free */
	puts("survived");
	return 0;
}
"""


def build(d, pad):
    """libframes.so (frame sizes set by pad) and the program linked to it, in d."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "frames_lib.c").write_text(LIB)
    (d / "frames_main.c").write_text(MAIN)
    lib = d / "libframes.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-O1", "-g", f"-DPAD={pad}", "-o", str(lib) + ".new",
                    str(d / "frames_lib.c")], check=True, timeout=120)
    (d / "libframes.so.new").replace(lib)  # a new file at the same path, as a rebuild makes
    exe = d / "frames_main"
    if not exe.exists():
        subprocess.run(["cc", "-O1", "-g", "-o", str(exe), str(d / "frames_main.c"), "-L", str(d), "-lframes",
                        f"-Wl,-rpath,{d}"], check=True, timeout=120)
    return exe


def double_free_stacks(heisen, session, exe, **env):
    """Run exe under the preload in session; its double-free finding's stacks
    by role, each a list of (module, offset) frames."""
    p = heisen.preload([exe], session, env={k: str(v) for k, v in env.items()})
    assert p.returncode == -signal.SIGABRT, (p.returncode, p.stderr)
    assert "survived" not in p.stdout
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    frees = [f for f in findings_of(report, "double-free") if f["pid"] == pid]
    assert len(frees) == 1, report["findings"]
    stacks = {s["role"]: s for s in frees[0]["stacks"]}
    assert set(stacks) == {"allocation", "first free", "second free"}, stacks.keys()
    for s in stacks.values():
        assert not s.get("truncated"), s
    return {role: [(fr["module"], fr["offset"]) for fr in s["frames"]] for role, s in stacks.items()}, stacks


def functions(stack):
    return [fr.get("function") for fr in stack["frames"]]


def table(session):
    """The session's table header as a dict."""
    with open(session / ".frames", "rb") as f:
        magic, version, cap, hits, published, doubts, full, rejected, _ = HDR.unpack(f.read(HDR.size))
    assert magic == MAGIC and version == 2, (hex(magic), version)
    return dict(capacity=cap, hits=hits, published=published, doubts=doubts, full=full, rejected=rejected)


def reference(heisen, tmp_path, exe, name):
    """The stacks from libunwind alone: sharing off, a fresh session."""
    ref = tmp_path / name
    frames, stacks = double_free_stacks(heisen, ref, exe, HEISEN_UNWIND_SHARE=0)
    assert not (ref / ".frames").exists()  # the switch is obeyed: no table made
    fns = functions(stacks["allocation"])
    assert fns[:3] == ["make_block", "make_layer", "lib_make"] and "main" in fns, fns
    assert functions(stacks["second free"])[:3] == ["drop_block", "lib_drop", "main"], stacks["second free"]
    return frames


def test_a_second_process_takes_the_first_ones_distances_and_keeps_exact_stacks(heisen, session, tmp_path):
    exe = build(tmp_path / "prog", 256)
    want = reference(heisen, tmp_path, exe, "ref")
    got1, _ = double_free_stacks(heisen, session, exe)
    assert got1 == want
    t1 = table(session)
    assert t1["published"] > 0 and t1["rejected"] == 0, t1
    got2, _ = double_free_stacks(heisen, session, exe)
    assert got2 == want  # frame for frame what libunwind reads
    t2 = table(session)
    assert t2["hits"] > t1["hits"], (t1, t2)  # the second process took the first one's distances
    assert t2["rejected"] == 0, (t1, t2)


def test_a_corrupt_table_is_refused_entry_by_entry_and_stacks_stay_exact(heisen, session, tmp_path):
    exe = build(tmp_path / "prog", 256)
    want = reference(heisen, tmp_path, exe, "ref")
    assert double_free_stacks(heisen, session, exe)[0] == want
    t1 = table(session)
    # every entry's distance made 16 bytes larger, its check left as it was: a wrong
    # distance that a reader trusting the bytes would walk with
    path = session / ".frames"
    data = bytearray(path.read_bytes())
    n = 0
    for off in range(ENTRIES_AT, len(data), ENTRY.size):
        key, val = ENTRY.unpack_from(data, off)
        if key and val:
            ENTRY.pack_into(data, off, key, (val & ~0xFFFF) | (((val & 0xFFFF) + 16) & 0xFFFF))
            n += 1
    assert n == t1["published"], (n, t1)
    path.write_bytes(bytes(data))
    assert double_free_stacks(heisen, session, exe)[0] == want
    t2 = table(session)
    assert t2["rejected"] > 0, t2  # the corrupt entries were read, and refused
    # a header that is not the table's: not used at all, stacks still exact
    data = bytearray(path.read_bytes())
    data[0:8] = b"NOTFRAME"
    path.write_bytes(bytes(data))
    assert double_free_stacks(heisen, session, exe)[0] == want
    assert path.read_bytes()[0:8] == b"NOTFRAME"  # left alone, not overwritten


def test_a_library_rebuilt_at_the_same_path_gets_its_own_distances(heisen, session, tmp_path):
    prog = tmp_path / "prog"
    exe = build(prog, 256)
    want_a = reference(heisen, tmp_path, exe, "ref_a")
    assert double_free_stacks(heisen, session, exe)[0] == want_a
    t1 = table(session)
    exe = build(prog, 512)  # same path, other frame sizes: another build id
    want_b = reference(heisen, tmp_path, exe, "ref_b")
    got_b, _ = double_free_stacks(heisen, session, exe)
    assert got_b == want_b
    t2 = table(session)
    # the rebuilt library's return addresses were learnt and published anew
    assert t2["published"] > t1["published"] and t2["rejected"] == 0, (t1, t2)


def test_frames_of_64_kib_and_more_are_learnt_and_shared(heisen, session, tmp_path):
    """Distances are kept in 8-byte units: a frame of 64 KiB or more (CPython's
    Py_RunMain keeps a 64 KiB path buffer) is learnt and shared like any
    other, not doubt for good (a real unwind through it in every process)."""
    exe = build(tmp_path / "prog", 70000)
    want = reference(heisen, tmp_path, exe, "ref")
    assert double_free_stacks(heisen, session, exe)[0] == want
    t1 = table(session)
    got2, _ = double_free_stacks(heisen, session, exe)
    assert got2 == want  # frame for frame what libunwind reads
    t2 = table(session)
    assert t2["hits"] > t1["hits"] and t2["rejected"] == 0, (t1, t2)
    data = (session / ".frames").read_bytes()
    doubt = [hex(key >> 32) for key, val in (ENTRY.unpack_from(data, off) for off in range(ENTRIES_AT, len(data), ENTRY.size))
             if key and not key & 0x80000000 and val & 0xFFFF == 0xFFFF]
    assert not doubt, doubt  # no return address left unlearnable
