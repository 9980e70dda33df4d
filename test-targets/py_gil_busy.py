# SPDX-License-Identifier: MIT
"""py_gil_busy — a busy threaded Python program whose C extensions handle the GIL correctly.

For about a second, several threads at once run code that releases and
retakes the GIL the way a correct extension does: sqlite3 queries (the
module drops the GIL around every sqlite3 call), zlib compress/decompress of
large buffers, hashlib digests of large buffers (both drop the GIL above a
couple of kilobytes), time.sleep, and queue.Queue hand-offs between a
producer and consumers.  Nothing here is a bug: heisen must report no
finding at all (in particular no potential deadlock through the GIL), and
the program must print exactly the same lines and exit with the same status
with heisen as without it.  The printed lines never depend on timing.

Usage: py_gil_busy.py [EXIT_STATUS] [SECONDS]  (defaults 0 and 1.0)
"""
import hashlib
import queue
import sqlite3
import sys
import threading
import time
import zlib

BLOB = bytes(range(256)) * 4096  # 1 MiB, compressible
BLOB_SHA256 = hashlib.sha256(BLOB).hexdigest()


def for_a_while(seconds, body):
    """Run body(i) until the deadline, at least twice; True when every call said True."""
    deadline = time.monotonic() + seconds
    i, ok = 0, True
    while i < 2 or time.monotonic() < deadline:
        ok = body(i) and ok
        i += 1
    return ok


def sqlite_worker(seconds, out):
    db = sqlite3.connect(":memory:")
    db.execute("create table t (k integer primary key, v text)")

    def body(i):
        with db:
            db.executemany("insert into t values (?, ?)",
                           ((i * 100 + j, f"row {j}") for j in range(100)))
        (n,) = db.execute("select count(*) from t where k >= ?", (i * 100,)).fetchone()
        return n == 100

    out["sqlite"] = for_a_while(seconds, body)
    db.close()


def zlib_worker(seconds, out):
    out["zlib"] = for_a_while(seconds, lambda i: zlib.decompress(zlib.compress(BLOB, 1)) == BLOB)


def hashlib_worker(seconds, out):
    out["hashlib"] = for_a_while(seconds, lambda i: hashlib.sha256(BLOB).hexdigest() == BLOB_SHA256)


def sleep_worker(seconds, out):
    def body(i):
        time.sleep(0.01)
        return True
    out["sleep"] = for_a_while(seconds, body)


def queue_workers(seconds, out):
    work, results = queue.Queue(maxsize=8), queue.Queue()

    def consumer():
        while (item := work.get()) is not None:
            results.put(hashlib.md5(item).digest())

    consumers = [threading.Thread(target=consumer, name=f"consumer-{c}") for c in range(3)]
    for t in consumers:
        t.start()
    sent = 0

    def body(i):
        nonlocal sent
        work.put(BLOB[:65536] + i.to_bytes(4, "little"))
        sent += 1
        return True

    ok = for_a_while(seconds, body)
    for _ in consumers:
        work.put(None)
    for t in consumers:
        t.join()
    out["queue"] = ok and results.qsize() == sent


def main():
    exit_status = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    seconds = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    out = {}
    workers = [sqlite_worker, zlib_worker, hashlib_worker, sleep_worker, queue_workers]
    threads = [threading.Thread(target=w, args=(seconds, out), name=w.__name__) for w in workers]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for name in sorted(out):
        print(name, "ok" if out[name] else "WRONG")
    print("threads", len(threads) + 3)
    sys.stdout.flush()
    sys.exit(exit_status)


if __name__ == "__main__":
    main()
