#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""chaos_rates.py — failure rates of bench/racy_pair natively, under
libheisen.so, and under libheisen.so with a chaos schedule (heisen-run
--chaos; shim/chaos.c), one seed per run as heisen-run --repeat gives them.

    /usr/bin/python3 bench/chaos_rates.py [BUILD_DIR] [RUNS]   (default build, 600)

For each case (racy_pair lazy-init, racy_pair abba) it first calibrates:
the window stays WINDOW_US and the arrival spread is chosen so that the
program natively fails about one run in a hundred on this machine, now
(rate ~ window/spread; CAL_RUNS native runs must fail 0.4 to 2.4 %, else
the spread is rescaled, at most twice).  Then
RUNS rounds, each two native runs (the cheapest column and the one with
the fewest failures), one under libheisen.so and one with a chaos schedule
(seed = round + 1), interleaved so that the machine's load moves all three
columns alike.  Each run is the program directly
(LD_PRELOAD, HEISEN_DIR, HEISEN_CHAOS=1, HEISEN_SEED=k: what heisen-run
--chaos K sets), without heisen-run's report, so that thousands of runs take
minutes; a run fails when it exits non-zero (lazy-init: abort on two caches;
abba: racy_pair itself sees the deadlock and exits 3).  The same through
the driver, with reports:
    heisen-run --repeat 200 --chaos 1 -- build/bench/racy_pair abba 100 SPREAD
Rates, not assertions: the machine is shared and noisy (bench/README.md
"Chaos schedules").
"""
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BUILD = Path(sys.argv[1] if len(sys.argv) > 1 else "build").resolve()
RUNS = int(sys.argv[2]) if len(sys.argv) > 2 else 600
TARGET = 0.01      # the native failure rate the calibration aims at
CAL_RUNS = 500
WINDOW_US = 100
# native rate ~ WINDOW/SPREAD times this: either request may land in the
# other's window (lazy-init); only the second in the first's (abba), nearly
CASES = [("lazy-init", 2.0), ("abba", 1.0)]
TIMEOUT = 10.0     # no run should come near it: a run past it counts as failed and is said


def run(case, window, spread, mode, k, tmp):
    env = dict(os.environ)
    env.pop("LD_PRELOAD", None)
    if mode != "native":
        env.update({"LD_PRELOAD": str(BUILD / "shim" / "libheisen.so"), "HEISEN_DIR": f"{tmp}/{mode}-{k}",
                    "HEISEN_HANG_TIMEOUT": "0"})
    if mode == "chaos":
        env.update({"HEISEN_CHAOS": "1", "HEISEN_SEED": str(k + 1)})
    try:
        p = subprocess.run([str(BUILD / "bench" / "racy_pair"), case, str(window), str(spread)], env=env,
                           timeout=TIMEOUT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        failed = p.returncode != 0
    except subprocess.TimeoutExpired:
        print(f"  {case} {mode} run {k}: still running after {TIMEOUT} s, counted as failed", flush=True)
        failed = True
    if mode != "native":
        shutil.rmtree(f"{tmp}/{mode}-{k}", ignore_errors=True)
    return failed


def calibrate(case, factor, tmp):
    spread = round(factor * WINDOW_US / TARGET)
    for attempt in range(3):
        fails = sum(run(case, WINDOW_US, spread, "native", k, tmp) for k in range(CAL_RUNS))
        rate = fails / CAL_RUNS
        print(f"  calibration {case}: window {WINDOW_US} us, spread {spread} us: native {fails}/{CAL_RUNS}",
              flush=True)
        # 500 runs at 1 % fail 5 times, give or take: 2 to 12 is within the noise
        if 0.4 * TARGET <= rate <= 2.4 * TARGET or attempt == 2:
            return spread
        # the rate goes as 1/spread; none seen: the spread is at least twice too wide
        scale = max(min(rate / TARGET if fails else 0.5, 4.0), 0.25)
        spread = max(round(spread * scale), 2 * WINDOW_US)
    return spread


def ratio(a, b):
    return f"{a / b:.1f}x" if b else ("-" if not a else "inf")


def main():
    t0 = time.monotonic()
    print(f"load average at start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="chaos-rates-") as tmp:
        for case, factor in CASES:
            spread = calibrate(case, factor, tmp)
            fails = {"native": 0, "heisen": 0, "chaos": 0}
            for k in range(RUNS):
                fails["native"] += run(case, WINDOW_US, spread, "native", 2 * k, tmp)
                for mode in fails:
                    fails[mode] += run(case, WINDOW_US, spread, mode, k, tmp)
            rows.append((f"{case} {WINDOW_US} {spread}", fails))
            print(f"  {case}: {fails} of {2 * RUNS}, {RUNS}, {RUNS}", flush=True)
    print(f"load average at end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}; "
          f"{time.monotonic() - t0:.0f} s", flush=True)
    print()
    print(f"| racy_pair case window spread | native | heisen | heisen --chaos | chaos/native | chaos/heisen |")
    print(f"|---|---|---|---|---|---|")
    for name, f in rows:
        n = {"native": 2 * RUNS, "heisen": RUNS, "chaos": RUNS}
        cells = [f"{f[m]}/{n[m]} ({100 * f[m] / n[m]:.1f} %)" for m in n]
        print(f"| {name} | {' | '.join(cells)} | {ratio(f['chaos'], f['native'] / 2)} | "
              f"{ratio(f['chaos'], f['heisen'])} |")


if __name__ == "__main__":
    main()
