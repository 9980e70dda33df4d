/* SPDX-License-Identifier: MIT */
/*
 * dumper/diff.h — `heisen-dump diff A B`: what differs between two sessions
 * (the first question to ask of a flaky failure: what changed).
 *
 * Five comparisons, each on what stays the same from one run of a program
 * to the next, so that two runs of the same thing under the same conditions
 * compare equal:
 *   - environment: every field of hs_env plus the Python version, as the
 *     set of values the processes of each session saw (never /dev/shm's free
 *     space, never times);
 *   - modules: the loaded objects by path, with their build-ids;
 *   - the process tree, by shape: each process is named by the path of
 *     command lines from its root (argv of each image, the session directory
 *     written "<session>", pids of the session written "<pid>"), never by
 *     pid; a path's count and end states are compared;
 *   - findings, by kind, process path and site (lock names, the innermost
 *     function of their stacks), never by address;
 *   - peak memory per process path, when it moved by more than a quarter
 *     and 16 MiB (RSS is never the same twice);
 *   - and the warnings, by kind.
 * The CLI and JSON are docs/interfaces.md "heisen-dump diff".
 */
#ifndef HEISEN_DUMPER_DIFF_H
#define HEISEN_DUMPER_DIFF_H

/* heisen-dump diff [--json] [--no-symbols] A B: argv[0] is "diff".
 * Exit status: 0 no difference, 1 differences, 2 an error. */
int hs_diff_main(int argc, char **argv);

#endif
