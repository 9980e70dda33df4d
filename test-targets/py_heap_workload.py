# SPDX-License-Identifier: MIT
"""py_heap_workload — a correct threaded Python workload: json, sqlite3,
zlib and re from eight threads at once, plus a shared sqlite3 database
behind a lock.  heisen's heap checker must report nothing.

Usage: py_heap_workload.py [ROUNDS]   (default 200)
Prints "pid P", "allocated N" (bytes the workload asked for, at least), "done ok".
"""
import json
import os
import re
import sqlite3
import sys
import threading
import zlib

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 200
WORD = re.compile(r"[a-z]+(\d+)")
allocated = [0] * 8
db = sqlite3.connect(":memory:", check_same_thread=False)
db.execute("create table t (k integer, v text)")
db_lock = threading.Lock()


def work(i):
    local = sqlite3.connect(":memory:")
    local.execute("create table x (a integer, b blob)")
    for r in range(ROUNDS):
        doc = {"thread": i, "round": r, "items": [f"item{n}" for n in range(50)], "blob": "x" * 2000}
        text = json.dumps(doc)
        packed = zlib.compress(text.encode() * 4)
        back = json.loads(zlib.decompress(packed).decode()[: len(text)])
        assert back["round"] == r
        nums = [int(m.group(1)) for m in WORD.finditer(" ".join(back["items"]))]
        assert sum(nums) == sum(range(50))
        local.execute("insert into x values (?, ?)", (r, packed))
        with db_lock:
            db.execute("insert into t values (?, ?)", (r, text[:100]))
        allocated[i] += len(text) * 5 + len(packed)
    assert local.execute("select count(*) from x").fetchone()[0] == ROUNDS
    local.close()


print(f"pid {os.getpid()}", flush=True)
ts = [threading.Thread(target=work, args=(i,)) for i in range(8)]
for t in ts:
    t.start()
for t in ts:
    t.join()
assert db.execute("select count(*) from t").fetchone()[0] == 8 * ROUNDS
print(f"allocated {sum(allocated)}", flush=True)
print("done ok", flush=True)
