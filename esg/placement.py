"""The placement machinery every placer shares: whole batches, warm workers, start-up versus budget.

A policy's proposing part says *which configurations* to try for the head batch of a queue; its placer
(:class:`esg.policies.placer.Placer`) says *which nodes* to try first and whether a new worker may be
started, and binds the batch with the rules here, the same for every policy (ESG and the baselines):

1. **Whole batches** (:func:`cap_batches`): a configuration planned for more jobs than the queue
   holds is replaced by the same resources at the largest profiled batch the queue can fill, so a
   batch runs (and is charged) for what it holds, never for empty places.
2. **Warm-instance routing**: an idle warm worker of the function that needs no MIG change is taken
   first, in priority then node order.
3. **Start-up versus budget**: otherwise the first placement whose start-up -- MIG instances created
   or destroyed (``mig_reconfig_ms`` each) plus a cold start when no idle worker waits on that slice --
   plus its run time and the fastest rest of the app still fits the head job's budget.
   A placement that stops idle workers of other functions to make room for the new worker's GPU memory
   (``Fit.evict``, :mod:`esg.memory`) is taken only when no placement in time needs none, and a new
   worker the scale-out rule starts (below) stops none while any placement needs none, nor while a batch
   of the function runs (the queue waits for it).
4. **Scale-out rule**: otherwise a new worker is started (the placement that starts soonest) only when
   the placer's scale-out gate allows it, asked with that placement's start-up (its cold start and MIG
   changes, by the cluster's figures) -- every policy's gate is :func:`worth_starting`: no batch of this
   queue runs, or the running batches would take longer than that start-up to clear the queue; else
   the queue waits for a worker to free up.
5. **Fallback** (:func:`fallback`): when none of the policy's configurations fits on any node, the
   function's four fastest other configurations (batch at most the queue length) are tried the same way.

Without worker tracking (a driver that does not know the workers) the first placement that fits is
taken, in the same order. A head that is not placed gets a :class:`~esg.dispatch.Wait` with its reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from typing import Final

from esg.cluster import ClusterSnapshot, Fit
from esg.defaults import StartupCosts
from esg.dispatch import NO_CONFIGURATION, Placement, Wait, candidate_fits, dispatch, fits_nowhere, node_order
from esg.model import Config
from esg.profiles import Profile

WAITING_FOR_A_WORKER: Final = "waiting for a warm worker of "
"""How the reason of a head that waits for a busy worker of its function begins (a start-up would not
be in time, and the placer's scale-out rule starts none)."""
FALLBACK_OPTIONS: Final = 4
"""How many of the function's fastest configurations the shared fallback tries."""


@dataclass
class HeadBatch:
    """The head batch of a queue, to place (not frozen: see its ``__init__``; nothing changes one)."""

    function: str
    priorities: tuple[Config, ...]
    latency_of: Callable[[Config], float]
    preferred: Sequence[str]
    budget_ms: float
    """What the head job has left for this function's start-up and run time."""
    startup: StartupCosts
    gate: Callable[[float], bool]
    """Whether the scale-out gate lets a new worker start, given the start-up (ms) the soonest placement
    would pay: its cold start and MIG changes."""
    busy: int
    """The function's batches in flight, over all its queues."""
    soonest: tuple[str, float, float] | None = field(default=None, init=False)
    """What :func:`place` found: the node, the start-up plus run time, and the start-up (ms) of the
    soonest placement that stops no other function's worker (None: none; set by the walk, read by the
    wait it answers)."""

    def __init__(self, function: str, priorities: tuple[Config, ...], latency_of: Callable[[Config], float],
                 preferred: Sequence[str], budget_ms: float, startup: StartupCosts, gate: Callable[[float], bool],
                 busy: int = 0) -> None:
        # written out (the dataclass keeps it, and ``dataclasses.replace`` calls it): compiled, an __init__
        # the dataclass generates stays interpreted Python, and a frozen one cannot be written natively
        self.function, self.priorities, self.latency_of, self.preferred = function, priorities, latency_of, preferred
        self.budget_ms, self.startup, self.gate, self.busy = budget_ms, startup, gate, busy
        self.soonest = None


def cap_batches(priorities: Sequence[Config], queued: int, profile: Profile) -> tuple[Config, ...]:
    """Each configuration with a batch larger than ``queued`` replaced by the same resources at the
    largest profiled batch of at most ``queued`` (kept as is when the profile has none), duplicates
    dropped, order kept."""
    out: dict[Config, None] = {}
    for c in priorities:
        if c.batch > queued:
            c = _largest_batch(profile, c, queued) or c
        out.setdefault(c, None)
    return tuple(out)


def _largest_batch(profile: Profile, config: Config, queued: int) -> Config | None:
    best: Config | None = None
    for e in profile.entries:
        c = e.config
        if c.gpu == config.gpu and c.vcpus == config.vcpus and c.batch <= queued:
            if best is None or c.batch > best.batch:
                best = c
    return best


def fastest_first(profile: Profile, allowed: Callable[[Config], bool]) -> tuple[Config, ...]:
    """The function's allowed configurations, fastest first (ties: smaller batch, fewer vCPUs, GPU
    profile name). A pure function of the profile and the spec: a policy computes it once per function."""
    opts = sorted((e.latency_ms, e.config.batch, e.config.vcpus, e.config.gpu or "", e.config)
                  for e in profile.entries if allowed(e.config))
    return tuple(o[-1] for o in opts)


def fallback(fastest: Sequence[Config], queued: int, exclude: AbstractSet[Config]) -> tuple[Config, ...]:
    """The :data:`FALLBACK_OPTIONS` first configurations of ``fastest`` (:func:`fastest_first`) with a
    batch of at most ``queued``, not in ``exclude``, fastest first. (Walking all of them was measured to
    cost the baselines: INFless at moderate/light 0.99 -> 0.77 on the trace comparison.)"""
    cap = max(queued, 1)
    seen: dict[Config, None] = {}
    for c in fastest:
        if c.batch <= cap and c not in exclude:
            seen.setdefault(c, None)
            if len(seen) == FALLBACK_OPTIONS:
                break
    return tuple(seen)


def place(snapshot: ClusterSnapshot, req: HeadBatch, no_fit: set[Config],
          seen: set[str] | None = None) -> Placement | Wait:
    """Where the head batch runs (reserved on ``snapshot``), or why it waits. ``seen`` collects the
    nodes where one of its configurations was found to fit."""
    if not snapshot.tracks_workers:
        return dispatch(snapshot, req.priorities, req.preferred, no_fit)
    if not req.priorities:
        return NO_CONFIGURATION
    warm_nodes = snapshot.nodes_with_warm(req.function)
    warm = first_warm(snapshot, req.priorities, req.preferred, no_fit, req.function, warm_nodes)
    if warm is not None:
        return _reserved(snapshot, warm[0], warm[1])
    in_time: tuple[Config, Fit] | None = None
    evicting: tuple[Config, Fit] | None = None
    soonest: tuple[float, Config, Fit] | None = None
    soonest_evicting: tuple[float, Config, Fit] | None = None
    for config, fit in candidate_fits(snapshot, req.priorities, req.preferred, no_fit, req.function, warm_nodes):
        if seen is not None:
            seen.add(fit.node)
        t = req.startup.of(fit) + req.latency_of(config)
        if t <= req.budget_ms:
            if not fit.evict:
                in_time = (config, fit)
                break  # the soonest only matters when nothing is in time
            if evicting is None:
                evicting = (config, fit)  # in time, but by stopping other functions' idle workers
            continue
        if fit.evict:
            if soonest_evicting is None or t < soonest_evicting[0]:
                soonest_evicting = (t, config, fit)
        elif soonest is None or t < soonest[0]:
            soonest = (t, config, fit)
    if soonest is None and req.busy == 0:
        # a start that stops other functions' idle workers: only for a function with no batch running,
        # which would otherwise never run (one with a batch running waits for it instead: two
        # functions' starts stopping each other's workers would leave both cold)
        soonest = soonest_evicting
    req.soonest = None if soonest is None else (soonest[2].node, soonest[0], req.startup.of(soonest[2]))
    chosen = in_time if in_time is not None else evicting
    if chosen is None and soonest is not None and req.soonest is not None and req.gate(req.soonest[2]):
        chosen = soonest[1:]
    if chosen is None:
        if soonest is None and soonest_evicting is None:
            return fits_nowhere(len(req.priorities), len(snapshot.nodes))
        return Wait(f"{WAITING_FOR_A_WORKER}{req.function}: starting another would take longer")
    return _reserved(snapshot, chosen[0], chosen[1])


def _reserved(snapshot: ClusterSnapshot, config: Config, fit: Fit) -> Placement:
    """The placement of ``config`` on ``fit``, reserved on the snapshot. (The arguments named one by
    one: compiled, a call with ``*`` unpacking goes through the interpreter's generic call.)"""
    snapshot.reserve(config, fit)
    return Placement(config, fit)


def first_warm(snapshot: ClusterSnapshot, priorities: Sequence[Config], preferred: Sequence[str],
               no_fit: set[Config], function: str, warm_nodes: AbstractSet[str]) -> tuple[Config, Fit] | None:
    """The first placement, in priority then node order, that takes an idle warm worker of
    ``function`` (such a placement never changes the MIG layout: the worker's slice exists and is idle).
    Only nodes with such a worker are looked at, and only configurations on a kind of instance where the
    cluster has an idle worker of ``function`` (:meth:`ClusterSnapshot.idle_totals`)."""
    if not warm_nodes:
        return None
    kinds = snapshot.idle_totals(function)
    routes: dict[bool, list[str]] = {}
    for config in priorities:
        if config in no_fit or config.gpu not in kinds:
            continue
        gpu = config.gpu is not None
        if gpu not in routes:
            routes[gpu] = [n for n in node_order(snapshot, preferred, config) if n in warm_nodes]
        for name in routes[gpu]:
            fit = snapshot.fit(name, config, function)
            if fit is not None and fit.warm_worker is not None:
                return config, fit
    return None


def may_scale_out(running: int, queued: int, priorities: Sequence[Config]) -> bool:
    """Start another worker only when none of this queue runs or the backlog exceeds what the running
    batches take next."""
    return running == 0 or queued > running * _max_batch(priorities)


def _max_batch(priorities: Sequence[Config]) -> int:
    """``max(c.batch for c in priorities)``, 1 for none (a loop: compiled, ``max`` over a generator with
    a default goes through the interpreter's generic call, at every placement)."""
    if not priorities:
        return 1
    largest = priorities[0].batch
    for c in priorities:
        if c.batch > largest:
            largest = c.batch
    return largest


def worth_starting(running: int, queued: int, priorities: Sequence[Config],
                   latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
    """Start another worker only when none of this queue runs, or when the running batches would take
    longer to work off the backlog (rounds of the largest planned batch) than a new worker takes to
    start: ``startup.cold_start_ms``, which the placer sets to the start-up the soonest placement would
    pay (its cold start and MIG changes, by the cluster's figures: :meth:`Placer.may_scale_out
    <esg.policies.placer.Placer.may_scale_out>`). A backlog that the running workers clear within that
    is served by them: a start-up would only take an instance from another function and leave its jobs
    waiting."""
    if running == 0:
        return True
    if not may_scale_out(running, queued, priorities):
        return False
    # the largest batch, the fastest of those (the first such: as max with the key (batch, -latency))
    largest = priorities[0]
    its_ms = latency_of(largest)
    for c in priorities:
        if c.batch >= largest.batch:
            ms = latency_of(c)
            if c.batch > largest.batch or ms < its_ms:
                largest, its_ms = c, ms
    rounds = -(-queued // (running * largest.batch))
    return rounds * its_ms > startup.cold_start_ms


def latency_lookup(latencies: Mapping[Config, float], profile: Profile) -> Callable[[Config], float]:
    def latency_of(config: Config) -> float:
        lat = latencies.get(config)
        return lat if lat is not None else profile.latency(config)
    return latency_of
