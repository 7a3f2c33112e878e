"""The cluster as the scheduler sees it: nodes with vCPUs and one MIG-partitioned GPU each.

A :class:`ClusterSnapshot` is built by the driver (the live service from agent heartbeats and its own
in-flight batches, the emulator from its node models) and handed to the scheduler, which reserves on
its own copy while it decides. :meth:`ClusterSnapshot.fit` answers "can this configuration run on this
node now, and on which MIG slice": an idle slice of the wanted profile, else a new instance placed
beside the instances that stay, destroying idle ones only when they are in the way (busy slices are
never touched).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass, field
from functools import cache

from esg import mig
from esg.model import Config


@dataclass(frozen=True, order=True)
class SliceRef:
    """A MIG GPU instance identified by its profile and placement start (memory slice)."""

    profile: str
    start: int


@dataclass
class Slice:
    ref: SliceRef
    busy: bool = False
    uuid: str | None = None


@dataclass
class NodeState:
    name: str
    vcpus_total: int
    vcpus_free: int
    gpu_model: str | None = None
    slices: list[Slice] = field(default_factory=list)
    warm: set[tuple[str, Config]] = field(default_factory=set)
    """(function, config) pairs with a warm worker on this node."""
    memory_mb: int = 0
    idle_workers: dict[tuple[str, SliceRef | None], int] = field(default_factory=dict)
    """Idle warm workers by (function, MIG instance or None for CPU), where the driver knows them."""
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    """What :class:`ClusterSnapshot` derived from this state (fits, layout, idle slices). A driver that
    hands the same unchanged object to several steps keeps it; a reservation clears it."""

    def free_compute_slices(self) -> int:
        if self.gpu_model is None:
            return 0
        return mig.free_compute_slices(self.gpu_model, [(s.ref.profile, s.ref.start) for s in self.slices])

    def has_idle_slice(self, profile: str | None) -> bool:
        return any(not s.busy and s.ref.profile == profile for s in self.slices)

    def idle_compute_slices(self) -> int:
        if self.gpu_model is None:
            return 0
        busy = [(s.ref.profile, s.ref.start) for s in self.slices if s.busy]
        return mig.free_compute_slices(self.gpu_model, busy)


@dataclass(frozen=True)
class Fit:
    """Where a configuration runs on a node: the slice (None on CPU) and MIG changes it needs."""

    node: str
    slice: SliceRef | None = None
    create: bool = False
    destroy: tuple[SliceRef, ...] = ()
    warm_worker: tuple[str, SliceRef | None] | None = None
    """The idle warm worker this placement takes (None: a cold start, or not tracked)."""

    @property
    def reconfigures(self) -> bool:
        return self.create or bool(self.destroy)

    @property
    def changed_instances(self) -> int:
        return int(self.create) + len(self.destroy)


@dataclass
class ClusterSnapshot:
    nodes: dict[str, NodeState]
    tracks_workers: bool = False
    """Whether ``NodeState.idle_workers`` is filled in (the emulator knows every worker)."""
    _order_memo: dict[bool, list[str]] = field(default_factory=dict, repr=False, compare=False)
    _warm_memo: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)

    @classmethod
    def of(cls, nodes: Iterable[NodeState]) -> ClusterSnapshot:
        return cls({n.name: n for n in nodes})

    def copy(self) -> ClusterSnapshot:
        return copy.deepcopy(self)

    def idle_compute(self, node_name: str) -> int:
        """Idle compute slices of a node (remembered until the node's next reservation)."""
        memo = self.nodes[node_name].memo
        if "idle" not in memo:
            memo["idle"] = self.nodes[node_name].idle_compute_slices()
        return memo["idle"]

    def by_capacity(self, gpu: bool) -> list[str]:
        """Node names, most free capacity first: idle compute slices for GPU work, vCPUs for CPU work
        (remembered until the next reservation)."""
        if gpu not in self._order_memo:
            if gpu:
                key = lambda n: (-self.idle_compute(n), -self.nodes[n].vcpus_free, n)  # noqa: E731
            else:
                key = lambda n: (-self.nodes[n].vcpus_free, n)  # noqa: E731
            self._order_memo[gpu] = sorted(self.nodes, key=key)
        return self._order_memo[gpu]

    def nodes_with_warm(self, function: str) -> frozenset[str]:
        """Nodes with an idle warm worker of ``function`` (remembered until the next reservation)."""
        if function not in self._warm_memo:
            self._warm_memo[function] = frozenset(n for n, s in self.nodes.items() if _has_warm(s, function))
        return self._warm_memo[function]

    def layout(self, node_name: str) -> tuple[tuple[str, int, bool], ...]:
        """A node's MIG instances as sorted (profile, start, busy)."""
        memo = self.nodes[node_name].memo
        if "layout" not in memo:
            memo["layout"] = tuple(sorted((s.ref.profile, s.ref.start, s.busy) for s in self.nodes[node_name].slices))
        return memo["layout"]

    def fit(self, node_name: str, config: Config, function: str | None = None) -> Fit | None:
        memo = self.nodes[node_name].memo
        if config not in memo:
            memo[config] = self._fit(node_name, config)
        fit = memo[config]
        if fit is None or function is None or fit.create:
            return fit
        key = (function, fit.slice)
        if self.nodes[node_name].idle_workers.get(key, 0) > 0:
            return Fit(fit.node, fit.slice, fit.create, fit.destroy, key)
        return fit

    def _fit(self, node_name: str, config: Config) -> Fit | None:
        node = self.nodes[node_name]
        if node.vcpus_free < config.vcpus:
            return None
        if config.gpu is None:
            return Fit(node_name)
        if node.gpu_model is None:
            return None
        placed = gpu_fit(node.gpu_model, self.layout(node_name), config.gpu)
        return None if placed is None else Fit(node_name, *placed)

    def reserve(self, config: Config, fit: Fit) -> None:
        node = self.nodes[fit.node]
        self._forget(fit.node)
        node.vcpus_free -= config.vcpus
        if fit.warm_worker is not None:
            node.idle_workers[fit.warm_worker] -= 1
        if fit.slice is None:
            return
        node.slices = [s for s in node.slices if s.ref not in fit.destroy]
        for s in node.slices:
            if s.ref == fit.slice:
                s.busy = True
                return
        node.slices.append(Slice(fit.slice, busy=True))

    def release(self, config: Config, fit: Fit) -> None:
        """Undo :meth:`reserve`'s claim (the slice stays, idle; destroyed slices stay destroyed)."""
        node = self.nodes[fit.node]
        self._forget(fit.node)
        node.vcpus_free = min(node.vcpus_total, node.vcpus_free + config.vcpus)
        for s in node.slices:
            if s.ref == fit.slice:
                s.busy = False


    def _forget(self, node_name: str) -> None:
        self.nodes[node_name].memo.clear()
        self._order_memo.clear()
        self._warm_memo.clear()


def _has_warm(node: NodeState, function: str) -> bool:
    key = ("warm", function)
    if key not in node.memo:
        node.memo[key] = any(k[0] == function and v > 0 for k, v in node.idle_workers.items())
    return node.memo[key]


@cache
def gpu_fit(model: str, layout: tuple[tuple[str, int, bool], ...], profile: str
            ) -> tuple[SliceRef, bool, tuple[SliceRef, ...]] | None:
    """Where ``profile`` runs on a GPU whose instances are ``layout`` (profile, start, busy):
    (slice, create?, idle slices to destroy), or None. A pure function of the layout, so remembered."""
    if profile not in mig.geometry(model).profiles:
        return None
    for p, start, busy in layout:
        if not busy and p == profile:
            return SliceRef(p, start), False, ()
    start = mig.best_start(model, profile, tuple((p, st) for p, st, _ in layout))
    if start is not None:
        return SliceRef(profile, start), True, ()
    start = mig.best_start(model, profile, tuple((p, st) for p, st, busy in layout if busy))
    if start is None:
        return None
    new = SliceRef(profile, start)
    victims = tuple(SliceRef(p, st) for p, st, busy in layout
                    if not busy and _overlaps(model, SliceRef(p, st), new))
    return new, True, victims


def _overlaps(model: str, a: SliceRef, b: SliceRef) -> bool:
    geo = mig.geometry(model)
    pa, pb = geo.profile(a.profile), geo.profile(b.profile)
    return a.start < b.start + pb.memory_slices and b.start < a.start + pa.memory_slices
