# SPDX-License-Identifier: MIT
"""py_sqlite_callbacks — sqlite3 connections with Python callbacks.

sqlite3 takes its connection's mutex inside sqlite3_step and
sqlite3_close_v2 and calls the Python callbacks (a user function, the trace
callback, the progress handler) with it held, taking the GIL: db mutex ->
GIL.  create_function, set_trace_callback and set_progress_handler take the
db mutex with the GIL held: GIL -> db mutex.

  single      one thread, one connection, all three callbacks: both orders
              come from one thread on a connection no other thread touches:
              no deadlock is possible, no finding
  perthread   the same in four threads, each with its own connection: no
              finding
  shared      one connection shared by two threads (check_same_thread=False):
              thread "udf" runs a query whose user function needs the GIL
              while it holds the db mutex; after it, thread "gil" holds the
              GIL and calls into the same connection (create_function takes
              the db mutex).  Overlapped, they deadlock: predicted.

Prints "pid P", "tid_udf T", "tid_gil T" (shared), "done".
"""
import os
import sqlite3
import sys
import threading


def with_callbacks(con):
    con.create_function("twice", 1, lambda x: 2 * x)
    con.set_trace_callback(lambda stmt: None)
    con.set_progress_handler(lambda: 0, 10)
    con.execute("create table t (x)")
    con.executemany("insert into t values (?)", [(i,) for i in range(50)])
    assert con.execute("select sum(twice(x)) from t").fetchone() == (2450,)
    con.set_trace_callback(None)
    con.set_progress_handler(None, 10)
    con.close()


def native_tid():
    return threading.get_native_id()


def main():
    mode = sys.argv[1] if len(sys.argv) > 1 else "single"
    print("pid", os.getpid(), flush=True)
    if mode == "single":
        with_callbacks(sqlite3.connect(":memory:"))
    elif mode == "perthread":
        ts = [threading.Thread(target=lambda: [with_callbacks(sqlite3.connect(":memory:")) for _ in range(3)])
              for _ in range(4)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
    elif mode == "shared":
        con = sqlite3.connect(":memory:", check_same_thread=False)
        con.create_function("twice", 1, lambda x: 2 * x)
        con.execute("create table t (x)")
        con.executemany("insert into t values (?)", [(i,) for i in range(50)])

        def udf():
            print("tid_udf", native_tid(), flush=True)
            assert con.execute("select sum(twice(x)) from t").fetchone() == (2450,)

        def gil():
            print("tid_gil", native_tid(), flush=True)
            con.create_function("thrice", 1, lambda x: 3 * x)

        for fn in (udf, gil):
            t = threading.Thread(target=fn)
            t.start()
            t.join()
        con.close()
    else:
        sys.exit(2)
    print("done", flush=True)


if __name__ == "__main__":
    main()
