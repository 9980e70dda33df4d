# SPDX-License-Identifier: MIT
"""py_ctypes_overflow — the classic off-by-one, written with ctypes.

A helper turns a Python str into a C string for a C library: it asks
libc's malloc for len(bytes) and strcpy's the bytes in, so the NUL lands
one byte past the block.  The length is argv[1]: a length n with n + 8 a
multiple of 16 (40, 88, 472) fills glibc's chunk exactly, so that byte is
glibc's size word of the next chunk; others (47) leave slack.  The block is
then freed, as the library's destroy call would.  Under the heap checker
that free is a heap-overflow with the Python lines of the allocation and of
the free (each ends in "# marker: NAME").

Prints "pid P", "tid_main T", "pointer 0x...", then "done ok" if it
survived (HEISEN_ON_HEAP_ERROR=continue).
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
libc.strcpy.restype = ctypes.c_void_p
libc.strcpy.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def say(key, value):
    sys.stdout.write(f"{key} {value}\n")
    sys.stdout.flush()


def to_c_string(text):
    raw = text.encode()
    buf = libc.malloc(len(raw))  # marker: alloc
    libc.strcpy(buf, raw)  # the bug: strlen bytes, no room for the NUL
    return buf


def destroy(buf):
    libc.free(buf)  # marker: free


n = int(sys.argv[1]) if len(sys.argv) > 1 else 88
say("pid", os.getpid())
say("tid_main", threading.get_native_id())
names = [to_c_string(("/srv/app/sessions/user-%06d/" % i).ljust(n, "x")) for i in range(4)]
say("pointer", hex(names[2]))
destroy(names[2])
for b in names[:2] + names[3:]:
    libc.free(b)
say("done ok", "")
