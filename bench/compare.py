#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/compare.py — every detector at its default, side by side, in one table.

Runs end-to-end workloads natively, under heisen (the library alone, no
launcher: LD_PRELOAD=BUILD/shim/libheisen.so HEISEN_DIR=<a fresh session>),
under heisen with full stacks (HEISEN_HEAP_STACKS=full HEISEN_FD_STACKS=full
HEISEN_LOCK_LEAF_AFTER=0),
and under the peer tools at their defaults: Scudo (LLVM's hardened allocator,
libclang_rt.scudo_standalone preloaded), gcc's ASan runtime preloaded
(ASAN_OPTIONS=verify_asan_link_order=0:detect_leaks=0), gcc's TSan runtime
preloaded (TSAN_OPTIONS=report_bugs=0), and valgrind --tool=memcheck
--trace-children=yes under a time cap.  Every run's process tree inherits the
tool (LD_PRELOAD, valgrind's --trace-children), so a child costs what it
costs.

Workloads (--only picks; the default is py,alloc,pythreads,make,shell):
  py      bench/py_workload.py under /usr/bin/python3 (threads, queue, json,
          sqlite3; the lock and GIL path)
  alloc   bench/alloc_workload (C++: 4 threads churning
          std::map<std::string, std::vector<std::string>>; the heap path)
  pythreads bench/py_alloc_workload.py under /usr/bin/python3 with
          PYTHONMALLOC=malloc in every config: 4 threads building and dropping
          dicts of str and bytes, JSON round trips (the heap path from a
          threaded Python service)
  pyalloc Python with PYTHONMALLOC=malloc in every config, churning dicts,
          lists and bytes in one thread (the heap path from Python; optional)
  make    make -j2 of a generated C project (40 files, gcc -O2), a clean
          rebuild per run (the process path: 127 process images per build)
  shell   bash starting /bin/true 200 times (the process start: the table
          below the main one gives ms per process start over native)

Measures, per run: wall seconds from fork to the wait4() of the workload's
top process, and peak memory: ru_maxrss of that wait4(), i.e. the peak
resident set of the largest single process of the tree (the kernel keeps
the maximum over the process and its waited-for descendants; shared pages
such as heisen's segment count where mapped).  Configs run interleaved
(native, heisen, ..., native, heisen, ...) so drift hits all alike; medians
of --runs; ratios are median over native's median from the same run.
memcheck runs once per workload (the first round) because it is slow; over
the cap its cell says "timeout".  A peer that fails on a workload gets
"n/a" and the reason (exit status, last line of stderr) and is not run again
on it; a peer not installed gets "n/a: not installed".  After every heisen
run, heisen-dump --json must exit 0 or 1 (not 2) and show at least the
processes the workload started, so a preload that did not record cannot be
measured as fast; otherwise compare.py stops with exit status 2.

Usage: /usr/bin/python3 bench/compare.py BUILD_DIR [--runs N] [--only py,alloc,pythreads,make,shell]
                                         [--detectors]
                                         [--quick] [--out FILE] [--memcheck-cap SECONDS]
  --runs N      interleaved rounds (default 5)
  --quick       smaller workloads and a 60 s memcheck cap: a smoke run, not a measurement
  --out FILE    also write the Markdown to FILE
  --detectors   instead of the peers: the defaults with one detector off each
                (heap checker, guard pages, fd tracking, Python locks; and all
                four off), so each detector's cost is its row against the defaults
Results: bench/README.md, "Side by side: every detector at its default".
"""
import argparse
import glob
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"
# The bounds heisen at its defaults must meet (the cost goal).
WALL_BOUND, RSS_BOUND, START_BOUND_MS = 1.10, 1.30, 0.5
# Variables of the caller's environment that would change what is measured.
SCRUB = ("LD_PRELOAD", "PYTHONMALLOC", "ASAN_OPTIONS", "TSAN_OPTIONS", "MALLOC_CHECK_", "MALLOC_PERTURB_",
         "GLIBC_TUNABLES", "SCUDO_OPTIONS", "VALGRIND_OPTS", "MAKEFLAGS", "MFLAGS")


def die(msg):
    print("compare.py: " + msg, file=sys.stderr)
    sys.exit(2)


class Result:
    """One run: exit status (None when killed at the cap), wall s, peak RSS KiB, stdout, stderr."""

    def __init__(self, rc, wall, maxrss_kib, out, err):
        self.rc, self.wall, self.maxrss_kib, self.out, self.err = rc, wall, maxrss_kib, out, err

    def last_err(self):
        lines = [l.strip() for l in self.err.splitlines() if l.strip()]
        return lines[-1][:160] if lines else "no message on stderr"


def measure(argv, env, cwd, cap):
    """Run argv in its own process group; return a Result.

    Wall: fork to wait4() of argv's process.  Peak RSS: that wait4()'s
    ru_maxrss (KiB), the largest single process of the tree.  Over cap
    seconds the whole group is killed (SIGKILL to the group we created) and
    rc is None."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        p = subprocess.Popen(argv, env=env, cwd=cwd, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                             start_new_session=True)
        killed = []

        def kill():
            killed.append(True)
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass

        timer = threading.Timer(cap, kill)
        timer.start()
        try:
            _, status, ru = os.wait4(p.pid, 0)
        finally:
            timer.cancel()
        wall = time.perf_counter() - t0
        p.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
        if killed:
            try:  # what is left of the group (valgrind's traced children, make's jobs)
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        out.seek(0)
        err.seek(0)
        return Result(None if killed else p.returncode, wall, ru.ru_maxrss,
                      out.read().decode(errors="replace"), err.read().decode(errors="replace"))


# --- workloads -------------------------------------------------------------

MAKEFILE = """\
CC = gcc
CFLAGS = -O2 -Wall
SRCS = $(wildcard src/*.c)
OBJS = $(SRCS:.c=.o)
app: $(OBJS)
\t$(CC) -o $@ $(OBJS)
src/%.o: src/%.c include/common.h
\t$(CC) $(CFLAGS) -Iinclude -c -o $@ $<
"""

C_UNIT = """\
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "common.h"

struct item{i} {{ char name[32]; int qty; double price; }};

static int cmp{i}(const void *a, const void *b)
{{
    const struct item{i} *x = a, *y = b;
    return x->qty != y->qty ? x->qty - y->qty : strcmp(x->name, y->name);
}}

unsigned long unit{i}(unsigned long seed)
{{
    struct item{i} items[64];
    for (int k = 0; k < 64; k++) {{
        seed = seed * 6364136223846793005UL + {i};
        snprintf(items[k].name, sizeof items[k].name, "item-%d-%lu", k, seed % 1000);
        items[k].qty = (int)(seed >> 33) % 100;
        items[k].price = (double)(seed % 10000) / 100.0;
    }}
    qsort(items, 64, sizeof items[0], cmp{i});
    unsigned long h = 0;
    for (int k = 0; k < 64; k++)
        h = h * 31 + (unsigned long)items[k].qty + strlen(items[k].name);
    return h ^ seed;
}}
"""


def make_project(root, nfiles):
    """A small C project: NFILES units, a header, a main and a Makefile; returns its directory."""
    proj = os.path.join(root, "cproject")
    os.makedirs(os.path.join(proj, "src"))
    os.makedirs(os.path.join(proj, "include"))
    with open(os.path.join(proj, "Makefile"), "w") as f:
        f.write(MAKEFILE)
    with open(os.path.join(proj, "include", "common.h"), "w") as f:
        f.write("#pragma once\n" + "".join("unsigned long unit%d(unsigned long seed);\n" % i
                                           for i in range(nfiles)))
    for i in range(nfiles):
        with open(os.path.join(proj, "src", "unit%02d.c" % i), "w") as f:
            f.write(C_UNIT.format(i=i))
    with open(os.path.join(proj, "src", "main.c"), "w") as f:
        f.write('#include <stdio.h>\n#include "common.h"\nint main(void)\n{\n    unsigned long h = 1;\n' +
                "".join("    h = unit%d(h);\n" % i for i in range(nfiles)) +
                '    printf("%lu\\n", h);\n    return 0;\n}\n')
    return proj


def make_clean(proj):
    for f in glob.glob(os.path.join(proj, "src", "*.o")) + [os.path.join(proj, "app")]:
        if os.path.exists(f):
            os.unlink(f)


PY_ALLOC = """
import sys, time
steps = int(sys.argv[1])
t0 = time.perf_counter()
live, total = {}, 0
for i in range(steps):
    key = "session-%d" % i
    live[key] = {"id": i, "body": bytes(64 + i % 448), "tags": ["t%d" % (i % 7), key],
                 "parts": [bytearray(32) for _ in range(i % 5)]}
    total += len(live[key]["body"])
    if len(live) > 20000:
        del live["session-%d" % (i - 20000)]
print("ok", steps, total, "%.6f" % (time.perf_counter() - t0))
"""


class Workload:
    """argv to run; env added in every config; check(stdout) -> bool; min_procs: process images
    heisen must have recorded; prepare(): untimed, before each run."""

    def __init__(self, key, title, argv, min_procs, env=None, check=None, prepare=None, cwd=None, starts=0):
        self.key, self.title, self.argv, self.min_procs = key, title, argv, min_procs
        self.env = env or {}
        self.check = check or (lambda out: out.split()[:1] == ["ok"])
        self.prepare = prepare or (lambda: None)
        self.cwd = cwd
        self.starts = starts  # process starts per run, for the per-start cost (shell)


def alloc_exe(build, tmp):
    """BUILD/bench/alloc_workload when meson built it (a C++ compiler was there), else
    compiled here with g++ -O2 into tmp; None when neither works."""
    exe = os.path.join(build, "bench", "alloc_workload")
    if os.access(exe, os.X_OK):
        return exe, "built by meson"
    exe = os.path.join(tmp, "alloc_workload")
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        return None, "no C++ compiler"
    p = subprocess.run([cxx, "-O2", "-pthread", "-o", exe, os.path.join(HERE, "alloc_workload.cc")],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode != 0:
        return None, "g++ failed: " + p.stdout[-300:]
    return exe, "compiled by compare.py with %s -O2 (not in the build)" % cxx


def workloads(keys, build, tmp, quick, notes):
    res = []
    for key in keys:
        if key == "py":
            size = 5000 if quick else 20000
            res.append(Workload("py", "py_workload.py %d" % size,
                                [PYTHON, os.path.join(HERE, "py_workload.py"), str(size)], 1))
        elif key == "alloc":
            exe, how = alloc_exe(build, tmp)
            if not exe:
                notes.append("alloc skipped: " + how)
                continue
            steps = 30000 if quick else 100000
            notes.append("alloc_workload: " + how)
            res.append(Workload("alloc", "alloc_workload %d (C++, 4 threads)" % steps, [exe, str(steps)], 1))
        elif key == "pythreads":
            steps = 4000 if quick else 12000
            res.append(Workload("pythreads", "py_alloc_workload.py %d (4 threads, PYTHONMALLOC=malloc)" % steps,
                                [PYTHON, os.path.join(HERE, "py_alloc_workload.py"), str(steps)], 1,
                                env={"PYTHONMALLOC": "malloc"}))
        elif key == "pyalloc":
            steps = 40000 if quick else 150000
            res.append(Workload("pyalloc", "Python dict/bytes churn %d, PYTHONMALLOC=malloc" % steps,
                                [PYTHON, "-c", PY_ALLOC, str(steps)], 1, env={"PYTHONMALLOC": "malloc"}))
        elif key == "make":
            nfiles = 16 if quick else 40
            proj = make_project(tmp, nfiles)
            p = subprocess.run(["make", "-s", "-j2", "-C", proj], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               text=True)  # once natively, untimed: the page cache, and a project that builds
            if p.returncode != 0:
                die("the generated C project does not build natively:\n" + p.stdout[-2000:])
            app = os.path.join(proj, "app")
            res.append(Workload("make", "make -j2, %d C files, clean rebuild" % nfiles,
                                ["make", "-s", "-j2", "-C", proj], nfiles,
                                check=lambda out, app=app: os.access(app, os.X_OK),
                                prepare=lambda proj=proj: make_clean(proj)))
        elif key == "shell":
            k = 100 if quick else 200
            res.append(Workload("shell", "bash: /bin/true x %d" % k,
                                ["/bin/bash", "-c", "for ((i = 0; i < %d; i++)); do /bin/true; done" % k],
                                k + 1, check=lambda out: True, starts=k + 1))
        else:
            die("unknown workload %r (py, alloc, pythreads, pyalloc, make, shell)" % key)
    return res


# --- configs ---------------------------------------------------------------

def scudo_runtime():
    libs = sorted(glob.glob("/usr/lib/llvm-*/lib/clang/*/lib/linux/libclang_rt.scudo_standalone-x86_64.so"))
    return libs[-1] if libs else None


def gcc_runtime(name, pattern):
    """gcc's runtime NAME (libasan.so, libtsan.so), resolved; else the newest PATTERN; else None."""
    try:
        path = subprocess.run(["gcc", "-print-file-name=" + name], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
        if os.path.isabs(path) and os.path.exists(path):
            return os.path.realpath(path)
    except OSError:
        pass
    libs = sorted(glob.glob(pattern))
    return libs[-1] if libs else None


class Config:
    """name; env(session dir or None) -> variables added; prefix: argv before the workload's;
    heisen: whether runs are verified with heisen-dump; missing: why it cannot run, or None."""

    def __init__(self, name, env=None, prefix=(), heisen=False, missing=None, once=False):
        self.name, self.env, self.prefix, self.heisen = name, env or (lambda s: {}), list(prefix), heisen
        self.missing, self.once = missing, once


def configs(shim):
    scudo = scudo_runtime()
    asan = gcc_runtime("libasan.so", "/usr/lib/x86_64-linux-gnu/libasan.so.*")
    tsan = gcc_runtime("libtsan.so", "/usr/lib/x86_64-linux-gnu/libtsan.so.*")
    valgrind = shutil.which("valgrind")
    return [
        Config("native"),
        Config("heisen (defaults)", lambda s: {"LD_PRELOAD": shim, "HEISEN_DIR": s}, heisen=True),
        Config("heisen, full stacks", lambda s: {"LD_PRELOAD": shim, "HEISEN_DIR": s, "HEISEN_HEAP_STACKS": "full",
                                                 "HEISEN_FD_STACKS": "full", "HEISEN_LOCK_LEAF_AFTER": "0"},
               heisen=True),
        Config("Scudo preload", lambda s: {"LD_PRELOAD": scudo},
               missing=None if scudo else "not installed (apt-get install libclang-rt-14-dev)"),
        Config("ASan preload (gcc)", lambda s: {"LD_PRELOAD": asan,
                                                "ASAN_OPTIONS": "verify_asan_link_order=0:detect_leaks=0"},
               missing=None if asan else "not installed (apt-get install libasan8)"),
        Config("TSan preload (gcc)", lambda s: {"LD_PRELOAD": tsan, "TSAN_OPTIONS": "report_bugs=0"},
               missing=None if tsan else "not installed (apt-get install libtsan2)"),
        Config("valgrind memcheck", prefix=[valgrind or "valgrind", "--tool=memcheck", "-q", "--trace-children=yes"],
               missing=None if valgrind else "not installed (apt-get install valgrind)", once=True),
    ]


# What each detector costs: the defaults against the defaults with that one
# detector off (the lock-order graph and the GIL check cannot be turned off:
# they are what every other record hangs on, so "hooks only" is their cost).
DETECTOR_OFF = [
    # HEISEN_HEAP=0 turns the guard pages off too unless a rate is given: 5000 is their default
    ("heisen, heap checker off", {"HEISEN_HEAP": "0", "HEISEN_GUARD_RATE": "5000"}),
    ("heisen, guard pages off", {"HEISEN_GUARD_RATE": "0"}),
    ("heisen, fd tracking off", {"HEISEN_FDS": "0"}),
    ("heisen, Python locks off", {"HEISEN_PY_LOCKS": "0"}),
    ("heisen, locks and GIL only", {"HEISEN_HEAP": "0", "HEISEN_GUARD_RATE": "0", "HEISEN_FDS": "0",
                                    "HEISEN_PY_LOCKS": "0"}),
]


def detector_configs(shim):
    """native, the defaults, and the defaults with one detector off each (--detectors)."""
    out = [Config("native"),
           Config("heisen (defaults)", lambda s: {"LD_PRELOAD": shim, "HEISEN_DIR": s}, heisen=True)]
    for name, off in DETECTOR_OFF:
        out.append(Config(name, lambda s, off=off: dict({"LD_PRELOAD": shim, "HEISEN_DIR": s}, **off), heisen=True))
    return out


def verify_session(dump, session, wl, cfg):
    """heisen-dump --json of a heisen run's session: exit 0 or 1, and at least wl.min_procs
    process images recorded; dies otherwise (a broken preload must not be measured as fast)."""
    segs = glob.glob(os.path.join(session, "*.seg"))
    p = subprocess.run([dump, "--json", "--no-symbols", session], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True)
    if p.returncode not in (0, 1):
        die("%s under %s: heisen-dump exited %d on %s (%d segments): the run did not record\n%s"
            % (wl.key, cfg.name, p.returncode, session, len(segs), p.stderr[-2000:]))
    procs = json.loads(p.stdout)["processes"]
    if len(procs) < wl.min_procs:
        die("%s under %s: heisen-dump saw %d process images in %s, the workload starts at least %d"
            % (wl.key, cfg.name, len(procs), session, wl.min_procs))
    return len(procs), p.returncode


# --- the run ---------------------------------------------------------------

def load_average():
    try:
        with open("/proc/loadavg") as f:
            return " ".join(f.read().split()[:3])
    except OSError:
        return "?"


def git_head():
    top = os.path.dirname(HERE)
    try:
        return subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip() or "unknown"
    except OSError:
        return "unknown"


def main():
    ap = argparse.ArgumentParser(description="every detector at its default, side by side (bench/README.md)")
    ap.add_argument("build", help="a built meson build directory (its shim/libheisen.so, dumper/heisen-dump)")
    ap.add_argument("--runs", type=int, default=5, help="interleaved rounds (default 5)")
    ap.add_argument("--only", default="py,alloc,pythreads,make,shell",
                    help="workloads: py,alloc,pythreads,pyalloc,make,shell")
    ap.add_argument("--quick", action="store_true", help="smaller workloads: a smoke run")
    ap.add_argument("--out", help="also write the Markdown here")
    ap.add_argument("--detectors", action="store_true",
                    help="instead of the peers: the defaults with one detector off each (what each one costs)")
    ap.add_argument("--memcheck-cap", type=float, default=None, help="seconds (default 120, --quick 60)")
    args = ap.parse_args()
    if args.runs < 1:
        die("--runs must be at least 1")
    build = os.path.abspath(args.build)
    shim = os.path.join(build, "shim", "libheisen.so")
    dump = os.path.join(build, "dumper", "heisen-dump")
    if not os.path.exists(shim) or not os.access(dump, os.X_OK):
        die("%s or %s not built: meson setup %s && ninja -C %s" % (shim, dump, build, build))
    cap = args.memcheck_cap or (60.0 if args.quick else 120.0)
    peer_cap = max(cap, 300.0)  # a hung preload must not hang the table either

    env0 = {k: v for k, v in os.environ.items() if k not in SCRUB and not k.startswith("HEISEN_")}
    tmp = tempfile.mkdtemp(prefix="heisen-compare-")
    # sessions where heisen puts them by default (tmpfs): /dev/shm/heisen-$UID/...
    shm_root = tempfile.mkdtemp(prefix="heisen-compare-", dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    notes = []
    started = time.perf_counter()
    load0 = load_average()
    try:
        wls = workloads([k.strip() for k in args.only.split(",") if k.strip()], build, tmp, args.quick, notes)
        cfgs = detector_configs(shim) if args.detectors else configs(shim)
        # per (workload, config): list of Result; and why a config is out for a workload
        res = {(w.key, c.name): [] for w in wls for c in cfgs}
        out_of = {}
        verified = {}
        nsess = 0
        for c in cfgs:
            if c.missing:
                for w in wls:
                    out_of[(w.key, c.name)] = c.missing
        for w in wls:
            for rnd in range(args.runs):
                for c in cfgs:
                    key = (w.key, c.name)
                    if key in out_of or (c.once and rnd > 0):
                        continue
                    w.prepare()
                    session = None
                    if c.heisen:
                        nsess += 1
                        session = os.path.join(shm_root, "s%d" % nsess)
                        os.mkdir(session, 0o700)
                    env = dict(env0, **w.env)
                    env.update(c.env(session))
                    r = measure(c.prefix + w.argv, env, w.cwd, cap if c.once else peer_cap)
                    if r.rc is None:
                        out_of[key] = "timeout (over %.0f s)" % (cap if c.once else peer_cap)
                    elif r.rc != 0 or not w.check(r.out):
                        if c.name == "native" or c.heisen:
                            die("%s under %s exited %d\n%s%s" % (w.key, c.name, r.rc, r.out[-1000:], r.err[-3000:]))
                        how = ("killed by %s" % signal.Signals(-r.rc).name if r.rc < 0 else "exit %d" % r.rc) \
                            if r.rc != 0 else "exit 0 but wrong output"
                        out_of[key] = "n/a: %s: %s" % (how, r.last_err())
                    else:
                        res[key].append(r)
                    if session:
                        verified[key] = verify_session(dump, session, w, c)
                        shutil.rmtree(session, ignore_errors=True)
                    print("  %-6s round %d  %-22s %s" % (w.key, rnd + 1, c.name,
                                                         out_of.get(key) or "%.3f s %.1f MiB" % (r.wall, r.maxrss_kib / 1024)),
                          file=sys.stderr, flush=True)
        text = report(args, build, wls, cfgs, res, out_of, verified, notes, load0, cap, started)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
        shutil.rmtree(shm_root, ignore_errors=True)
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    return 0


def report(args, build, wls, cfgs, res, out_of, verified, notes, load0, cap, started):
    med = {}
    for k, rs in res.items():
        if rs:
            med[k] = (statistics.median(r.wall for r in rs), statistics.median(r.maxrss_kib for r in rs) / 1024, len(rs))
    lines = ["heisen side by side: `%s`" % " ".join([PYTHON] + sys.argv),
             "",
             "cpu: %s, %d cpus; kernel %s; build %s (compare.py at %s); load average %s at start, %s at end; %s"
             % (platform.processor() or platform.machine(), os.cpu_count(), platform.release(), build,
                git_head(), load0, load_average(), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())),
             "",
             "| workload | under | wall s | wall x | peak RSS MiB | RSS x | runs | bound / note |",
             "|---|---|---:|---:|---:|---:|---:|---|"]
    for w in wls:
        nat = med.get((w.key, "native"))
        for c in cfgs:
            k = (w.key, c.name)
            if k not in med:
                lines.append("| %s | %s | %s | | | | | |" % (w.title, c.name, out_of.get(k, "n/a: no run")))
                continue
            wall, rss, n = med[k]
            note = []
            if c.name == "heisen (defaults)" and w.starts:
                note.append("bound: per process start, below")
            elif c.name == "heisen (defaults)":
                ok = wall / nat[0] <= WALL_BOUND and rss / nat[1] <= RSS_BOUND
                note.append("%s (bounds %.2fx wall, %.2fx RSS)" % ("within" if ok else "**OVER**", WALL_BOUND,
                                                                     RSS_BOUND))
            if k in verified:
                note.append("heisen-dump: exit %d, process images: %d" % verified[k][::-1])
            if k in out_of:
                note.append(out_of[k] + " after %d run(s)" % n)
            lines.append("| %s | %s | %.3f | %.2f | %.1f | %.2f | %d | %s |"
                         % (w.title, c.name, wall, wall / nat[0], rss, rss / nat[1], n, "; ".join(note)))
    for w in wls:
        if not w.starts or (w.key, "native") not in med:
            continue
        nat = med[(w.key, "native")][0]
        lines += ["", "Per process start, %s (%d process images per run: bash and the /bin/true it starts), "
                  "from the median wall times above:" % (w.title, w.starts), "",
                  "| under | ms per process start | over native | bound |", "|---|---:|---:|---|"]
        for c in cfgs:
            k = (w.key, c.name)
            if k not in med:
                lines.append("| %s | %s | | |" % (c.name, out_of.get(k, "n/a: no run")))
                continue
            per = med[k][0] / w.starts * 1e3
            over = (med[k][0] - nat) / w.starts * 1e3
            bound = ""
            if c.name == "heisen (defaults)":
                bound = "%s (+%.1f ms)" % ("within" if over <= START_BOUND_MS else "**OVER**", START_BOUND_MS)
            lines.append("| %s | %.3f | %+.3f ms | %s |" % (c.name, per, over, bound))
    if args.detectors:
        notes = notes + ["--detectors: each row turns one detector off (%s); a detector's cost is the "
                         "defaults' row minus its own" % "; ".join("%s: %s" % (n, " ".join(
                             "%s=%s" % kv for kv in off.items())) for n, off in DETECTOR_OFF)]
    lines += [""] + ["note: " + n for n in notes]
    lines.append("memcheck: valgrind --tool=memcheck -q --trace-children=yes, one run per workload, cap %.0f s. "
                 "Wall x and RSS x: median over native's median in this run; peak RSS: the largest single "
                 "process of the tree (wait4's ru_maxrss). Total time of this run: %.0f s."
                 % (cap, time.perf_counter() - started))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
