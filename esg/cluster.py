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
from typing import Final

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
    memo: dict = field(default_factory=dict, repr=False, compare=False)
    """What :class:`ClusterSnapshot` derived from this state (fits, layout, idle slices). A driver that
    hands the same unchanged object to several steps keeps it; a reservation clears it."""

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

    @property
    def reconfigures(self) -> bool:
        return self.create or bool(self.destroy)

    @property
    def changed_instances(self) -> int:
        return int(self.create) + len(self.destroy)


_MISSING: Final = object()
_NONE: Final[frozenset[str]] = frozenset()


@dataclass
class ClusterSnapshot:
    """The nodes' states and what is derived from them, kept up to date as nodes change.

    Per node (in ``NodeState.memo``): fits, layout, idle compute. Across nodes: the capacity order and
    which nodes have an idle warm worker of each function. Both indexes are built on first use and then
    updated one node at a time (a reservation, a release, a driver's :meth:`put`), so a step that
    changes one node does not re-sort or re-scan the others. The routes made from the capacity order
    (:meth:`route`) are kept until a change moves a node to another place in it: a node's key moves at
    each of its changes, its place among the others seldom.
    """

    nodes: dict[str, NodeState]
    tracks_workers: bool = False
    """Whether ``NodeState.idle_workers`` is filled in (the emulator knows every worker)."""
    _routes: dict[tuple[tuple[str, ...], bool], list[str]] = field(default_factory=dict, repr=False, compare=False)
    """(preferred nodes, gpu?) -> :meth:`route`'s order; kept until a capacity order's nodes change places."""
    _capacity: dict[bool, tuple[list[tuple], list[str], dict[str, int]]] = field(
        default_factory=dict, repr=False, compare=False)
    """gpu? -> (the nodes' sort keys in order, their names in that order, node -> its place); a key ends
    with the node's name (:func:`_reorder`)."""
    _warm: dict[str, set[str]] | None = field(default=None, repr=False, compare=False)
    _warm_of: dict[str, frozenset[str]] = field(default_factory=dict, repr=False, compare=False)
    nowhere: set[Config] = field(default_factory=set, repr=False, compare=False)
    """Configurations found to fit on no node (a walk of every node's :meth:`fit`), until any node
    changes: a driver that keeps the snapshot across steps does not walk them again while nothing
    changed."""
    version: int = field(default=0, repr=False, compare=False)
    """Counts node changes (reservations, releases, :meth:`put`)."""
    changed_at: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    """Node -> the :attr:`version` of its last change (absent: unchanged since the snapshot was built)."""
    idle_epoch: int = field(default=0, repr=False, compare=False)
    """Counts the changes after which any function's idle workers may have moved (a node's state put or
    built again without naming the function whose workers moved, workers killed)."""
    idle_moves: dict[str, int] = field(default_factory=dict, repr=False, compare=False)
    """Function -> the changes that moved its idle workers alone (a warm worker taken, a batch finished).
    While neither this count nor :attr:`idle_epoch` moved, the function's idle workers are where they
    were: a reader that derived something from them alone need not look at the nodes again."""
    instances_epoch: int = field(default=0, repr=False, compare=False)
    """Counts the changes after which a node's MIG instances per profile may have moved: its
    ``prewarm.instances_by_profile`` memo (kept over a change only while the instances are the same ones)
    absent, or another object than at its last change. While it stays, a sum of the nodes' counts made
    since is still the cluster's."""
    _instances_of: dict[str, dict[str, int] | None] = field(default_factory=dict, repr=False, compare=False)
    """Node -> its instance counts memo at its last change (:attr:`instances_epoch`)."""
    _idle_totals: dict[str, dict[str | None, int]] | None = field(default=None, repr=False, compare=False)
    """Function -> its idle workers by kind summed over the nodes (:meth:`idle_totals`; None: not asked
    yet)."""
    _idle_of: dict[str, dict[str, dict[str | None, int]]] = field(default_factory=dict, repr=False, compare=False)
    """Node -> its :func:`idle_by_kind` counts as :attr:`_idle_totals` last counted them."""
    _deferred: set[str] | None = field(default=None, repr=False, compare=False)
    """While :func:`tracked` builds the snapshot: the nodes changed, whose indexes are updated once when
    it is done rather than at each of its claims (three updates a claim, hundreds of claims a turn)."""

    @classmethod
    def of(cls, nodes: Iterable[NodeState]) -> ClusterSnapshot:
        return cls({n.name: n for n in nodes})

    def copy(self) -> ClusterSnapshot:
        return copy.deepcopy(self)

    def put(self, state: NodeState, memo_kept: bool = False, workers: bool | str = True) -> None:
        """Replace one node's state. A driver may keep one snapshot across steps and put only the nodes
        that changed: what was derived from the other nodes' states stays remembered. ``memo_kept``: the
        driver vouches that ``state.memo`` holds only what is true of the state as it is now (whoever
        changed the state cleared what it made stale, as the emulator's node models do), so it is kept;
        else it is cleared. ``workers``: a function's name when the driver vouches that, of the node's
        idle workers, only that function's changed since the snapshot last saw the state (the warm
        index then looks at that function alone)."""
        self.nodes[state.name] = state
        self._changed(state.name, workers=workers, clear=not memo_kept)

    def idle_compute(self, node_name: str) -> int:
        """Idle compute slices of a node (remembered until the node's next reservation)."""
        memo = self.nodes[node_name].memo
        if IDLE_COMPUTE not in memo:
            memo[IDLE_COMPUTE] = self.nodes[node_name].idle_compute_slices()
        return memo[IDLE_COMPUTE]

    def by_capacity(self, gpu: bool) -> list[str]:
        """Node names, most free capacity first: idle compute slices for GPU work, vCPUs for CPU work."""
        return self.route((), gpu)

    def max_free_vcpus(self) -> int:
        """The most free vCPUs on any node (0 with no nodes)."""
        if not self.nodes:
            return 0
        return self.nodes[self.route((), False)[0]].vcpus_free

    def route(self, preferred: tuple[str, ...], gpu: bool) -> list[str]:
        """The nodes to try, in order: ``preferred`` ones first (those that exist), then the rest by free
        capacity for GPU or CPU work (remembered until a node changes places in that order)."""
        key = (preferred, gpu)
        order = self._routes.get(key)
        if order is None:
            if preferred:
                order = _preferred_first(preferred, self.nodes, self.route((), gpu))
            else:
                order = self._capacity_index(gpu)[1][:]  # (a copy: the names' list follows the order)
            self._routes[key] = order
        return order

    def nodes_with_warm(self, function: str) -> frozenset[str] | set[str]:
        """Nodes with an idle warm worker of ``function`` (a live view: it follows later changes)."""
        if self._warm is None:
            self._warm = {}
            for name, state in self.nodes.items():
                self._index_warm(name, state)
        return self._warm.get(function, _NONE)

    def idle_totals(self, function: str) -> dict[str | None, int]:
        """``function``'s idle warm workers summed over the nodes by kind of instance (MIG profile, None
        for CPU; positive counts only). Counted over every node at the first ask, then moved at each
        change of a node by what changed in its :func:`idle_by_kind` counts (only the named function's
        when the change names one): ESG asks for a function's totals after nearly every change of its
        workers, and on 16 nodes a walk of the nodes for each was 7 % of the replay. A value nothing
        changes: a move makes a new dict."""
        if self._idle_totals is None:
            self._idle_totals = {}
            for name, state in self.nodes.items():
                self._count_idle(name, state, None)
        return self._idle_totals.get(function, _NO_KINDS)

    def _count_idle(self, node_name: str, state: NodeState, function: str | None) -> None:
        """Move :attr:`_idle_totals` by what changed in the node's idle counts since they were last
        counted (``function``: only its counts may have)."""
        old = self._idle_of.get(node_name, _NO_IDLE)
        new = self._idle_of[node_name] = idle_by_kind(state)
        if function is not None:
            self._move_idle(function, old.get(function), new.get(function))
            return
        for f, counts in old.items():
            self._move_idle(f, counts, new.get(f))
        for f, counts in new.items():
            if f not in old:
                self._move_idle(f, None, counts)

    def _move_idle(self, function: str, old: dict[str | None, int] | None, new: dict[str | None, int] | None) -> None:
        """Move ``function``'s totals from a node's ``old`` counts by kind to its ``new`` ones."""
        if old is new:
            return  # (counts carried over a change are the same dict)
        assert self._idle_totals is not None
        totals = dict(self._idle_totals.get(function, _NO_KINDS))
        if old is not None:
            for kind, n in old.items():
                left = totals[kind] - n
                if left:
                    totals[kind] = left
                else:
                    del totals[kind]
        if new is not None:
            for kind, n in new.items():
                totals[kind] = totals.get(kind, 0) + n
        if totals:
            self._idle_totals[function] = totals
        elif function in self._idle_totals:
            del self._idle_totals[function]

    def changed_since(self, version: int) -> list[str]:
        """The nodes that changed after :attr:`version` was ``version``."""
        if version >= self.version:
            return []
        return [n for n, v in self.changed_at.items() if v > version]

    def idle_profiles(self, node_name: str) -> frozenset[str]:
        """The MIG profiles of a node's idle instances (remembered until the node changes)."""
        memo = self.nodes[node_name].memo
        found = memo.get("idle_profiles")
        if found is None:
            found = memo["idle_profiles"] = frozenset(s.ref.profile for s in self.nodes[node_name].slices if not s.busy)
        return found

    def layout(self, node_name: str) -> tuple[tuple[str, int, bool], ...]:
        """A node's MIG instances as sorted (profile, start, busy)."""
        memo = self.nodes[node_name].memo
        if "layout" not in memo:
            memo["layout"] = tuple(sorted((s.ref.profile, s.ref.start, s.busy) for s in self.nodes[node_name].slices))
        return memo["layout"]

    def fit(self, node_name: str, config: Config, function: str | None = None) -> Fit | None:
        """Where ``config`` runs on the node (None: it does not fit); with ``function``, the fit takes an
        idle warm worker of it when one waits on that slice. Remembered until the node changes."""
        node = self.nodes[node_name]
        memo = node.memo
        found = memo.get(config, _MISSING)
        fit: Fit | None  # (typed: compiled, a field read on what the untyped memo holds is a generic look-up)
        if found is _MISSING:
            fit = memo[config] = self._fit(node_name, config)
        else:
            fit = found
        if fit is None or function is None or fit.create:
            return fit
        warm = memo.get((config, function), _MISSING)
        if warm is _MISSING:
            key = self._idle_worker(node, function, fit.slice)
            warm = memo[(config, function)] = None if key is None else _warm_fit_on(fit.node, key)
        return fit if warm is None else warm

    @staticmethod
    def _idle_worker(node: NodeState, function: str, slice_: SliceRef | None) -> tuple[str, SliceRef | None] | None:
        """An idle worker of ``function`` that a batch fitting on ``slice_`` could take: on that slice, or on
        another idle instance of its MIG profile on the node (the layout names one idle instance per
        profile, which need not be the one holding the worker)."""
        key = (function, slice_)
        if node.idle_workers.get(key, 0) > 0:
            return key
        if slice_ is None:
            return None
        for s in node.slices:
            if not s.busy and s.ref.profile == slice_.profile and node.idle_workers.get((function, s.ref), 0) > 0:
                return (function, s.ref)
        return None

    def _fit(self, node_name: str, config: Config) -> Fit | None:
        node = self.nodes[node_name]
        if node.vcpus_free < config.vcpus:
            return None
        if config.gpu is None:
            return _cpu_fit_on(node_name)
        if node.gpu_model is None:
            return None
        code = node.memo.get(LAYOUT_CODE)
        if code is None:
            code = node.memo[LAYOUT_CODE] = layout_code(node)
        key = (node_name, node.gpu_model, code, config.gpu)
        fit = _GPU_FITS_BY_CODE.get(key, _UNKNOWN)
        if fit is _UNKNOWN:
            placed = gpu_fit(node.gpu_model, self.layout(node_name), config.gpu)
            fit = _GPU_FITS_BY_CODE[key] = None if placed is None else Fit(node_name, placed[0], placed[1], placed[2])
        return fit

    def reserve(self, config: Config, fit: Fit) -> None:
        node = self.nodes[fit.node]
        kept = CarriedMemos(node)
        taken = 0
        before = 0
        node.vcpus_free -= config.vcpus
        if fit.warm_worker is not None and (before := node.idle_workers.get(fit.warm_worker, 0)) > 0:
            node.idle_workers[fit.warm_worker] -= 1
        if fit.slice is not None:
            if fit.destroy:
                node.slices = [s for s in node.slices if s.ref not in fit.destroy]
                kept.instances = kept.idle = None
            for s in node.slices:
                if s.ref == fit.slice:
                    taken = 0 if s.busy else 1
                    s.busy = True
                    break
            else:
                node.slices.append(Slice(fit.slice, busy=True))
                kept.instances = None
                taken = 1
        killed = False
        if fit.destroy:
            for k in [k for k in node.idle_workers if k[1] is not None and k[1] in fit.destroy]:
                del node.idle_workers[k]  # destroying a MIG instance kills its workers
                killed = True
        if killed:
            kept.by_kind = None
        kept.put_back(node, fit.slice, -taken, fit.warm_worker, before)
        self._changed(fit.node, workers=True if killed else
                      (fit.warm_worker[0] if fit.warm_worker is not None else False), clear=False)

    def release(self, config: Config, fit: Fit) -> None:
        """Undo :meth:`reserve`'s claim (the slice stays, idle; destroyed slices stay destroyed)."""
        self._release(self.nodes[fit.node], config, fit)
        self._changed(fit.node, workers=False)

    @staticmethod
    def _release(node: NodeState, config: Config, fit: Fit) -> None:
        node.vcpus_free = min(node.vcpus_total, node.vcpus_free + config.vcpus)
        for s in node.slices:
            if s.ref == fit.slice:
                s.busy = False

    def finish(self, function: str, config: Config, fit: Fit) -> None:
        """A reserved batch ended: :meth:`release`, and its worker waits idle and warm on its slice (a
        slice the node's state did not show yet is there now)."""
        node = self.nodes[fit.node]
        kept = CarriedMemos(node)
        freed = 0
        if fit.slice is not None:
            for s in node.slices:
                if s.ref == fit.slice:
                    freed = 1 if s.busy else 0
                    break
            else:
                node.slices.append(Slice(fit.slice))
                kept.instances = None
        self._release(node, config, fit)
        key = (function, fit.slice)
        before = node.idle_workers.get(key, 0)
        node.idle_workers[key] = before + 1
        kept.put_back(node, fit.slice, freed, key, before)
        self._changed(fit.node, workers=function, clear=False)

    def _changed(self, node_name: str, workers: bool | str = True, clear: bool = True) -> None:
        """A node's state changed: forget what was derived from it (unless ``clear`` is False: its memo
        is known to be up to date) and update the indexes (``workers``: its idle workers may have changed
        too; a function's name: only that function's)."""
        state = self.nodes[node_name]
        if clear:
            state.memo.clear()
        if self._deferred is not None:      # building the snapshot: the indexes follow once, at the end
            self._deferred.add(node_name)
            return
        self.version += 1
        self.changed_at[node_name] = self.version
        if workers is True:
            self.idle_epoch += 1
        elif workers is not False:
            self.idle_moves[workers] = self.idle_moves.get(workers, 0) + 1
        self.nowhere.clear()
        instances: dict[str, int] | None = state.memo.get(INSTANCES)
        if instances is None or instances is not self._instances_of.get(node_name):
            self.instances_epoch += 1
            self._instances_of[node_name] = instances
        moved = False
        for gpu, (ordered, names, places) in self._capacity.items():
            if _reorder(ordered, names, places, node_name, self._capacity_key(node_name, gpu)):
                moved = True
        if moved:
            self._routes.clear()  # the routes follow the order of nodes, not their keys
        if workers is not False and self._idle_totals is not None:
            self._count_idle(node_name, state, None if workers is True else workers)
        if workers is False or self._warm is None:
            return
        if workers is True:
            self._index_warm(node_name, state)
            return
        counts = state.memo.get(IDLE_BY_KIND)  # (carried over the change where it could be: no scan)
        warm_here = (workers in counts if counts is not None
                     else any(n > 0 for (f, _), n in state.idle_workers.items() if f == workers))
        nodes = self._warm.get(workers)
        if warm_here:
            if nodes is None:
                nodes = self._warm[workers] = set()
            if node_name not in nodes:
                nodes.add(node_name)
                self._warm_of[node_name] = self._warm_of.get(node_name, _NONE) | {workers}
        elif nodes is not None and node_name in nodes:
            nodes.discard(node_name)
            self._warm_of[node_name] = self._warm_of[node_name] - {workers}

    def _capacity_key(self, node_name: str, gpu: bool) -> tuple:
        if gpu:
            return (-self.idle_compute(node_name), -self.nodes[node_name].vcpus_free, node_name)
        return (-self.nodes[node_name].vcpus_free, node_name)

    def _capacity_index(self, gpu: bool) -> tuple[list[tuple], list[str], dict[str, int]]:
        index = self._capacity.get(gpu)
        if index is None:
            ordered = sorted([self._capacity_key(n, gpu) for n in self.nodes])
            names: list[str] = [k[-1] for k in ordered]
            places: dict[str, int] = {}
            for i, name in enumerate(names):
                places[name] = i
            index = self._capacity[gpu] = (ordered, names, places)
        return index

    def _index_warm(self, node_name: str, state: NodeState) -> None:
        assert self._warm is not None
        old = self._warm_of.get(node_name, _NONE)
        new = self._warm_of[node_name] = _warm_functions(state)
        for f in old - new:
            self._warm[f].discard(node_name)
        for f in new - old:
            self._warm.setdefault(f, set()).add(node_name)


def _reorder(ordered: list[tuple], names: list[str], places: dict[str, int], name: str, key: tuple) -> bool:
    """Put node ``name``'s new sort ``key`` into the capacity order (``ordered``, the nodes' ``names`` in
    the same order, each node's place in ``places``); whether the order of nodes changed. A node's key
    moves at nearly every change of it, its place among the others less often: a key that still sorts
    between its neighbours takes its old key's place (two comparisons, where finding the old key and
    the new one's place took two binary searches at every change)."""
    at = places.get(name, -1)
    if at >= 0:
        if (at == 0 or ordered[at - 1] < key) and (at + 1 == len(ordered) or key < ordered[at + 1]):
            ordered[at] = key
            return False
        del ordered[at]
        del names[at]
    to = _place_in(ordered, key)
    ordered.insert(to, key)
    names.insert(to, name)
    lo, hi = (to, len(ordered)) if at < 0 else (min(at, to), max(at, to) + 1)
    for i in range(lo, hi):  # the places that shifted
        places[names[i]] = i
    return True


def _preferred_first(preferred: tuple[str, ...], nodes: dict[str, NodeState], order: list[str]) -> list[str]:
    """``preferred``'s nodes (those in ``nodes``, each once, in their order), then the rest of ``order``.
    Built with plain loops over the few preferred nodes: on 16 nodes a route is built again after most
    changes of the capacity order, and ``dict.fromkeys`` and a list's ``in`` go through the interpreter's
    generic calls compiled."""
    first: list[str] = []
    for n in preferred:
        if n in nodes and not _listed(first, n):
            first.append(n)
    found = first[:]
    for n in order:
        if not _listed(first, n):
            found.append(n)
    return found


def _listed(names: list[str], name: str) -> bool:
    for n in names:
        if n == name:
            return True
    return False


def _place_in(ordered: list[tuple], key: tuple) -> int:
    """``bisect.bisect_left(ordered, key)``, written out: compiled, a call into the ``bisect`` module goes
    through the interpreter's generic call (four at every change of a node)."""
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if ordered[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo


IDLE_BY_KIND: Final = "idle_by_kind"
"""The ``NodeState.memo`` key of :func:`idle_by_kind` (idle workers per function, by kind)."""
INSTANCES: Final = "instances"
"""The ``NodeState.memo`` key of ``prewarm.instances_by_profile`` (kept over a change that only makes an
instance busy or idle)."""
LAYOUT_CODE: Final = "layout_code"
"""The ``NodeState.memo`` key of :func:`layout_code`."""
IDLE_COMPUTE: Final = "idle"
"""The ``NodeState.memo`` key of :meth:`ClusterSnapshot.idle_compute` (carried over a change,
:func:`carry_idle_compute`)."""


class CarriedMemos:
    """What a change of one node keeps of its memo (``NodeState.memo``): read before the change, put
    back after it, moved by what the change did. A change that made one of them untrue beyond that sets
    it to None before :meth:`put_back` (a MIG instance created or destroyed: the instance counts and idle
    compute slices; workers killed: the idle counts)."""

    def __init__(self, node: NodeState) -> None:
        memo = node.memo
        self.by_kind: dict | None = memo.get(IDLE_BY_KIND)
        self.instances: dict[str, int] | None = memo.get(INSTANCES)
        self.idle: int | None = memo.get(IDLE_COMPUTE)

    def put_back(self, node: NodeState, ref: SliceRef | None, moved: int,
                 worker: tuple[str, SliceRef | None] | None, before: int) -> None:
        """Clear ``node``'s memo and put back what is kept: the instance counts as they were (the same
        instances), the idle compute slices moved by ``ref``'s (:func:`carry_idle_compute`), the idle counts
        moved by ``worker``'s count from ``before`` (:func:`carry_idle_by_kind`; None: no count moved)."""
        node.memo.clear()
        if self.instances is not None:
            node.memo[INSTANCES] = self.instances
        carry_idle_compute(node, self.idle, ref, moved)
        if worker is not None:
            carry_idle_by_kind(node, self.by_kind, worker, before)
        elif self.by_kind is not None:
            node.memo[IDLE_BY_KIND] = self.by_kind  # its idle workers did not change


def carry_idle_compute(node: NodeState, kept: int | None, ref: SliceRef | None, moved: int) -> None:
    """After a change that cleared ``node``'s memo, in which only ``ref`` went from idle (or absent) to
    busy (``moved`` -1) or from busy to idle (+1), or no instance's busy state moved (0): put back its
    idle compute slices from before the change (``kept``; None: not known, left to be counted), moved by
    ``ref``'s (the batches of a node take and free an instance at every change; a count of every busy
    instance at each was 3 % of the replay)."""
    if kept is None:
        return
    if moved and ref is not None and node.gpu_model is not None:
        kept += moved * mig.compute_slices(node.gpu_model, ref.profile)
    node.memo[IDLE_COMPUTE] = kept


def carry_idle_by_kind(node: NodeState, kept: dict | None, key: tuple[str, SliceRef | None], before: int) -> None:
    """After a change of ``node`` cleared its memo, in which the only change to its idle workers was
    ``key``'s count going from ``before``: put back :func:`idle_by_kind`'s counts from before the
    change (``kept``), updated by that count's move -- a kind (or a function) whose count reaches 0 is
    left out, one that had none is added -- so that they hold what a scan would rebuild: the same
    functions, kinds and counts (perhaps in another order, which no reader of them depends on: each looks
    a function or a kind up, or takes their set). ``kept`` itself is left as it was (new dicts for what
    changed): a copy of the state may share it."""
    if kept is None:
        return
    moved = node.idle_workers.get(key, 0) - before
    if not moved:
        node.memo[IDLE_BY_KIND] = kept
        return
    function, ref = key
    kind = None if ref is None else ref.profile
    counts = dict(kept.get(function, _NO_COUNTS))
    n = counts.get(kind, 0) + moved
    if n > 0:
        counts[kind] = n
    else:
        del counts[kind]
    found = dict(kept)
    if counts:
        found[function] = counts
    else:
        del found[function]
    node.memo[IDLE_BY_KIND] = found


_NO_COUNTS: Final[dict[str | None, int]] = {}
_NO_KINDS: Final[dict[str | None, int]] = {}
_NO_IDLE: Final[dict[str, dict[str | None, int]]] = {}


def idle_by_kind(node: NodeState) -> dict[str, dict[str | None, int]]:
    """A node's idle warm workers counted per function by kind of instance (MIG profile, None for
    CPU); only positive counts are held, in no order a caller may rely on. Remembered on its state
    (``NodeState.memo``; a change of one worker count carries it over, :func:`carry_idle_by_kind`, any
    other change clears it): ESG asks for every function and profile at every step (the pool rule,
    and the kinds a queue's function is warm on), and the snapshot's idle totals
    (:meth:`ClusterSnapshot.idle_totals`) follow it at every change. The caller must not change it."""
    found: dict[str, dict[str | None, int]] | None = node.memo.get(IDLE_BY_KIND)
    if found is None:
        found = {}
        for (f, ref), n in node.idle_workers.items():
            if n > 0:
                kind = None if ref is None else ref.profile
                counts = found.get(f)
                if counts is None:
                    found[f] = {kind: n}
                else:
                    counts[kind] = counts.get(kind, 0) + n
        node.memo[IDLE_BY_KIND] = found
    return found


def _warm_functions(node: NodeState) -> frozenset[str]:
    """Functions with an idle warm worker on the node (remembered on its state): the functions of
    :func:`idle_by_kind`'s counts when the memo holds them (carried over the change), else a scan."""
    found = node.memo.get("warm")
    if found is None:
        counts = node.memo.get(IDLE_BY_KIND)
        if counts is not None:
            found = frozenset(counts)
        else:
            found = frozenset(k[0] for k, v in node.idle_workers.items() if v > 0)
        node.memo["warm"] = found
    return found


# The fits below are remembered in module dicts rather than through ``functools.cache``: compiled, a
# call through the cache's wrapper goes through the interpreter's generic call (~1.7 million calls in
# ten minutes of the heavy replay), a look-up in a dict does not.
_CPU_FITS: Final[dict[str, Fit]] = {}
_WARM_FITS: Final[dict[tuple[str, tuple[str, SliceRef | None]], Fit]] = {}


def _cpu_fit_on(node_name: str) -> Fit:
    """A CPU configuration's :class:`Fit` on a node (immutable, so shared, as the GPU ones in
    ``_GPU_FITS_BY_CODE``)."""
    fit = _CPU_FITS.get(node_name)
    if fit is None:
        fit = _CPU_FITS[node_name] = Fit(node_name)
    return fit


def _warm_fit_on(node_name: str, worker: tuple[str, SliceRef | None]) -> Fit:
    """The :class:`Fit` that takes the idle warm ``worker`` (function, slice) on a node (shared, as the
    GPU ones in ``_GPU_FITS_BY_CODE``)."""
    key = (node_name, worker)
    fit = _WARM_FITS.get(key)
    if fit is None:
        fit = _WARM_FITS[key] = Fit(node_name, worker[1], False, (), worker)
    return fit


_GPU_FITS_BY_CODE: Final[dict[tuple[str, str, int, str], Fit | None]] = {}
"""A GPU configuration's fit on a node by (node, GPU model, :func:`layout_code`, profile): :func:`gpu_fit`
as a shared (immutable) :class:`Fit`, what :meth:`ClusterSnapshot.fit` looks up for a node it has not fitted the
profile on since its last change (a node's layout changes at nearly every change of the node; a layout
as a key is hashed element by element at each look-up and compared element by element when found, its
code is one integer)."""
_SLOT_BITS: Final[dict[SliceRef, int]] = {}
"""Each MIG instance (profile, start) seen, its two bits in :func:`layout_code`: given in the order first
seen in the process, the same on every node (a code is only ever compared, never shown or kept)."""


def layout_code(node: NodeState) -> int:
    """The node's MIG instances with their busy states as one integer: two bits per instance (profile,
    start), the first for an idle one, the second for a busy one. Two nodes have the same code exactly
    when they have the same :meth:`ClusterSnapshot.layout` (a node holds an instance at most once)."""
    code = 0
    for s in node.slices:
        bit = _SLOT_BITS.get(s.ref)
        if bit is None:
            bit = _SLOT_BITS[s.ref] = 1 << (2 * len(_SLOT_BITS))
        code |= bit << 1 if s.busy else bit
    return code


_UNKNOWN: Final = Fit("")
"""Not looked up yet (``_GPU_FITS_BY_CODE``; no answer is this object)."""


def gpu_fit(model: str, layout: tuple[tuple[str, int, bool], ...], profile: str
            ) -> tuple[SliceRef, bool, tuple[SliceRef, ...]] | None:
    """Where ``profile`` runs on a GPU whose instances are ``layout`` (profile, start, busy):
    (slice, create?, idle slices to destroy), or None. A pure function of the layout, which
    :meth:`ClusterSnapshot.fit` remembers by :func:`layout_code`."""
    start: int | None
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
    victims = tuple(SliceRef(p, st) for p, st, busy in layout
                    if not busy and mig.overlaps(model, (p, st), (profile, start)))
    return SliceRef(profile, start), True, victims


@dataclass(frozen=True)
class Claim:
    """A batch the scheduler placed with :meth:`ClusterSnapshot.reserve`, as a live driver remembers it
    until its node's report shows it (``finished``: its result came back)."""

    batch_id: str
    function: str
    config: Config
    fit: Fit
    finished: bool = False


@dataclass(frozen=True)
class NodeReport:
    """A node's own report (its agent's heartbeat): its state, the batches it was running when it wrote
    the report (the state shows them busy) and those it had answered (the state shows them idle again)."""

    state: NodeState
    running: frozenset[str] = frozenset()
    done: frozenset[str] = frozenset()


def tracked(reports: Iterable[NodeReport], claims: Iterable[Claim]) -> ClusterSnapshot:
    """The cluster as a live driver should plan on it: each node as its last report says, with the
    scheduler's own claims the report cannot show yet kept on top -- a batch the report does not know
    is still reserved (and, once finished, its worker idle on its slice); one the report shows running
    keeps its slice and vCPUs claimed (the worker it took is the report's) and, when its result came
    since, is finished there; one the report shows answered is left alone.

    vCPUs are the driver's own account: the node's total less every unanswered claim (the report's
    free count lags the batches sent since). The reports' states become the snapshot's (and change)."""
    seen = _reported(reports)
    snap = ClusterSnapshot({n: r.state for n, r in seen.items()}, tracks_workers=True, _deferred=set())
    _claim(snap, seen, claims)
    return snap


def retrack(snap: ClusterSnapshot, reports: Iterable[NodeReport], claims: Iterable[Claim]) -> None:
    """Put the reported nodes into ``snap`` as :func:`tracked` builds them (``claims`` on other nodes are
    ignored), the other nodes left as they are.

    For a driver that keeps one snapshot across steps: the step's own reservations stay on it (they are
    the claims of the batches it sends), a batch whose result came is put through
    :meth:`ClusterSnapshot.finish` on it, and only a node with a new report is built again -- not every
    node over every claim at every step."""
    seen = _reported(reports)
    snap._deferred = set(seen)
    for name, r in seen.items():
        snap.nodes[name] = r.state
    _claim(snap, seen, claims)


def _reported(reports: Iterable[NodeReport]) -> dict[str, NodeReport]:
    """The reports by node, each state made ready for its claims: nothing derived kept, and every vCPU
    free (the claims take theirs again)."""
    seen: dict[str, NodeReport] = {}
    for r in reports:
        r.state.memo.clear()
        r.state.vcpus_free = r.state.vcpus_total
        seen[r.state.name] = r
    return seen


def _claim(snap: ClusterSnapshot, seen: dict[str, NodeReport], claims: Iterable[Claim]) -> None:
    """Reserve (and finish) ``claims`` on the ``seen`` nodes of ``snap``, whose indexes follow once at the
    end (``snap._deferred`` is set: the nodes already changed)."""
    for c in claims:
        report = seen.get(c.fit.node)
        if report is None or c.batch_id in report.done:
            continue
        if c.batch_id not in report.running:
            snap.reserve(c.config, c.fit)
        else:
            # the agent had taken it: its worker shows taken, but its slice may not be carved yet (the
            # MIG change comes after the take), so the slice's claim stays -- it is idempotent
            snap.reserve(c.config, Fit(c.fit.node, c.fit.slice, c.fit.create, c.fit.destroy))
        if c.finished:
            snap.finish(c.function, c.config, c.fit)
    changed, snap._deferred = snap._deferred, None
    for name in sorted(changed or ()):
        snap._changed(name)
