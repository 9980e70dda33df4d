# SPDX-License-Identifier: MIT
"""A lock taken without the GIL and given back with it, then the reverse.

Thread "keeper" takes ext_lock_c with the GIL released (heisenlocks.take_c_nogil)
and returns to Python still holding it — so the GIL was retaken while holding
ext_lock_c (ext_lock_c -> GIL) — then releases it with the GIL held.  Later,
thread "grabber" takes ext_lock_c while holding the GIL (GIL -> ext_lock_c).
The two never overlap, so the run cannot hang; the order is still a
potential deadlock.  With HEISEN_GOT_PATCH=0 the GIL's entry points are not
hooked, and only the release of a lock taken without the GIL shows the
ext_lock_c -> GIL edge.
"""
import os
import sys
import threading

sys.path.insert(0, os.environ.get("HEISEN_PYEXT", os.path.dirname(os.path.abspath(__file__))))
import heisenlocks  # noqa: E402


def keeper():
    print("tid_keeper", heisenlocks.native_tid(), flush=True)
    heisenlocks.take_c_nogil()
    heisenlocks.release_c()  # marker: release with the GIL


def grabber():
    print("tid_grabber", heisenlocks.native_tid(), flush=True)
    heisenlocks.take_c_with_gil()  # marker: take with the GIL


print("pid", os.getpid(), flush=True)
for fn in (keeper, grabber):
    t = threading.Thread(target=fn)
    t.start()
    t.join()
print("done ok", flush=True)
