#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/compare_shims.py — two builds of libheisen.so side by side in one run.

What a change to the hook path costs: bench_mutex (ns per uncontended
lock+unlock pair) and py_workload.py (seconds of work), natively, under the
library of build OLD and under the library of build NEW, interleaved
repetition by repetition so that drift hits all three alike; medians.
Used for the memory-sample check in hs_rec; bench/README.md.

Usage: /usr/bin/python3 bench/compare_shims.py NEW_BUILD OLD_BUILD [REPS]
  (bench_mutex is taken from NEW_BUILD; build OLD with
   `git archive REV | tar -x -C DIR && meson setup DIR/build DIR && ninja -C DIR/build`)
"""
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 2
    new, old = (os.path.abspath(b) for b in sys.argv[1:3])
    reps = int(sys.argv[3]) if len(sys.argv) > 3 else 5
    mutex = os.path.join(new, "bench", "bench_mutex")
    wl = ["/usr/bin/python3", os.path.join(HERE, "py_workload.py"), "30000"]
    libs = [("native", None), ("old " + old, os.path.join(old, "shim", "libheisen.so")),
            ("new " + new, os.path.join(new, "shim", "libheisen.so"))]
    res = {name: ([], []) for name, _ in libs}
    for _ in range(reps):
        for name, lib in libs:
            d = tempfile.mkdtemp()
            env = dict(os.environ)
            if lib:
                env.update(LD_PRELOAD=lib, HEISEN_DIR=os.path.join(d, "m"))
            out = subprocess.run([mutex, "2000000"], env=env, capture_output=True, text=True, check=True).stdout
            res[name][0].append(float(next(l for l in out.splitlines() if l.startswith("mutex ")).split()[1]))
            if lib:
                env["HEISEN_DIR"] = os.path.join(d, "p")
            out = subprocess.run(wl, env=env, capture_output=True, text=True, check=True).stdout
            res[name][1].append(float(out.split()[-1]))
            shutil.rmtree(d)
    nat = [statistics.median(v) for v in res["native"]]
    print("%-60s %14s %18s" % ("under", "mutex ns/pair", "py_workload work s"))
    for name, (m, p) in res.items():
        print("%-60s %6.1f (%5.2fx) %8.3f (%5.2fx)" % (name, statistics.median(m), statistics.median(m) / nat[0],
                                                       statistics.median(p), statistics.median(p) / nat[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
