# SPDX-License-Identifier: MIT
"""Python frames interleaved with native frames.

Stacks recorded for findings carry the Python functions that were running,
where the evaluation loop ran them: innermost first, "python": true, with the
script's function names and line numbers, below the native frames of the
extension they called (docs/interfaces.md, "Python and the GIL").  Checked
under Debian's /usr/bin/python3 (libpython linked into the executable) and
under pyenv's 3.11.7 (a shared libpython3.11.so), which imports the same
extension build (same 3.11 ABI).  The other CPython versions (3.8 to 3.13,
and one heisen does not know) are tests/test_python_versions.py's, through
ctypes, which needs no extension build per version.
"""
import os
import signal
from pathlib import Path

import pytest

from conftest import SYSTEM_PYTHON, findings_of, pyext_dir

PYENV = Path("/root/.pyenv/versions")
PYENV_311 = PYENV / "3.11.7" / "bin" / "python3.11"

INTERPRETERS = [
    pytest.param(SYSTEM_PYTHON, id="debian-static-libpython"),
    pytest.param(str(PYENV_311), id="pyenv-shared-libpython"),
]


def need(python):
    if not os.access(python, os.X_OK):
        pytest.skip(f"{python} is not installed")


def line_of(path, text):
    """1-based number of the only line of path that is `text` once stripped."""
    lines = [i for i, l in enumerate(Path(path).read_text().splitlines(), 1) if l.strip() == text]
    assert len(lines) == 1, (path, text, lines)
    return lines[0]


def python_frames(stack):
    return [f for f in stack["frames"] if f["python"]]


def check_python_frame(f):
    assert f["python"] is True
    assert f["module"] is None and f["offset"] is None, f
    assert isinstance(f["function"], str) and isinstance(f["file"], str) and f["line"] > 0, f


@pytest.mark.parametrize("python", INTERPRETERS)
def test_lock_order_edges_show_the_python_callers(heisen, session, python):
    need(python)
    ext = pyext_dir(heisen)
    script = heisen.src_targets / "py_lock_order.py"
    p = heisen.preload([python, script, ext], session)
    assert p.returncode == 0, p.stderr
    call_line = line_of(script, "fn()")

    report = heisen.dump_json(session, expect_rc=1)
    cycles = findings_of(report, "potential-deadlock")
    assert len(cycles) == 1, report["findings"]
    stacks = cycles[0]["stacks"]
    assert stacks
    for st in stacks:
        frames = st["frames"]
        names = [f["function"] for f in frames]
        # the extension's native frames on top, the Python caller below them
        assert names[0] in ("ext_take_a_then_b", "ext_take_b_then_a"), names
        native_entry = names.index("py_a_then_b" if names[0] == "ext_take_a_then_b" else "py_b_then_a")
        pys = python_frames(st)
        assert pys, names
        for f in pys:
            check_python_frame(f)
        first_py = frames.index(pys[0])
        assert first_py > native_entry, names
        worker = pys[0]
        assert worker["function"] == "worker", names
        assert worker["file"].endswith("py_lock_order.py") and worker["line"] == call_line, worker
        # the thread machinery that called it, outward, in call order
        py_names = [f["function"] for f in pys]
        assert py_names[1:4] == ["Thread.run", "Thread._bootstrap_inner", "Thread._bootstrap"], py_names
        assert all(f["file"].endswith("threading.py") for f in pys[1:4])
        # native frames of the interpreter remain between and below them
        assert not frames[-1]["python"], names

    text = heisen.dump(session).stdout
    assert f"worker ({script}:{call_line}) [python]" in text, text


CRASH_SCRIPT = """\
import os, sys
sys.path.insert(0, sys.argv[1])
import heisenlocks


class Service:
    def handle(self):
        heisenlocks.crash()


def serve():
    Service().handle()


print("pid", os.getpid(), flush=True)
serve()
"""


@pytest.mark.parametrize("python", INTERPRETERS)
def test_crash_stack_shows_the_python_function_below_the_native_frame(heisen, session, tmp_path, python):
    need(python)
    ext = pyext_dir(heisen)
    script = tmp_path / "service.py"
    script.write_text(CRASH_SCRIPT)
    p = heisen.preload([python, script, ext], session)
    assert p.returncode == -signal.SIGSEGV, (p.returncode, p.stderr)

    report = heisen.dump_json(session, expect_rc=1)
    crashes = findings_of(report, "crash")
    assert len(crashes) == 1, report["findings"]
    frames = crashes[0]["stacks"][0]["frames"]
    names = [f["function"] for f in frames]
    assert names[:2] == ["ext_crash_here", "py_crash"], names
    pys = python_frames(crashes[0]["stacks"][0])
    for f in pys:
        check_python_frame(f)
        assert f["file"] == str(script), f
    assert [(f["function"], f["line"]) for f in pys] == [
        ("Service.handle", line_of(script, "heisenlocks.crash()")),
        ("serve", line_of(script, "Service().handle()")),
        ("<module>", line_of(script, "serve()")),
    ], pys
    assert frames.index(pys[0]) > names.index("py_crash")
