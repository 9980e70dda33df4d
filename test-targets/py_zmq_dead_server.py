# SPDX-License-Identifier: MIT
"""py_zmq_dead_server — a zmq client whose server went away; term() waits forever.

EmbeddingClient.__init__ makes two zmq sockets and connects them to a
loopback port nobody listens on (the server is gone), queues a request,
checks the server's health, which times out and raises before the sockets
are stored anywhere a close would find them.  The retry wrapper keeps each
failed attempt's exception, so the half-built clients and their sockets stay
alive.  Then the job shuts zmq down: Context.term() waits forever for
sockets that nobody will close, while libzmq's I/O thread keeps retrying
the connection every 100 ms — the process is never quiet as a whole.

Prints "pid", "tid_main", "attempts N", "terminating".
"""
import os
import socket
import sys
import threading

import zmq


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def dead_port():
    """A loopback port that was free a moment ago: nobody listens on it."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


class EmbeddingClient:
    def __init__(self, ctx, port):
        self.sender = ctx.socket(zmq.PUSH)  # marker: constructor opens sender
        self.sender.setsockopt(zmq.LINGER, -1)
        self.sender.connect(f"tcp://127.0.0.1:{port}")
        self.receiver = ctx.socket(zmq.SUB)  # marker: constructor opens receiver
        self.receiver.setsockopt(zmq.LINGER, -1)
        self.receiver.connect(f"tcp://127.0.0.1:{port + 1}")
        self.sender.send(b"health?")  # queued until a peer connects
        self._check_health()

    def _check_health(self):
        if not self.receiver.poll(50):
            raise TimeoutError("the embedding server did not answer")


failed_attempts = []


def get_embedding(ctx, port):
    for attempt in range(3):
        try:
            return EmbeddingClient(ctx, port)
        except TimeoutError as e:
            failed_attempts.append(e)  # kept for the log: so is the half-built client
    return None


def main():
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    ctx = zmq.Context()
    get_embedding(ctx, dead_port())
    say("attempts", len(failed_attempts))
    say("terminating", "now")
    ctx.term()  # marker: term waits
    say("term", "interrupted")
    threading.Event().wait()  # marker: after term


if __name__ == "__main__":
    main()
