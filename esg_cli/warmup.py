"""How long an emulated load needs to settle before it is measured (``esg emulate``'s warm-up warning).

A cell starts on an empty cluster: no warm worker and no MIG instance. Until its capacity is up, requests
queue; what queued drains only at the capacity the load leaves spare. A measured window that begins
before that backlog is gone reports the start-up, not the load (a 30-s emulation with 10 s of warm-up
gave INFless a 0.000 hit rate and a 12-s p99, against 0.978 at 60 s with 30 s of warm-up).

The settling time comes from a fluid model of that start, in units of the cluster's capacity C (the load
is the share ``rho`` of C, as ``--load`` defines it):

* no capacity while the slowest function's first worker starts (its profiled cold start);
* then capacity grows linearly to C while each GPU carves its MIG instances one at a time: as many as it
  has compute slices (its finest layout), each taking ``--mig-reconfig-ms``; GPUs carve in parallel;
* arrivals come at ``rho`` x C throughout; the backlog grows while capacity is under that and shrinks
  at the spare capacity after.

The load has settled when the backlog is gone and capacity exceeds the arrivals. The model is an upper
bound of a policy that carves the finest layout before serving, and a lower bound of none that serves
nothing while it starts: every policy here serves some requests during its start, and none starts faster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

#: The fluid model's time step (s).
STEP_S = 0.01


@dataclass(frozen=True)
class StartUp:
    cold_s: float
    """The slowest function's first worker start (s)."""
    instances: int
    """MIG instances each GPU carves (its compute slices; 0 without MIG)."""
    reconfig_s: float
    """Per MIG instance (s)."""

    @property
    def ramp_s(self) -> float:
        return self.instances * self.reconfig_s


def settle_s(load: float, start: StartUp) -> float:
    """When the backlog of a cluster starting from nothing is gone, under ``load`` (a share of capacity);
    infinite at 1 or more."""
    if load >= 1:
        return math.inf
    backlog, t = 0.0, 0.0
    while True:
        ramp = (t - start.cold_s) / start.ramp_s if start.ramp_s > 0 else 1.0
        capacity = 0.0 if t < start.cold_s else min(1.0, ramp)
        backlog = max(0.0, backlog + (load - capacity) * STEP_S)
        t += STEP_S
        if backlog == 0.0 and capacity > load:
            return t


def advice(level: str, load: float, start: StartUp, warmup_s: float) -> str | None:
    """The warning for a warm-up shorter than ``level``'s settling time, else None."""
    need = settle_s(load, start)
    if warmup_s >= need:
        return None
    need_s = math.ceil(need)
    mig = (f", then {start.instances} MIG instances per GPU carved one at a time "
           f"({start.instances} x {start.reconfig_s:g} s)") if start.instances else ""
    return (f"warning: --warmup-s {warmup_s:g} is shorter than the {need_s} s load {level} ({load:.0%} of "
            f"capacity) needs to settle from an empty cluster (no capacity during the slowest cold start, "
            f"{start.cold_s:g} s{mig}; the backlog drains at the {1 - load:.0%} left): its figures measure the "
            f"start-up. Measure with --warmup-s {need_s} or more (and --duration-s beyond it)")
