# SPDX-License-Identifier: MIT
"""A whole stack taken inside heisen (shim/stacks.c hs_stack_here: a new
lock-order edge's, a blocking lock's wait stack, a self-deadlock's) is read
through the learnt frame distances from heisen's own frame outward, with
libunwind only at a return address no unwind has learnt yet; its frames
are those libunwind reads, frame for frame.

The program (built here at -O2 without frame pointers, so that the
distances come from the CFI) takes lock_a then lock_b in one thread and
lock_b then lock_a in another, each deep in frames of their own sizes: two
new lock-order edges, a potential deadlock.  The reference is a process in
a session of its own with sharing off (libunwind learns there); the
session's first process learns and publishes the distances (its own and
heisen's frames), and a later one reads both edges' stacks without loading
libunwind at all, the same frames as the reference.
"""
import subprocess

from conftest import fact_int, findings_of, lockname

PROG = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

pthread_mutex_t lock_a = PTHREAD_MUTEX_INITIALIZER;
pthread_mutex_t lock_b = PTHREAD_MUTEX_INITIALIZER;

#define CHECK(x) do { if ((x) != 0) abort(); } while (0)

__attribute__((noinline)) static void take_second(pthread_mutex_t *m)
{
	volatile char pad[200];
	pad[0] = 1;
	CHECK(pthread_mutex_lock(m));
	pad[199] = 2;
	CHECK(pthread_mutex_unlock(m));
}

__attribute__((noinline)) static void take_pair(pthread_mutex_t *first, pthread_mutex_t *second, int depth)
{
	volatile char pad[296];
	pad[0] = (char)depth;
	if (depth > 0) {
		take_pair(first, second, depth - 1);
	} else {
		CHECK(pthread_mutex_lock(first));
		take_second(second);
		CHECK(pthread_mutex_unlock(first));
	}
	pad[295] = 3;
}

__attribute__((noinline)) void take_a_then_b(void)
{
	volatile char pad[72];
	pad[0] = 1;
	take_pair(&lock_a, &lock_b, 3);
	pad[71] = 1;
}

__attribute__((noinline)) void take_b_then_a(void)
{
	volatile char pad[136];
	pad[0] = 1;
	take_pair(&lock_b, &lock_a, 2);
	pad[135] = 1;
}

static void *thread_ab(void *arg)
{
	(void)arg;
	take_a_then_b();
	return NULL;
}

static void *thread_ba(void *arg)
{
	(void)arg;
	take_b_then_a();
	return NULL;
}

static void run(void *(*fn)(void *))
{
	pthread_t t;
	CHECK(pthread_create(&t, NULL, fn, NULL));
	CHECK(pthread_join(t, NULL));
}

int main(void)
{
	run(thread_ab);
	run(thread_ba);
	printf("pid %d\n", (int)getpid());
	fflush(stdout);
	return 0;
}
"""


def build(d):
    d.mkdir(parents=True, exist_ok=True)
    (d / "edge_walk.c").write_text(PROG)
    exe = d / "edge_walk"
    subprocess.run(["cc", "-O2", "-g", "-fomit-frame-pointer", "-fno-optimize-sibling-calls", "-pthread", "-o",
                    str(exe), str(d / "edge_walk.c")], check=True, timeout=120)
    return exe


def frames(stack):
    return [(fr["module"], fr["offset"]) for fr in stack["frames"]]


def run(heisen, session, exe, **env):
    """exe under the preload in session with ld.so's file log; (libunwind
    loaded before the program's "pid" line, its last; the potential
    deadlock's edge stacks by (from, to) lock names, each a pair of
    (module, offset) frame lists; the same as function names)."""
    e = heisen.env(session, LD_PRELOAD=heisen.lib, LD_DEBUG="files")
    e.update({k: str(v) for k, v in env.items()})
    p = subprocess.run([str(exe)], env=e, timeout=60, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert p.returncode == 0, (p.returncode, p.stdout)
    pid = fact_int(p.stdout, "pid")
    lines = p.stdout.splitlines()
    before = lines[:next(i for i, ln in enumerate(lines) if ln.startswith("pid "))]
    loaded = any("file=libunwind.so.8 " in ln for ln in before)
    report = heisen.dump_json(session)
    pds = [f for f in findings_of(report, "potential-deadlock") if f["pid"] == pid]
    assert len(pds) == 1, report["findings"]
    got, names = {}, {}
    for ed in pds[0]["edges"]:
        key = (lockname(ed["from"]), lockname(ed["to"]))
        for s in (ed["from_stack"], ed["to_stack"]):
            assert not s.get("truncated"), s
        got[key] = (frames(ed["from_stack"]), frames(ed["to_stack"]))
        names[key] = [fr.get("function") for fr in ed["to_stack"]["frames"]]
    assert set(got) == {("lock_a", "lock_b"), ("lock_b", "lock_a")}, got.keys()
    return loaded, got, names


def test_a_new_edges_stack_is_walked_without_libunwind_and_is_libunwinds(heisen, session, tmp_path):
    exe = build(tmp_path / "prog")
    # the reference: libunwind learns in a process of its own (sharing off)
    _, want, names = run(heisen, tmp_path / "ref", exe, HEISEN_UNWIND_SHARE=0)
    # the whole stack of each new edge, from the function that took the second lock out
    ab, ba = names[("lock_a", "lock_b")], names[("lock_b", "lock_a")]
    assert ab[:6] == ["take_second", "take_pair", "take_pair", "take_pair", "take_pair", "take_a_then_b"], ab
    assert ba[:5] == ["take_second", "take_pair", "take_pair", "take_pair", "take_b_then_a"], ba
    assert "thread_ab" in ab and "thread_ba" in ba
    # the session's first process learns, its edges' stacks the reference's
    loaded, got, _ = run(heisen, session, exe)
    assert got == want
    # a later one reads every stack through the distances the first one shared
    loaded, got, _ = run(heisen, session, exe)
    assert got == want  # frame for frame what libunwind reads
    assert not loaded  # the edges' stacks (and every other) read without libunwind
