#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chaos_rates.py — failure rates of bench/racy_pair natively, under
libheisen.so, and under libheisen.so with a chaos schedule (heisen-run
--chaos; shim/chaos.c), one seed per run as heisen-run --repeat gives them.

    /usr/bin/python3 bench/chaos_rates.py [BUILD_DIR] [RUNS]   (default build, 200)

Each run is the program directly (LD_PRELOAD, HEISEN_DIR, HEISEN_CHAOS=1,
HEISEN_SEED=k: what heisen-run --chaos K sets), without heisen-run's
report, so that hundreds of runs take a minute; a run fails when it exits
non-zero (the race's abort) or does not end within TIMEOUT (the deadlock).
The same with heisen-run: heisen-run --repeat 200 --chaos 1
--hang-timeout 1 --on-hang kill -- build/bench/racy_pair abba 100000.
Rates, not assertions: the machine is shared and noisy (bench/README.md).
"""
import os
import subprocess
import sys
import tempfile
from pathlib import Path

BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve()
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 200
TIMEOUT = 1.0
CASES = [("lazy-init", "0"), ("abba", "100000")]


def run(case, extra_env):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    env.update(extra_env)
    try:
        p = subprocess.run([str(BUILD / "bench" / "racy_pair"), *case], env=env, timeout=TIMEOUT,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return p.returncode != 0
    except subprocess.TimeoutExpired:
        return True


def main():
    lib = str(BUILD / "shim" / "libheisen.so")
    print(f"{'case':<22} {'native':>10} {'heisen':>10} {'heisen --chaos':>15}   ({RUNS} runs each)")
    for case in CASES:
        with tempfile.TemporaryDirectory(prefix="chaos-rates-") as d:
            rates = []
            for mode in ("native", "heisen", "chaos"):
                fails = 0
                for k in range(RUNS):
                    env = {}
                    if mode != "native":
                        env = {"LD_PRELOAD": lib, "HEISEN_DIR": f"{d}/{mode}-{k}", "HEISEN_HANG_TIMEOUT": "0"}
                    if mode == "chaos":
                        env.update({"HEISEN_CHAOS": "1", "HEISEN_SEED": str(k + 1)})
                    fails += run(case, env)
                rates.append(fails)
            print(f"{' '.join(case):<22} {rates[0]:>6}/{RUNS} {rates[1]:>6}/{RUNS} {rates[2]:>11}/{RUNS}", flush=True)


if __name__ == "__main__":
    main()
