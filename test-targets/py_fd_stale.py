# SPDX-License-Identifier: MIT
"""py_fd_stale — seed 004 through CPython's own file objects.

The evaluator opens the checkpoint state file; a "reopen" path closes the
number with os.close() behind the file object's back; the checkpoint
writer thread opens its file and gets that number; then the evaluator's
file object is closed — its FileIO closes the number again, which is now
the writer's.  The writer's write and close then fail with EBADF.

heisen: stale-close, the stale close at the evaluator's f.close() line,
the rightful owner's creation at the writer's open() line, the history
with the os.close() line; the Python lines are marked "# marker: NAME".

Prints "pid", "tid_main", "tid_writer", "fd N", "writer_write 9",
"writer_close 9".
"""
import os
import sys
import tempfile
import threading


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


opened = threading.Event()
go = threading.Event()


def writer(path):
    say("tid_writer", threading.get_native_id())
    g = open(path, "w")  # marker: writer opens
    say("writer_fd", g.fileno())
    opened.set()
    go.wait()
    try:
        g.write("model.ckpt-200\n")
        g.flush()
    except OSError as e:
        say("writer_write", e.errno)
    try:
        g.close()  # marker: writer closes
    except OSError as e:
        say("writer_close", e.errno)


def evaluate(state, ckpt):
    f = open(state)  # marker: evaluator opens
    say("fd", f.fileno())
    os.close(f.fileno())  # marker: reopen closes behind its back
    t = threading.Thread(target=writer, args=(ckpt,), name="writer")
    t.start()
    opened.wait()
    f.close()  # marker: stale close
    go.set()
    t.join()


def main():
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    d = tempfile.mkdtemp()
    state = os.path.join(d, "checkpoint")
    with open(state, "w") as f:
        f.write("model.ckpt-100\n")
    evaluate(state, os.path.join(d, "checkpoint.tmp"))
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    say("done", "ok")


if __name__ == "__main__":
    main()
