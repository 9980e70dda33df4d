#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""The worst-case stack use of each hook of libheisen.so, from gcc's call
graph with frame sizes (-fcallgraph-info=su, one .ci file per object).

Build a scratch tree for it (never the tree the tests use):
    meson setup build-su -Dc_args=-fcallgraph-info=su && ninja -C build-su shim/libheisen.so
    bench/hook_stack_use.py build-su [hook ...]

For each exported hook (default: the lock, heap and fd hooks a thread
meets) prints the deepest path of heisen's own frames in bytes, with and
without the unwinding paths (the functions stacks.c guards with
hs_stack_room: chain_unwind, stack_here_unwind, stack_site_slow).  Calls into
libc and libunwind count 0 (their frames are not in the graph): the unwinder's
own use is what HS_UNWIND_ROOM (shim/shim.h) keeps free for.  A recursive
cycle is reported and cut.
"""
import glob
import os
import re
import sys

NODE = re.compile(r'node: \{ title: "([^"]+)" label: "[^\\]*\\n[^\\]*(?:\\n(\d+) bytes \(([^)]*)\))?')
EDGE = re.compile(r'edge: \{ sourcename: "([^"]+)" targetname: "([^"]+)"(?: label: "([^":]+):(\d+))?')
UNWIND = {"chain_unwind", "stack_here_unwind", "stack_site_slow"}
# Functions that call back through a function pointer, which gcc's graph
# shows only as __indirect_call: each call of one is followed into the
# callback named at that call (its second argument, read from the source
# line the graph gives), e.g. hs_dir_each(fd, count_entry, &n).
WALKERS = {"hs_dir_each"}
DEFAULT = ["pthread_mutex_lock", "pthread_mutex_unlock", "pthread_mutex_trylock", "pthread_cond_wait",
           "pthread_rwlock_wrlock", "malloc", "free", "calloc", "realloc", "open", "openat", "close",
           "socket", "dup2", "read"]


def load(tree):
    size, edges, walked = {}, {}, []
    for ci in glob.glob(os.path.join(tree, "shim", "**", "*.ci"), recursive=True):
        with open(ci) as f:
            for line in f:
                m = NODE.match(line)
                if m and m.group(2):
                    size[m.group(1)] = int(m.group(2))
                m = EDGE.match(line)
                if m and short(m.group(2)) in WALKERS and m.group(3):
                    walked.append((m.group(1), m.group(2), os.path.join(tree, m.group(3)), int(m.group(4))))
                elif m:
                    edges.setdefault(m.group(1), []).append(m.group(2))
    for caller, walker, src, lineno in walked:
        with open(src) as f:
            text = f.readlines()[lineno - 1]
        cb = re.search(short(walker) + r"\([^,]+,\s*(\w+)", text)
        node = f"{walker}<{cb.group(1) if cb else '?'}>"
        size[node] = size.get(walker, 0)
        edges[node] = [t for t in edges.get(walker, []) if t != "__indirect_call"]
        edges[node] += [n for n in size if cb and short(n) == cb.group(1)]
        edges.setdefault(caller, []).append(node)
    return size, edges


def short(name):
    return name.rsplit(":", 1)[-1].split(".")[0]


def deepest(fn, size, edges, skip_unwind, memo, path):
    key = (fn, skip_unwind)
    if key in memo:
        return memo[key]
    if fn in path:
        return 0, [fn + " (recursion cut)"]
    if skip_unwind and short(fn) in UNWIND:
        return 0, []
    path.add(fn)
    best, best_path = 0, []
    for callee in edges.get(fn, ()):
        d, p = deepest(callee, size, edges, skip_unwind, memo, path)
        if d > best:
            best, best_path = d, p
    path.discard(fn)
    memo[key] = (size.get(fn, 0) + best, [fn] + best_path)
    return memo[key]


def main():
    tree = sys.argv[1] if len(sys.argv) > 1 else "build-su"
    hooks = sys.argv[2:] or DEFAULT
    size, edges = load(tree)
    if not size:
        sys.exit(f"no .ci files under {tree}/shim: build it with -fcallgraph-info=su")
    memo = {}
    print(f"{'hook':28} {'no unwind':>10} {'with unwind':>12}  deepest path (with unwind)")
    for h in hooks:
        if h not in size:
            print(f"{h:28} {'?':>10} {'?':>12}  (not in the graph)")
            continue
        a, _ = deepest(h, size, edges, True, memo, set())
        b, p = deepest(h, size, edges, False, memo, set())
        print(f"{h:28} {a:>10} {b:>12}  " + " > ".join(f"{short(x)}:{size.get(x, 0)}" for x in p if size.get(x, 0)))


if __name__ == "__main__":
    main()
