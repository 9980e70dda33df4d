# SPDX-License-Identifier: MIT
"""A process that builds a 4 MiB buffer soon after a smaller one, says
"burst PID ready" and waits (120 s) to be SIGKILLed by the test
(tests/test_proc.py): the last memory sample the process leaves must hold
the 4 MiB.  heisen takes an allocation-driven sample when large allocations
add up to a step, at most once a millisecond on the precise clock.

    py_alloc_burst.py tick   the 4 MiB 1.5 ms (precise clock) after a 2 MiB one,
                             within one tick of CLOCK_MONOTONIC_COARSE, which heisen
                             reads first for "is a sample due" and which lags: the
                             4 MiB allocation's own sample must be the last
    py_alloc_burst.py gap    the 4 MiB within 0.5 ms of a 1 MiB one (inside the
                             minimum gap), then a threading.Lock taken and released
                             (a recorded event): the sample the gap held back is
                             taken there

tick: the program starts right after a coarse tick, makes the first
allocation (its sample is timed on the precise clock), waits 1.5 ms on the
precise clock and makes the second before the next tick.  gap: the first
allocation comes 3 ms (precise) after the last recorded event, so that it
is sampled, and the second within 0.5 ms of it.  When a try misses its
timing (a loaded machine), the program waits and tries again (at most 50
times).  It prints

    tick TICK_NS             the coarse clock's resolution
    attempts N               tries until one met its timing
    rss_before BYTES         the resident set (/proc/self/statm) before the first allocation
    burst PID ready          then sleeps

and exits 3 when no try met it.
"""
import os
import sys
import threading
import time

CLOCK_MONOTONIC_COARSE = 6  # <linux/time.h>; the time module has no name for it
GAP_NS = 1_500_000
LOCK = threading.Lock()


def coarse():
    return time.clock_gettime_ns(CLOCK_MONOTONIC_COARSE)


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def spin_ns(ns):
    t0 = time.monotonic_ns()
    while time.monotonic_ns() < t0 + ns:
        pass


def tick_try():
    before = rss()
    c0 = coarse()
    while (c := coarse()) == c0:
        pass
    first = bytearray(2 << 20)
    spin_ns(GAP_NS)
    if coarse() != c:
        return None
    return before, first, bytearray(4 << 20)


def gap_try():
    before = rss()
    spin_ns(3_000_000)
    t1 = time.monotonic_ns()
    first = bytearray(1 << 20)
    if time.monotonic_ns() - t1 >= 500_000:
        return None
    burst = bytearray(4 << 20)
    with LOCK:
        pass
    return before, first, burst


def main(mode):
    print("tick", int(time.clock_getres(CLOCK_MONOTONIC_COARSE) * 1e9), flush=True)
    attempt_once = {"tick": tick_try, "gap": gap_try}[mode]
    for attempt in range(1, 51):
        time.sleep(0.06)
        kept = attempt_once()
        if kept is None:
            continue
        before, *bufs = kept
        print("attempts", attempt, flush=True)
        print("rss_before", before, flush=True)
        print("burst", os.getpid(), "ready", flush=True)
        time.sleep(120)
        return sum(map(len, bufs)) and 0
    return 3


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1] if len(sys.argv) > 1 else "tick"))
