#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""bench/pairs.py — two whole commands timed in interleaved pairs.

The commands in bench/README.md that compare two builds or two settings of
one workload ("A against B, N pairs") run A and B in turn, A B A B ..., and
take the ratio A/B pair by pair, so a machine whose speed drifts during the
call (another job starting, the CPU clock changing) moves both sides of a
pair alike.  This script is that measurement with nothing but the Python
standard library:

  wall   seconds from just before the fork to just after wait4() reaps the
         command (start-up and set-up included: the whole process)
  cpu    user + system seconds of the command and the children it waited
         for, from the kernel's accounting (wait4's struct rusage)
  peak   ru_maxrss of that wait4(): the peak resident set of the largest
         single process of the tree, in MiB (not the sum of the processes);
         it cannot read much below this script's own resident set, which the
         forked child has before its exec: the first line prints that floor

Each figure is printed as min, median and max over the runs; quote the
median, read the spread as the noise.  The pair ratios (A/B) are printed
the same way.  The commands get an empty standard input and their output is
thrown away (write `sh -c 'exec CMD >>FILE 2>&1'` to keep it); neither is
given a shell otherwise.  It measures and never judges: exit status 0 when
every run was started and reaped (the commands' own exit codes are
printed), 2 for unusable arguments or a command that cannot start.

Usage: /usr/bin/python3 bench/pairs.py [-n RUNS] [--warmup N] [--vs 'COMMAND_B'] -- COMMAND [ARG ...]
  -n RUNS     counted runs of each command (default 5)
  --warmup N  runs of each command first, not counted (default 1)
  --vs B      the baseline, one string split as a shell splits words
Without --vs, A alone is timed.
"""
import argparse
import os
import shlex
import statistics
import sys
import time


def run_once(argv):
    """Run argv once; return (wall s, cpu s, peak MiB, exit status)."""
    devnull = os.open(os.devnull, os.O_RDWR)
    start = time.monotonic()
    try:
        pid = os.fork()
    except OSError as e:
        os.close(devnull)
        raise SystemExit(f"pairs.py: fork: {e}")
    if pid == 0:
        try:
            os.dup2(devnull, 0)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.execvp(argv[0], argv)
        except OSError as e:
            os.write(2, f"pairs.py: cannot run {argv[0]}: {e}\n".encode())
        os._exit(127)
    _, status, ru = os.wait4(pid, 0)
    wall = time.monotonic() - start
    os.close(devnull)
    code = os.waitstatus_to_exitcode(status)
    return wall, ru.ru_utime + ru.ru_stime, ru.ru_maxrss / 1024.0, code


def spread(values, fmt):
    """min / median / max of values, each formatted with fmt."""
    return "  ".join(fmt.format(v) for v in
                     (min(values), statistics.median(values), max(values)))


def main():
    ap = argparse.ArgumentParser(
        description="Time whole commands in interleaved pairs (A B A B ...).")
    ap.add_argument("-n", type=int, default=5, help="counted runs a side")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted runs a side")
    ap.add_argument("--vs", help="the baseline command B, one string")
    ap.add_argument("command", nargs=argparse.REMAINDER)
    args = ap.parse_args()
    cmd_a = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not cmd_a or args.n < 1 or args.warmup < 0:
        ap.error("give -n >= 1 and a command after --")
    sides = [("A", cmd_a)]
    if args.vs:
        sides.append(("B", shlex.split(args.vs)))
    for _, argv in sides:
        if not (os.path.sep in argv[0] and os.access(argv[0], os.X_OK)) and \
                not any(os.access(os.path.join(d, argv[0]), os.X_OK)
                        for d in os.environ.get("PATH", "").split(os.pathsep)):
            print(f"pairs.py: {argv[0]}: not an executable command", file=sys.stderr)
            return 2
    for _ in range(args.warmup):
        for _, argv in sides:
            run_once(argv)
    res = {name: [] for name, _ in sides}
    for _ in range(args.n):
        for name, argv in sides:
            res[name].append(run_once(argv))
    import resource
    floor = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    print(f"load average {os.getloadavg()[0]:.2f}; {args.n} runs a side"
          + (", interleaved A B A B ..." if args.vs else "")
          + f"; peak floor {floor:.1f} MiB (this script's own)")
    for name, argv in sides:
        r = res[name]
        codes = sorted({x[3] for x in r})
        print(f"{name}: {shlex.join(argv)}")
        print(f"   wall s   {spread([x[0] for x in r], '{:.4f}')}   (min median max)")
        print(f"   cpu s    {spread([x[1] for x in r], '{:.4f}')}")
        print(f"   peak MiB {spread([x[2] for x in r], '{:.1f}')}")
        print(f"   exit codes {codes}")
    if args.vs:
        a, b = res["A"], res["B"]
        for i, label in ((0, "wall"), (1, "cpu"), (2, "peak")):
            ratios = [x[i] / y[i] for x, y in zip(a, b) if y[i] > 0]
            if ratios:
                print(f"A/B {label:5s} {spread(ratios, '{:.3f}')}   (min median max of the pairs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
