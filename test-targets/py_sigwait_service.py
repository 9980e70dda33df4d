# SPDX-License-Identifier: MIT
"""py_sigwait_service — a service that takes its signals itself, in a thread.

The main thread blocks SIGTERM, SIGINT and SIGHUP (every thread it starts
inherits that), starts a "signals" thread that blocks every signal and takes
them with signal.sigtimedwait (the way a supervisor or a daemon without
handlers does; a signalfd reader is the same), and a "worker" that waits in
os.read on a pipe only the signals thread writes, then joins the worker.
Idle: no progress, the main thread's join and the worker's read can only be
ended from inside, so a hang watcher asks for snapshots.  The main thread
and the worker answer; the signals thread must never be sent the request
(it would dequeue it as its own signal) and its stack is unknown.  Each
signal it dequeues is printed as "got SIGNO CODE"; SIGTERM or SIGINT wakes
the worker and the service ends.

Prints "pid P", "tid_main T", "tid_signals T", "tid_worker T", "ready",
then "got ..." per signal, "done".
"""
import os
import signal
import sys
import threading

TERM = {signal.SIGTERM, signal.SIGINT, signal.SIGHUP}


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def take_signals(w, started):
    signal.pthread_sigmask(signal.SIG_BLOCK, signal.valid_signals())
    say("tid_signals", threading.get_native_id())
    started.set()
    while True:
        info = signal.sigtimedwait(signal.valid_signals(), 30)
        if info is None:
            continue
        say("got", f"{info.si_signo} {info.si_code}")
        if info.si_signo in (signal.SIGTERM, signal.SIGINT):
            os.write(w, b"x")
            return


def work(r, started):
    say("tid_worker", threading.get_native_id())
    started.set()
    os.read(r, 1)


def main():
    signal.pthread_sigmask(signal.SIG_BLOCK, TERM)
    r, w = os.pipe()
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    s_started, w_started = threading.Event(), threading.Event()
    threading.Thread(target=take_signals, args=(w, s_started), name="signals", daemon=True).start()
    worker = threading.Thread(target=work, args=(r, w_started), name="worker")
    worker.start()
    s_started.wait()
    w_started.wait()
    say("ready", 1)
    worker.join()
    say("done", 1)


main()
