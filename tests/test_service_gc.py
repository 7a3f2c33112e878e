"""The services' collector settings: start-up objects frozen, young passes spaced out, cycles still
collected without anyone asking. Run in a child interpreter: the settings are process-wide."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHILD = """
import gc, json, weakref
from esg_cli import service_gc

class Node:
    pass

built = [Node() for _ in range(1000)]        # what a service built before it settles
service_gc.settle()
frozen, threshold = gc.get_freeze_count(), gc.get_threshold()[0]

freed = []
a, b = Node(), Node()
a.other, b.other = b, a                       # a cycle: reference counting alone never frees it
weakref.finalize(a, freed.append, True)
del a, b
early = bool(freed)
keep = []
for i in range(3 * service_gc.GEN0_THRESHOLD):   # live allocations, as a burst in flight makes
    keep.append({})
    if freed:
        break
print(json.dumps({"frozen": frozen, "threshold": threshold, "early": early, "freed": bool(freed),
                  "after": i}))
"""


def test_settle_freezes_start_up_objects_and_still_collects_cycles_on_its_own() -> None:
    out = subprocess.run([sys.executable, "-c", CHILD], cwd=ROOT, capture_output=True, text=True, timeout=60,
                         env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    from esg_cli import service_gc
    assert got["frozen"] >= 1000                       # the objects built before settling are out of the passes
    assert got["threshold"] == service_gc.GEN0_THRESHOLD
    assert not got["early"]                           # a cycle waits for a pass ...
    assert got["freed"]                               # ... which comes by itself
    assert got["after"] <= 2 * service_gc.GEN0_THRESHOLD
