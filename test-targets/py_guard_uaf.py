# SPDX-License-Identifier: MIT
"""py_guard_uaf — a buffer from libc's malloc, through ctypes, read after
it was freed: a Python wrapper that keeps the raw pointer of a native buffer
after handing it back (the shape of a ctypes binding whose close() does not
clear its pointer).

libc is opened the common way, CDLL(ctypes.util.find_library("c")).  Under
heisen with HEISEN_GUARD_RATE=1 the buffer sits in a guard page, which is
made inaccessible by the free, so the read faults and heisen reports a
use-after-free with the Python lines of the allocation, the free and the
read (each line ends in "# marker: NAME").

Prints "pid P", "tid_main T", "pointer 0x...", then "done ok" if it survived
(HEISEN_ON_HEAP_ERROR=continue).
"""
import ctypes
import ctypes.util
import os
import sys
import threading

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.restype = None
libc.free.argtypes = [ctypes.c_void_p]


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


class Frame:
    def __init__(self, n):
        self.ptr = libc.malloc(n)  # marker: alloc
        ctypes.memset(self.ptr, 0x41, n)
        self.n = n

    def close(self):
        libc.free(self.ptr)  # marker: free

    def payload(self):
        return ctypes.string_at(self.ptr + 8, 16)  # marker: read


say("pid", os.getpid())
say("tid_main", threading.get_native_id())
frame = Frame(96)
say("pointer", hex(frame.ptr))
frame.close()
data = frame.payload()
say("read", len(data))
say("done", "ok")
