# SPDX-License-Identifier: MIT
"""pylock_deep — bench_pylock.py's `with lock:` pair run DEPTH Python frames deep.

A lazily kept Python lock stack checks the frames further out than the
caller of the frame that took the lock on every acquisition (up to 12 of
them; README.md "Python locks"), so a pair's cost grows with the depth up
to that bound: this runs the same timed body as bench_pylock.py under
DEPTH extra frames of plain recursion, for callgrind's instruction counts
per pair at a depth (bench/README.md "Python lock stacks through shared
helpers, checked").

Usage: python3 bench/pylock_deep.py DEPTH [LOOPS [REPEATS]]   (defaults 20000, 3)
Prints "with-lock depth D median_ns N".
"""
import statistics
import sys
import threading
import time
import timeit

depth = int(sys.argv[1])
loops = int(sys.argv[2]) if len(sys.argv) > 2 else 20000
repeats = int(sys.argv[3]) if len(sys.argv) > 3 else 3
lock = threading.Lock()


def body():
    with lock:
        pass


def down(n):
    if n > 0:
        return down(n - 1)
    return [t / loops * 1e9 for t in timeit.Timer(body, timer=time.perf_counter).repeat(number=loops, repeat=repeats)]


print(f"with-lock depth {depth} median_ns {statistics.median(down(depth)):.1f}")
