#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/heap_sweep.py — which double frees each allocator checker still
catches after N intervening allocations (a detection table, not a timing).

Runs test-targets/heap_free_sweep (SIZE N THREADS: a block freed, N mixed-size
allocations 16 B - 4 KiB with half freed at once, then the block freed again)
for SIZE 64 and 4096, N 0, 10, 1000, 100000, 1000000, one thread and eight,
under: heisen's defaults (LD_PRELOAD=libheisen.so), LLVM's Scudo preloaded,
gcc's ASan runtime preloaded, and glibc alone.  A case is "caught" when the
process dies at the second free with the checker's own message (heisen: its
double-free line; Scudo: "invalid chunk state"; ASan: "attempting
double-free"; glibc: "double free" / "free(): ..."), "missed" when it prints
"second free done"; "invalid-free" is heisen finding the address inside a
block glibc has given out since (the free is refused, but not named a double
free); anything else is shown as it is.

Usage: /usr/bin/python3 bench/heap_sweep.py [BUILD_DIR] [--quick]
  BUILD_DIR  a built meson build directory (default: ./build)
  --quick    N up to 100000 only
Results: bench/README.md "Double frees after N allocations".
"""
import glob
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = (64, 4096)
NS = (0, 10, 1000, 100000, 1000000)
THREADS = (1, 8)


def scudo_path():
    c = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-x86_64.so"))
    return c[-1] if c else None


def asan_path():
    c = sorted(glob.glob("/usr/lib/x86_64-linux-gnu/libasan.so.*"))
    return c[-1] if c else None


# (name, extra environment, what the checker prints when it catches a double free)
def checkers(build, tmp):
    out = [("heisen", lambda: {"LD_PRELOAD": os.path.join(build, "shim", "libheisen.so"),
                               "HEISEN_DIR": tempfile.mkdtemp(dir=tmp)}, re.compile(r"heisen: double-free of"))]
    s = scudo_path()
    if s:
        out.append(("scudo", lambda: {"LD_PRELOAD": s}, re.compile(r"invalid chunk state|double free", re.I)))
    a = asan_path()
    if a:
        out.append(("asan preload", lambda: {"LD_PRELOAD": a, "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"},
                    re.compile(r"attempting double-free")))
    out.append(("glibc", lambda: {}, re.compile(r"double free|free\(\): ")))
    return out


def run_case(exe, env, caught_re, size, n, threads):
    e = dict(os.environ)
    for k in [k for k in e if k.startswith(("HEISEN_", "ASAN_", "SCUDO_"))] + ["LD_PRELOAD", "MALLOC_CHECK_"]:
        e.pop(k, None)
    e.update(env)
    try:
        p = subprocess.run([exe, str(size), str(n), str(threads)], env=e, capture_output=True, text=True,
                           timeout=300)
    except subprocess.TimeoutExpired:
        return "timeout"
    if "second free done" in p.stdout:
        return "missed"
    if caught_re.search(p.stderr):
        return "caught"
    if "heisen: invalid-free of" in p.stderr:
        return "invalid-free"  # the address now lies inside another block of ours
    return "other rc=%d %s" % (p.returncode, (p.stderr.strip().splitlines() or [""])[-1][:60])


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    build = os.path.abspath(args[0] if args else os.path.join(HERE, "..", "build"))
    ns = NS[:-1] if "--quick" in sys.argv else NS
    exe = os.path.join(build, "test-targets", "heap_free_sweep")
    with tempfile.TemporaryDirectory() as tmp:
        cks = checkers(build, tmp)
        print("%-6s %-8s %-8s" % ("size", "N", "threads") + "".join("%-14s" % c[0] for c in cks))
        for size in SIZES:
            for threads in THREADS:
                for n in ns:
                    row = [run_case(exe, env(), rx, size, n, threads) for _, env, rx in cks]
                    print("%-6d %-8d %-8d" % (size, n, threads) + "".join("%-14s" % r for r in row), flush=True)


if __name__ == "__main__":
    main()
