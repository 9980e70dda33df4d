# SPDX-License-Identifier: MIT
"""Python locks on a CPython whose frames heisen does not read (pyenv's 3.6
and 3.7): each threading.Lock is a node of its own (an instance node keyed
by its address, as a C mutex is; its id taken again by the next lock made
through the same native stack once it is destroyed), its acquisitions and
releases go through the same hooks as on the versions heisen knows, and the
cycle through a Python lock, the GIL and a C mutex is predicted.

The release of such a lock remembers that its edge to the GIL is in the
graph (semaphores.c sem_gil_edge_known) as a class's release does; these
cases check that the edge is still there when it counts: after thousands
of short-lived locks made, taken and released with the GIL held, whose ids
the locks of the cycle take again.  (A version without its thread's native
id, 3.6 and 3.7, runs test-targets/py_lock_gil_native.py with
threading.get_ident standing in.)
"""
import pytest

from conftest import fact_int, facts, findings_of
from test_python_versions import pyenv_python

# Make, take, release and drop CHURN locks first (their ids freed, each edge to the
# GIL made and remembered), then run the cycle's script with its arguments.
RUNNER = """
import runpy, sys, threading
threading.get_native_id = getattr(threading, "get_native_id", threading.get_ident)
for _ in range(int(sys.argv[1])):
    lock = threading.Lock()
    for _ in range(3):
        with lock:
            pass
    del lock
sys.argv = sys.argv[2:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.fixture(autouse=True)
def python_locks_default(monkeypatch):
    monkeypatch.delenv("HEISEN_PY_LOCKS", raising=False)


@pytest.mark.parametrize("minor", [6, 7])
@pytest.mark.parametrize("churn", [0, 3000], ids=["fresh", "after-3000-short-lived-locks"])
def test_cycle_through_a_python_lock_the_gil_and_a_c_mutex_without_python_frames(heisen, session, minor, churn):
    exe = pyenv_python(minor)
    if exe is None:
        pytest.skip(f"no CPython 3.{minor} under ~/.pyenv/versions")
    lib = heisen.targets / "libnativelock.so"
    assert lib.exists(), f"{lib} is missing: ninja -C {heisen.build}"
    src = heisen.src_targets / "py_lock_gil_native.py"
    p = heisen.preload([exe, "-c", RUNNER, str(churn), src, lib], session)
    assert p.returncode == 0 and facts(p.stdout)["done"] == ["1"], (p.returncode, p.stdout, p.stderr)
    pid = fact_int(p.stdout, "pid")
    report = heisen.dump_json(session, expect_rc=1)
    cycles = [f for f in findings_of(report, "potential-deadlock")
              if f["pid"] == pid and len(f["edges"]) == 3]
    assert len(cycles) == 1, report["findings"]
    names = [(e["from"].get("name"), e["to"].get("name")) for e in cycles[0]["edges"]]
    # the Python lock: the node that is neither the GIL nor the C mutex
    nodes = {n for pair in names for n in pair}
    assert "GIL" in nodes and "registry_lock" in nodes and len(nodes) == 3, names
    (journal,) = nodes - {"GIL", "registry_lock"}
    assert set(names) == {(journal, "GIL"), ("GIL", "registry_lock"), ("registry_lock", journal)}, names
