# SPDX-License-Identifier: MIT
"""py_ctypes_double_free — the same ctypes malloc'd pointer freed twice.

A 4 KiB buffer from libc's malloc through ctypes is freed, other
allocations happen (so glibc's tcache no longer has it on top and glibc
does not notice), then it is freed again.  Under HEISEN_HEAP=1 heisen
reports the double free with the Python lines of the allocation and of both
frees (each line ends in "# marker: NAME").

How libc is opened is argv[1]: "none" (CDLL(None), the program's own
global scope), "find_library" (CDLL(ctypes.util.find_library("c")), the
common idiom) or "soname" (CDLL("libc.so.6")); the last two are handles of
libc itself, whose dlsym answers glibc's own malloc and free.

Prints "pid P", "tid_main T", "pointer 0x...", then "done ok" if it survived
(HEISEN_ON_HEAP_ERROR=continue).
"""
import ctypes
import os
import sys
import threading

how = sys.argv[1] if len(sys.argv) > 1 else "none"
if how == "find_library":
    import ctypes.util  # only here: its imports would crowd the stacks of HEISEN_HEAP_STACKS=full
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
else:
    libc = ctypes.CDLL(None if how == "none" else "libc.so.6")
libc.malloc.restype = ctypes.c_void_p
libc.malloc.argtypes = [ctypes.c_size_t]
libc.free.restype = None
libc.free.argtypes = [ctypes.c_void_p]


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def make_buffer():
    return libc.malloc(4096)  # marker: alloc


def release(p):
    libc.free(p)  # marker: first free


def release_again(p):
    libc.free(p)  # marker: second free


say("pid", os.getpid())
say("tid_main", threading.get_native_id())
buf = make_buffer()
say("pointer", hex(buf))
release(buf)
others = [libc.malloc(4096) for _ in range(8)] + [bytearray(4096) for _ in range(8)]
release_again(buf)
for p in others[:8]:
    libc.free(p)
say("done", "ok")
