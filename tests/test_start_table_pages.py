# SPDX-License-Identifier: MIT
"""Which pages of heisen's process-private hashed tables a Python start writes.

A hashed table is touched at random: a table of N pages that a start fills
a few hundred entries of has nearly all N pages written, a page fault each
(~12 us on the VM measured: bench/README.md "A Python start's page faults
in the stack and heap tables").  The learnt return-address distances
(stacks.c) and the heap checker's site cache (heap_core.c) start small and
grow as they fill, so a Python start writes a few pages of each, not all
32 and 16 of their largest sizes.  Checked from inside the started Python
itself: at its end it reads its own /proc/self/pagemap for the pages of
each table (libheisen's .bss, the symbols' addresses from nm).  And a
warm session's Python script start takes every frame distance from the
session's table, the 64 KiB frame of Py_RunMain's included, so it loads
no libunwind at all.
"""
import json
import os
import subprocess

import pytest

from conftest import SYSTEM_PYTHON

# The child: the present pages of each named range of libheisen, after a
# Python start that imports what a small service does.
CHILD = r"""
import json, sqlite3, struct, sys, threading
lib, ranges = sys.argv[1], json.loads(sys.argv[2])
base = None
for line in open("/proc/self/maps"):
    f = line.split()
    if len(f) > 5 and f[5] == lib and int(f[2], 16) == 0:
        base = int(f[0].split("-")[0], 16)
        break
out = {}
with open("/proc/self/pagemap", "rb") as pm:
    for name, (off, size) in ranges.items():
        lo, hi = (base + off) >> 12, (base + off + size + 4095) >> 12
        pm.seek(lo * 8)
        data = pm.read((hi - lo) * 8)
        out[name] = [sum(struct.unpack_from("<Q", data, 8 * i)[0] >> 63 for i in range(hi - lo)), hi - lo]
print(json.dumps(out))
"""


def symbols(lib, names):
    """{name: (offset, size)} of libheisen's data symbols among names (static ones too)."""
    out = subprocess.run(["nm", "-S", lib], capture_output=True, text=True, check=True).stdout
    found = {}
    for line in out.splitlines():
        f = line.split()
        if len(f) == 4 and f[2] in "bBdD" and f[3] in names:
            found[f[3]] = (int(f[0], 16), int(f[1], 16))
    return found


def table_pages(heisen, session, **env):
    """{table: [present pages, pages]} after a Python start (the session warm: its second start)."""
    lib = os.path.realpath(heisen.lib)
    syms = symbols(lib, {"pcoff", "pcoff_store", "site_cache"})
    ranges = {"distances": syms.get("pcoff_store", syms.get("pcoff")), "site cache": syms["site_cache"]}
    assert ranges["distances"], "no learnt-distance table in libheisen's symbols"
    e = heisen.env(session, LD_PRELOAD=lib, HEISEN_SESSION_AUTO="1", **env)
    for _ in range(2):
        r = subprocess.run([SYSTEM_PYTHON, "-c", CHILD, lib, json.dumps(ranges)], env=e,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.splitlines()[-1])


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/self/pagemap's present bits need root")
def test_a_python_start_writes_few_pages_of_the_learnt_distances(heisen, session):
    pages = table_pages(heisen, session)
    present, total = pages["distances"]
    assert present >= 1, pages  # the start did learn (or take) distances
    # 2048 entries first (4 pages), 4096 once half full (8 more): a start's
    # ~500-700 return addresses fit the first; at the fixed 16,384 slots
    # every one of the 32 pages was written
    assert present <= 8, pages


@pytest.mark.skipif(os.geteuid() != 0, reason="/proc/self/pagemap's present bits need root")
def test_a_python_start_writes_few_pages_of_the_heap_site_cache(heisen, session):
    pages = table_pages(heisen, session)
    present, total = pages["site cache"]
    assert present >= 1, pages  # the heap checker did cache sites
    # 2048 entries (4 pages) until 256 sites; a start meets ~120 (all 16 pages before)
    assert present <= 6, pages


# A script's start: CPython computes sys.path[0] in Py_RunMain, whose frame
# holds a 64 KiB path buffer (Debian's 3.11: CFA = rsp + 65,600).
SCRIPT = r"""
import json, sqlite3, sys, threading
print(any(line.rstrip().endswith(("/libunwind.so.8", ".so.8.0.1")) and "libunwind" in line
          for line in open("/proc/self/maps")))
"""


def test_a_warm_python_script_start_loads_no_libunwind(heisen, session, tmp_path):
    """The frame distances learnt by a session's first Python start walk every
    later start's new call sites, Py_RunMain's 64 KiB frame included: no
    libunwind loaded (its dlopen, its pages and the DWARF it reads).  A
    distance was kept in bytes in 16 bits, so that frame was never learnt and
    each start unwound through it."""
    script = tmp_path / "start.py"
    script.write_text(SCRIPT)
    e = heisen.env(session, LD_PRELOAD=os.path.realpath(heisen.lib), HEISEN_SESSION_AUTO="1",
                   HEISEN_GUARD_RATE="0", PYTHONHASHSEED="0")
    loaded = []
    for _ in range(3):
        r = subprocess.run([SYSTEM_PYTHON, str(script)], env=e, capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        loaded.append(r.stdout.strip())
    assert loaded[0] == "True", loaded  # the session's first start unwinds, and learns
    assert loaded[1:] == ["False", "False"], loaded
