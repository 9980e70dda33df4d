# SPDX-License-Identifier: MIT
"""py_clean_threads — an ordinary, correct threaded Python program.

Worker threads pass work through queue.Queue, share counters under
threading.Lock / RLock / Condition, write rows to sqlite3 (an in-memory
database shared under a lock, and a temporary file database opened by every
worker), and round-trip everything through json.  Nothing here is a bug:
heisen must report no finding, and the program must print exactly the same
thing and exit with exactly the same status with heisen as without it.

Usage: py_clean_threads.py [EXIT_STATUS]  (default 0; the status is the
program's last act, so a test can tell it apart from a crash).
"""
import json
import os
import queue
import sqlite3
import sys
import tempfile
import threading

WORKERS = 6
ITEMS = 300


def main():
    exit_status = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    work = queue.Queue(maxsize=16)
    results = queue.Queue()
    counter_lock = threading.Lock()
    stats_lock = threading.RLock()
    done_cond = threading.Condition()
    counters = {"items": 0, "bytes": 0}
    finished = []

    mem = sqlite3.connect(":memory:", check_same_thread=False)
    mem.execute("create table seen (worker integer, item integer, doc text)")
    mem_lock = threading.Lock()

    tmpdir = tempfile.mkdtemp(prefix="heisen-clean-")
    dbpath = os.path.join(tmpdir, "work.db")
    with sqlite3.connect(dbpath) as db:
        db.execute("create table done (item integer primary key, square integer)")

    def bump(name, by):
        with stats_lock:          # re-entered below: an RLock
            with stats_lock:
                with counter_lock:
                    counters[name] += by

    def worker(wid):
        db = sqlite3.connect(dbpath, timeout=30)
        try:
            while True:
                item = work.get()
                if item is None:
                    break
                doc = json.dumps({"item": item, "square": item * item, "worker": wid},
                                 sort_keys=True)
                back = json.loads(doc)
                with mem_lock:
                    mem.execute("insert into seen values (?, ?, ?)", (wid, item, doc))
                with db:
                    db.execute("insert into done values (?, ?)", (item, back["square"]))
                bump("items", 1)
                bump("bytes", len(doc))
                results.put(back["square"])
                work.task_done()
        finally:
            db.close()
        with done_cond:
            finished.append(wid)
            done_cond.notify_all()

    threads = [threading.Thread(target=worker, args=(w,), name=f"worker-{w}")
               for w in range(WORKERS)]
    for t in threads:
        t.start()
    for i in range(ITEMS):
        work.put(i)
    work.join()
    for _ in threads:
        work.put(None)
    with done_cond:
        ok = done_cond.wait_for(lambda: len(finished) == WORKERS, timeout=60)
    for t in threads:
        t.join()

    squares = sorted(results.get() for _ in range(ITEMS))
    with mem_lock:
        mem_rows = mem.execute("select count(*), sum(item) from seen").fetchone()
    with sqlite3.connect(dbpath) as db:
        file_rows = db.execute("select count(*), sum(square) from done").fetchone()
    os.unlink(dbpath)
    os.rmdir(tmpdir)

    print(json.dumps({
        "all_finished": ok,
        "items": counters["items"],
        "bytes": counters["bytes"],
        "sum_squares": sum(squares),
        "memory_db": list(mem_rows),
        "file_db": list(file_rows),
    }, sort_keys=True))
    sys.exit(exit_status)


if __name__ == "__main__":
    main()
