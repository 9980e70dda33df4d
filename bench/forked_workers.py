# SPDX-License-Identifier: MIT
# bench/README.md "The tools' own cost": 256 fork workers (a 257-process session);
# their sentinel pipes stay open, an fd-leak finding, so the text report prints stacks.
# With the argument "clean", each worker is closed after its join (p.close()):
# nothing to report, the end of a clean run.
# 256 children that each import a little and sleep briefly, then exit
import multiprocessing as mp, sys, time
def work(i):
    import json, hashlib
    time.sleep(0.5)
    return hashlib.sha1(json.dumps(i).encode()).hexdigest()
if __name__ == "__main__":
    clean = sys.argv[1:] == ["clean"]
    ctx = mp.get_context("fork")
    procs = [ctx.Process(target=work, args=(i,)) for i in range(256)]
    for p in procs: p.start()
    for p in procs:
        p.join()
        if clean:
            p.close()
    print("ok", 256 if clean else sum(p.exitcode == 0 for p in procs))
