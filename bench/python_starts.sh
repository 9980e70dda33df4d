#!/bin/sh
# SPDX-License-Identifier: MIT
# 20 Python starts (import json, sqlite3, threading) under the preload $1, for
# bench/pairs.py pairs (bench/README.md "A Python start: libunwind's signal masks"):
#   bench/pairs.py -n 15 --vs "bench/python_starts.sh /work/main/build/shim/libheisen.so" \
#       -- bench/python_starts.sh build/shim/libheisen.so
# A path that does not exist runs native (the loader says so on stderr and goes on).
dir=/dev/shm/heisen-python-starts.$$
mkdir -p "$dir"
i=0
while [ $i -lt 20 ]; do
  LD_PRELOAD=$1 HEISEN_SESSION_AUTO=1 HEISEN_DIR=$dir /usr/bin/python3 -c "import json, sqlite3, threading"
  i=$((i + 1))
done
rm -rf "$dir"
exit 0
