# SPDX-License-Identifier: MIT
"""heisen's unwinds and the program's signal mask.

libunwind blocks every signal around each of its critical sections: in
Debian's build that is two rt_sigprocmask system calls per step and two
more per procedure-info lookup, thousands at a Python start.  heisen blocks
the signals once per unwind instead (shim/unwind_mask.c) and answers
libunwind's own mask calls inside it without a system call.  Do no harm to
the host program: its blocked and pending signals, its handler and its own
sigprocmask calls (the old mask, EINVAL) are as they are natively, while a
second thread signals it during the unwinds.
"""
import re
import subprocess

from conftest import target


def sigprocmask_calls(cmd, env=None, preload=None):
    """(stdout, number of rt_sigprocmask system calls of the whole process tree);
    preload: a library for the traced program only (strace -E), not strace."""
    opts = ["-E", f"LD_PRELOAD={preload}"] if preload else []
    p = subprocess.run(["strace", "-f", "-qq", "-c", "-e", "trace=rt_sigprocmask", "-o", "/dev/stderr", *opts,
                        *[str(c) for c in cmd]], capture_output=True, text=True, timeout=120, env=env)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    m = re.search(r"^\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?rt_sigprocmask$", p.stderr, re.M)
    assert m, p.stderr
    return p.stdout, int(m.group(1))


def test_program_mask_and_handlers_are_kept_during_unwinds(heisen, way):
    cmd = [target(heisen, "signal_masks")]
    want = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, timeout=60)
    assert want.returncode == 0, want.stderr
    assert "usr2_blocked 1" in want.stdout and "handled 200" in want.stdout, want.stdout
    assert "bad_how -1 errno_einval 1" in want.stdout, want.stdout
    p = way.run(cmd)
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-2000:])
    assert p.stdout == want.stdout


def test_one_mask_change_per_unwind(heisen, session):
    """200 new allocation sites make about 200 unwinds: at most two mask
    system calls each on top of the program's own (libunwind's alone made
    about nine per unwind here)."""
    cmd = [target(heisen, "signal_masks")]
    out_native, native = sigprocmask_calls(cmd)
    # the guard pages off: a sample's two stacks are chain reads whose first
    # walk at a new call path is an unwind too (two mask changes), at random
    # allocations; the count is then the sites' unwinds alone
    out, under = sigprocmask_calls(cmd, env={**heisen.env(session), "HEISEN_GUARD_RATE": "0"}, preload=heisen.lib)
    assert out == out_native
    sites = int(re.search(r"^sites (\d+)$", out, re.M).group(1))
    assert under - native <= 2 * sites + 200, (native, under)
