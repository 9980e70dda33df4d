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
  shared      one connection shared by two threads at the same time
              (check_same_thread=False): thread "udf" runs a query whose
              user function needs the GIL while it holds the db mutex, then
              plain queries; thread "gil" waits (sleeps, no Python lock)
              until that query is over, then runs plain queries at the same
              time as "udf" and calls create_function (the GIL held, the db
              mutex taken).  Nothing orders one thread's uses after the
              other's, so the two orders can meet: predicted.  They never do
              here ("gil" takes the db mutex with the GIL only after the
              user function is done; plain queries take the GIL with no db
              mutex held), so the run cannot hang.

Prints "pid P", "tid_udf T", "tid_gil T" (shared), "done".
"""
import os
import sqlite3
import sys
import threading
import time


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


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")  # one write: the threads' lines do not interleave
    sys.stdout.flush()


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
        con.create_function("twice", 1, lambda x: 2 * x)  # marker: main create_function
        con.execute("create table t (x)")
        con.executemany("insert into t values (?)", [(i,) for i in range(50)])
        # the two threads meet through plain variables and sleeps only: no
        # Python lock orders one's use of the connection after the other's
        state = {"udf_done": False, "gil_done": False}

        def udf():
            say("tid_udf", native_tid())
            # the user function runs inside sqlite3_step with the db mutex held, needing the GIL
            assert con.execute("select sum(twice(x)) from t").fetchone() == (2450,)  # marker: udf query
            state["udf_done"] = True
            deadline = time.monotonic() + 60
            while not state["gil_done"] and time.monotonic() < deadline:  # at the same time as "gil"
                assert con.execute("select count(*) from t").fetchone() == (50,)

        def gil():
            say("tid_gil", native_tid())
            while not state["udf_done"]:  # never while "udf" may be in its user function
                time.sleep(0.001)
            try:
                for i in range(200):
                    assert con.execute("select max(x) from t").fetchone() == (49,)
                    if i % 50 == 0:
                        # the GIL held while sqlite3 takes the db mutex (a new name: sqlite3
                        # refuses to replace a function while a statement runs)
                        con.create_function(f"times{i}", 1, lambda x: i * x)  # marker: gil create_function
            finally:
                state["gil_done"] = True

        ts = [threading.Thread(target=fn) for fn in (udf, gil)]
        for t in ts:
            t.start()
        for t in ts:
            t.join()
        con.close()
    else:
        sys.exit(2)
    print("done", flush=True)


if __name__ == "__main__":
    main()
