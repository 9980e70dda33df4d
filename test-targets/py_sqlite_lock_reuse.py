# SPDX-License-Identifier: MIT
"""py_sqlite_lock_reuse — mutexes in heap blocks freed among sqlite's blocks,
their memory handed out again for new mutexes taken in the other order.

Each round opens an sqlite3 connection (sqlite keeps its mutexes in heap
blocks among the connection's small ones), uses it and closes it; then a
256-byte block from libc's malloc (ctypes), zeroed, holds two default
pthread mutexes (PTHREAD_MUTEX_INITIALIZER: no pthread_mutex_init, which
would forget the old lock by itself, as in a calloc'd struct), at
offsets 72 and 136 (the second and third 64-byte granules of the block,
not its first), taken A then B and left unlocked, and the
block is freed without pthread_mutex_destroy.  The next malloc of the same
size (glibc hands the block back at once when heisen's heap checker is off)
holds two new mutexes at the same addresses, taken B then A.  Every pair is
a new lock pair: no lock-order cycle may come of the reused addresses.
After ROUNDS rounds two threads, one after the other, take one live pair
(in a 512-byte block, elsewhere) in opposite orders: a real ABBA (one potential deadlock, its locks at "a" and
"b").

Prints "pid P", "reused N" (rounds whose second block came back at the
first's address), "a 0x..", "b 0x..", "done ok".
"""
import ctypes
import os
import sqlite3
import sys
import threading

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
BLOCK = 256
OFF_A, OFF_B = 72, 136

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.restype = None
libc.free.argtypes = [ctypes.c_void_p]
for name in ("pthread_mutex_lock", "pthread_mutex_unlock"):
    getattr(libc, name).argtypes = [ctypes.c_void_p]
    getattr(libc, name).restype = ctypes.c_int


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def check(rc, what):
    if rc != 0:
        raise SystemExit(f"{what} failed: {rc}")


def pair(size=BLOCK):
    blk = libc.malloc(size)
    if not blk:
        raise SystemExit("malloc failed")
    ctypes.memset(blk, 0, size)  # zeroed: PTHREAD_MUTEX_INITIALIZER, no init call that would forget
    return blk, blk + OFF_A, blk + OFF_B


def nest(first, second):
    check(libc.pthread_mutex_lock(first), "lock")
    check(libc.pthread_mutex_lock(second), "lock")
    check(libc.pthread_mutex_unlock(second), "unlock")
    check(libc.pthread_mutex_unlock(first), "unlock")


def sqlite_round(i):
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, name TEXT)")
    db.executemany("INSERT INTO t (name) VALUES (?)", [(f"n{i}-{k}",) for k in range(20)])
    db.commit()
    n = db.execute("SELECT count(*) FROM t WHERE name LIKE 'n%'").fetchone()[0]
    db.close()
    return n


say("pid", os.getpid())
reused = 0
for i in range(ROUNDS):
    if sqlite_round(i) != 20:
        raise SystemExit("sqlite lost rows")
    blk, a, b = pair()
    nest(a, b)
    libc.free(blk)  # freed with its mutexes, not destroyed
    blk2, a2, b2 = pair()
    reused += blk2 == blk
    nest(b2, a2)  # the other order, in the same memory when reused
    libc.free(blk2)
say("reused", reused)

blk, a, b = pair(2 * BLOCK)  # another size: not the reused block's memory
say("a", hex(a))
say("b", hex(b))
for first, second in ((a, b), (b, a)):
    t = threading.Thread(target=nest, args=(first, second))
    t.start()
    t.join()
say("done", "ok")
