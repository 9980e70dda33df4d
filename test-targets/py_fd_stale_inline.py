# SPDX-License-Identifier: MIT
"""py_fd_stale_inline — seed 004's stale close in one thread, through
CPython's own file objects.

The evaluator opens the checkpoint state file (file object A); a reopen
path closes the number with os.close() behind A's back; the checkpoint
writer, in the same thread, opens its file (B) and gets that number; then
A is closed — its FileIO closes the number again, which is B's.  B's write
and close then fail with EBADF.

heisen: stale-close (rule same-sites) naming A.close() as the close that
ended B's generation, with the number's history back to A's open; the
Python lines are marked "# marker: NAME".

Prints "pid", "tid_main", "fd N", "writer_fd N", "writer_write 9",
"writer_close 9".
"""
import os
import sys
import tempfile
import threading


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def evaluate(state, ckpt):
    f = open(state)  # marker: evaluator opens
    say("fd", f.fileno())
    os.close(f.fileno())  # marker: reopen closes behind its back
    g = open(ckpt, "w")  # marker: writer opens
    say("writer_fd", g.fileno())
    f.close()  # marker: stale close
    try:
        g.write("model.ckpt-200\n")
        g.flush()
    except OSError as e:
        say("writer_write", e.errno)
    try:
        g.close()  # marker: writer closes
    except OSError as e:
        say("writer_close", e.errno)


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
