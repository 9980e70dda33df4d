#!/bin/sh
# SPDX-License-Identifier: MIT
#
# bench/fd_pair_layouts.sh REV OUTDIR [PAD...]
#
# libheisen.so of git revision REV built once per code layout, into
# OUTDIR/libheisen-REV-PAD.so: PAD bytes (default 0 1024 2048 3072) of
# never-run padding at the start of shim/fd_core.c's code, which moves the
# fd hooks' code and everything linked after it by PAD bytes.  An
# open/close pair's time moves by up to ~40 ns with where its code lands
# (bench/README.md "fd stacks shared by a loop's open and close"), more
# than most single changes, so a change is judged by the mean over the
# layouts of each build, run interleaved:
#
#   bench/fd_pair_layouts.sh d06c53a /tmp/l && bench/fd_pair_layouts.sh HEAD /tmp/l
#   for r in $(seq 15); do build/bench/fd_pair time 150            # native
#     for l in /tmp/l/*.so; do HEISEN_DIR=/tmp/s LD_PRELOAD=$l build/bench/fd_pair time 150; done; done
#
# Builds in a temporary copy of REV's tree (git archive), the default
# meson options; the padding is a function no one calls.
set -eu
rev=$1
out=$2
shift 2
pads=${*:-0 1024 2048 3072}
repo=$(git rev-parse --show-toplevel)
name=$(git -C "$repo" rev-parse --short "$rev")
mkdir -p "$out"
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git -C "$repo" archive "$rev" | tar -x -C "$src"
meson setup "$src/build" "$src" >/dev/null
for p in $pads; do
	git -C "$repo" show "$rev:shim/fd_core.c" |
		awk -v pad="$p" '{ print }
			/^#include "shim.h"$/ && !done {
				print "__attribute__((used, noinline)) void hs_fd_layout_pad(void) { __asm__ volatile(\".skip " pad ", 0x90\"); }"
				done = 1
			}' >"$src/shim/fd_core.c"
	ninja -C "$src/build" shim/libheisen.so >/dev/null
	cp "$src/build/shim/libheisen.so" "$out/libheisen-$name-$p.so"
	echo "$out/libheisen-$name-$p.so"
done
