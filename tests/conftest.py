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
