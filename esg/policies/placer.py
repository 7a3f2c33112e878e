"""The placer: the half of a policy that binds proposed configurations to nodes.

Mature schedulers split a decision in two. Kubernetes' scheduler framework filters and scores nodes for
a pod, then reserves and binds it; OpenWhisk's load balancer picks an invoker apart from the activation's
lifecycle. A policy here is split the same way (:class:`esg.policies.base.Policy` composes the halves):

* its **proposing part** (:meth:`Policy.choose <esg.policies.base.Policy.choose>` and the hooks that feed
  it) says *what* to run: configurations for the head batch of a queue, best first (a
  :class:`~esg.policies.context.Choice`);
* its **placer** (this module) says *where*: which nodes to try first (:meth:`Placer.preferred_nodes`),
  whether a new worker may be started (:meth:`Placer.may_scale_out`), and binds the batch with the
  machinery of :mod:`esg.placement` -- whole batches, an idle warm worker first, start-up against the
  head's budget, the scale-out rule, then the function's fastest configurations when none of the
  proposal fits anywhere (:meth:`Placer.place`). The answer is a :class:`~esg.dispatch.Placement`
  (reserved on the snapshot) or a :class:`~esg.dispatch.Wait` with its reason.

:class:`Placer` is the shared placer: nodes by free capacity (the platform's order), the shared scale-out
rule. The baselines compose it as it is (Orion, Aquatope) or with their bin-packing order
(:class:`esg.policies.common.PackingPlacer`: INFless, FaST-GShare); ESG's own placer
(:class:`esg.policies.esg_policy.EsgPlacer`) is a subclass with ESG_Dispatch's locality order and ESG's
scale-out rule.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace

from mypy_extensions import mypyc_attr

from esg import placement
from esg.cluster import ClusterSnapshot
from esg.defaults import StartupCosts
from esg.dispatch import NO_CONFIGURATION, Placement, Wait
from esg.model import App, Config, Job
from esg.policies.context import Choice, PolicyContext
from esg.queues import AfwQueue
from esg.slo_split import group_latency
from esg.timing import cold_start_ms
from esg.waits import Until, profile_groups


@mypyc_attr(allow_interpreted_subclasses=True)
class Placer:
    """The shared placer: binds a :class:`~esg.policies.context.Choice` to a node with the machinery of
    :mod:`esg.placement`; subclasses change the node order and the scale-out rule."""

    def __init__(self, ctx: PolicyContext):
        self.ctx = ctx
        self._rest_ms: dict[tuple[str, str], float] = {}
        self._fastest: dict[str, tuple[Config, ...]] = {}
        self._groups: dict[tuple, tuple[object, tuple]] = {}
        """(function, configurations, id of the latencies) -> (those latencies, their profile groups)."""
        self._startup: dict[str, tuple[object, StartupCosts]] = {}
        """function -> (its profile, the start-up costs worked out from it)."""
        self._caps: dict[tuple[int, int], tuple[tuple[Config, ...], object, tuple[Config, ...]]] = {}
        """(id of the priorities, queue length) -> (those priorities, the profile, :func:`placement.cap_batches`)."""

    def add_app(self, ctx: PolicyContext, app: App) -> None:
        """The policy learnt (or replaced) ``app``: ``ctx`` is its context now; what was worked out from
        the old one is forgotten."""
        self.ctx = ctx
        # its profiles replace those of its functions: every app sharing one is worked out again
        functions = set(app.functions)
        changed = {a.name for a in ctx.apps.values() if functions & set(a.functions)} | {app.name}
        self._rest_ms = {k: v for k, v in self._rest_ms.items() if k[0] not in changed}
        self._fastest = {}
        self._startup = {}
        self._groups = {}
        self._caps = {}

    def preferred_nodes(self, app: App, head: Job, snapshot: ClusterSnapshot) -> list[str]:
        """Nodes to try first for the head batch (the rest follow by free capacity): by default none, as
        a load-balancing platform places."""
        return []

    def may_scale_out(self, running: int, queued: int, priorities: Sequence[Config],
                      latency_of: Callable[[Config], float], startup: StartupCosts) -> bool:
        """Whether the head batch may start a new worker when no idle one takes it: the shared scale-out
        rule (:func:`esg.placement.may_scale_out`). ``startup``: what the new worker would pay before it
        runs -- its ``cold_start_ms`` is the whole start-up of the soonest placement (cold start and MIG
        changes, by the cluster's figures), which a gate weighs the backlog against."""
        return placement.may_scale_out(running, queued, priorities)

    def place(self, app: App, queue: AfwQueue, choice: Choice, snapshot: ClusterSnapshot,
              preferred: Sequence[str], now_ms: float, no_fit: set[Config], running: int,
              busy: int = 0) -> Placement | Wait:
        """Where the head batch runs: the shared machinery of :mod:`esg.placement` (whole batches,
        warm workers first, start-up against the budget, :meth:`may_scale_out` given the ``running``
        batches of the queue), then a fallback to the function's fastest configurations when none of the
        choice's fits on any node; ``busy``: the function's batches in flight over all its queues. A wait
        names the events that can end it (:class:`~esg.waits.Until`)."""
        function = queue.key[1]
        profile = self.ctx.profiles[function]
        queued = len(queue)
        own = self._capped(choice.priorities, queued, profile)
        if not own:
            return Wait(choice.reason) if choice.reason else NO_CONFIGURATION
        startup = self._startup_of(function, profile)
        rest = self.rest_ms(app, function)
        budget = queue.head.deadline_ms - now_ms - rest
        latency_of = placement.latency_lookup(choice.latencies, profile)
        head = placement.HeadBatch(function, own, latency_of, preferred, budget, startup,
                                   self._gate_for(running, queued, own, latency_of), busy)
        seen: set[str] = set()
        placed = placement.place(snapshot, head, no_fit, seen)
        if not isinstance(placed, Wait):
            return placed
        if not all(c in no_fit for c in own):
            if not seen:
                return placed  # (no node looked at: nothing to watch, placed again next step)
            return placed.ending(self._until(head, [(own, True, head.soonest)], snapshot, queue.head.deadline_ms,
                                             rest, choice.latencies, running, queued))
        spare = placement.fallback(self._fastest_first(function), queued, set(own))
        if not spare:
            return placed.ending(self._until(head, [(own, False, head.soonest)], snapshot, queue.head.deadline_ms,
                                             rest, choice.latencies, running, queued))
        walked = head.soonest
        head = replace(head, priorities=spare,
                       gate=self._gate_for(running, queued, spare, latency_of))
        seen2: set[str] = set()
        placed = placement.place(snapshot, head, no_fit, seen2)
        if isinstance(placed, Wait):
            return placed.ending(self._until(head, [(own, False, walked), (spare, bool(seen2), head.soonest)],
                                             snapshot, queue.head.deadline_ms, rest, choice.latencies, running,
                                             queued))
        return placed

    def _until(self, head: placement.HeadBatch, lists, snapshot: ClusterSnapshot, deadline_ms: float,
               rest_ms: float, latencies: Mapping[Config, float], running: int, queued: int) -> Until:
        """The events that end the wait of ``head`` after walking ``lists`` (configurations, whether one
        fits somewhere)."""
        made = []
        for configs, fits, _ in lists:
            if not snapshot.tracks_workers:
                groups = profile_groups(configs, None)  # untracked: any fit places
            else:
                key = (head.function, configs, id(latencies))
                hit = self._groups.get(key)
                if hit is None or hit[0] is not latencies:  # (kept, the latencies' id is not reused)
                    if len(self._groups) >= 4096:
                        self._groups.clear()
                    hit = self._groups[key] = (latencies, profile_groups(configs, head.latency_of))
                groups = hit[1]
            made.append((configs, groups, fits))
        # from the table's largest batch on, a longer queue caps and falls back to the same lists
        deep = max(e.config.batch for e in self.ctx.profiles[head.function].entries)
        walks = tuple((configs, soonest) for configs, _, soonest in lists)

        def scale_out(r: int, q: int) -> tuple[bool, ...]:
            """This placer's scale-out answer for each list the walk used, with these counts and the
            soonest placement's start-up the walk found (none found: the gate is not asked)."""
            return tuple([soonest is not None and self._gate_for(r, q, configs, head.latency_of)(soonest[2])
                          for configs, soonest in walks])
        answers = scale_out(running, queued)
        return Until.placed(head.function, deadline_ms, rest_ms, head.startup, made, snapshot, deep,
                            scale_out, answers, tuple(soonest for _, soonest in walks))

    def _gate_for(self, running: int, queued: int, configs: tuple[Config, ...],
              latency_of: Callable[[Config], float]) -> Callable[[float], bool]:
        """The scale-out gate for ``configs``, asked with the start-up of the placement a start would take."""
        def gate(start_ms: float) -> bool:
            return self.may_scale_out(running, queued, configs, latency_of, StartupCosts(0.0, start_ms))
        return gate

    def _capped(self, priorities: tuple[Config, ...], queued: int, profile) -> tuple[Config, ...]:
        """:func:`placement.cap_batches`, remembered per (priorities, queue length, profile): a policy's
        priority lists are few (its cached plans), and asked again at every placement."""
        key = (id(priorities), queued)
        hit = self._caps.get(key)
        if hit is None or hit[0] is not priorities or hit[1] is not profile:  # (kept: the ids are not reused)
            if len(self._caps) >= 4096:
                self._caps.clear()
            hit = self._caps[key] = (priorities, profile, placement.cap_batches(priorities, queued, profile))
        return hit[2]

    def _startup_of(self, function: str, profile) -> StartupCosts:
        """The function's start-up costs (remembered while its profile and the context stay)."""
        hit = self._startup.get(function)
        if hit is None or hit[0] is not profile:
            hit = self._startup[function] = (profile, StartupCosts(
                self.ctx.mig_reconfig_ms, cold_start_ms(profile, self.ctx.cold_start_scale)))
        return hit[1]

    def _fastest_first(self, function: str) -> tuple[Config, ...]:
        """The function's allowed configurations, fastest first (remembered until an app is added)."""
        found = self._fastest.get(function)
        if found is None:
            found = self._fastest[function] = placement.fastest_first(
                self.ctx.profiles[function], self.ctx.spec(function).allows)
        return found

    def rest_ms(self, app: App, function: str) -> float:
        """The fastest the functions after ``function`` can run (what the head must leave them)."""
        key = (app.name, function)
        if key not in self._rest_ms:
            after = tuple(f for f in app.descendants(function) if f != function)
            fastest = {f: min(e.latency_ms for e in self.ctx.profiles[f].entries
                              if self.ctx.spec(f).allows(e.config)) for f in after}
            self._rest_ms[key] = group_latency(app, after, fastest) if after else 0.0
        return self._rest_ms[key]

