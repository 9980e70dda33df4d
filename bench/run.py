#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/run.py — heisen's cost, measured side by side in one run.

Runs, in this order, and prints one table per part:
  1. bench_record: the hook's pieces alone: ns per record (hs_rec, with and
     without hs_now), per clock read, per lookup (site, lock id, edge);
  2. bench_mutex natively, under libheisen.so (recording, and loaded with
     HEISEN_DISABLE=1), interleaved repetition by repetition, medians and the
     ratio against native; then the same program under the peers that are
     installed: gcc's ThreadSanitizer (bench_mutex_tsan, built by meson when
     gcc can link -fsanitize=thread), valgrind's helgrind and drd (smaller N);
  3. bench/py_workload.py under /usr/bin/python3: native, heisen, heisen
     disabled, and helgrind at a smaller size;
  4. a stack capture with Python frames (bench_pystack, when built);
  5. the GIL check per lock acquisition (benchgil, when built): ns per
     uncontended mutex pair with the GIL held and with it released, native,
     heisen and heisen disabled interleaved; the difference under heisen is
     what the check and the GIL -> L edge lookup cost;
  6. the heap checker: bench_malloc (ns per malloc/free pair, one
     thread and 4) natively, under heisen with the heap off and on
     (HEISEN_HEAP=1, HEISEN_HEAP_STACKS=site|full|none), interleaved, and
     under gcc's ASan runtime preloaded and valgrind --tool=memcheck; then
     py_workload.py natively, under heisen with the heap off and on (with and
     without PYTHONMALLOC=malloc), under the preloaded ASan runtime (a failure
     there is reported, not fatal) and memcheck at a smaller size;
  7. processes and environment: bench_proc (reading the
     environment once at start, one memory sample with and without counting
     descriptors), bench_bigalloc (ns per malloc 256 KiB / mmap 1 MiB pair,
     where allocation-driven samples are taken) natively, under heisen with
     the heap off and on and with HEISEN_DISABLE=1, interleaved; and the cost
     of starting a process (/bin/true) natively, under heisen (each a
     session's first image, and as a session's later images start: with
     HEISEN_SESSION_DIR_ID) and disabled.
  8. file descriptors: bench_fd (ns per open/close, socket/close,
     pipe2/close pair, one thread and 4) natively and under heisen with fd
     tracking on (stacks site, the default, and full) and off (HEISEN_FDS=0),
     interleaved; then the same pairs from Python (os.open/os.close and
     open().close()), native and heisen.
At the end, the per-operation costs of heisen at its defaults, each as "+N ns
over native": malloc+free pair (6), uncontended mutex lock+unlock (2), open+close
(8), the GIL check at a lock (5), process start (7).  End-to-end workloads with
every peer at its default, as one table: bench/compare.py.
A peer that is not installed is skipped with a note.  After the first
recording run it checks with heisen-dump (when built) that the shim really
recorded, so a shim that silently records nothing cannot look fast.

Usage: /usr/bin/python3 bench/run.py [BUILD_DIR] [--quick] [--heap-only] [--proc-only] [--fd-only]
  BUILD_DIR    a configured and built meson build directory (default: build/ of this checkout)
  --quick      fewer repetitions and smaller sizes (a smoke run, ~40 s)
  --heap-only  part 6 alone
  --proc-only  part 7 alone
  --fd-only    part 8 alone
Results and interpretation: bench/README.md.  Speed is measured here, never
asserted in tests.
"""
import glob
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"


def die(msg):
    print("run.py: " + msg, file=sys.stderr)
    sys.exit(2)


def try_run(argv, env=None, timeout=600):
    """Run argv with env added to a clean environment; return (exit status, stdout, stderr, wall seconds)."""
    full_env = dict(os.environ)
    for k in ("LD_PRELOAD", "HEISEN_DIR", "HEISEN_DISABLE", "HEISEN_HEAP", "HEISEN_HEAP_STACKS", "PYTHONMALLOC",
              "ASAN_OPTIONS", "HEISEN_FDS", "HEISEN_FD_STACKS"):
        full_env.pop(k, None)
    full_env.update(env or {})
    t0 = time.perf_counter()
    p = subprocess.run(argv, env=full_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       timeout=timeout)
    return p.returncode, p.stdout, p.stderr, time.perf_counter() - t0


def run(argv, env=None, timeout=600):
    """Run argv; return (stdout, wall seconds).  Dies with its stderr on failure."""
    rc, out, err, wall = try_run(argv, env, timeout)
    if rc != 0:
        die("%s exited %d\n%s" % (" ".join(argv), rc, err[-4000:]))
    return out, wall


def parse_cases(out):
    """'name value' lines (comments start with #) -> {name: float}."""
    res = {}
    for line in out.splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name, value = line.split()
        res[name] = float(value)
    return res


def table(title, header, rows):
    print()
    print(title)
    widths = [max(len(str(r[i])) for r in [header] + rows) for i in range(len(header))]
    fmt = "  ".join("%-" + str(w) + "s" if i == 0 else "%" + str(w) + "s" for i, w in enumerate(widths))
    print("  " + fmt % tuple(header))
    print("  " + "  ".join("-" * w for w in widths))
    for r in rows:
        print("  " + fmt % tuple(r))
    sys.stdout.flush()


def cpu_model():
    try:
        for line in subprocess.run(["lscpu"], stdout=subprocess.PIPE, text=True).stdout.splitlines():
            if line.startswith("Model name:"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def git_head():
    """The commit of the source tree, '+dirty' when shim/ has uncommitted changes."""
    top = os.path.dirname(HERE)
    try:
        head = subprocess.run(["git", "-C", top, "rev-parse", "--short", "HEAD"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", top, "status", "--porcelain", "--", "shim", "include"],
                               stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True).stdout.strip()
    except OSError:
        return "unknown"
    return (head or "unknown") + ("+dirty shim/" if dirty else "")


class Session:
    """A fresh HEISEN_DIR per recording run, all under one temporary directory."""

    def __init__(self, under=None):
        self.root = tempfile.mkdtemp(prefix="heisen-bench-", dir=under)
        self.n = 0

    def new(self):
        self.n += 1
        d = os.path.join(self.root, "s%d" % self.n)
        os.mkdir(d, 0o700)
        return d

    def close(self):
        shutil.rmtree(self.root, ignore_errors=True)


def heisen_configs(shim, sess):
    """The three runs most parts compare: native, heisen recording, heisen loaded but disabled.
    Each config is (name, function returning a fresh environment)."""
    heisen_env = lambda: {"LD_PRELOAD": shim, "HEISEN_DIR": sess.new()}
    return [
        ("native", lambda: {}),
        ("heisen", heisen_env),
        ("heisen HEISEN_DISABLE=1", lambda: dict(heisen_env(), HEISEN_DISABLE="1")),
    ]


def interleaved(configs, reps, measure, verify=None):
    """measure(env) for every config, repetition by repetition, so drift hits all alike.

    configs: tuples whose [0] is the name and [1] makes the environment.
    verify: {config name: check(env, sample) -> note}; each check runs once, on
    that config's first run (a heisen run is verified to have recorded, so a
    shim that records nothing cannot look fast).
    Returns ({name: [sample, ...]}, [note, ...])."""
    samples = {c[0]: [] for c in configs}
    notes, pending = [], dict(verify or {})
    for _ in range(reps):
        for c in configs:
            env = c[1]()
            sample = measure(env)
            samples[c[0]].append(sample)
            if c[0] in pending:
                notes.append(pending.pop(c[0])(env, sample))
    return samples, notes


NOT_CHECKED = "not checked (no heisen-dump in the build)"

# The per-operation costs of heisen at its defaults, collected by the parts
# that measure them and printed together at the end: (operation, ns over
# native, where it comes from).
PER_OP = []


def per_op_summary():
    if not PER_OP:
        return
    print()
    print("per operation, heisen at its defaults, over native (medians of this run):")
    for what, ns, where in PER_OP:
        ms = " = %+.3f ms" % (ns / 1e6) if abs(ns) >= 1e5 else ""
        print("  %-34s %+12.1f ns over native%s   (%s)" % (what, ns, ms, where))


def heisen_env(shim, sess):
    """heisen(**kw) gives a config: a function that makes the environment of one
    run under the shim, in a fresh session, with the variables kw added."""
    return lambda **kw: (lambda: dict({"LD_PRELOAD": shim, "HEISEN_DIR": sess.new()}, **kw))


def dump_json(dump, session_dir):
    """heisen-dump --json --no-symbols of a bench run's session, parsed; dies when it fails."""
    p = subprocess.run([dump, "--json", "--no-symbols", session_dir], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if p.returncode not in (0, 1):
        die("heisen-dump failed on %s:\n%s" % (session_dir, p.stderr))
    return json.loads(p.stdout)


def check_recorded(dump, session_dir, want_edge):
    """heisen-dump must see the run's lock events (and, for bench_mutex, the A -> B edge)."""
    if not dump:
        return NOT_CHECKED
    doc = dump_json(dump, session_dir)
    types = {e["type"] for pr in doc["processes"] for t in pr["threads"] for e in t["events"]}
    if "lock-acquired" not in types and "lock-released" not in types:
        die("the shim recorded no lock events in %s: the numbers would be meaningless" % session_dir)
    if want_edge:
        dot = subprocess.run([dump, "--dot", "--no-symbols", session_dir], stdout=subprocess.PIPE,
                             stderr=subprocess.DEVNULL, text=True).stdout
        if "->" not in dot:
            die("the shim recorded no lock-order edge for the nested case in %s" % session_dir)
    return "checked with heisen-dump: lock events%s recorded" % (" and the A -> B edge" if want_edge else "")


# Run inside CPython 3.11 by stack_cost(): bench_pystack (bench/bench_pystack.c)
# measured at several Python call depths; one "depth case ns native interleaved
# python" line per measurement, the median of REPS.
STACK_COST = """
import statistics, sys
sys.path.insert(0, sys.argv[1])
import bench_pystack as b
n, reps = int(sys.argv[2]), int(sys.argv[3])
def at(depth, f):
    return f() if depth == 0 else at(depth - 1, f)
for depth in (1, 10, 30):
    nat, inter, py = at(depth, b.frames)
    for case in ("native", "interleave", "here", "careful"):
        k = n if case != "careful" else max(n // 50, 100)
        at(depth, lambda: b.measure(case, k // 10))
        ns = statistics.median(at(depth, lambda: b.measure(case, k)) for _ in range(reps))
        print(depth, case, "%.1f" % ns, nat, inter, py)
"""


def stack_cost(build, reps, notes):
    """Part 4: ns per stack capture with and without Python frames."""
    bdir = os.path.join(build, "bench")
    if not any(f.startswith("bench_pystack") and f.endswith(".so") for f in os.listdir(bdir)):
        notes.append("stack capture with Python frames skipped: bench_pystack not built (needs CPython 3.11 headers)")
        return
    # the extension carries the shim's initial-exec TLS (held-lock chains, guards):
    # more than glibc keeps spare for a dlopen'ed object by default
    out, _ = run([PYTHON, "-c", STACK_COST, bdir, "20000", str(reps)],
                 env={"GLIBC_TUNABLES": "glibc.rtld.optional_static_tls=65536"})
    rows, by = [], {}
    for line in out.split("\n"):
        f = line.split()
        if len(f) == 6:
            by.setdefault(f[0], {})[f[1]] = float(f[2])
            by[f[0]]["shape"] = "%s native -> %s (%s Python)" % (f[3], f[4], f[5])
    for depth, c in by.items():
        rows.append([depth, c["shape"], "%.0f" % c["native"], "%.0f" % c["here"], "%.0f" % c["interleave"],
                     "%.0f" % c["careful"]])
    table("4. a stack capture (a new edge's stack) in CPython 3.11 at a Python call depth — ns per capture, median of %d:"
          " native = unwind + module check + intern, as before Python frames were read; with Python = hs_stack_here (all of it, Python"
          " frames interleaved); interleave alone = the added part; careful = interleave as a signal handler does it"
          " (process_vm_readv)" % reps, ["depth", "frames", "native", "with Python", "interleave alone", "careful"], rows)


# Run under /usr/bin/python3 by gil_cost(): benchgil (bench/benchgil.c);
# "addr ADDRESS", then "case ns_per_op" lines, each the median of INNER
# in-process repetitions (with and without the GIL alternating).
GIL_COST = """
import statistics, sys
sys.path.insert(0, sys.argv[1])
import benchgil as b
n, inner = int(sys.argv[2]), int(sys.argv[3])
ns = {"gil": [], "nogil": [], "check": []}
for _ in range(inner):
    ns["gil"].append(b.pairs_gil(n))
    ns["nogil"].append(b.pairs_nogil(n))
    ns["check"].append(b.check_gil(n))
print("addr", b.mutex_addr())
for case, v in ns.items():
    print(case, "%.3f" % (statistics.median(v) / n))
"""


def check_gil_edge(dump, session_dir, addr, n):
    """heisen-dump must see CPython, the pairs' events, and the edge GIL -> benchgil's mutex."""
    if not dump:
        return NOT_CHECKED
    procs = [pr for pr in dump_json(dump, session_dir)["processes"] if pr.get("python")]
    if not procs:
        die("the shim did not find CPython in %s: the GIL check never ran" % session_dir)
    events = sum(pr["events_recorded"] for pr in procs)
    if events < 2 * n:
        die("the shim recorded %d events in %s, fewer than the %d lock/unlock pairs" % (events, session_dir, n))
    # --json lists edges only inside findings (a lone GIL -> L edge closes no
    # cycle); the graph itself is in --dot
    dot = subprocess.run([dump, "--dot", "--no-symbols", session_dir], stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL, text=True).stdout
    gil = re.findall(r'^\s*("[^"]+") \[label="GIL\\n', dot, re.M)
    mine = re.findall(r'^\s*("[^"]+") \[label="[^"]*%s' % re.escape("0x%x" % addr), dot, re.M)
    if not gil or not mine or not any("%s -> %s" % (g, m) in dot for g in gil for m in mine):
        die("no GIL -> benchgil mutex (0x%x) edge recorded in %s: the numbers would be meaningless"
            % (addr, session_dir))
    return ("checked with heisen-dump: CPython %s seen, %d events (--json), the edge GIL -> mutex 0x%x (--dot)"
            % (procs[0]["python"]["version"], events, addr))


def gil_cost(build, shim, dump, sess, reps, n, inner, notes):
    """Part 5: ns per lock+unlock pair with and without the GIL, native and under heisen."""
    bdir = os.path.join(build, "bench")
    if not any(f.startswith("benchgil") and f.endswith(".so") for f in os.listdir(bdir)):
        notes.append("GIL check cost skipped: benchgil not built (needs CPython headers)")
        return
    def measure(env):
        out, _ = run([PYTHON, "-c", GIL_COST, bdir, str(n), str(inner)], env)
        return int(out.split()[1]), parse_cases("\n".join(out.splitlines()[1:]))

    verify = {"heisen": lambda env, smp: "benchgil under heisen: " +
              check_gil_edge(dump, env["HEISEN_DIR"], smp[0], n)}
    runs, checked = interleaved(heisen_configs(shim, sess), reps, measure, verify)
    notes.extend(checked)
    samples = {name: [cases for _, cases in v] for name, v in runs.items()}
    med = {name: {c: statistics.median(s[c] for s in v) for c in ("gil", "nogil", "check")}
           for name, v in samples.items()}
    nat = med["native"]
    rows = []
    for name, m in med.items():
        rng = lambda c: "%.1f-%.1f" % (min(s[c] for s in samples[name]), max(s[c] for s in samples[name]))
        rows.append([name, "%.1f (%.2fx)" % (m["gil"], m["gil"] / nat["gil"]), rng("gil"),
                     "%.1f (%.2fx)" % (m["nogil"], m["nogil"] / nat["nogil"]), rng("nogil"),
                     "%+.1f" % (m["gil"] - m["nogil"]), "%.1f" % m["check"], "%d x N=%d" % (reps, n)])
    table("5. benchgil under %s — the GIL check per lock acquisition: median ns per uncontended mutex lock+unlock "
          "pair (ratio to native in this run); with GIL = the GIL held (heisen: the check answers yes, plus the "
          "GIL -> L edge lookup), without GIL = inside Py_BEGIN_ALLOW_THREADS (the check answers no); each run "
          "the median of %d in-process repetitions" % (PYTHON, inner),
          ["under", "with GIL", "range", "without GIL", "range", "GIL - no GIL", "PyGILState_Check", "runs"], rows)
    h = med["heisen"]
    print("  GIL check cost (heisen with GIL - heisen without GIL): %+.1f ns per acquisition (native's own "
          "difference: %+.1f ns); heisen adds %+.1f ns per pair with the GIL, %+.1f ns without; "
          "PyGILState_Check alone: %.1f ns"
          % (h["gil"] - h["nogil"], nat["gil"] - nat["nogil"], h["gil"] - nat["gil"], h["nogil"] - nat["nogil"],
             nat["check"]))
    PER_OP.append(("GIL check at a lock acquisition", (h["gil"] - h["nogil"]) - (nat["gil"] - nat["nogil"]),
                   "part 5, benchgil: (with GIL - without) under heisen minus the same natively"))


def check_heap(dump, session_dir, stacks, min_allocs):
    """heisen-dump --json must show the process's heap block: the checker on, in the stacks mode asked
    for, with at least min_allocs allocations counted (so a shim that checks nothing cannot look fast)."""
    if not dump:
        return NOT_CHECKED
    heaps = [pr["heap"] for pr in dump_json(dump, session_dir)["processes"] if pr.get("heap")]
    if not heaps:
        die("no heap block in %s: the heap checker was not on, the numbers would be meaningless" % session_dir)
    allocs = sum(h["allocs"] for h in heaps)
    if allocs < max(min_allocs, 1):
        die("the heap checker counted %d allocations in %s, fewer than %d" % (allocs, session_dir, min_allocs))
    modes = {h["stacks"] for h in heaps}
    if modes != {stacks}:
        die("heap stacks mode %s in %s, asked for %s" % (sorted(modes), session_dir, stacks))
    return "checked with heisen-dump --json: heap block, stacks %s, %d allocs" % (stacks, allocs)


def asan_runtime():
    """gcc's ASan runtime (libasan.so) when installed, else None."""
    try:
        path = subprocess.run(["gcc", "-print-file-name=libasan.so"], stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, text=True).stdout.strip()
    except OSError:
        return None
    return path if os.path.isabs(path) and os.path.exists(path) else None


def memcheck_errors(err):
    m = re.search(r"ERROR SUMMARY: ([\d,]+) errors", err)
    return m.group(1).replace(",", "") if m else "?"


def heap_cost(build, shim, dump, sess, quick, valgrind, notes):
    """Part 6: the heap checker against native, ASan's runtime and memcheck."""
    exe = os.path.join(build, "bench", "bench_malloc")
    if not os.access(exe, os.X_OK):
        notes.append("heap part skipped: %s not built" % exe)
        return
    reps = 3 if quick else 5
    n = 500000 if quick else 2000000
    n_vg = 50000 if quick else 200000
    vg_reps = 1 if quick else 3
    py_size = 10000 if quick else 30000
    py_reps = 3 if quick else 5
    py_vg_size = 300 if quick else 1500
    asan = asan_runtime()
    if not asan:
        notes.append("ASan skipped: gcc's libasan.so not installed (apt-get install libasan8)")

    heisen = heisen_env(shim, sess)
    # (label, environment, stacks mode to check with heisen-dump or None)
    configs = [
        ("native", lambda: {}, None),
        ("heisen, heap off", heisen(HEISEN_HEAP="0"), None),
        ("heisen heap, stacks=site (default)", heisen(HEISEN_HEAP="1"), "site"),
        ("heisen heap, stacks=full", heisen(HEISEN_HEAP="1", HEISEN_HEAP_STACKS="full"), "full"),
        ("heisen heap, stacks=none", heisen(HEISEN_HEAP="1", HEISEN_HEAP_STACKS="none"), "none"),
    ]
    if asan:
        configs.append(("LD_PRELOAD=libasan.so (gcc 12)", lambda: {"LD_PRELOAD": asan,
                                                                    "ASAN_OPTIONS": "detect_leaks=0"}, None))
    # n pairs + n/10 warm-up in one thread, the same in four
    verify = {name: (lambda st: lambda env, _: "bench_malloc, heap stacks=%s: %s" % (
        st, check_heap(dump, env["HEISEN_DIR"], st, 2 * n)))(stacks) for name, _, stacks in configs if stacks}
    samples, checked = interleaved(configs, reps, lambda env: parse_cases(run([exe, str(n)], env)[0]), verify)
    notes.extend(checked)
    cases = list(samples["native"][0].keys())
    med = {name: {c: statistics.median(s[c] for s in v) for c in cases} for name, v in samples.items()}
    counts = {name: "%d x N=%d" % (reps, n) for name in samples}
    if valgrind:
        s, errs = [], []
        for _ in range(vg_reps):
            rc, out, err, _ = try_run([valgrind, "--tool=memcheck", exe, str(n_vg)])
            if rc != 0:
                die("memcheck: bench_malloc exited %d\n%s" % (rc, err[-4000:]))
            s.append(parse_cases(out))
            errs.append(memcheck_errors(err))
        med["valgrind --tool=memcheck"] = {c: statistics.median(x[c] for x in s) for c in cases}
        counts["valgrind --tool=memcheck"] = "%d x N=%d" % (vg_reps, n_vg)
        notes.append("bench_malloc under memcheck: ERROR SUMMARY %s errors" % "/".join(errs))
    else:
        notes.append("memcheck skipped: valgrind not installed (apt-get install valgrind)")
    nat = med["native"]
    rows = [[name] + ["%.1f (%.2fx)" % (m[c], m[c] / nat[c]) for c in cases] + [counts[name]]
            for name, m in med.items()]
    table("6. heap checker, bench_malloc — median ns per malloc/free pair, sizes 16..512 bytes (ratio to "
          "native in this run); single: one thread; threads4: 4 threads at once on %d cpus, wall ns per pair"
          % os.cpu_count(), ["under"] + cases + ["runs"], rows)
    off = med["heisen, heap off"]
    site, full, none = (med["heisen heap, stacks=%s" % k] for k in ("site (default)", "full", "none"))
    print("  heisen with the heap off adds %+.1f ns per pair (single); the heap checker on top of it: "
          "site %+.1f, full %+.1f, none %+.1f ns"
          % (off["single"] - nat["single"], site["single"] - off["single"], full["single"] - off["single"],
             none["single"] - off["single"]))
    PER_OP.append(("malloc+free pair", site["single"] - nat["single"],
                   "part 6, bench_malloc single, heap on with stacks=site"))
    print("  the stack kept per malloc and per free (two per pair), against none: site %+.1f ns per pair "
          "(threads4 %+.1f), full %+.1f (threads4 %+.1f)"
          % (site["single"] - none["single"], site["threads4"] - none["threads4"],
             full["single"] - none["single"], full["threads4"] - none["threads4"]))

    # end to end: the threaded Python service
    wl = [PYTHON, os.path.join(HERE, "py_workload.py")]
    asan_env = lambda **kw: (lambda: dict({"LD_PRELOAD": asan,
                                           "ASAN_OPTIONS": "detect_leaks=0:verify_asan_link_order=0"}, **kw))
    # (label, environment, check the heap block)
    pconf = [
        ("native", lambda: {}, False),
        ("native PYTHONMALLOC=malloc", lambda: {"PYTHONMALLOC": "malloc"}, False),
        ("heisen, heap off", heisen(HEISEN_HEAP="0"), False),
        ("heisen heap", heisen(HEISEN_HEAP="1"), True),
        ("heisen heap PYTHONMALLOC=malloc", heisen(HEISEN_HEAP="1", PYTHONMALLOC="malloc"), True),
    ]
    if asan:
        pconf += [("LD_PRELOAD=libasan.so", asan_env(), False),
                  ("LD_PRELOAD=libasan.so PYTHONMALLOC=malloc", asan_env(PYTHONMALLOC="malloc"), False)]
    py = {c[0]: [] for c in pconf}
    failed = {}
    pchecked = set()
    for _ in range(py_reps):
        for name, envf, check in pconf:
            if name in failed:
                continue
            env = envf()
            rc, out, err, wall = try_run(wl + [str(py_size)], env)
            fields = out.split()
            if rc != 0 or not fields or fields[0] != "ok":
                if "libasan" not in name:
                    die("py_workload under %s exited %d\n%s%s" % (name, rc, out[-2000:], err[-4000:]))
                last = [l for l in err.splitlines() if l.strip()]
                failed[name] = "exit %d: %s" % (rc, last[-1][:200] if last else "no message")
                continue
            py[name].append((wall, float(fields[-1])))
            if check and name not in pchecked:
                pchecked.add(name)
                notes.append("py_workload under %s: %s" % (name, check_heap(dump, env["HEISEN_DIR"], "site", 1)))
    for name, why in failed.items():
        notes.append("py_workload under %s FAILED (gcc's ASan runtime preloaded into a program not built "
                     "with it is unsupported): %s" % (name, why))
    pmed = {name: (statistics.median(w for w, _ in v), statistics.median(k for _, k in v))
            for name, v in py.items() if v}
    rows = []
    for name, _, _ in pconf:
        if name not in pmed:
            rows.append([name, str(py_size), "failed", "-", "-", "-", "-", "%d" % len(py[name])])
            continue
        w, k = pmed[name]
        ks = [k for _, k in py[name]]
        rows.append([name, str(py_size), "%.3f" % w, "%.3f" % k, "%.3f-%.3f" % (min(ks), max(ks)),
                     "%.2f" % (w / pmed["native"][0]), "%.2f" % (k / pmed["native"][1]), "%d" % len(ks)])
    if valgrind:
        small = [run(wl + [str(py_vg_size)])[::-1] for _ in range(3)]
        nw = statistics.median(w for w, _ in small)
        nk = statistics.median(float(o.split()[-1]) for _, o in small)
        nks = [float(o.split()[-1]) for _, o in small]
        rc, out, err, wall = try_run([valgrind, "--tool=memcheck"] + wl + [str(py_vg_size)])
        if rc != 0 or not out.startswith("ok"):
            die("py_workload under memcheck exited %d\n%s" % (rc, err[-4000:]))
        notes.append("py_workload under memcheck: ERROR SUMMARY %s errors" % memcheck_errors(err))
        rows.append(["native (small)", str(py_vg_size), "%.3f" % nw, "%.3f" % nk,
                     "%.3f-%.3f" % (min(nks), max(nks)), "1.00", "1.00", "3"])
        rows.append(["valgrind --tool=memcheck", str(py_vg_size), "%.3f" % wall, "%.3f" % float(out.split()[-1]),
                     "-", "%.2f" % (wall / nw), "%.2f" % (float(out.split()[-1]) / nk), "1"])
    table("6b. py_workload.py under %s with the heap checked — seconds, median; wall = whole process, work = the "
          "workload alone; x = ratio of medians to native at the same size (PYTHONMALLOC=malloc: pymalloc off, "
          "every object through malloc)" % PYTHON,
          ["under", "size", "wall s", "work s", "work range", "wall x", "work x", "runs"], rows)
    if "heisen heap" in pmed and "heisen, heap off" in pmed:
        print("  work medians: heap checker on %.3f s against heap off %.3f s (%.2fx); with PYTHONMALLOC=malloc "
              "%.3f s against native PYTHONMALLOC=malloc %.3f s (%.2fx)"
              % (pmed["heisen heap"][1], pmed["heisen, heap off"][1],
                 pmed["heisen heap"][1] / pmed["heisen, heap off"][1],
                 pmed["heisen heap PYTHONMALLOC=malloc"][1], pmed["native PYTHONMALLOC=malloc"][1],
                 pmed["heisen heap PYTHONMALLOC=malloc"][1] / pmed["native PYTHONMALLOC=malloc"][1]))


def check_samples(dump, session_dir):
    """heisen-dump --json must show memory samples and the environment of the run's process."""
    if not dump:
        return NOT_CHECKED
    procs = dump_json(dump, session_dir)["processes"]
    samples = sum(pr["memory"]["samples"] for pr in procs if pr.get("memory"))
    if not samples or not all(pr.get("environment") for pr in procs):
        die("no memory samples or no environment in %s: the numbers would be meaningless" % session_dir)
    return "checked with heisen-dump --json: environment recorded, %d memory samples" % samples


def proc_cost(build, shim, dump, sess, quick, notes):
    """Part 7: processes and environment."""
    bp, bb = (os.path.join(build, "bench", x) for x in ("bench_proc", "bench_bigalloc"))
    if not (os.access(bp, os.X_OK) and os.access(bb, os.X_OK)):
        notes.append("part 7 skipped: bench_proc or bench_bigalloc not built")
        return
    reps = 3 if quick else 5
    out, _ = run([bp, str(500 if quick else 2000)])
    pc = parse_cases(out)
    table("7a. bench_proc — what process and environment tracking adds, alone: us per op, median of 5 (env_read: once per process "
          "image at start; mem_sample: statm + getrusage; +fds: and counting /proc/self/fd)",
          ["case", "us/op"], [[k, "%.2f" % v] for k, v in pc.items()])
    n = 50000 if quick else 200000
    heisen = heisen_env(shim, sess)
    configs = [("native", lambda: {}), ("heisen, heap off", heisen(HEISEN_HEAP="0")),
               ("heisen (heap on, the default)", heisen()),
               ("heisen HEISEN_DISABLE=1", heisen(HEISEN_DISABLE="1"))]
    samples, checked = interleaved(
        configs, reps, lambda env: parse_cases(run([bb, str(n)], env)[0]),
        {"heisen, heap off": lambda env, _: "bench_bigalloc, heap off: " + check_samples(dump, env["HEISEN_DIR"])})
    notes.extend(checked)
    cases = list(samples["native"][0].keys())
    med = {name: {c: statistics.median(x[c] for x in v) for c in cases} for name, v in samples.items()}
    rows = [[name] + ["%.1f (%.2fx)" % (m[c], m[c] / med["native"][c]) for c in cases] + ["%d x N=%d" % (reps, n)]
            for name, m in med.items()]
    table("7b. bench_bigalloc — median ns per pair (ratio to native in this run); malloc256k: malloc 256 KiB, "
          "touch, free; mmap1m: mmap 1 MiB, touch, munmap", ["under"] + cases + ["runs"], rows)
    print("  heisen with the heap off adds %+.1f ns per malloc256k pair (the size check, the due check on "
          "CLOCK_MONOTONIC_COARSE, CLOCK_MONOTONIC once per 1 MiB within a millisecond of a sample, "
          "a sample per 1 MiB of such allocations at most once a millisecond)"
          % (med["heisen, heap off"]["malloc256k"] - med["native"]["malloc256k"]))
    k = 100 if quick else 300

    def starts(env):
        t = time.perf_counter()
        for _ in range(k):
            subprocess.run(["/bin/true"], env=dict(os.environ, **env), check=True)
        took = (time.perf_counter() - t) / k * 1e3
        # keep one segment (for the check): thousands of 4.5 MiB files would slow the next runs down
        for f in sorted(glob.glob(os.path.join(env.get("HEISEN_DIR", "/nonexistent"), "*.seg")))[1:]:
            os.unlink(f)
        return took

    # the sessions in /dev/shm (sess), as heisen's own default puts them (a file
    # system in memory); one more row with them under TMPDIR, a disk here
    disk = Session(tempfile.gettempdir())

    def later_image():
        # each /bin/true as a session's later images start: with the identity of
        # the directory its first image walked (segment.c session_dir_reopen)
        d = sess.new()
        st = os.stat(d)
        return {"LD_PRELOAD": shim, "HEISEN_DIR": d, "HEISEN_SESSION_DIR_ID": "%d:%d" % (st.st_dev, st.st_ino)}
    configs = heisen_configs(shim, sess) + [
        ("heisen, a later image (HEISEN_SESSION_DIR_ID)", later_image),
        ("heisen, sessions under %s" % tempfile.gettempdir(), lambda: {"LD_PRELOAD": shim, "HEISEN_DIR": disk.new()})]
    try:
        st, checked = interleaved(configs, reps, starts,
                                  {"heisen": lambda env, _: "/bin/true under heisen: " +
                                   check_samples(dump, env["HEISEN_DIR"])})
    finally:
        disk.close()
    notes.extend(checked)
    smed = {name: statistics.median(v) for name, v in st.items()}
    table("7c. starting a process — /bin/true from Python's subprocess.run, ms per process, median of %d x %d "
          "(sessions in /dev/shm unless the row says otherwise)" % (reps, k), ["under", "ms", "x"], [[nm, "%.3f" % v, "%.2f" % (v / smed["native"])]
                                              for nm, v in smed.items()])
    PER_OP.append(("process start", (smed["heisen"] - smed["native"]) * 1e6,
                   "part 7c, /bin/true from subprocess.run"))
    print("  of heisen's %+.3f ms per process start, reading the environment (7a) is %.3f ms"
          % (smed["heisen"] - smed["native"], pc["env_read"] / 1e3))


def check_fds(dump, session_dir, min_created):
    """heisen-dump must see the run's fds: at least min_created generations created."""
    if not dump:
        return NOT_CHECKED
    created = max((p["fds"] or {}).get("created", 0) for p in dump_json(dump, session_dir)["processes"])
    if created < min_created:
        die("heisen recorded %d fd creations, expected at least %d" % (created, min_created))
    return "recorded %d fd creations (verified with heisen-dump)" % created


PY_FD = """
import os, sys, time
n = int(sys.argv[1])
def pairs(fn, n):
    fn(n // 10)
    t0 = time.perf_counter()
    fn(n)
    return (time.perf_counter() - t0) * 1e9 / n
def raw(n):
    for _ in range(n):
        os.close(os.open('/dev/null', os.O_RDONLY))
def fileobj(n):
    for _ in range(n):
        open('/dev/null', 'rb', buffering=0).close()
print('os_open_close %.1f' % pairs(raw, n))
print('open_close %.1f' % pairs(fileobj, n))
"""


def fd_cost(build, shim, dump, sess, quick, notes):
    """Part 8: file descriptors, native against heisen with fd tracking on and off."""
    exe = os.path.join(build, "bench", "bench_fd")
    if not os.access(exe, os.X_OK):
        notes.append("fd part skipped: %s not built" % exe)
        return
    reps = 3 if quick else 7
    n = 100000 if quick else 300000
    py_n = 20000 if quick else 100000
    heisen = heisen_env(shim, sess)
    configs = [
        ("native", lambda: {}),
        ("heisen, fds off (HEISEN_FDS=0)", heisen(HEISEN_FDS="0")),
        ("heisen, fds on (stacks site, default)", heisen()),
        ("heisen, fds on, HEISEN_FD_STACKS=full", heisen(HEISEN_FD_STACKS="full")),
    ]
    verify = {"heisen, fds on (stacks site, default)": lambda env, _: "bench_fd under heisen: " + check_fds(
        dump, env["HEISEN_DIR"], 3 * n)}
    def medians(samples, n):
        """Median per case and config, and the table rows with ratios to native."""
        cases = list(samples["native"][0].keys())
        med = {name: {c: statistics.median(s[c] for s in v) for c in cases} for name, v in samples.items()}
        rows = [[name] + ["%.0f (%.2fx)" % (m[c], m[c] / med["native"][c]) for c in cases] +
                ["%d x N=%d" % (reps, n)] for name, m in med.items()]
        return cases, med, rows

    samples, checked = interleaved(configs, reps, lambda env: parse_cases(run([exe, str(n)], env)[0]), verify)
    notes.extend(checked)
    cases, med, rows = medians(samples, n)
    nat = med["native"]
    table("8. file descriptors, bench_fd — median ns per create/close pair (ratio to native in this "
          "run); threads4: open_close in 4 threads at once on %d cpus, wall ns per pair" % os.cpu_count(),
          ["under"] + cases + ["runs"], rows)
    on, off = med["heisen, fds on (stacks site, default)"], med["heisen, fds off (HEISEN_FDS=0)"]
    print("  fd tracking adds, per pair: " + ", ".join("%s %+.0f ns" % (c, on[c] - off[c]) for c in cases) +
          " (against heisen with fds off); against native: " +
          ", ".join("%s %+.0f ns" % (c, on[c] - nat[c]) for c in cases))
    PER_OP.append(("open+close pair", on["open_close"] - nat["open_close"], "part 8, bench_fd open_close"))
    py_configs = [c for c in configs if c[0] in ("native", "heisen, fds off (HEISEN_FDS=0)",
                                                 "heisen, fds on (stacks site, default)")]
    pys, _ = interleaved(py_configs, reps, lambda env: parse_cases(run([PYTHON, "-c", PY_FD, str(py_n)], env)[0]))
    pcases, _, rows = medians(pys, py_n)
    table("8b. the same from %s — median ns per pair: os_open_close = os.close(os.open(...)), open_close = "
          "open(..., buffering=0).close() (a FileIO); stacks carry this call's Python frames" % PYTHON,
          ["under"] + pcases + ["runs"], rows)


OPTIONS = ("--quick", "--heap-only", "--proc-only", "--fd-only")


def main():
    usage = next(ln for ln in __doc__.splitlines() if ln.startswith("Usage:"))
    for a in sys.argv[1:]:
        if a in ("-h", "--help"):
            print(usage)
            return
        if a.startswith("-") and a not in OPTIONS:
            sys.stderr.write("run.py: unknown option %s\n%s\n" % (a, usage))
            sys.exit(2)
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    quick = "--quick" in sys.argv[1:]
    heap_only = "--heap-only" in sys.argv[1:]
    proc_only = "--proc-only" in sys.argv[1:]
    fd_only = "--fd-only" in sys.argv[1:]
    build = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build"))
    exe = {name: os.path.join(build, "bench", name) for name in ("bench_record", "bench_mutex", "bench_mutex_tsan")}
    shim = os.path.join(build, "shim", "libheisen.so")
    dump = os.path.join(build, "dumper", "heisen-dump")
    for name in ("bench_record", "bench_mutex"):
        if not os.access(exe[name], os.X_OK):
            die("%s not built: meson setup %s && ninja -C %s" % (exe[name], build, build))
    if not os.path.exists(shim):
        die("%s not built" % shim)
    if not os.access(dump, os.X_OK):
        dump = None
    valgrind = shutil.which("valgrind")

    reps = 3 if quick else 5
    n_mutex = 1000000 if quick else 3000000
    n_tsan = 300000 if quick else 1000000
    n_vg = 10000 if quick else 30000
    vg_reps = 1 if quick else 3
    py_size = 15000 if quick else 60000
    py_reps = 3 if quick else 5
    py_vg_size = 500 if quick else 2000
    n_gil = 500000 if quick else 2000000
    gil_inner = 3

    # sessions where heisen's default puts them: /dev/shm, a file system in
    # memory (part 7c adds one row with them on TMPDIR's disk)
    sess = Session("/dev/shm" if os.path.isdir("/dev/shm") else None)
    started = time.perf_counter()
    print("heisen bench: %s" % " ".join([PYTHON] + sys.argv))
    print("cpu: %s, %d cpus; kernel %s; build %s; source %s" % (cpu_model(), os.cpu_count(), platform.release(),
                                                             build, git_head()))
    notes = []

    if heap_only or proc_only or fd_only:
        if heap_only:
            heap_cost(build, shim, dump, sess, quick, valgrind, notes)
        if proc_only:
            proc_cost(build, shim, dump, sess, quick, notes)
        if fd_only:
            fd_cost(build, shim, dump, sess, quick, notes)
        per_op_summary()
        print()
        for n in notes:
            print("note: " + n)
        print("total time of this run: %.0f s" % (time.perf_counter() - started))
        sess.close()
        return 0

    # 1. the record path
    out, _ = run([exe["bench_record"], str(4000000 if quick else 10000000)])
    rec = parse_cases(out)
    table("1. bench_record — the hook's pieces alone: ns per op, median of 5 (hs_rec: private ring of 256 "
          "records; lookups: hits on a default-geometry segment)",
          ["case", "ns/op"], [[k, "%.2f" % v] for k, v in rec.items()])

    # 2. uncontended locks: native and heisen interleaved, so drift hits both alike
    configs = heisen_configs(shim, sess)
    samples, checked = interleaved(
        configs, reps, lambda env: parse_cases(run([exe["bench_mutex"], str(n_mutex)], env)[0]),
        {"heisen": lambda env, _: "bench_mutex under heisen: " +
         check_recorded(dump, env["HEISEN_DIR"], want_edge=True)})
    notes.extend(checked)
    cases = list(samples["native"][0].keys())
    med = {name: {c: statistics.median(s[c] for s in samples[name]) for c in cases} for name in samples}
    counts = {name: "%d x N=%d" % (reps, n_mutex) for name in samples}

    # peers, where installed
    if os.access(exe["bench_mutex_tsan"], os.X_OK):
        s = [parse_cases(run([exe["bench_mutex_tsan"], str(n_tsan)])[0]) for _ in range(reps)]
        med["gcc TSan (-fsanitize=thread)"] = {c: statistics.median(x[c] for x in s) for c in cases}
        counts["gcc TSan (-fsanitize=thread)"] = "%d x N=%d" % (reps, n_tsan)
    else:
        notes.append("TSan skipped: bench_mutex_tsan not built (gcc cannot link -fsanitize=thread; "
                     "apt-get install libtsan2, then reconfigure)")
    if valgrind:
        for tool in ("helgrind", "drd"):
            label = "valgrind --tool=" + tool
            s = [parse_cases(run([valgrind, "--tool=" + tool, "-q", exe["bench_mutex"], str(n_vg)])[0])
                 for _ in range(vg_reps)]
            med[label] = {c: statistics.median(x[c] for x in s) for c in cases}
            counts[label] = "%d x N=%d" % (vg_reps, n_vg)
    else:
        notes.append("helgrind and drd skipped: valgrind not installed (apt-get install valgrind)")

    header = ["under"] + cases + ["runs"]
    rows = [[name] + ["%.1f (%.2fx)" % (m[c], m[c] / med["native"][c]) for c in cases] + [counts[name]]
            for name, m in med.items()]
    table("2. bench_mutex — median ns per op (ratio to native in this run); mutex, rwlock_rd, rwlock_wr: "
          "one lock+unlock pair; nested: lock A, lock B, unlock B, unlock A",
          header, rows)
    extra = {c: med["heisen"][c] - med["native"][c] for c in cases}
    print("  heisen adds: " + ", ".join("%s %+.1f ns" % (c, v) for c, v in extra.items()))
    PER_OP.append(("uncontended mutex lock+unlock", extra["mutex"], "part 2, bench_mutex"))
    # an uncontended lock+unlock pair: each hook reads the coarse clock once (shim/clock.c:
    # inline from the vDSO data once found, else the call bench_record times) and writes
    # one record or folds the release into the acquisition's; site + lock-id lookups
    pieces = 2 * rec["clock_coarse"] + 2 * rec["hs_rec"] + rec["site_lookup"] + rec["lock_id_lookup"]
    print("  of a mutex pair's %+.1f ns, the pieces of 1. account for at most %.1f ns: 2 x clock_coarse "
          "(%.1f; less once the clock is read inline), 2 x hs_rec (%.1f), site lookup (%.1f), lock-id lookup "
          "(%.1f); the rest is the hooks' own work (entry and exit, the held-lock stack, the calls in between: "
          "bench/README.md \"The uncontended mutex pair in registers\")"
          % (extra["mutex"], pieces, 2 * rec["clock_coarse"], 2 * rec["hs_rec"], rec["site_lookup"],
             rec["lock_id_lookup"]))

    # 3. end to end: a threaded Python service
    wl = [PYTHON, os.path.join(HERE, "py_workload.py")]

    def py_run(env, size):
        out, wall = run(wl + [str(size)], env)
        fields = out.split()
        if not fields or fields[0] != "ok":
            die("py_workload: unexpected output %r" % out)
        return wall, float(fields[-1])

    run(wl + ["200"])  # warm the page cache
    py, checked = interleaved(
        configs, py_reps, lambda env: py_run(env, py_size),
        {"heisen": lambda env, _: "py_workload under heisen: " +
         check_recorded(dump, env["HEISEN_DIR"], want_edge=False)})
    notes.extend(checked)
    rows = []
    pmed = {name: (statistics.median(w for w, _ in v), statistics.median(k for _, k in v)) for name, v in py.items()}
    for name, (w, k) in pmed.items():
        ks = [k for _, k in py[name]]
        rows.append([name, str(py_size), "%.3f" % w, "%.3f" % k, "%.3f-%.3f" % (min(ks), max(ks)),
                     "%.2f" % (w / pmed["native"][0]), "%.2f" % (k / pmed["native"][1]), "%d" % py_reps])
    if valgrind:
        nat = [py_run({}, py_vg_size) for _ in range(3)]
        out, wall = run([valgrind, "--tool=helgrind", "-q"] + wl + [str(py_vg_size)])
        hg = (wall, float(out.split()[-1]))
        nw = statistics.median(w for w, _ in nat)
        nk = statistics.median(k for _, k in nat)
        rows.append(["native (small)", str(py_vg_size), "%.3f" % nw, "%.3f" % nk,
                     "%.3f-%.3f" % (min(k for _, k in nat), max(k for _, k in nat)), "1.00", "1.00", "3"])
        rows.append(["valgrind --tool=helgrind", str(py_vg_size), "%.3f" % hg[0], "%.3f" % hg[1], "-",
                     "%.2f" % (hg[0] / nw), "%.2f" % (hg[1] / nk), "1"])
    else:
        notes.append("helgrind on py_workload skipped: valgrind not installed")
    table("3. py_workload.py (threading + queue + sqlite3 :memory: + json, 4 workers) under %s — seconds, median;"
          " wall = whole process, work = the workload alone; x = ratio of medians to native at the same size" % PYTHON,
          ["under", "size", "wall s", "work s", "work range", "wall x", "work x", "runs"], rows)

    # 4. a stack capture with Python frames
    stack_cost(build, reps, notes)

    # 5. the GIL check per lock acquisition
    gil_cost(build, shim, dump, sess, reps, n_gil, gil_inner, notes)

    # 6. the heap checker
    heap_cost(build, shim, dump, sess, quick, valgrind, notes)

    # 7. processes and environment
    proc_cost(build, shim, dump, sess, quick, notes)
    # 8. file descriptors
    fd_cost(build, shim, dump, sess, quick, notes)
    per_op_summary()

    print()
    for n in notes:
        print("note: " + n)
    print("total time of this run: %.0f s" % (time.perf_counter() - started))
    sess.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
