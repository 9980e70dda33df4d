# SPDX-License-Identifier: MIT
"""Shared fixtures for heisen's end-to-end tests.

The tests drive the real binaries of a meson build directory (HEISEN_BUILD,
default ./build next to this repository's meson.build) on real programs and
assert on `heisen-dump --json`.  The interfaces are in docs/interfaces.md.
"""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILD = Path(os.environ.get("HEISEN_BUILD", REPO / "build")).resolve()
SYSTEM_PYTHON = "/usr/bin/python3"


class Heisen:
    """Paths of the built artefacts and helpers that run them."""

    def __init__(self, build: Path):
        self.build = build
        self.lib = build / "shim" / "libheisen.so"
        self.run_bin = build / "launcher" / "heisen-run"
        self.dump_bin = build / "dumper" / "heisen-dump"
        self.targets = build / "test-targets"
        self.src_targets = REPO / "test-targets"

    def env(self, session: Path | None = None, **extra):
        """An environment for running a program under the shim by hand."""
        env = dict(os.environ)
        env.pop("LD_PRELOAD", None)
        env.pop("HEISEN_DIR", None)
        if session is not None:
            env["HEISEN_DIR"] = str(session)
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def preload(self, cmd, session: Path, timeout=60, **kw):
        """Run cmd with LD_PRELOAD=libheisen.so HEISEN_DIR=session."""
        env = self.env(session)
        env["LD_PRELOAD"] = str(self.lib)
        env.update(kw.pop("env", {}))
        return subprocess.run([str(c) for c in cmd], env=env, timeout=timeout,
                              capture_output=True, text=True, **kw)

    def run(self, args, timeout=120, **kw):
        """Run heisen-run with args (a list: options, '--', command...)."""
        env = self.env()
        env.update(kw.pop("env", {}))
        return subprocess.run([str(self.run_bin)] + [str(a) for a in args], env=env,
                              timeout=timeout, capture_output=True, text=True, **kw)

    def dump(self, session: Path, *opts, timeout=120):
        """heisen-dump with opts; returns the CompletedProcess."""
        return subprocess.run([str(self.dump_bin), *map(str, opts), str(session)],
                              timeout=timeout, capture_output=True, text=True,
                              env=self.env())

    def dump_json(self, session: Path, *opts, expect_rc=None):
        """heisen-dump --json, parsed.  Fails the test on an unexpected exit code."""
        p = self.dump(session, "--json", *opts)
        if expect_rc is not None:
            assert p.returncode == expect_rc, (p.returncode, p.stderr)
        assert p.returncode in (0, 1, 2), (p.returncode, p.stderr)
        return json.loads(p.stdout)


@pytest.fixture(scope="session")
def heisen():
    h = Heisen(BUILD)
    for f in (h.lib, h.run_bin, h.dump_bin):
        if not f.exists():
            pytest.exit(f"{f} is missing: build first (meson setup {BUILD} && ninja -C {BUILD})", 2)
    return h


@pytest.fixture
def session(tmp_path):
    """A fresh session directory for one test."""
    d = tmp_path / "session"
    return d


def findings_of(report, kind):
    return [f for f in report["findings"] if f["kind"] == kind]


def frame_functions(stack):
    return [fr.get("function") for fr in stack["frames"]]


def lock_names(finding):
    return sorted(l.get("name") or l["address"] for l in finding.get("locks", []))


# ---- helpers for the target tests (test-targets/) ----------------------------
#
# Everything above this line is shared with tests/test_launcher.py and
# tests/test_recorder.py: keep its names working.


def target(heisen, name):
    """The built C test target `name` (test-targets/name.c)."""
    p = heisen.targets / name
    if not p.exists():
        pytest.fail(f"{p} is missing: ninja -C {heisen.build}")
    return p


def pyext_dir(heisen):
    """The build directory that holds the heisenlocks extension module."""
    d = heisen.targets
    if not list(d.glob("heisenlocks*.so")):
        pytest.skip(f"heisenlocks extension not built in {d} (python3-dev missing?)")
    return d


def facts(stdout):
    """The "key value" lines a target prints, as {key: [value, ...]}."""
    out = {}
    for line in stdout.splitlines():
        parts = line.split(None, 1)
        if len(parts) == 2:
            out.setdefault(parts[0], []).append(parts[1].strip())
    return out


def fact_int(stdout, key, index=0):
    """The index-th integer value printed as "key N"."""
    vals = facts(stdout).get(key)
    assert vals and len(vals) > index, f"target did not print {key!r}: {stdout!r}"
    return int(vals[index])


def all_frame_functions(finding):
    """Every function named in any stack of a finding (stacks, edges, threads)."""
    names = []
    for st in finding.get("stacks", []):
        names += frame_functions(st)
    for e in finding.get("edges", []):
        for k in ("from_stack", "to_stack"):
            if e.get(k):
                names += frame_functions(e[k])
    for t in finding.get("threads", []):
        for k in ("hold_stack", "wait_stack"):
            if t.get(k):
                names += frame_functions(t[k])
    return names


def lockname(ref):
    return ref.get("name") or ref["address"]


def process_of(report, pid, image=0):
    ps = [p for p in report["processes"] if p["pid"] == pid and p.get("image", 0) == image]
    assert len(ps) == 1, f"want one process {pid}.{image}, have {[(p['pid'], p.get('image')) for p in report['processes']]}"
    return ps[0]


def edge_pairs(finding):
    """The edges of a potential-deadlock as {(from_name, to_name)}."""
    return {(lockname(e["from"]), lockname(e["to"])) for e in finding["edges"]}


class Way:
    """One way of running a program under heisen: bare LD_PRELOAD, or heisen-run.

    run(cmd, ...) returns the CompletedProcess; returncode() turns "killed by
    signal S" into what that way reports (-S for a bare run, 128+S for
    heisen-run, which exits with the command's own status).
    """

    def __init__(self, heisen, name, session):
        self.heisen = heisen
        self.name = name
        self.session = session

    def run(self, cmd, timeout=60, run_opts=(), env=None, **kw):
        env = dict(env or {})
        if self.name == "preload":
            return self.heisen.preload(cmd, self.session, timeout=timeout, env=env, **kw)
        return self.heisen.run(["--dir", self.session, *run_opts, "--", *cmd],
                               timeout=timeout, env=env, **kw)

    def killed_by(self, signo):
        return -signo if self.name == "preload" else 128 + signo


@pytest.fixture(params=["preload", "heisen-run"])
def way(request, heisen, session):
    """Run the test once under bare LD_PRELOAD + HEISEN_DIR, once under heisen-run."""
    return Way(heisen, request.param, session)


# ---- helpers for the Python/GIL tests (tests/test_gil.py) --------------------
#
# Three kinds of CPython, because the GIL entry points are reached in two
# different ways: Debian's /usr/bin/python3 links libpython statically (the
# shim must patch GOT entries), pyembed (test-targets/pyembed.c) runs the same
# interpreter through Debian's libpython3.11.so.1.0, and the python3 first on
# PATH, when it is another shared build (pyenv, a Docker python image), is a
# third.  The extension modules are built against Debian's 3.11 headers and
# import in all of them.

import re
import shutil


class Interp:
    """One CPython to run a script with: cmd(script, *args) is its argv."""

    def __init__(self, name, exe, libpython):
        self.name = name                  # "debian-static", "embed-shared", "path-shared"
        self.exe = Path(exe)
        self.libpython = libpython        # "static" | "shared"

    @property
    def shared(self):
        return self.libpython == "shared"

    def cmd(self, script, *args):
        return [self.exe, script, *args]

    def __repr__(self):
        return f"Interp({self.name}, {self.exe})"


def _ldd_libpython(exe):
    try:
        out = subprocess.run(["ldd", str(exe)], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    m = re.search(r"(libpython3\.\d+\.so[.\d]*) => (\S+)", out)
    return m.group(2) if m else None


def _path_python():
    """(exe, None) for the shared python3 first on PATH, else (None, why not)."""
    found = shutil.which("python3")
    if found is None:
        return None, "no python3 on PATH"
    try:
        out = subprocess.run(
            [found, "-c", "import sys, sysconfig; print(sys.executable); "
             "print(sysconfig.get_config_var('Py_ENABLE_SHARED')); "
             "print('%d.%d' % sys.version_info[:2])"],
            capture_output=True, text=True, timeout=60, env={k: v for k, v in os.environ.items()
                                                             if k != "LD_PRELOAD"})
    except (OSError, subprocess.SubprocessError) as e:
        return None, f"python3 on PATH ({found}) does not run: {e}"
    lines = out.stdout.split()
    if out.returncode != 0 or len(lines) != 3:
        return None, f"python3 on PATH ({found}) does not run: {out.stderr.strip()}"
    exe, shared, version = Path(lines[0]).resolve(), lines[1], lines[2]
    if exe == Path(SYSTEM_PYTHON).resolve():
        return None, f"python3 on PATH is Debian's {SYSTEM_PYTHON}"
    if shared != "1":
        return None, f"python3 on PATH ({exe}) is not a shared build (Py_ENABLE_SHARED={shared})"
    if version != "3.11":
        return None, f"python3 on PATH ({exe}) is {version}: the test extensions are built for 3.11"
    if _ldd_libpython(exe) is None:
        return None, f"python3 on PATH ({exe}) does not link libpython dynamically (ldd)"
    return exe, None


INTERPRETER_KINDS = ["debian-static", "embed-shared", "path-shared"]


def interpreter(heisen, kind):
    """The Interp of that kind, or pytest.skip with the reason it is not here."""
    if kind == "debian-static":
        if not Path(SYSTEM_PYTHON).exists():
            pytest.skip(f"{SYSTEM_PYTHON} is missing")
        return Interp(kind, SYSTEM_PYTHON, "static")
    if kind == "embed-shared":
        exe = heisen.targets / "pyembed"
        if not exe.exists():
            pytest.fail(f"{exe} is missing: python3-dev (python-3.11-embed) must be installed "
                        f"for CI, then ninja -C {heisen.build}")
        lib = _ldd_libpython(exe)
        assert lib and "libpython3.11.so" in lib, f"{exe} does not link libpython3.11.so: {lib}"
        return Interp(kind, exe, "shared")
    if kind == "path-shared":
        exe, why = _path_python()
        if exe is None:
            pytest.skip(why)
        return Interp(kind, exe, "shared")
    raise ValueError(kind)


@pytest.fixture(params=INTERPRETER_KINDS)
def interp(request, heisen):
    """Each CPython kind in turn (skipped, with the reason, when not available)."""
    return interpreter(heisen, request.param)


def marker_line(script, marker):
    """The line number of the line of `script` that ends with "# marker: <marker>"."""
    hits = [n for n, line in enumerate(Path(script).read_text().splitlines(), 1)
            if line.rstrip().endswith(f"# marker: {marker}")]
    assert len(hits) == 1, f"marker {marker!r} in {script}: {hits}"
    return hits[0]


def python_frames(stack):
    """The Python frames of a stack, innermost first."""
    return [fr for fr in stack["frames"] if fr.get("python") is True]


def find_python_frame(stack, function, file_suffix=None, line=None):
    """Index in stack["frames"] of the Python frame `function` (at line), or None."""
    for i, fr in enumerate(stack["frames"]):
        if fr.get("python") is not True or fr.get("function") != function:
            continue
        if file_suffix is not None and not (fr.get("file") or "").endswith(file_suffix):
            continue
        if line is not None and fr.get("line") != line:
            continue
        return i
    return None


def native_index(stack, function):
    """Index in stack["frames"] of the first native frame `function`, or None."""
    for i, fr in enumerate(stack["frames"]):
        if fr.get("python") is False and fr.get("function") == function:
            return i
    return None


def all_stacks(finding):
    """Every stack of a finding: stacks, edges' from/to, threads' hold/wait/stack."""
    out = list(finding.get("stacks", []))
    for e in finding.get("edges", []):
        out += [e[k] for k in ("from_stack", "to_stack") if e.get(k)]
    for t in finding.get("threads", []):
        out += [t[k] for k in ("hold_stack", "wait_stack", "stack") if t.get(k)]
    return out


def lockrefs_in(report):
    """Every LOCKREF anywhere in a report (findings and threads' held/waiting)."""
    refs = []

    def walk(x):
        if isinstance(x, dict):
            if "address" in x and "kind" in x and "generation" in x:
                refs.append(x)
            for v in x.values():
                walk(v)
        elif isinstance(x, list):
            for v in x:
                walk(v)

    walk(report.get("findings", []))
    for p in report.get("processes", []):
        for t in p.get("threads", []):
            walk(t.get("held"))
            walk(t.get("waiting"))
    return refs


def pytest_configure(config):
    config.addinivalue_line("markers", "regrtest: CPython's own regression tests under the shim "
                            "(tests/test_heap.py; a minute or two; deselect with -m 'not regrtest')")
