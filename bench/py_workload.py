# SPDX-License-Identifier: MIT
"""bench/py_workload.py — a small threaded Python service, for end-to-end cost.

A producer feeds JSON requests through a queue.Queue to worker threads; each
worker decodes one, writes it into its own in-memory sqlite3 database (the
sqlite3 module is built thread-safe: every API call takes pthread mutexes),
commits and runs a small range query every 8 requests, and sends a JSON reply through a second
queue; a shared threading.Lock guards a counter.  Lock traffic therefore comes
from the GIL (a pthread mutex + condition variable in CPython 3.11), sqlite's
mutexes and the interpreter's own locks.  The same SIZE does the same work
(which worker gets which request varies).  Prints "ok REQUESTS REPLIES QTY
SECONDS" (SECONDS: the work alone, without interpreter start-up) and exits 0
only when every request was answered and counted.

Usage: /usr/bin/python3 bench/py_workload.py [SIZE]   (default 50000 requests)
bench/run.py times it natively and under each tool; see bench/README.md.
"""
import json
import queue
import sqlite3
import sys
import threading
import time

WORKERS = 4


def worker(inbox, outbox, totals, totals_lock):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE item (id INTEGER PRIMARY KEY, name TEXT, qty INTEGER, tags TEXT)")
    done = 0
    while True:
        msg = inbox.get()
        if msg is None:
            break
        req = json.loads(msg)
        db.execute("INSERT INTO item (id, name, qty, tags) VALUES (?, ?, ?, ?)",
                   (req["id"], req["name"], req["qty"], json.dumps(req["tags"])))
        done += 1
        if done % 8 == 0:
            db.commit()
            (n, s) = db.execute("SELECT count(*), sum(qty) FROM item WHERE id BETWEEN ? AND ?",
                                (req["id"] - 64, req["id"])).fetchone()
        else:
            (n, s) = (0, 0)
        outbox.put(json.dumps({"id": req["id"], "n": n, "s": s or 0}))
        with totals_lock:
            totals[0] += req["qty"]
    db.close()


def main():
    size = int(sys.argv[1]) if len(sys.argv) > 1 else 50000
    t0 = time.perf_counter()
    inbox = queue.Queue(maxsize=256)
    outbox = queue.Queue()
    totals = [0]
    totals_lock = threading.Lock()
    threads = [threading.Thread(target=worker, args=(inbox, outbox, totals, totals_lock))
               for _ in range(WORKERS)]
    for t in threads:
        t.start()
    replies = 0

    def drain():
        nonlocal replies
        while True:
            try:
                reply = json.loads(outbox.get_nowait())
            except queue.Empty:
                return
            assert 0 <= reply["id"] < size and reply["n"] >= 0
            replies += 1

    for i in range(size):
        inbox.put(json.dumps({"id": i, "name": "item-%d" % i, "qty": (i * 7919) % 1000,
                              "tags": ["t%d" % (i % 5), "bench"]}))
        if i % 512 == 0:
            drain()
    for _ in threads:
        inbox.put(None)
    for t in threads:
        t.join()
    drain()
    expect_qty = sum((i * 7919) % 1000 for i in range(size))
    if replies != size or totals[0] != expect_qty:
        print("FAIL", size, replies, totals[0], expect_qty)
        return 1
    print("ok", size, replies, totals[0], "%.6f" % (time.perf_counter() - t0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
