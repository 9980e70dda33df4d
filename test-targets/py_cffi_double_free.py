# SPDX-License-Identifier: MIT
"""py_cffi_double_free — cffi's ABI mode: ffi.dlopen("c") opens libc by
name (a handle of libc itself) and a 4 KiB block from its malloc is freed
twice, with other allocations in between so that glibc does not notice.
Each line ends in "# marker: NAME".

Prints "pid P", "tid_main T", "pointer 0x...", then "done ok" if it survived
(HEISEN_ON_HEAP_ERROR=continue).
"""
import os
import sys
import threading

from cffi import FFI

ffi = FFI()
ffi.cdef("void *malloc(size_t n); void free(void *p);")
libc = ffi.dlopen("c")


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
say("pointer", hex(int(ffi.cast("uintptr_t", buf))))
release(buf)
others = [libc.malloc(4096) for _ in range(8)]
release_again(buf)
for p in others:
    libc.free(p)
say("done", "ok")
