# SPDX-License-Identifier: MIT
"""py_helper_lines — locks and fds reached through shared helpers of two or
more Python levels, from two lines of one function, so that every call of
the helpers runs at the same frame addresses and instructions and only the
caller's line tells the two apart.

mode "locks":
  transfer() takes `accounts` then `ledger` through contextlib's
  @contextmanager helper `locked()` (the generator frame takes the lock,
  _GeneratorContextManager.__enter__ called it, the `with` line is one frame
  further out), and forward() takes `queue_lock` then `stats_lock` through a
  two-level function helper (take -> _take -> acquire), both in a loop;
  audit() and backward() take each pair in the opposite order: two
  lock-order cycles, whose edges carry the stack of the lock held (taken at
  the first line) while the second is taken (at the second line).
mode "fds":
  work() opens a file through open_stat -> _open_ro, a TCP socket through
  make_socket -> _new_socket, and a pyzmq socket through Context.socket,
  each from two lines, in a loop, keeps them, and ends with SIGKILL (fds
  open at the end: an fd leak per line).

Prints "pid", "rounds N".
"""
import contextlib
import os
import socket
import sys
import threading

ROUNDS = 4

# ---- locks ------------------------------------------------------------------

accounts = threading.Lock()
ledger = threading.Lock()
queue_lock = threading.Lock()
stats_lock = threading.Lock()


@contextlib.contextmanager
def locked(lock):
    lock.acquire()  # marker: helper acquires
    try:
        yield
    finally:
        lock.release()


def transfer():
    with locked(accounts):  # marker: transfer takes accounts
        with locked(ledger):  # marker: transfer takes ledger
            pass


def audit():
    with ledger:
        with accounts:
            pass


def take(lock):
    _take(lock)


def _take(lock):
    lock.acquire()


def forward():
    take(queue_lock)  # marker: forward takes queue
    take(stats_lock)  # marker: forward takes stats
    stats_lock.release()
    queue_lock.release()


def backward():
    with stats_lock:
        with queue_lock:
            pass


def locks():
    for _ in range(ROUNDS):
        transfer()
        forward()
    audit()
    backward()


# ---- fds ----------------------------------------------------------------------

KEPT = []


def open_stat():
    return _open_ro("/proc/self/stat")


def _open_ro(path):
    return open(path, "rb")


def make_socket():
    return _new_socket(socket.AF_INET)


def _new_socket(family):
    return socket.socket(family, socket.SOCK_STREAM)


def work(ctx):
    import zmq
    for _ in range(ROUNDS):
        KEPT.append(open_stat())  # marker: opens first file
        KEPT.append(open_stat())  # marker: opens second file
        KEPT.append(make_socket())  # marker: opens first socket
        KEPT.append(make_socket())  # marker: opens second socket
        KEPT.append(ctx.socket(zmq.PUSH))  # marker: opens sender
        KEPT.append(ctx.socket(zmq.PUSH))  # marker: opens second sender


def main():
    mode = sys.argv[1]
    print("pid", os.getpid(), flush=True)
    if mode == "locks":
        locks()
    else:
        import zmq
        ctx = zmq.Context()
        work(ctx)
    print("rounds", ROUNDS, flush=True)
    if mode == "fds":
        os.kill(os.getpid(), 9)  # the fds stay open at the end


if __name__ == "__main__":
    main()
