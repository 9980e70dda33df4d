# SPDX-License-Identifier: MIT
"""py_queue_nesting — queue.Queue's mutex taken many times alone, then nested.

A worker thread serves COUNT rounds through two queue.Queue objects and a
counter lock: each round puts and gets a job on `jobs` (a queue.Queue
subclass whose _put can journal, as PriorityQueue and LifoQueue override
_put), puts and gets a reply on `replies`, and bumps a counter under
`done_lock`.  Three Python lock classes taken in turn under the worker's
own thread-state lock, nothing nested under any of them; every put and get
probes the queue's mutex under itself (Condition.notify -> _is_owned:
acquire(False) by the holder).

Then, with NEST "abba", a second thread puts one journaled job: _put takes
the journal's threading.Lock under the queue's mutex (jobs -> journal);
and a third thread sizes the queue under the journal lock (journal ->
jobs).  One thread after the other: the program ends, and the cycle is a
prediction.  With NEST "audit" only the auditor runs (the one order: no
cycle).  With NEST "deadlock" the two nest at once and deadlock for real:
"putter" holds the mutex (in put) and waits for the journal lock, which
"auditor" holds while it waits for the mutex; heisen-run's watchdog ends
it.

Usage: py_queue_nesting.py COUNT abba|audit|deadlock
Prints "pid P", "served N", "tid_putter T", "tid_auditor T", "done 1".
"""
import os
import queue
import sys
import threading

count, nest = int(sys.argv[1]), sys.argv[2]


def say(key, value):
    os.write(1, f"{key} {value}\n".encode())  # one write: lines of two threads never mix


class Journal:
    def __init__(self):
        self.lock = threading.Lock()  # marker: journal lock created
        self.lines = []


journal = Journal()
putter_in, auditor_in = threading.Event(), threading.Event()


class JournalQueue(queue.Queue):
    """A queue that can journal what it is given, under its own mutex."""

    journaling = False

    def _put(self, item):
        if self.journaling:
            if nest == "deadlock":
                putter_in.set()
                auditor_in.wait()
            with journal.lock:  # marker: put journals under the queue's mutex
                journal.lines.append(item)
        super()._put(item)


jobs = JournalQueue()  # marker: jobs queue created
replies = queue.Queue()  # marker: replies queue created
done_lock = threading.Lock()  # marker: counter lock created
served = [0]


def serve():
    for i in range(count):
        jobs.put(i)  # marker: serve puts a job
        replies.put(jobs.get())  # marker: serve answers
        replies.get()
        with done_lock:  # marker: serve counts
            served[0] += 1


def putter():
    say("tid_putter", threading.get_native_id())
    jobs.journaling = True
    jobs.put(-1)  # marker: putter puts a journaled job


def auditor():
    say("tid_auditor", threading.get_native_id())
    with journal.lock:  # marker: auditor takes the journal lock
        if nest == "deadlock":
            putter_in.wait()
            auditor_in.set()
        return jobs.qsize()  # marker: auditor sizes the queue under the journal lock


def in_thread(fn):
    t = threading.Thread(target=fn, name=fn.__name__)
    t.start()
    return t


say("pid", os.getpid())
in_thread(serve).join()
say("served", served[0])
if nest == "abba":
    in_thread(putter).join()
    in_thread(auditor).join()
elif nest == "audit":
    in_thread(auditor).join()
elif nest == "deadlock":
    for t in [in_thread(putter), in_thread(auditor)]:
        t.join()
say("done", 1)
