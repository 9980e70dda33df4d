# SPDX-License-Identifier: MIT
"""py_sqlalchemy_pool — SQLAlchemy's QueuePool handing sqlite3 connections between threads.

An engine over a sqlite file with a QueuePool (POOL connections, default 3,
OVER overflow, default 0: from the environment) and check_same_thread=False:
the pool hands each connection from thread to thread under its queue's
lock, never to two at once.  A "connect" listener creates a user function
on each new connection (the GIL held while sqlite3 takes the connection's
mutex: GIL -> db mutex).  WORKERS threads (default 4, more than the
connections; a ThreadPoolExecutor's threads, which live until it shuts
down) each check a connection out and in ROUNDS times (default 40),
holding it a while and working a while without one, so connections turn
over; each request either runs the user function inside sqlite3_step (db
mutex -> GIL), or sets a trace callback (GIL -> db mutex), runs a traced
query (the callback under the db mutex) and clears it, or runs a plain
query.  The orders on one connection come from different threads, but the
pool never lets two threads use it at once: no deadlock is possible.
(Threads that end while others go on using their connections would be
taken as outlived, README "A GIL cycle needs two threads that can hold
its lock at once": a stated limit, not what this target checks.)

Usage: py_sqlalchemy_pool.py DB_PATH [WORKERS] [ROUNDS].  Prints "pid P",
"connections N" (made by the pool), "handovers H" (checkouts of a
connection last used by another thread), "done".
"""
import concurrent.futures
import os
import sys
import threading
import time

import sqlalchemy
from sqlalchemy import event, text
from sqlalchemy.pool import QueuePool

db_path = sys.argv[1]
workers = int(sys.argv[2]) if len(sys.argv) > 2 else 4
rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 40

engine = sqlalchemy.create_engine(f"sqlite:///{db_path}", poolclass=QueuePool, pool_size=int(os.environ.get("POOL", "3")), max_overflow=int(os.environ.get("OVER", "0")),
                                  connect_args={"check_same_thread": False})
traced = []
connections = []


@event.listens_for(engine, "connect")
def on_connect(dbapi_con, record):
    dbapi_con.create_function("twice", 1, lambda x: 2 * x)  # GIL -> db mutex
    connections.append(dbapi_con)


last_user = {}
handovers = 0


def work(n):
    global handovers
    for i in range(rounds):
        with engine.connect() as c:
            raw = c.connection.dbapi_connection
            prev = last_user.get(id(raw))
            if prev is not None and prev != threading.get_ident():
                handovers += 1
            last_user[id(raw)] = threading.get_ident()
            kind = (i + n) % 3
            if kind == 0:  # a report: the user function runs inside sqlite3_step (db mutex -> GIL)
                total = c.execute(text("select sum(twice(x)) from t")).scalar()
                assert total == 2 * sum(range(20)), total
            elif kind == 1:  # a traced request: the trace callback runs under the db mutex
                raw.set_trace_callback(traced.append)  # GIL -> db mutex
                assert c.execute(text("select count(*) from t")).scalar() == 20
                raw.set_trace_callback(None)
            else:
                assert c.execute(text("select max(x) from t")).scalar() == 19
            time.sleep(0.001)  # hold it a while: the others queue for a connection
        time.sleep(0.001 * (n + 1))  # work without one: the pool's queue turns over


print("pid", os.getpid(), flush=True)
with engine.begin() as c:
    c.execute(text("create table if not exists t (x)"))
    c.execute(text("delete from t"))
    for i in range(20):
        c.execute(text("insert into t values (:x)"), {"x": i})
# a server's worker threads: they live until the pool of threads shuts down
with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as executor:
    for f in [executor.submit(work, n) for n in range(workers)]:
        f.result()
engine.dispose()
print("connections", len(connections), flush=True)
print("handovers", handovers, flush=True)
print("done", flush=True)
