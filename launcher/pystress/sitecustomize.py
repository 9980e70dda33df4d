# SPDX-License-Identifier: MIT
"""heisen-run --gc-stress: CPython's cyclic garbage collector on a hair
trigger, so finalizers (__del__, weakref callbacks) run at arbitrary points
of the program — seed 001's zmq.Context.__del__ -> term() that hung only
when the collector ran at the wrong moment.

heisen-run puts this directory first on PYTHONPATH and sets
HEISEN_GC_STRESS=THRESHOLD (gen-0 threshold: a collection after that many
new container objects; CPython's default is 700).  The sitecustomize this
file shadows, if any, is imported after it.
"""
import gc
import os
import sys

try:
    _threshold = max(1, int(os.environ.get("HEISEN_GC_STRESS", "1")))
except ValueError:
    _threshold = 1
gc.set_threshold(_threshold, 1, 1)

# chain to the sitecustomize found further down the path
_here = os.path.dirname(os.path.abspath(__file__))
_saved = list(sys.path)
_self = sys.modules.pop("sitecustomize", None)
try:
    sys.path = [p for p in sys.path if os.path.abspath(p or ".") != _here]
    try:
        import sitecustomize  # noqa: F401  (the shadowed one)
    except ImportError:
        pass
finally:
    sys.path = _saved
    if "sitecustomize" not in sys.modules and _self is not None:
        sys.modules["sitecustomize"] = _self
