# SPDX-License-Identifier: MIT
"""py_sqlite_churn — a service that opens and closes sqlite3 connections for
a long time, then meets a real lock-order inversion.

Four threads open, query and close 3,000 sqlite3 connections in all (each
connection has its own sqlite mutexes, created and destroyed with it, taken
with the GIL held and released).  Then thread "ab" calls heisenlocks.a_then_b()
and, after it, thread "ba" calls heisenlocks.b_then_a(): heisen must still
predict that ABBA, and no table of its lock-order graph may fill.

argv[1]: the heisenlocks build directory; argv[2]: connections (default 3000).
Prints "pid P", "tid_ab T", "tid_ba T", "done".
"""
import os
import sqlite3
import sys
import threading

sys.path.insert(0, sys.argv[1])
import heisenlocks  # noqa: E402

TOTAL = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
THREADS = 4


def churn(n):
    for i in range(n):
        con = sqlite3.connect(":memory:")
        con.execute("create table t (x)")
        con.execute("insert into t values (?)", (i,))
        assert con.execute("select count(*) from t").fetchone() == (1,)
        con.close()


def worker(label, fn):
    sys.stdout.write(f"{label} {heisenlocks.native_tid()}\n")
    sys.stdout.flush()
    fn()


def main():
    print("pid", os.getpid(), flush=True)
    ts = [threading.Thread(target=churn, args=(TOTAL // THREADS,)) for _ in range(THREADS)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    for label, fn in (("tid_ab", heisenlocks.a_then_b), ("tid_ba", heisenlocks.b_then_a)):
        t = threading.Thread(target=worker, args=(label, fn), name=label)
        t.start()
        t.join()
    print("done", flush=True)


if __name__ == "__main__":
    main()
