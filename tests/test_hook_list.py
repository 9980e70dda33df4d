# SPDX-License-Identifier: MIT
"""shim/hooks.def is the one honest list of what libheisen.so interposes.

Every function the library exports is either a hook listed once in
hooks.def (HS_HOOK, HS_HOOK_V, HS_HOOK_OWN) or a function of the public
header include/heisen/heisen.h; nothing else leaks into the program's
symbol namespace, and no listed hook is missing from the library.  The GIL
entry points (HS_HOOK_GOT) are patched into libpython's global offset
table, never exported (an exported PyGILState_Ensure would be found by
every dlsym(RTLD_DEFAULT, ...) probe for Python, in programs without it).
"""
import re
import subprocess
from collections import Counter

from conftest import REPO

HOOK = re.compile(r"^(HS_HOOK(?:_V|_OWN|_GOT)?)\(\s*[^,]+,\s*([A-Za-z_][A-Za-z0-9_]*)\s*,", re.M)


def listed():
    kinds = {}
    names = Counter()
    for kind, name in HOOK.findall((REPO / "shim" / "hooks.def").read_text()):
        kinds.setdefault(kind, set()).add(name)
        names[name] += 1
    return kinds, names


def public_functions():
    text = (REPO / "include" / "heisen" / "heisen.h").read_text()
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)   # examples in comments are not declarations
    return set(re.findall(r"^[A-Za-z_][\w \*]*?\b(heisen_\w+)\s*\(", text, re.M))


def exported(lib):
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True)
    syms = set()
    for line in out.stdout.splitlines():
        parts = line.split()
        if len(parts) == 3 and parts[1] in "TWi":
            syms.add(parts[2].split("@")[0])
    return syms


def test_every_hook_is_listed_once():
    kinds, names = listed()
    twice = sorted(n for n, c in names.items() if c > 1)
    assert twice == [], twice
    # the families the issue of an honest list named: the heap, mmap64, vfork, the GIL
    for n in ("malloc", "free", "posix_memalign", "mmap64", "vfork", "dlsym"):
        assert n in names, n
    assert kinds["HS_HOOK_GOT"] == {"PyGILState_Ensure", "PyGILState_Release", "PyEval_SaveThread",
                                    "PyEval_RestoreThread", "PyEval_AcquireThread", "PyEval_ReleaseThread"}


def test_exported_symbols_are_the_hook_list_and_the_public_header(heisen):
    kinds, _ = listed()
    hooks = kinds["HS_HOOK"] | kinds.get("HS_HOOK_V", set()) | kinds["HS_HOOK_OWN"]
    api = public_functions()
    assert {"heisen_name_lock", "heisen_fd_set_owner", "heisen_fd_close_owned", "heisen_abi_version"} <= api, api
    have = exported(heisen.lib)
    assert sorted(have - hooks - api) == [], "exported but listed nowhere"
    assert sorted((hooks | api) - have) == [], "listed but not exported"
    assert not (kinds["HS_HOOK_GOT"] & have), "GIL entry points must not be exported"
