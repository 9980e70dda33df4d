# SPDX-License-Identifier: MIT
"""A process that builds a 4 MiB buffer a couple of milliseconds after a 2 MiB
one, says "burst PID ready" and waits (120 s) to be SIGKILLed by the test
(tests/test_proc.py): a memory sample is due at each of the two allocations,
and the last sample the process leaves must hold the 4 MiB.

heisen judges "is a sample due" on CLOCK_MONOTONIC_COARSE, which moves by
ticks (4 ms at HZ=250) and lags the precise clock.  So that the second
allocation falls where the two clocks disagree on every run, the program
starts right after a coarse tick, makes the first allocation (its sample is
timed on the precise clock), waits 1.5 ms on the precise clock (longer than
the minimum gap between allocation-driven samples, 1 ms) and makes the second
before the next tick.  When a tick came in between (a loaded machine), it
waits 10 ms and tries again (at most 50 times); it prints

    tick TICK_NS             the coarse clock's resolution
    attempts N               tries until the second allocation met the tick
    burst PID ready          then sleeps

and exits 3 when no try met it.
"""
import os
import time

CLOCK_MONOTONIC_COARSE = 6  # <linux/time.h>; the time module has no name for it
GAP_NS = 1_500_000


def coarse():
    return time.clock_gettime_ns(CLOCK_MONOTONIC_COARSE)


def main():
    print("tick", int(time.clock_getres(CLOCK_MONOTONIC_COARSE) * 1e9), flush=True)
    for attempt in range(1, 51):
        time.sleep(0.01)
        c0 = coarse()
        while (c := coarse()) == c0:
            pass
        first = bytearray(2 << 20)
        t0 = time.monotonic_ns()
        while time.monotonic_ns() < t0 + GAP_NS:
            pass
        if coarse() != c:
            del first
            continue
        burst = bytearray(4 << 20)
        print("attempts", attempt, flush=True)
        print("burst", os.getpid(), "ready", flush=True)
        time.sleep(120)
        return len(first) + len(burst)
    return 3


if __name__ == "__main__":
    raise SystemExit(main())
