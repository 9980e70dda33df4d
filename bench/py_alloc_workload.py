# SPDX-License-Identifier: MIT
"""bench/py_alloc_workload.py — a threaded Python service's heap traffic, for end-to-end cost.

Run with PYTHONMALLOC=malloc (bench/compare.py sets it in every config), so
every object the interpreter makes — dicts, str, bytes, lists — is a malloc
and every object it drops a free: the heap path from Python, with the
threads a service has.  THREADS threads (default 4) each handle STEPS
requests: a request is a dict of str and bytes fields (a payload of 64 to
2,111 bytes, a header dict, a list of tags) kept in the thread's own cache of
at most WINDOW entries (the oldest dropped, so blocks of every age are
freed); every request is encoded to JSON and decoded back (json's C
accelerator: one str and many small objects per round trip), and every 16th
one joins a few cached payloads into one bytes (a growing block).  Blocks
are freed by the thread that made them, and now and then by another (a
shared queue of finished requests, emptied by whichever thread holds the
lock).  The same STEPS and THREADS give the same work and the same checksum.

Prints "ok THREADS STEPS CHECKSUM SECONDS" (SECONDS: the work alone, without
interpreter start-up) and exits 0.

Usage: PYTHONMALLOC=malloc /usr/bin/python3 bench/py_alloc_workload.py [STEPS [THREADS]]
       (default 12000 steps per thread, 4 threads)
bench/compare.py runs it natively, under heisen and under the peer tools.
"""
import json
import sys
import threading
import time

WINDOW = 2048  # requests a thread keeps at once


def handle(tid, steps, done, done_lock, sums):
    cache = {}
    total = 0
    x = 12345 + tid
    for i in range(steps):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        key = "req-%d-%d" % (tid, i)
        req = {
            "id": i,
            "key": key,
            "user": "user-%d" % (x % 997),
            "payload": bytes((x >> 8) % 2048 + 64),
            "headers": {"content-type": "application/json", "x-trace": "%08x" % x, "x-step": str(i)},
            "tags": ["t%d" % (x % 7), "shard-%d" % (x % 13), key],
        }
        cache[key] = req
        text = json.dumps({"id": i, "key": key, "headers": req["headers"], "tags": req["tags"],
                           "size": len(req["payload"])})
        back = json.loads(text)
        total += back["size"] + len(text)
        if i % 16 == 0:
            joined = b"".join(cache["req-%d-%d" % (tid, j)]["payload"] for j in range(max(0, i - 7), i + 1)
                              if "req-%d-%d" % (tid, j) in cache)
            total += len(joined)
        if len(cache) > WINDOW:
            old = cache.pop("req-%d-%d" % (tid, i - WINDOW))
            if i % 8 == 0:
                with done_lock:  # handed to the shared queue: freed by whichever thread empties it
                    done.append(old)
                    if len(done) >= 64:
                        total += sum(len(r["payload"]) for r in done)
                        done.clear()
    sums[tid] = total


def main():
    steps = int(sys.argv[1]) if len(sys.argv) > 1 else 12000
    nthreads = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    done, done_lock, sums = [], threading.Lock(), [0] * nthreads
    t0 = time.perf_counter()
    threads = [threading.Thread(target=handle, args=(t, steps, done, done_lock, sums)) for t in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    print("ok", nthreads, steps, sum(sums) + sum(len(r["payload"]) for r in done),
          "%.6f" % (time.perf_counter() - t0))


if __name__ == "__main__":
    main()
