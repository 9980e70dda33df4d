# SPDX-License-Identifier: MIT
"""py_helper_lines — Python locks taken through shared helpers of two or
more Python levels, from two lines of one function, so that every call of
the helpers runs at the same frame addresses and instructions and only the
caller's line tells the two apart.

transfer() takes `accounts` then `ledger` through contextlib's
@contextmanager helper `locked()` (the generator frame takes the lock,
_GeneratorContextManager.__enter__ called it, the `with` line is one frame
further out), and forward() takes `queue_lock` then `stats_lock` through a
two-level function helper (take -> _take -> acquire), both in a loop, the
first lock still held while the second is taken; audit() and backward()
take each pair in the opposite order: two lock-order cycles, whose edges
carry the stack of the lock held (taken at the first line), read while the
second is taken (at the second line).  relay() does the same with a
native pthread mutex (taken through ctypes.PyDLL, the GIL held) and a
Python lock through hold -> _hold, relay_back() in the opposite order.

Prints "pid P", "rounds N".
"""
import contextlib
import ctypes
import os
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


class NativeMutex:
    """A pthread mutex taken with the GIL held (ctypes.PyDLL keeps it, as a C
    extension that takes its own mutex without releasing the GIL does)."""

    libc = ctypes.PyDLL(None)

    def __init__(self):
        self.m = ctypes.create_string_buffer(64)  # zeroed: PTHREAD_MUTEX_INITIALIZER

    def acquire(self):
        assert self.libc.pthread_mutex_lock(self.m) == 0

    def release(self):
        assert self.libc.pthread_mutex_unlock(self.m) == 0


gate = NativeMutex()
signal_lock = threading.Lock()


def hold(lock):
    _hold(lock)


def _hold(lock):
    lock.acquire()


def relay():
    hold(gate)  # marker: relay takes gate
    hold(signal_lock)  # marker: relay takes signal
    signal_lock.release()
    gate.release()


def relay_back():
    with signal_lock:
        gate.acquire()
        gate.release()


def locks():
    for _ in range(ROUNDS):
        transfer()
        forward()
        relay()
    audit()
    backward()
    relay_back()


def main():
    print("pid", os.getpid(), flush=True)
    locks()
    print("rounds", ROUNDS, flush=True)


if __name__ == "__main__":
    main()
