# SPDX-License-Identifier: MIT
"""py_blocked_read — a Python service stuck in a blocking call that is not a lock.

Thread "reader" runs wait_for_reply(), which blocks in os.read on a pipe
whose write end is open but that nobody writes; the main thread joins it.
Nothing ever happens again: no lock is involved, the whole process makes no
progress.  Under `heisen-run --hang-timeout 2 --on-hang kill` the report must
be a `hang` that shows the reader's Python line (wait_for_reply, the os.read
line) and the main thread's join.

Prints "pid P", "tid_reader T", "tid_main T", "waiting".
"""
import os
import sys
import threading

reader_ready = threading.Event()


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")  # one write: threads interleave
    sys.stdout.flush()


def wait_for_reply(fd):
    say("tid_reader", threading.get_native_id())
    reader_ready.set()
    return os.read(fd, 1)  # marker: wait_for_reply reads


def main():
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    r, w = os.pipe()  # w stays open: the read never sees EOF
    t = threading.Thread(target=wait_for_reply, args=(r,), name="reader")
    t.start()
    reader_ready.wait()
    say("waiting", "ok")
    t.join()  # marker: main joins the reader
    say("not", "reached")
    os.close(w)


if __name__ == "__main__":
    main()
