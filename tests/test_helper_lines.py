# SPDX-License-Identifier: MIT
"""Stacks through shared helpers name each caller's own line.

A helper of two or more Python levels (contextlib's @contextmanager, a
function calling a function, pyzmq's Context.socket) runs at the same frame
addresses and instructions whoever calls it; only a frame further out, the
caller's line, tells two calls apart.  A stack kept lazily (a Python lock's
acquisition: its native frames and a token of the Python frame that took
the lock and its caller, the rest read when needed) must never show the
frames further out of a later call of the same helpers: it names the line
that took the lock, or ends before it, marked truncated
(README.md "Python locks").  fd creation stacks read every frame at the
call: each fd names the line that made it.

Target: test-targets/py_helper_lines.py.
"""
import pytest

from conftest import SYSTEM_PYTHON, fact_int, findings_of, marker_line, process_of, python_frames
from test_python_versions import py  # noqa: F401  (the interpreter matrix fixture: 3.8-3.13, Debian's 3.11)


def script(heisen):
    return heisen.src_targets / "py_helper_lines.py"


def lines_of(stack, function):
    return [fr["line"] for fr in python_frames(stack) if fr["function"] == function]


@pytest.mark.parametrize("helper,function,first,second", [
    ("locked", "transfer", "transfer takes accounts", "transfer takes ledger"),
    ("_take", "forward", "forward takes queue", "forward takes stats"),
], ids=["contextmanager", "two-level-function"])
def test_a_lock_held_through_a_shared_helper_never_shows_the_next_callers_line(
        heisen, session, py, helper, function, first, second):  # noqa: F811
    """function takes lock X at line `first` through the helper, keeps it,
    and takes lock Y at line `second` through the same helper; elsewhere Y
    then X: a lock-order cycle.  The edge X -> Y carries X's acquisition
    stack, read when Y is taken, when a new call of the helper sits where
    X's call was: it names `first` (or ends before function, truncated),
    never `second`; Y's names `second`."""
    src = script(heisen)
    p = heisen.preload([py.exe, src, "locks"], session, timeout=120)
    assert p.returncode == 0, (p.returncode, p.stderr[-3000:])
    pid = fact_int(p.stdout, "pid")
    r = heisen.dump_json(session, expect_rc=1)
    a, b = marker_line(src, first), marker_line(src, second)
    cycles = [f for f in findings_of(r, "potential-deadlock") if f["pid"] == pid and any(
        lines_of(s, helper) for s in f["stacks"])]
    assert len(cycles) == 1, [f.get("message") for f in r["findings"]]
    held = [s for s in cycles[0]["stacks"] if lines_of(s, helper) and "(then " in s["role"]]
    taking = [s for s in cycles[0]["stacks"] if lines_of(s, helper) and "while holding" in s["role"]]
    assert len(held) == 1 and len(taking) == 1, [s["role"] for s in cycles[0]["stacks"]]
    got = lines_of(held[0], function)
    # never the later call's line; the acquisition's own line, or a stack that says it ends early
    assert got == [a] or (got == [] and held[0].get("truncated") is True), (a, b, got, held[0]["frames"])
    assert lines_of(taking[0], function) == [b], (b, taking[0]["frames"])


def test_fds_created_through_shared_helpers_name_each_callers_line(heisen, session):
    """open() through two levels of helpers, socket.socket() through two,
    and pyzmq's Context.socket(), each from two lines of work() in a loop,
    kept and SIGKILLed: every fd's creation stack names the line that
    created it, each line as many times as it ran."""
    try:
        import zmq  # noqa: F401  (Debian's python3-zmq, for /usr/bin/python3)
    except ImportError:
        pytest.fail("pyzmq is missing: apt-get install python3-zmq (./dev does)")
    src = script(heisen)
    p = heisen.preload([SYSTEM_PYTHON, src, "fds"], session, timeout=120)
    assert p.returncode == -9, (p.returncode, p.stderr[-3000:])
    pid, rounds = fact_int(p.stdout, "pid"), fact_int(p.stdout, "rounds")
    r = heisen.dump_json(session)
    fds = process_of(r, pid)["fds"]["open"]
    pairs = {"_open_ro": ("opens first file", "opens second file"),
             "_new_socket": ("opens first socket", "opens second socket"),
             "Context.socket": ("opens sender", "opens second sender")}
    for helper, (first, second) in pairs.items():
        a, b = marker_line(src, first), marker_line(src, second)
        made = [lines_of(d["stack"], "work") for d in fds if d.get("stack") and lines_of(d["stack"], helper)]
        assert made and all(m in ([a], [b]) for m in made), (helper, a, b, made)
        # pyzmq's first socket also starts the context's threads (their eventfds and epolls)
        n_a, n_b = made.count([a]), made.count([b])
        assert n_b == rounds and (n_a == rounds if helper != "Context.socket" else n_a >= rounds), \
            (helper, n_a, n_b, rounds)
