"""The cluster's value types: MIG instances, node states and fits.

A :class:`NodeState` is a plain record of one node as a driver knows it (an agent's heartbeat, an
emulated node model): vCPUs, its GPU's MIG instances and which are busy, its idle warm workers. Nothing
derived from it is kept on it: :class:`esg.index.ClusterIndex` keeps that, per snapshot. A :class:`Fit`
says where a configuration runs on a node and what MIG change it needs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from esg import mig
from esg.model import Config, set_field


@dataclass(frozen=True)
class SliceRef:
    """A MIG GPU instance identified by its profile and placement start (memory slice).

    Its ``__init__``, hash, ``==`` and order are written out in the class (native methods when compiled,
    instead of interpreted ones called at every dict and set look-up of ``idle_workers``): they are the
    ones ``@dataclass(frozen=True, order=True)`` makes -- the hash ``hash((profile, start))``, worked out
    once, at construction, so sets and dicts keyed on it iterate as before. (Compiled, a class that
    defines ``__eq__`` has every comparison slot, and ``order=True`` refuses to overwrite them.) A copy
    is rebuilt from the two fields, and hashes afresh."""

    profile: str
    start: int
    _hash: int = field(init=False, repr=False, compare=False)

    def __init__(self, profile: str, start: int) -> None:
        set_field(self, "profile", profile)
        set_field(self, "start", start)
        set_field(self, "_hash", hash((profile, start)))

    def __eq__(self, other: object) -> bool:  # the dataclass's own, written out for mypyc (esg_build)
        if isinstance(other, SliceRef):
            return self.profile == other.profile and self.start == other.start
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __reduce__(self) -> tuple:
        return (SliceRef, (self.profile, self.start))

    def __lt__(self, other: object) -> bool:
        if isinstance(other, SliceRef):
            return (self.profile, self.start) < (other.profile, other.start)
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, SliceRef):
            return (self.profile, self.start) <= (other.profile, other.start)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, SliceRef):
            return (self.profile, self.start) > (other.profile, other.start)
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, SliceRef):
            return (self.profile, self.start) >= (other.profile, other.start)
        return NotImplemented


@dataclass
class Slice:
    """One MIG instance of a node: where it sits, whether a batch uses it, and its MIG UUID (None while
    it has no compute instance, or where the driver does not know it). The scheduler's view and what an
    agent's heartbeat reports are the same thing; mutable because a snapshot marks its reservations on
    it (a driver copies the slices it was sent before planning on them)."""

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

    def free_compute_slices(self) -> int:
        if self.gpu_model is None:
            return 0
        return mig.free_compute_slices(self.gpu_model, [(s.ref.profile, s.ref.start) for s in self.slices])

    def idle_compute_slices(self) -> int:
        """The compute slices no busy instance holds (asked after every change of the node: the busy
        instances' profiles only, no (profile, start) pairs)."""
        if self.gpu_model is None:
            return 0
        return mig.compute_slices_left(self.gpu_model, [s.ref.profile for s in self.slices if s.busy])


@dataclass(frozen=True)
class Fit:
    """Where a configuration runs on a node: the slice (None on CPU) and MIG changes it needs."""

    node: str
    slice: SliceRef | None = None
    create: bool = False
    destroy: tuple[SliceRef, ...] = ()
    warm_worker: tuple[str, SliceRef | None] | None = None
    """The idle warm worker this placement takes (None: a cold start, or not tracked)."""
    evict: tuple[tuple[str, int], ...] = ()
    """Idle warm workers (function, how many) to stop on ``slice`` before the new worker starts there:
    the GPU memory they hold is what it lacks (:mod:`esg.memory`)."""

    @property
    def reconfigures(self) -> bool:
        return self.create or bool(self.destroy)

    @property
    def changed_instances(self) -> int:
        return int(self.create) + len(self.destroy)
