#!/bin/sh
# SPDX-License-Identifier: MIT
#
# bench/pylock_layouts.sh REV OUTDIR [OFFSET...]
#
# libheisen.so of git revision REV built once per place of the Python lock
# pair's block (shim/hot_bss.ld's HS_PAIR_OFFSET: bytes past a 4 KiB
# boundary; default 0 512 1024 1536 2048 2560 3072 3584), into
# OUTDIR/off-OFFSET/shim/libheisen.so, the layout bench/pylock_pairs.py
# takes (a comma-separated list of build directories):
#
#   bench/pylock_layouts.sh HEAD /tmp/pl
#   /usr/bin/python3 bench/pylock_pairs.py --procs 2 $(ls -d /tmp/pl/off-* | paste -sd,) 5
#
# A `with lock:` pair's time moves by 10-20 ns with where that block lies
# modulo 4 KiB against the interpreter's own hot code (bench/README.md
# "Python lock pairs at a fixed place"), so the offset is chosen by the
# worst interpreter over every offset, and a change to the pair's code is
# judged over several offsets, not at one.  Builds in a temporary copy of
# REV's tree (git archive), the default meson options.
set -eu
rev=$1
out=$2
shift 2
offs=${*:-0 512 1024 1536 2048 2560 3072 3584}
repo=$(git rev-parse --show-toplevel)
src=$(mktemp -d)
trap 'rm -rf "$src"' EXIT
git -C "$repo" archive "$rev" | tar -x -C "$src"
grep -q '^HS_PAIR_OFFSET = ' "$src/shim/hot_bss.ld" || { echo "pylock_layouts: $rev has no HS_PAIR_OFFSET in shim/hot_bss.ld" >&2; exit 2; }
meson setup "$src/build" "$src" >/dev/null
for o in $offs; do
	sed -i "s/^HS_PAIR_OFFSET = .*;/HS_PAIR_OFFSET = $o;/" "$src/shim/hot_bss.ld"
	ninja -C "$src/build" shim/libheisen.so >/dev/null
	mkdir -p "$out/off-$o/shim"
	cp "$src/build/shim/libheisen.so" "$out/off-$o/shim/libheisen.so"
	echo "$out/off-$o"
done
