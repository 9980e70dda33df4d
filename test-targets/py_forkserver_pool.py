# SPDX-License-Identifier: MIT
"""py_forkserver_pool — a ProcessPoolExecutor under the forkserver start method.

The forkserver waits in select for requests and the resource tracker
blocks in read() on its pipe for the whole run: both wait for another live
process (the parent).  The pool works for about SECONDS (default 6) on
many short tasks; the main thread waits on results that keep coming.  No
hang.  Prints "pid P", "semaphores NAME ..." (the named POSIX semaphores of
the pool's queues: /dev/shm/sem.NAME until the resource tracker unlinks
them), "results N".

With "deadlock" as the second argument, one task runs two threads in its
worker that take two locks in opposite orders and deadlock (a real hang
in a child process): the worker's main thread waits forever in join().
Prints "worker W" for that worker.
"""
import concurrent.futures
import multiprocessing as mp
import os
import sys
import threading
import time


def take_both(first, second, barrier):
    with first:
        barrier.wait()
        with second:  # marker: the worker's threads deadlock
            pass


def deadlock():
    a, b = threading.Lock(), threading.Lock()
    barrier = threading.Barrier(2)
    ts = [threading.Thread(target=take_both, args=(a, b, barrier)),
          threading.Thread(target=take_both, args=(b, a, barrier))]
    for t in ts:
        t.start()
    print("worker", os.getpid(), flush=True)
    for t in ts:
        t.join()  # marker: the worker waits forever


def work(x):
    if x == "deadlock":
        deadlock()
        return 0
    t = time.monotonic() + 0.05
    while time.monotonic() < t:
        pass
    return x * x


def queue_semaphores(pool):
    """The names of the named semaphores behind the pool's call and result
    queues (their locks and the call queue's bound), as sem_open made them."""
    names = []
    for q in (pool._call_queue, pool._result_queue):
        for attr in ("_rlock", "_wlock", "_sem"):
            lock = getattr(q, attr, None)
            name = getattr(getattr(lock, "_semlock", None), "name", None)
            if name:
                names.append(name.lstrip("/"))
    return names


def main():
    seconds = float(sys.argv[1]) if len(sys.argv) > 1 else 6.0
    print("pid", os.getpid(), flush=True)
    ctx = mp.get_context("forkserver")
    n = 0
    with concurrent.futures.ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        print("semaphores", *queue_semaphores(pool), flush=True)
        end = time.monotonic() + seconds
        if len(sys.argv) > 2 and sys.argv[2] == "deadlock":
            n += sum(1 for _ in pool.map(work, [1, 2, "deadlock", 3]))
        while time.monotonic() < end:
            n += sum(1 for _ in pool.map(work, range(8)))
    print("results", n, flush=True)


if __name__ == "__main__":
    main()
