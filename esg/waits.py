"""Waits that name their events: what can end a head batch's wait.

A placement that cannot happen now answers a :class:`~esg.dispatch.Wait` whose :class:`Until` names
the events after which placing the head again could answer differently. The scheduler keeps the wait
per queue and places that queue's head again only once one of them happened (both drivers: the
emulator and the live service hand the step one snapshot kept across steps, whose index says which
nodes changed since a version). The events:

* **a worker frees** (:meth:`Until.ended_on`): on a node that changed, an idle warm worker of the
  function on a MIG profile the head's configurations use;
* **a slice or vCPUs free** (:meth:`Until.ended_on`): on a node that changed, one of those
  configurations fits and its start-up plus run time is within the head's budget then;
* **the fallback turns** (:meth:`Until.ended_on`): a list of configurations the placement found to fit
  nowhere now fits on a changed node, or the last node where one fitted no longer does (the placer
  then walks other configurations);
* **the queue changes** (checked by the scheduler, :meth:`Until.same_scale_out`): another head job, a
  length below :attr:`Until.deep` that differs, another proposal, or another answer of the placer's
  scale-out rule for the batches running.

A wait the policy itself decides (a proposal with no configurations, ``Choice.retry_at_ms``) names no
events: the proposal is asked at every step, and at its retry time at the latest.

No deadline ends a placement's wait: the head's budget only shrinks as time passes, so a start that was
too late stays too late, and a node that did not change keeps its verdict. Whether the placement waits is
a function of per-node facts about the lists it walked -- on a node, does a configuration fit, and does
one take an idle warm worker or start within the budget --, so only a node that changed is looked at
again, with the budget the head has then. Configurations are looked at per MIG profile: their fit on a
node is the same but for the vCPUs, so the profile's fewest vCPUs decide whether one fits, and the
fastest of those the node's free vCPUs allow decides the start (:func:`profile_groups`).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Sequence
from typing import Final

from esg.cluster import ClusterSnapshot
from esg.defaults import StartupCosts
from esg.model import Config


class Until:
    """The events that can end one wait (the module says which, and why no others)."""

    __slots__ = ("function", "deadline_ms", "rest_ms", "startup", "parts", "scale_out", "answers", "deep",
                 "soonest")

    def __init__(self, function: str, deadline_ms: float, rest_ms: float, startup: StartupCosts,
                 parts: list[tuple[tuple, set[str] | None]], deep: int,
                 scale_out: Callable[[int, int], tuple[bool, ...]] | None, answers: tuple[bool, ...],
                 soonest: tuple[tuple[str, float, float] | None, ...] = ()):
        self.function = function
        self.deadline_ms = deadline_ms
        self.rest_ms = rest_ms
        """The head's budget at ``now`` is ``deadline_ms - now - rest_ms`` (as the placement computes it)."""
        self.startup = startup
        self.parts = parts
        """Per list of configurations walked: its :func:`profile_groups`, and the nodes where one fits
        (None: it fit nowhere)."""
        self.scale_out = scale_out
        """The placer's scale-out answer for each list walked, given (running, queued) batches; None: the
        verdict does not depend on it."""
        self.answers = answers
        """Those answers when the wait began."""
        self.deep = deep
        """The queue length from which more jobs change nothing (the lists, capped to it, stay)."""
        self.soonest = soonest
        """Per list walked, the soonest start the walk found that stops no other function's worker (node,
        start-up plus run time, start-up; None: none), which the scale-out gate weighed: a change of
        that node, a sooner start elsewhere, or (with none) any start that stops no worker ends the
        wait."""

    @classmethod
    def placed(cls, function: str, deadline_ms: float, rest_ms: float, startup: StartupCosts,
               lists: Sequence[tuple[Sequence[Config], Callable[[Config], float] | None | tuple, bool]],
               snapshot: ClusterSnapshot, deep: int = 0,
               scale_out: Callable[[int, int], tuple[bool, ...]] | None = None,
               answers: tuple[bool, ...] = (),
               soonest: tuple[tuple[str, float, float] | None, ...] = ()) -> Until:
        """The events that end a placement's wait. ``lists``: (configurations, their latency (None: any
        fit places) or their :func:`profile_groups` already made, whether one fits somewhere); ``deep``:
        see :attr:`deep`."""
        parts = []
        for configs, latency_of, fits_somewhere in lists:
            groups = latency_of if isinstance(latency_of, tuple) else profile_groups(configs, latency_of)
            found = None
            if fits_somewhere:
                found = {n for n in snapshot.nodes if _fits(snapshot, n, groups)}
            parts.append((tuple(groups), found))
        return cls(function, deadline_ms, rest_ms, startup, parts, deep, scale_out, answers, soonest)

    def same_scale_out(self, running: int, queued: int) -> bool:
        """Whether the placer's scale-out rule answers as it did when the wait began."""
        return self.scale_out is None or self.scale_out(running, queued) == self.answers

    def ended_on(self, snapshot: ClusterSnapshot, node: str, now_ms: float) -> bool:
        """Whether ``node``'s change (the others did not change) is an event that ends the wait at
        ``now_ms``: a worker freed on it, a slice or vCPUs freed on it, or the fallback turned."""
        free = snapshot.nodes[node].vcpus_free if node in snapshot.nodes else -1
        budget = self.deadline_ms - now_ms - self.rest_ms
        for i, (groups, fits) in enumerate(self.parts):
            soonest = self.soonest[i] if i < len(self.soonest) else None
            if soonest is not None and soonest[0] == node:
                return True  # the soonest start's node changed: the gate may answer otherwise
            found = False
            for probe, vcpus, best in groups:
                if free < probe.vcpus or snapshot.fit(node, probe) is None:
                    continue
                found = True  # (fitting as the placement's walk counts it: whatever the function)
                fit = snapshot.fit(node, probe, self.function)
                if fit is None:
                    continue  # no room for the function's GPU memory there
                if fit.warm_worker is not None:
                    return True  # a worker freed
                t = self.startup.of(fit) + best[bisect.bisect_right(vcpus, free) - 1]
                if t <= budget:
                    return True  # a slice (or vCPUs) freed in time
                if not fit.evict and (soonest is None or t < soonest[1]):
                    return True  # a sooner start, or the first that stops no other function's worker
            if fits is None:
                if found:
                    return True  # a list that fit nowhere fits: the placer would not fall back
            elif found:
                fits.add(node)
            else:
                fits.discard(node)
                if not fits:
                    return True  # the last node where the list fitted: the placer would fall back
        return False


NO_STARTUP: Final = StartupCosts(0.0, 0.0)


def _fits(snapshot: ClusterSnapshot, node: str, groups) -> bool:
    free = snapshot.nodes[node].vcpus_free
    return any(free >= probe.vcpus and snapshot.fit(node, probe) is not None for probe, _, _ in groups)


def profile_groups(configs: Sequence[Config], latency_of: Callable[[Config], float] | None) -> tuple:
    """``configs`` by MIG profile, as :class:`Until` looks at them: per profile (a probe configuration
    with its fewest vCPUs, the vCPU counts in order, the fastest latency up to each count)."""
    by_gpu: dict[str | None, list[tuple[int, float]]] = {}
    for c in configs:
        by_gpu.setdefault(c.gpu, []).append((c.vcpus, latency_of(c) if latency_of else -math.inf))
    groups = []
    for gpu, opts in by_gpu.items():
        opts.sort()
        vcpus = [v for v, _ in opts]
        best, low = [], math.inf
        for _, lat in opts:
            low = min(low, lat)
            best.append(low)
        groups.append((Config(1, vcpus[0], gpu), vcpus, best))
    return tuple(groups)
