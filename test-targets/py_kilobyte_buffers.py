# SPDX-License-Identifier: MIT
"""py_kilobyte_buffers — a request loop that drops kilobyte buffers, then a
ctypes buffer freed twice.

Run under PYTHONMALLOC=malloc (every object a malloc, every drop a free).
First the loop: 20,000 request payloads of 1,500 to 1,999 bytes (a bytes
object each, dropped at once, as a service drops a request's buffer when it
has answered it); glibc's own count of the bytes its chunks hold in use
(mallinfo2's uordblks, all arenas) is read before and after, and the
difference printed as "held BYTES": what the loop left in glibc's hands
with nothing of it alive (natively a few hundred bytes).  Then a 1,500-byte
buffer from libc's malloc through ctypes is freed, 50 more payloads are
dropped, and the buffer is freed again: a double free, whose allocation and
both frees carry the Python lines marked "# marker: NAME".

Prints "pid P", "tid_main T", "held BYTES", "pointer 0x...", then "done ok"
if it survived (HEISEN_ON_HEAP_ERROR=continue).
"""
import ctypes
import os
import sys
import threading

libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.restype = None
libc.free.argtypes = [ctypes.c_void_p]


class Mallinfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in
                ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks", "fordblks",
                 "keepcost")]


libc.mallinfo2.restype = Mallinfo2
libc.mallinfo2.argtypes = []


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def serve(sizes):
    for n in sizes:
        payload = bytes(n)  # a request's buffer, dropped when answered
        del payload


def make_buffer():
    return libc.malloc(1500)  # marker: alloc


def release(p):
    libc.free(p)  # marker: first free


def release_again(p):
    libc.free(p)  # marker: second free


def main():
    say("pid", os.getpid())
    say("tid_main", threading.get_native_id())
    # the sizes made first: the loop itself then allocates nothing but its buffers
    sizes = [1500 + i % 500 for i in range(20000)]
    serve(sizes[:10])
    before = libc.mallinfo2().uordblks
    serve(sizes)
    after = libc.mallinfo2().uordblks
    say("held", after - before)
    p = make_buffer()
    say("pointer", hex(p))
    release(p)
    serve(sizes[:50])
    release_again(p)
    say("done", "ok")


main()
