# SPDX-License-Identifier: MIT
"""A process that builds a 4 MiB buffer soon after a smaller one, says
"burst PID ready" and waits (120 s) to be SIGKILLed by the test
(tests/test_proc.py): the last memory sample the process leaves must hold
the 4 MiB.  heisen takes an allocation-driven sample when large allocations
add up to a step, at most once a millisecond on the precise clock.

    py_alloc_burst.py tick   the 4 MiB 1.5 ms (precise clock) after a 1 MiB one,
                             within one tick of CLOCK_MONOTONIC_COARSE, which heisen
                             reads first for "is a sample due" and which lags: the
                             4 MiB allocation's own sample must be the last
    py_alloc_burst.py gap    a 4 MiB mapping less than 1 ms (the minimum gap) after
                             a 1 MiB one's sample, both written, then a
                             threading.Lock taken and released (a recorded event):
                             the sample the gap held back is taken there

tick: the program starts right after a coarse tick, makes the first
allocation (its sample is timed on the precise clock), waits until 1.5 ms
on the precise clock have passed since that allocation began and makes the
second before the next tick.  The first is 1 MiB, the smallest that makes
a sample due (shim/proc.c mem_step's floor): writing new pages takes ~3 ms a MiB
where page faults are slow (a Firecracker guest: 12 us a page), so a 2 MiB
one and the gap did not fit in one 4 ms tick there.  gap: the buffers
are new anonymous mappings (mmap), written page by page once both are
made, as numpy's and the like's large buffers are allocated, then filled:
each try's memory is new (a freed bytearray's pages would be reused
resident by a later try's malloc: no growth to see), and the two
allocations follow each other closely.  The first comes 3 ms or more
(precise) after the last recorded event, so that it is sampled, and the
try counts only when both were made less than 1 ms after the precise
clock read just before the first: the first's sample comes after that
read and the second's check before the second read, so the second met
the gap whatever the scheduler did in between.  The wait before the first
varies from try to try (3 to 5.8 ms), so that the allocations do not fall
at the end of a time slice at every try on a loaded machine.  When a try
misses its timing, the program gives its buffers back to the kernel
(glibc's malloc_trim: after the first such buffer is freed, glibc raises
its mmap threshold and keeps the next ones in the heap, where a freed
buffer's pages would stay resident and the next try's buffer would reuse
them: no growth of the resident set to see), waits and tries again (at
most 200 times).
It prints

    tick TICK_NS             the coarse clock's resolution
    attempts N               tries until one met its timing
    rss_before BYTES         the resident set (/proc/self/statm) before the first allocation
    burst PID ready          then sleeps

and exits 3 when no try met it.
"""
import ctypes
import mmap
import os
import sys
import threading
import time

CLOCK_MONOTONIC_COARSE = 6  # <linux/time.h>; the time module has no name for it
GAP_NS = 1_500_000
PAGE = mmap.PAGESIZE
MIN_GAP_NS = 1_000_000  # HS_MEM_MIN_GAP_NS (shim/shim.h): allocation-driven samples at most once per ms
LOCK = threading.Lock()
LIBC = ctypes.CDLL(None)


def coarse():
    return time.clock_gettime_ns(CLOCK_MONOTONIC_COARSE)


def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def spin_until(t):
    while time.monotonic_ns() < t:
        pass


def spin_ns(ns):
    spin_until(time.monotonic_ns() + ns)


def tick_try(attempt):
    before = rss()
    c0 = coarse()
    while (c := coarse()) == c0:
        pass
    t0 = time.monotonic_ns()
    first = bytearray(1 << 20)
    spin_until(t0 + GAP_NS)
    if coarse() != c:
        return None
    return before, first, bytearray(4 << 20)


def fresh(n):
    """n bytes of new anonymous memory (not yet resident: written later)."""
    return mmap.mmap(-1, n, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


def write(buf):
    for off in range(0, len(buf), PAGE):
        buf[off] = 1


def gap_try(attempt):
    before = rss()  # /proc reads: recorded events, which may take a time-driven sample
    spin_ns(3_000_000 + attempt % 8 * 400_000)
    t1 = time.monotonic_ns()
    first = fresh(1 << 20)
    burst = fresh(4 << 20)
    if time.monotonic_ns() - t1 >= MIN_GAP_NS:
        return None  # the 4 MiB may have come after the gap: sampled on its own
    write(first)
    write(burst)
    with LOCK:
        pass
    return before, first, burst


def main(mode):
    print("tick", int(time.clock_getres(CLOCK_MONOTONIC_COARSE) * 1e9), flush=True)
    attempt_once = {"tick": tick_try, "gap": gap_try}[mode]
    for attempt in range(1, 201):
        time.sleep(0.06)
        kept = attempt_once(attempt)
        if kept is None:
            LIBC.malloc_trim(0)  # the missed try's pages back to the kernel: the next try's are new
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
