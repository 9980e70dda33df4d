# SPDX-License-Identifier: MIT
"""pylock_pairs — what heisen adds to a Python `with lock:` pair, per interpreter.

For each interpreter, ROUNDS rounds of one native process and one process
under heisen (LD_PRELOAD=BUILD/shim/libheisen.so, its session in /dev/shm),
each running bench_pylock.py 200000 15 cpu (the thread's CPU time per pair,
median of 15 repeats).  A process runs natively at one of two or three
speeds, fixed for its life (code placement), so one pair of processes can
differ by several ns: the median of the rounds' differences is the figure.

Usage: python3 bench/pylock_pairs.py BUILD_DIR [ROUNDS [PYTHON ...]]
  (defaults: 9 rounds; /usr/bin/python3 and the pyenv 3.12 and 3.13 builds
  found under ~/.pyenv/versions)
Prints one line per interpreter: native median, heisen's added median and range.
"""
import glob
import os
import shutil
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    lib = os.path.join(os.path.abspath(sys.argv[1]), "shim", "libheisen.so")
    if not os.path.exists(lib):
        sys.exit("pylock_pairs: no %s: build first (./dev build)" % lib)
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 9
    pys = sys.argv[3:] or (["/usr/bin/python3"] + sorted(
        p for v in ("3.12", "3.13") for p in glob.glob(os.path.expanduser("~/.pyenv/versions/%s*/bin/python3" % v))))
    sess = "/dev/shm/heisen-bench-pylock-%d" % os.getpid()

    def run(py, env):
        out = subprocess.run([py, os.path.join(HERE, "bench_pylock.py"), "200000", "15", "cpu"],
                             capture_output=True, text=True, check=True, env=dict(os.environ, **env)).stdout.split()
        return float(out[2])

    print("load average %s" % open("/proc/loadavg").read().split()[:3])
    for py in pys:
        added, native = [], []
        for _ in range(rounds):
            n = run(py, {})
            shutil.rmtree(sess, ignore_errors=True)
            h = run(py, {"LD_PRELOAD": lib, "HEISEN_DIR": sess, "HEISEN_SESSION_AUTO": "1"})
            added.append(h - n)
            native.append(n)
        print("%s: native median %.1f ns; heisen adds median %+.1f ns (range %+.1f to %+.1f, %d interleaved rounds)"
              % (py, statistics.median(native), statistics.median(added), min(added), max(added), rounds))
    shutil.rmtree(sess, ignore_errors=True)
    print("load average %s" % open("/proc/loadavg").read().split()[:3])


if __name__ == "__main__":
    main()
