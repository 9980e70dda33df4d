# SPDX-License-Identifier: MIT
"""pylock_sets — where the Python lock pair's block (shim/hot_bss.ld,
HS_PAIR_OFFSET) lands against each interpreter's own hot code, per offset.

A `with lock:` pair's time moves by 10-20 ns with the block's place modulo
4 KiB (bench/README.md "Python lock pairs at a fixed place").  This scores
every offset (64-byte steps) by a model of the front end's decoded-op cache:
64 sets indexed by address bits 6..11 (lines 4 KiB apart share a set), WAYS
ways, each way holding up to OPS instructions of one 64-byte line; the hot
lines of the loop (executed at least once a pair) are counted per set, a
line of n hot instructions taking ceil(n / OPS) ways, and the score is the
sum over sets of the ways wanted beyond WAYS (0: everything fits).  It is a
model, fitted on measurements (defaults 12 ways of 8, the best of the fits
tried), used to pick offsets to measure, not instead of measuring.

Input: one callgrind profile per interpreter, made with --dump-instr=yes
against a build whose HS_PAIR_OFFSET is BUILD_OFFSET:

  valgrind --tool=callgrind --trace-children=yes --dump-instr=yes --callgrind-out-file=cg.PY.%p \\
    env HEISEN_DIR=/dev/shm/s HEISEN_SESSION_AUTO=1 LD_PRELOAD=BUILD/shim/libheisen.so PY bench/bench_pylock.py 30000 3

Usage: python3 bench/pylock_sets.py [--ways W] [--ops K] [--build-offset B] PROFILE...
Prints, best first, each offset's score per profile and the worst.
"""
import collections
import math
import re
import sys

PAIR_FUNCS = ("sem_trywait", "sem_post", "sem_order_acquired", "hs_py_token")
MIN_PER_PAIR = 85000  # bench_pylock.py 30000 3: 90,000 pairs


def hot_lines(path):
    """({line: hot instructions} of the interpreter's objects, the same of the pair's block)."""
    names, cost, fnof = {}, collections.Counter(), {}
    ob = fn = positions = None
    last = [0, 0]
    skip = False
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        if line.startswith("positions:"):
            positions = line.split()[1:]
            continue
        m = re.match(r"^(ob|fn|cob|cfn|fl|fi|fe|cfi|cfl)=\((\d+)\)(?: (.*))?$", line)
        if m:
            k, i, nm = m.groups()
            kind = "ob" if k in ("ob", "cob") else "fn" if k in ("fn", "cfn") else "fl"
            if nm is not None:
                names[(kind, i)] = nm
            if k == "ob":
                ob = names.get(("ob", i))
            elif k == "fn":
                fn = (names.get(("fn", i)) or "").split("'")[0]  # callgrind's recursion suffix, f'2
            continue
        if line.startswith("calls="):
            skip = True
            continue
        if line[0] in "0123456789+-*" and positions:
            toks = line.split()
            for j in range(len(positions)):
                t = toks[j]
                last[j] = (last[j] if t == "*" else last[j] + int(t[1:], 0) if t[0] == "+"
                           else last[j] - int(t[1:], 0) if t[0] == "-" else int(t, 0))
            if skip:
                skip = False
                continue
            if len(toks) > len(positions):
                cost[(ob, last[0])] += int(toks[len(positions)])
                fnof[(ob, last[0])] = fn
    interp, pair = collections.Counter(), collections.Counter()
    for key, c in cost.items():
        if c >= MIN_PER_PAIR:
            (pair if fnof[key] in PAIR_FUNCS else interp)[key[1] // 64] += 1
    return interp, pair


def score(interp, pair, shift, ways, ops):
    want = collections.Counter()
    for line, n in interp.items():
        want[line % 64] += math.ceil(n / ops)
    for line, n in pair.items():
        want[(line + shift // 64) % 64] += math.ceil(n / ops)
    return sum(max(0, w - ways) for w in want.values())


def main():
    args = sys.argv[1:]
    ways, ops, base = 12, 8, 0
    while args and args[0].startswith("--"):
        opt, val = args[0], int(args[1], 0)
        if opt == "--ways":
            ways = val
        elif opt == "--ops":
            ops = val
        elif opt == "--build-offset":
            base = val
        else:
            sys.exit(__doc__)
        args = args[2:]
    if not args:
        sys.exit(__doc__)
    profiles = [hot_lines(p) for p in args]
    for p, (interp, pair) in zip(args, profiles):
        if not pair:
            sys.exit("pylock_sets: %s: no hot line of %s (not a --dump-instr=yes profile of bench_pylock.py?)"
                     % (p, ", ".join(PAIR_FUNCS)))
    rows = []
    for off in range(0, 4096, 64):
        s = [score(i, h, (off - base) % 4096, ways, ops) for i, h in profiles]
        rows.append((max(s), sum(s), off, s))
    print("offset | " + " | ".join(args) + " | worst (model: 64 sets, %d ways of %d instructions)" % (ways, ops))
    for worst, _, off, s in sorted(rows):
        print("%d | %s | %d" % (off, " | ".join(str(x) for x in s), worst))


if __name__ == "__main__":
    main()
