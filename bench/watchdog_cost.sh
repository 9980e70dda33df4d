#!/bin/bash
# SPDX-License-Identifier: MIT
# bench/README.md "The tools' own cost".
# usage: watchcpu.sh HEISEN_RUN N SECONDS : CPU of heisen-run (self, and its reaped heisen-dump helpers)
# from t=25 s to t=SECONDS-5 s, while N forked children of a Python program sleep
HR=$1; N=$2; S=$3; D=$(mktemp -d)
$HR --dir $D/s -- /usr/bin/python3 "$(dirname "$0")/idle_workers.py" $N $S 2>$D/err &
PID=$!
tck=$(getconf CLK_TCK)
self() { awk '{print $14+$15}' /proc/$PID/stat; }
kids() { awk '{print $16+$17}' /proc/$PID/stat; }
T0=$(date +%s)
until [ "$(ls $D/s 2>/dev/null | grep -c 'seg$')" -gt $N ]; do sleep 0.5; done; sleep 5
start=$(( $(date +%s) - T0 )); a=$(self); c=$(kids); t0=$(date +%s.%N)
sleep $((S-start-5)); b=$(self); d=$(kids); t1=$(date +%s.%N)
wait $PID
el=$(echo "$t1-$t0" | bc)
echo "ready after $start s; segments $(ls $D/s | grep -c seg); over $el s: heisen-run itself $(echo "100*($b-$a)/$tck/$el" | bc -l | cut -c1-5) % of a core, its heisen-dump runs $(echo "100*($d-$c)/$tck/$el" | bc -l | cut -c1-5) %"
tail -1 $D/err; rm -rf $D
