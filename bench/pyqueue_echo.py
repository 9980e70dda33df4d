# SPDX-License-Identifier: MIT
"""bench/pyqueue_echo.py — round trips through two queue.Queue objects.

The main thread puts a number on one queue.Queue and waits for it on a
second; an echo thread takes it from the first and puts it on the second.
Each round trip is two puts and two gets, each getter usually blocking in
Condition.wait (a new waiter lock, sem_init, per wait) and each put and
get probing its queue's mutex (Condition.notify -> _is_owned): the Python
lock hooks' work besides the `with lock:` pair (bench/README.md "Python
locks a service uses in turn").  Prints "ok".

Usage: /usr/bin/python3 bench/pyqueue_echo.py [ROUNDS]   (default 2000)
"""
import queue
import sys
import threading


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    q, r = queue.Queue(), queue.Queue()

    def echo():
        while True:
            x = q.get()
            if x is None:
                return
            r.put(x)

    t = threading.Thread(target=echo)
    t.start()
    for i in range(n):
        q.put(i)
        assert r.get() == i
    q.put(None)
    t.join()
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
