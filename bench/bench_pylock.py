# SPDX-License-Identifier: MIT
"""bench_pylock — the cost of one uncontended threading.Lock acquire/release
pair (`with lock:`), as Python code pays it.

Runs `with lock: pass` LOOPS times per repeat, REPEATS repeats (timeit),
and prints the median and the minimum in ns per iteration.  Run it once
natively and once under LD_PRELOAD=libheisen.so; the difference of the
medians is what the semaphore hooks (sem_trywait + sem_post, plus the
lock-order bookkeeping) cost per pair.

Usage: python3 bench_pylock.py [LOOPS [REPEATS [cpu]]]   (defaults 200000, 15)
With "cpu" the time is the thread's CPU time (time.thread_time) instead of
the wall clock: a run that other processes preempt is not counted longer
(their cache pollution still is), which steadies the figures on a shared
machine.
Prints "with-lock median_ns N min_ns M".
"""
import statistics
import sys
import threading
import time
import timeit

loops = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
repeats = int(sys.argv[2]) if len(sys.argv) > 2 else 15
# time.thread_time is 3.7+; the same clock by its id on 3.6
thread_time = getattr(time, "thread_time", lambda: time.clock_gettime(time.CLOCK_THREAD_CPUTIME_ID))
timer = thread_time if sys.argv[3:4] == ["cpu"] else time.perf_counter
lock = threading.Lock()


def body():
    with lock:
        pass


times = [t / loops * 1e9 for t in timeit.Timer(body, timer=timer).repeat(number=loops, repeat=repeats)]
print(f"with-lock median_ns {statistics.median(times):.1f} min_ns {min(times):.1f}")
