# SPDX-License-Identifier: MIT
"""A Python lock's stack through shared helpers names its own caller's line.

A helper of two or more Python levels (contextlib's @contextmanager, a
function calling a function that calls acquire()) runs at the same frame
addresses and instructions whoever calls it; only a frame further out, the
caller's line, tells two calls apart.  A Python lock's stack is kept lazily
at the acquisition (native frames up to the evaluation loop, a token of the
Python frame that took it and its caller, and the line keys of up to 12
frames further out); the rest is read from the thread's stack when an edge
needs it.  Run again from another line while the first lock is still held,
the helper's new call sits where the first one's frames were: the held
lock's stack must still name the line that took it, never the other line
(README.md "Python locks").  On every interpreter the machine has.

Target: test-targets/py_helper_lines.py.
"""
import pytest

from conftest import fact_int, findings_of, marker_line, python_frames
from test_python_versions import py  # noqa: F401  (the interpreter matrix fixture: 3.8-3.13, Debian's 3.11)


def lines_of(stack, function):
    return [fr["line"] for fr in python_frames(stack) if fr["function"] == function]


@pytest.mark.parametrize("helper,function,first,second", [
    ("locked", "transfer", "transfer takes accounts", "transfer takes ledger"),
    ("_take", "forward", "forward takes queue", "forward takes stats"),
    ("_hold", "relay", "relay takes gate", "relay takes signal"),
], ids=["contextmanager", "two-level-function", "native-mutex"])
def test_a_lock_held_through_a_shared_helper_names_its_own_line(
        heisen, session, py, helper, function, first, second):  # noqa: F811
    """function takes lock X at line `first` through the helper, keeps it,
    and takes lock Y at line `second` through the same helper; elsewhere Y
    then X: a lock-order cycle.  The edge X -> Y carries X's acquisition
    stack, read when Y is taken, while a new call of the helper sits where
    X's call was: it names `first` and not `second`; Y's names `second`.
    native-mutex: X is a pthread mutex taken with the GIL held (its stack is
    kept lazily by the pthread hook as a Python lock's is), Y a Python lock."""
    src = heisen.src_targets / "py_helper_lines.py"
    p = heisen.preload([py.exe, src], session, timeout=180)
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
    # the acquisition's own line, never the later call's
    assert got == [a] and b not in got, (a, b, got, held[0]["frames"])
    assert lines_of(taking[0], function) == [b], (b, taking[0]["frames"])
