# SPDX-License-Identifier: MIT
"""py_zmq_constructor_leak — seed 001: a constructor opens sockets and raises; retried.

BertClient.__init__ makes two zmq sockets and connects them, then checks
the server's health, which times out (nobody listens) and raises before
the sockets are stored anywhere a close would find them.  The retry
decorator keeps every failed attempt's exception for its log, so the
half-built clients (and their sockets) stay alive.  The "server" is a
stub in this process (a PULL and a PUB socket bound on loopback) that
accepts the connections but never answers, so once connected zmq is idle.  After the retries,
the job shuts zmq down: Context.term() waits forever for sockets that
nobody will close.

heisen-run --hang-timeout: `hang` (the main thread in term()) plus
`fd-leak` whose largest groups were created at the constructor's lines
("# marker: constructor opens").

Prints "pid", "tid_main", "attempts N", "terminating" (and "term
interrupted" when a signal made term() return).
"""
import os
import sys
import threading

import zmq


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class BertClient:
    def __init__(self, ctx, port):
        self.sender = ctx.socket(zmq.PUSH)  # marker: constructor opens
        self.sender.setsockopt(zmq.LINGER, -1)
        self.sender.connect(f"tcp://127.0.0.1:{port}")
        self.receiver = ctx.socket(zmq.SUB)  # marker: constructor opens receiver
        self.receiver.setsockopt(zmq.LINGER, -1)
        self.receiver.connect(f"tcp://127.0.0.1:{port + 1}")
        self.sender.send(b"health?")  # queued: linger keeps it until delivered
        self._check_health()

    def _check_health(self):
        if not self.receiver.poll(50):
            raise TimeoutError("the BERT server did not answer")

    def encode(self, sentence):
        return [0.0]


failed_attempts = []


def retry_on_timeout(fn):
    def wrapper(*args):
        for attempt in range(3):
            try:
                return fn(*args)
            except TimeoutError as e:
                failed_attempts.append(e)  # kept for the log: so is the half-built client
        return None
    return wrapper


@retry_on_timeout
def get_embedding(ctx, port, sentence):
    bc = BertClient(ctx, port)
    return bc.encode(sentence)


def main():
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    ctx = zmq.Context()
    server_in = ctx.socket(zmq.PULL)  # the stub server: accepts, never answers
    port = server_in.bind_to_random_port("tcp://127.0.0.1")
    server_out = ctx.socket(zmq.PUB)
    server_out.bind(f"tcp://127.0.0.1:{port + 1}")
    get_embedding(ctx, port, "hello")
    say("attempts", len(failed_attempts))
    say("terminating", "now")
    ctx.term()  # marker: term waits
    # pyzmq's term() gives up when a signal interrupts libzmq's wait (EINTR:
    # heisen's hang snapshot is one); the job would have waited on, and so
    # does this one, sockets and all
    say("term", "interrupted")
    threading.Event().wait()


if __name__ == "__main__":
    main()
