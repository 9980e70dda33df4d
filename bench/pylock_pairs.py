# SPDX-License-Identifier: MIT
"""pylock_pairs — what heisen adds to a Python `with lock:` pair, per interpreter.

For each interpreter, ROUNDS rounds; a round runs PROCS native processes
and PROCS processes under heisen (LD_PRELOAD=BUILD/shim/libheisen.so, its
session in /dev/shm), alternating native / heisen, each running
bench_pylock.py 200000 9 cpu (the thread's CPU time per pair; the
process's figure is the minimum of its 9 repeats).  A process runs at one
of two or three speeds fixed for its life (code placement, the layout of
its heap and stacks), so one pair of processes can differ by 10 ns either
way: each side's figure in a round is the minimum over its PROCS
processes (the fast placement, on both sides), and the median of the
rounds' differences is the figure printed.

Each library's page cache is dropped first (written back, then
POSIX_FADV_DONTNEED), so every build is measured as read from disk, as an
installed library is: a library whose pages are still the ones the linker
wrote (small pages scattered in memory) cost up to 20 ns more a pair on
some interpreters than the same bytes read afresh (bench/README.md "Python
lock pairs at a fixed place").

Usage: python3 bench/pylock_pairs.py [--procs N] BUILD_DIR[,BUILD_DIR...] [ROUNDS [PYTHON ...]]
  (defaults: 3 processes a side, 11 rounds; /usr/bin/python3 and every
  CPython 3.6 to 3.13 found under ~/.pyenv/versions)
Prints one line per interpreter: native median, heisen's added median and
range (the load average before and after).  With several builds (a
comma-separated list, e.g. main's and a branch's), each round runs every
build's processes alternating with the native ones, and each build gets
its line ("PYTHON [BUILD_DIR]: ..."), and at the end a table, one row per
build: heisen's added median per interpreter and the worst of them (how a
code layout is chosen: the one whose worst interpreter is best,
bench/README.md "Python lock pairs at a fixed place").
"""
import glob
import os
import re
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
LOOPS, REPEATS = "200000", "9"


def default_pythons():
    """/usr/bin/python3 and the pyenv builds of 3.6 to 3.13, oldest first."""
    found = []
    for p in glob.glob(os.path.expanduser("~/.pyenv/versions/3.*/bin/python3")):
        m = re.search(r"/3\.(\d+)\.(\d+)[^/]*/bin/python3$", p)
        if m and 6 <= int(m.group(1)) <= 13:
            found.append(((int(m.group(1)), int(m.group(2))), p))
    pys = [p for _, p in sorted(found)]
    if os.path.exists("/usr/bin/python3"):
        pys.insert(0, "/usr/bin/python3")
    return pys


def drop_page_cache(path):
    """Write back and drop path's cached pages: its next mapping reads it afresh."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def main():
    args = sys.argv[1:]
    procs = 3
    if args[:1] == ["--procs"] and len(args) > 1:
        procs = int(args[1])
        args = args[2:]
    if not args or procs < 1:
        sys.exit(__doc__)
    builds = [b for b in args[0].split(",") if b]
    libs = [os.path.join(os.path.abspath(b), "shim", "libheisen.so") for b in builds]
    for lib in libs:
        if not os.path.exists(lib):
            sys.exit("pylock_pairs: no %s: build first (./dev build)" % lib)
    for lib in libs:
        drop_page_cache(lib)
    rounds = int(args[1]) if len(args) > 1 else 11
    pys = args[2:] or default_pythons()
    missing = [p for p in pys if not os.path.exists(p)]
    if missing:
        sys.exit("pylock_pairs: no such interpreter: %s" % ", ".join(missing))
    sess = "/dev/shm/heisen-bench-pylock-%d" % os.getpid()

    def run(py, env):
        out = subprocess.run([py, os.path.join(HERE, "bench_pylock.py"), LOOPS, REPEATS, "cpu"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, **env)).stdout.split()
        return float(out[4])  # "with-lock median_ns N min_ns M": the process's minimum

    print("load average %s" % open("/proc/loadavg").read().split()[:3])
    table = {b: [] for b in builds}
    for py in pys:
        added = [[] for _ in libs]
        native = []
        for _ in range(rounds):
            n, h = [], [[] for _ in libs]
            for _ in range(procs):
                n.append(run(py, {}))
                for i, lib in enumerate(libs):
                    shutil.rmtree(sess, ignore_errors=True)
                    h[i].append(run(py, {"LD_PRELOAD": lib, "HEISEN_DIR": sess, "HEISEN_SESSION_AUTO": "1"}))
            native.append(min(n))
            for i in range(len(libs)):
                added[i].append(min(h[i]) - min(n))
        for i, b in enumerate(builds):
            table[b].append(statistics.median(added[i]))
            name = py if len(builds) == 1 else "%s [%s]" % (py, b)
            print("%s: native median %.1f ns; heisen adds median %+.1f ns (range %+.1f to %+.1f, %d interleaved rounds"
                  " of %d processes a side, each side its fastest)"
                  % (name, statistics.median(native), statistics.median(added[i]), min(added[i]), max(added[i]),
                     rounds, procs), flush=True)
    shutil.rmtree(sess, ignore_errors=True)
    if len(builds) > 1:
        short = [re.sub(r"^.*/versions/|/bin/python3$", "", p) for p in pys]
        print("heisen adds, ns (median of the rounds) | " + " | ".join(short) + " | worst")
        for b in builds:
            print("%s | %s | %+.1f" % (b, " | ".join("%+.1f" % v for v in table[b]), max(table[b])))
    print("load average %s" % open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
