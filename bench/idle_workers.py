# SPDX-License-Identifier: MIT
# bench/README.md "The tools' own cost": N forked children that sleep SECONDS (idle processes).
import os, sys, time
n = int(sys.argv[1]); secs = float(sys.argv[2])
kids = []
for i in range(n):
    pid = os.fork()
    if pid == 0:
        time.sleep(secs)
        os._exit(0)
    kids.append(pid)
time.sleep(secs)
for k in kids: os.waitpid(k, 0)
