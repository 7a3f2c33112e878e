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

    def free_compute_slices(self) -> int:
        if self.gpu_model is None:
            return 0
        return mig.free_compute_slices(self.gpu_model, [(s.ref.profile, s.ref.start) for s in self.slices])

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

    @property
    def reconfigures(self) -> bool:
        return self.create or bool(self.destroy)


@dataclass
class ClusterSnapshot:
    nodes: dict[str, NodeState]

    @classmethod
    def of(cls, nodes: Iterable[NodeState]) -> ClusterSnapshot:
        return cls({n.name: n for n in nodes})

    def copy(self) -> ClusterSnapshot:
        return copy.deepcopy(self)

    def fit(self, node_name: str, config: Config) -> Fit | None:
        node = self.nodes[node_name]
        if node.vcpus_free < config.vcpus:
            return None
        if config.gpu is None:
            return Fit(node_name)
        if node.gpu_model is None or config.gpu not in mig.geometry(node.gpu_model).profiles:
            return None
        for s in sorted(node.slices, key=lambda s: s.ref):
            if not s.busy and s.ref.profile == config.gpu:
                return Fit(node_name, s.ref)
        occupied = [(s.ref.profile, s.ref.start) for s in node.slices]
        start = _new_start(node.gpu_model, config.gpu, occupied)
        if start is not None:
            return Fit(node_name, SliceRef(config.gpu, start), create=True)
        kept = [(s.ref.profile, s.ref.start) for s in node.slices if s.busy]
        start = _new_start(node.gpu_model, config.gpu, kept)
        if start is None:
            return None
        new = SliceRef(config.gpu, start)
        victims = tuple(s.ref for s in node.slices if not s.busy and _overlaps(node.gpu_model, s.ref, new))
        return Fit(node_name, new, create=True, destroy=victims)

    def reserve(self, config: Config, fit: Fit) -> None:
        node = self.nodes[fit.node]
        node.vcpus_free -= config.vcpus
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
        node.vcpus_free = min(node.vcpus_total, node.vcpus_free + config.vcpus)
        for s in node.slices:
            if s.ref == fit.slice:
                s.busy = False


def _new_start(model: str, profile: str, occupied: list[tuple[str, int]]) -> int | None:
    return mig.best_start(model, profile, tuple(sorted(occupied)))


def _overlaps(model: str, a: SliceRef, b: SliceRef) -> bool:
    geo = mig.geometry(model)
    pa, pb = geo.profile(a.profile), geo.profile(b.profile)
    return a.start < b.start + pb.memory_slices and b.start < a.start + pa.memory_slices
