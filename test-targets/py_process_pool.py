# SPDX-License-Identifier: MIT
"""Seed 002: a ProcessPoolExecutor whose worker dies, and the trees of
processes multiprocessing and subprocess make (tests/test_proc.py).

    py_process_pool.py oom [fork|spawn|forkserver]   a worker allocates without bound (run it in a
                                                memory-limited cgroup): BrokenProcessPool
    py_process_pool.py sigkill                       a worker takes native locks (heisenlocks), allocates
                                                a little, says "victim PID ready" and waits to be
                                                SIGKILLed by the test: BrokenProcessPool
    py_process_pool.py clean [N]                     N workers (default 3) each square numbers: exit 0;
                                                knobs that leave argv alone (for heisen-dump diff):
                                                POOL_WORKERS=N, POOL_SQLITE=1 (import sqlite3),
                                                POOL_GROW_MIB=M (the main process grows by M MiB),
                                                POOL_EXT=DIR (heisenlocks: a lock-order cycle)
    py_process_pool.py tree                          a spawn pool, a forkserver pool, subprocess.run of a
                                                Python child, a fork child: every pid printed
    py_process_pool.py peak MIB                      grow to MIB resident, free it, exit 0
    py_process_pool.py fds N                         hold N open descriptors for 1.5 s, then exit 0

Prints "key value" lines (conftest.facts): "main PID", "worker PID", ...
"""
import concurrent.futures as cf
import multiprocessing as mp
import os
import subprocess
import sys
import time


def say(*words):
    print(*words, flush=True)


def hog():
    """Allocate 8 MiB at a time, touching every page, until the OOM killer comes."""
    say("hog", os.getpid())
    chunks = []
    while True:
        chunks.append(bytearray(8 << 20))


def victim(ext_dir):
    """Leave a trail the report can show, then wait for the test's SIGKILL."""
    sys.path.insert(0, ext_dir)
    import heisenlocks
    heisenlocks.a_then_b()
    keep = [bytearray(1 << 20) for _ in range(4)]
    say("victim", os.getpid(), "ready")
    time.sleep(120)
    return len(keep)


def square(x):
    return os.getpid(), x * x


def run_pool(ctx, work, *args):
    with cf.ProcessPoolExecutor(max_workers=2, mp_context=mp.get_context(ctx)) as ex:
        f = ex.submit(work, *args)
        try:
            f.result(timeout=120)
        except cf.process.BrokenProcessPool as e:
            say("broken", type(e).__name__)
            return 1
    return 0


def clean(n):
    n = int(os.environ.get("POOL_WORKERS", n))
    if os.environ.get("POOL_SQLITE") == "1":
        import sqlite3
        sqlite3.connect(":memory:").execute("select 1")
    grown = [bytearray(1 << 20) for _ in range(int(os.environ.get("POOL_GROW_MIB", "0")))]
    if os.environ.get("POOL_EXT"):
        sys.path.insert(0, os.environ["POOL_EXT"])
        import heisenlocks
        heisenlocks.a_then_b()
        heisenlocks.b_then_a()
    del grown
    with cf.ProcessPoolExecutor(max_workers=n, mp_context=mp.get_context("fork")) as ex:
        pids = {pid for pid, _ in ex.map(square, range(64))}
        # every worker gets one task, so each has started and shows in the tree
        pids |= {pid for pid, _ in (f.result() for f in [ex.submit(square, i) for i in range(n * 4)])}
    for pid in sorted(pids):
        say("worker", pid)
    return 0


def tree():
    for ctx in ("spawn", "forkserver"):
        pool = mp.get_context(ctx).Pool(2)
        for pid, _ in pool.map(square, range(8), chunksize=1):
            say(ctx + "_worker", pid)
        pool.close()  # not terminate(), which the with-statement does: let the workers exit
        pool.join()
        if ctx == "forkserver":
            from multiprocessing import forkserver
            say("forkserver", forkserver._forkserver._forkserver_pid)
    p = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                       capture_output=True, text=True, check=True)
    say("subprocess_child", p.stdout.strip())
    pid = os.fork()
    if pid == 0:
        os._exit(0)
    os.waitpid(pid, 0)
    say("fork_child", pid)
    return 0


def peak(mib):
    chunks = [bytearray(1 << 20) for _ in range(mib)]
    say("grown", os.getpid(), len(chunks))
    del chunks
    return 0


def fds(n):
    """Hold n descriptors open while working (large allocations) for 1.5 s:
    heisen counts open descriptors at most once a second, with a memory sample."""
    held = [open(os.devnull) for _ in range(n)]
    say("held", len(held))
    end = time.monotonic() + 1.5
    while time.monotonic() < end:
        buf = bytearray(256 << 10)
        time.sleep(0.01)
    del buf
    return len(held) - n


def main():
    say("main", os.getpid())
    mode = sys.argv[1]
    if mode == "oom":
        return run_pool(sys.argv[2] if len(sys.argv) > 2 else "fork", hog)
    if mode == "sigkill":
        return run_pool("fork", victim, sys.argv[2])
    if mode == "clean":
        return clean(int(sys.argv[2]) if len(sys.argv) > 2 else 3)
    if mode == "tree":
        return tree()
    if mode == "peak":
        return peak(int(sys.argv[2]))
    if mode == "fds":
        return fds(int(sys.argv[2]))
    raise SystemExit(f"unknown mode {mode}")


if __name__ == "__main__":
    sys.exit(main())
