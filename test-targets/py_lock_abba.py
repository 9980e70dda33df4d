# SPDX-License-Identifier: MIT
"""py_lock_abba — two threading.Lock taken in opposite orders by two threads.

A cache and a store, each with its own lock: "reader" takes the cache's
lock then the store's, "writer" the store's then the cache's (the most
common deadlock of Python code).  By default the threads run one after
the other, so the program ends; heisen predicts the deadlock from the
order alone.  With "together" both take their first lock, meet at a
barrier, and deadlock for real.  With "churn N" the program first makes
CPython create and drop N short-lived locks the way a busy service does
(queue.Queue get with a timeout, Condition.wait(0): a lock per wait).
With "warm" each thread first takes each of its locks alone a few times
elsewhere (warm_up), as a service does long before two locks nest: the
acquisitions that then nest are each a lock's hundredth, not its first.
With "cond" (after "warm") the cache's lock is taken through a
threading.Condition around it: Condition.__enter__ takes it and returns,
so the lock is held past the frame that took it.  "together warm": each
thread first also nests its two locks once in its own order, so when they
deadlock for real no acquisition makes a new edge.

Usage: py_lock_abba.py [together [warm] | churn N | warm [cond]]
Prints "pid P", "tid_reader T", "tid_writer T", "done" (never with together).
"""
import os
import queue
import sys
import threading

together = sys.argv[1:2] == ["together"]
churn = int(sys.argv[2]) if sys.argv[1:2] == ["churn"] else 0
warm = sys.argv[1:2] == ["warm"] or (together and "warm" in sys.argv[2:])
cond = sys.argv[1:2] == ["warm"] and "cond" in sys.argv[2:]
meet = threading.Barrier(2)


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Cache:
    def __init__(self):
        self.lock = threading.Lock()  # marker: cache lock created
        self.cond = threading.Condition(self.lock)
        self.entries = {}


class Store:
    def __init__(self):
        self.lock = threading.Lock()  # marker: store lock created
        self.rows = {}


cache, store = Cache(), Store()


reader_nested, warmed = threading.Event(), threading.Barrier(2)


def warm_up(first, second, who):
    for lock in (first, second):
        for _ in range(100):
            with lock:
                pass
    if together:
        # one thread nests after the other (at once they would deadlock here), then both go on
        if who == "writer":
            reader_nested.wait()
        with first:
            with second:
                pass
        if who == "reader":
            reader_nested.set()
        warmed.wait()


def reader():
    say("tid_reader", threading.get_native_id())
    if warm:
        warm_up(cache.lock, store.lock, "reader")
    with cache.cond if cond else cache.lock:  # marker: reader takes the cache lock
        if together:
            meet.wait()
        with store.lock:  # marker: reader takes the store lock
            cache.entries["k"] = store.rows.get("k")


def writer():
    say("tid_writer", threading.get_native_id())
    if warm:
        warm_up(store.lock, cache.lock, "writer")
    with store.lock:  # marker: writer takes the store lock
        if together:
            meet.wait()
        with cache.lock:  # marker: writer takes the cache lock
            store.rows["k"] = 1
            cache.entries.pop("k", None)


say("pid", os.getpid())
jobs, ready = queue.Queue(), threading.Condition()
for i in range(churn // 2):
    jobs.put(i)
    jobs.get(timeout=5)
    with ready:
        ready.wait(0)
threads = [threading.Thread(target=f, name=f.__name__) for f in (reader, writer)]
for t in threads:
    t.start()
    if not together:
        t.join()
for t in threads:
    t.join()
say("done", 1)
