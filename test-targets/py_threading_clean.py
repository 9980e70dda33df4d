# SPDX-License-Identifier: MIT
"""py_threading_clean — correct uses of every threading primitive built on
CPython's lock, none of which may give a finding.

RLock re-entered by its owner, Condition.wait/notify (its waiter locks are
taken by the waiter and released by the notifier), Condition.wait(0),
queue.Queue producers and consumers, a ThreadPoolExecutor, a
threading.Semaphore(5), an Event, a Lock released by another thread (a
signal), and two Locks always nested in the same order.  At the end the
main thread takes "last_lock" so a test can see that heisen saw it.

Usage: py_threading_clean.py
Prints "pid P", "squares N", "done 1".
"""
import os
import queue
import sys
import threading
from concurrent.futures import ThreadPoolExecutor


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


say("pid", os.getpid())
rlock = threading.RLock()
cond = threading.Condition()
items = []
jobs = queue.Queue(maxsize=2)
slots = threading.Semaphore(5)
go = threading.Event()
outer, inner = threading.Lock(), threading.Lock()  # marker: nested locks created


def reenter():
    with rlock:
        with rlock:
            with outer:
                with inner:
                    pass


def consumer():
    with cond:
        cond.wait(0)
        while not items:
            cond.wait(5)
        items.pop()


def producer():
    go.wait(5)
    with cond:
        items.append(1)
        cond.notify()


def put_jobs():
    for i in range(200):
        jobs.put(i)
    jobs.put(None)


def get_jobs():
    while jobs.get() is not None:
        pass


def use_slots():
    for _ in range(50):
        with slots:
            with outer:
                with inner:
                    pass


threads = [threading.Thread(target=f) for f in (reenter, consumer, producer, put_jobs, get_jobs, use_slots,
                                                  use_slots)]
for t in threads:
    t.start()
go.set()
for t in threads:
    t.join()
with ThreadPoolExecutor(4) as pool:
    say("squares", sum(pool.map(lambda x: x * x, range(100))))
signal = threading.Lock()
signal.acquire()
threading.Thread(target=signal.release).start()
signal.acquire()
say("done", 1)
