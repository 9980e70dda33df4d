# SPDX-License-Identifier: MIT
"""py_idle_services — correct services with nothing to do, for SECONDS.

  asyncio     an asyncio TCP server on loopback; nobody connects; the loop
              waits (epoll with no timeout) until SIGALRM ends it
  socketserver  a ThreadingTCPServer in serve_forever; a timer shuts it down
  executor    a ThreadPoolExecutor whose workers have nothing to do (blocked
              on its queue's lock), while the main thread waits in accept()
              on a listening socket until SIGALRM ends it

None of them hangs: each waits for the outside world.  Exits 0 after
SECONDS (default 8).  Prints "pid P" and "ready".
"""
import asyncio
import concurrent.futures
import os
import signal
import socket
import socketserver
import sys
import threading


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Done(Exception):
    pass


def on_alarm(signum, frame):
    raise Done()


async def serve_asyncio(seconds):
    loop = asyncio.get_running_loop()
    stop = loop.create_future()
    loop.add_signal_handler(signal.SIGALRM, stop.set_result, None)

    async def handle(reader, writer):
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    signal.alarm(seconds)
    say("ready", "asyncio")
    async with server:
        await stop


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        self.request.sendall(self.request.recv(1024))


def main():
    mode = sys.argv[1]
    seconds = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    say("pid", os.getpid())
    if mode == "asyncio":
        asyncio.run(serve_asyncio(seconds))
    elif mode == "socketserver":
        with socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo) as server:
            threading.Timer(seconds, server.shutdown).start()
            say("ready", "socketserver")
            server.serve_forever()
    elif mode == "executor":
        with concurrent.futures.ThreadPoolExecutor(max_workers=4) as pool:
            list(pool.map(abs, range(-8, 0)))  # the workers exist, then idle
            listener = socket.socket()
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            signal.signal(signal.SIGALRM, on_alarm)
            signal.alarm(seconds)
            say("ready", "executor")
            try:
                listener.accept()
            except Done:
                pass
            listener.close()
    say("done", mode)


if __name__ == "__main__":
    main()
