# SPDX-License-Identifier: MIT
"""py_small_stacks — a Python service whose worker threads run with the
smallest stack Python allows (threading.stack_size(32768): thread pools,
embedded interpreters), each working a sqlite3 connection: every query takes
and releases the connection's sqlite mutexes (pthread mutexes inside
libsqlite3), nested in sqlite's own order, with the GIL released around them.

argv[1]: threads (default 4); argv[2]: queries per thread (default 200).
Prints "pid P", one "sum N" per thread in thread order, "done".
"""
import os
import sqlite3
import sys
import threading

THREADS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
QUERIES = int(sys.argv[2]) if len(sys.argv) > 2 else 200
sums = [None] * THREADS


def work(k):
    con = sqlite3.connect(":memory:", check_same_thread=False)
    con.execute("create table t (x integer)")
    total = 0
    for i in range(QUERIES):
        con.execute("insert into t values (?)", (i * k,))
        total += con.execute("select count(*) from t").fetchone()[0]
    con.close()
    sums[k] = total


def main():
    print(f"pid {os.getpid()}", flush=True)
    threading.stack_size(32768)
    ts = [threading.Thread(target=work, args=(k,), name=f"small{k}") for k in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for s in sums:
        print(f"sum {s}")
    print("done")


if __name__ == "__main__":
    main()
