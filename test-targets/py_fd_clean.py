# SPDX-License-Identifier: MIT
"""py_fd_clean — a threaded Python program that uses fds correctly.

Files (with open() blocks, and file objects dropped in one thread and
collected by the garbage collector in another), pipes (os.pipe wrapped in
file objects), sockets (a socketserver.ThreadingTCPServer whose handler
threads close what its acceptor accepted, clients in a ThreadPoolExecutor),
subprocess runs (vfork, close_range and dup2 in the child), os.dup, epoll
and eventfd.  heisen must report no fd finding (and no other).

Prints "pid", "files N", "requests N", "subprocesses N", "done ok".
"""
import concurrent.futures
import gc
import os
import select
import socket
import socketserver
import subprocess
import sys
import tempfile
import threading


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Echo(socketserver.BaseRequestHandler):
    def handle(self):
        data = self.request.recv(64)
        self.request.sendall(data.upper())


def files(d, n, tag):
    for i in range(n):
        p = os.path.join(d, f"{tag}-{i}")
        with open(p, "w") as f:
            f.write("x" * 100)
        with open(p) as f:
            assert f.read() == "x" * 100
        fd = os.open(p, os.O_RDONLY)
        dup = os.dup(fd)
        os.close(fd)
        os.close(dup)
        os.unlink(p)
    return n


def pipes(n):
    for _ in range(n):
        r, w = os.pipe()
        with os.fdopen(w, "w") as wf, os.fdopen(r) as rf:
            wf.write("ping")
            wf.flush()
            wf.close()
            assert rf.read() == "ping"
    return n


def client(port, i):
    with socket.create_connection(("127.0.0.1", port)) as s:
        s.sendall(b"req%d" % i)
        return s.recv(64)


dropped = []


def drop_files(d, n):
    # open file objects here, let another thread's collection close them
    for i in range(n):
        f = open(os.path.join(d, f"gc-{i}"), "w")
        f.write("y")
        f.flush()
        dropped.append([f, dropped])  # a reference cycle: only the collector frees it
    dropped.clear()


def main():
    say("pid", os.getpid())
    d = tempfile.mkdtemp()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), Echo)
    port = server.server_address[1]
    st = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    st.start()
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        nfiles = sum(ex.map(files, [d] * 4, [40] * 4, ["a", "b", "c", "d"]))
        replies = list(ex.map(client, [port] * 60, range(60)))
        npipes = sum(ex.map(pipes, [30] * 4))
    assert all(r.startswith(b"REQ") for r in replies), replies
    t = threading.Thread(target=drop_files, args=(d, 20))
    t.start()
    t.join()
    collector = threading.Thread(target=gc.collect)
    collector.start()
    collector.join()
    nproc = 0
    for i in range(5):
        out = subprocess.run([sys.executable, "-c", "print('child', %d)" % i], capture_output=True, text=True,
                             check=True)
        assert out.stdout.strip() == "child %d" % i
        nproc += 1
    with subprocess.Popen(["cat"], stdin=subprocess.PIPE, stdout=subprocess.PIPE) as p:
        assert p.communicate(b"through a pipe")[0] == b"through a pipe"
    nproc += 1
    ep = select.epoll()
    ev = os.eventfd(0)
    ep.register(ev, select.EPOLLIN)
    os.eventfd_write(ev, 1)
    assert ep.poll(1)
    ep.close()
    os.close(ev)
    server.shutdown()
    server.server_close()
    st.join()
    for name in os.listdir(d):
        os.unlink(os.path.join(d, name))
    os.rmdir(d)
    say("files", nfiles)
    say("requests", len(replies))
    say("pipes", npipes)
    say("subprocesses", nproc)
    say("done", "ok")


if __name__ == "__main__":
    main()
