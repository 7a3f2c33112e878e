"""The cluster index: everything the scheduler derives from the nodes' states, kept one node at a time.

A :class:`~esg.cluster.ClusterSnapshot` holds the nodes' states (plain records) and one
:class:`ClusterIndex`. Every change of a node goes through the snapshot -- a reservation, a release, a
finished batch, a driver's ``put`` -- which tells the index what changed (:meth:`ClusterIndex.changed`);
the index answers the scheduler's questions from what it kept:

* per node (:class:`NodeFacts`): fits, the MIG layout, idle compute slices, idle workers by function and
  kind, instances by profile, the profiles of its idle instances, those holding an idle worker;
* across nodes: the free-capacity order and the routes made from it, the nodes with an idle warm worker
  of each function, each function's idle workers summed by kind, the cluster's instances by profile, and
  the configurations found to fit on no node.

Contracts. An answer is what a scan of the current states gives (``tests/core/test_index.py`` checks
each against one after random changes); a caller never changes a returned dict or set. Generation
numbers say when an answer may have moved: :attr:`ClusterIndex.version` (any node),
:meth:`ClusterIndex.idle_generation` (one function's idle workers), :attr:`ClusterIndex.instances_generation`
(the instances per profile); a reader may keep what it derived while the generation stays. Nothing
outside this module keeps what it derives from the states.

Why incremental: a step changes one or two nodes of many, and the scheduler asks about every node at
every step (fits along a route, idle workers per function and kind, capacity order). Per-node facts are
carried over a change where the change says exactly what moved (a worker taken or idle again, an
instance made busy or idle); anything else starts the node's facts afresh.
"""

from __future__ import annotations

from typing import Final

from esg import mig
from esg.memory import evictions, idle_on, instance_memory_mb, worker_mb
from esg.model import Config
from esg.state import Fit, NodeState, SliceRef

Worker = tuple[str, SliceRef | None]
"""An idle warm worker's kind: (function, MIG instance or None for CPU)."""
Layout = tuple[tuple[str, int, bool], ...]
"""A node's MIG instances as sorted (profile, start, busy)."""

_NONE: Final[frozenset[str]] = frozenset()
_NO_KINDS: Final[dict[str | None, int]] = {}
_NO_IDLE: Final[dict[str, dict[str | None, int]]] = {}
_UNKNOWN: Final = Fit("")
"""Not looked up yet (the fits kept; no answer is this object)."""


class NodeFacts:
    """What the index derived from one node's state since its last change (None or -1: not yet)."""

    def __init__(self) -> None:
        self.fits: dict[Config, Fit | None] = {}
        self.warm_fits: dict[tuple[Config, str], Fit | None] = {}
        self.cold_fits: dict[tuple[Config, str], Fit | None] = {}
        """A new worker's fit where its GPU memory decides (:mod:`esg.memory`)."""
        self.layout: Layout | None = None
        self.layout_code = -1
        self.idle_compute = -1
        self.idle_by_kind: dict[str, dict[str | None, int]] | None = None
        self.warm: frozenset[str] | None = None
        self.instances: dict[str, int] | None = None
        self.idle_profiles: frozenset[str] | None = None
        self.stocked: frozenset[str] | None = None
        self.by_function: dict[str, dict[str, int]] = {}


class Carry:
    """What a change of one node keeps of its facts: read before the change, moved by what it did. A
    change that made one of them untrue beyond that sets it to None (a MIG instance created or
    destroyed: ``instances`` and ``idle``; workers killed: ``by_kind``)."""

    def __init__(self, facts: NodeFacts | None) -> None:
        self.by_kind: dict[str, dict[str | None, int]] | None = None if facts is None else facts.idle_by_kind
        self.instances: dict[str, int] | None = None if facts is None else facts.instances
        self.idle: int | None = None if facts is None or facts.idle_compute < 0 else facts.idle_compute

    def kept(self, node: NodeState, ref: SliceRef | None, moved: int, worker: Worker | None, before: int) -> NodeFacts:
        """The node's facts after a change in which only ``ref`` went from idle (or absent) to busy
        (``moved`` -1) or back (+1), or none moved (0), and only ``worker``'s count moved from
        ``before`` (None: no count moved): the instance counts as they were, the idle compute slices
        moved by ``ref``'s, the idle counts moved by the worker's (new dicts: a copy may share the old)."""
        facts = NodeFacts()
        facts.instances = self.instances
        if self.idle is not None:
            idle = self.idle
            if moved and ref is not None and node.gpu_model is not None:
                idle += moved * mig.compute_slices(node.gpu_model, ref.profile)
            facts.idle_compute = idle
        kept = self.by_kind
        if kept is None or worker is None:
            facts.idle_by_kind = kept
            return facts
        n_moved = node.idle_workers.get(worker, 0) - before
        if not n_moved:
            facts.idle_by_kind = kept
            return facts
        function, slice_ = worker
        kind = None if slice_ is None else slice_.profile
        counts = dict(kept.get(function, _NO_KINDS))
        n = counts.get(kind, 0) + n_moved
        if n > 0:
            counts[kind] = n
        else:
            del counts[kind]
        found = dict(kept)
        if counts:
            found[function] = counts
        else:
            del found[function]
        facts.idle_by_kind = found
        return facts


# -- scans of one node's state: what the index keeps, computed from scratch --------------------------

def idle_by_kind(node: NodeState) -> dict[str, dict[str | None, int]]:
    """The node's idle warm workers per function by kind of instance (MIG profile, None for CPU);
    positive counts only."""
    found: dict[str, dict[str | None, int]] = {}
    for (f, ref), n in node.idle_workers.items():
        if n > 0:
            kind = None if ref is None else ref.profile
            counts = found.get(f)
            if counts is None:
                found[f] = {kind: n}
            else:
                counts[kind] = counts.get(kind, 0) + n
    return found


def idle_by_function(node: NodeState, profile: str) -> dict[str, int]:
    """Per function, the idle instances of ``profile`` on ``node`` holding an idle worker of it."""
    idle = {s.ref for s in node.slices if not s.busy and s.ref.profile == profile}
    found: dict[str, int] = {}
    for (f, r), n in node.idle_workers.items():
        if n > 0 and r in idle:
            found[f] = found.get(f, 0) + 1
    return found


def stocked_profiles(node: NodeState) -> frozenset[str]:
    """The MIG profiles of ``node``'s idle instances that hold an idle worker."""
    idle = {s.ref for s in node.slices if not s.busy}
    if not idle:
        return _NONE
    return frozenset([r.profile for (_, r), n in node.idle_workers.items() if n > 0 and r is not None and r in idle])


def instances_by_profile(node: NodeState) -> dict[str, int]:
    """``node``'s MIG instances counted by profile."""
    found: dict[str, int] = {}
    for s in node.slices:
        found[s.ref.profile] = found.get(s.ref.profile, 0) + 1
    return found


def gpu_fit(model: str, layout: Layout, profile: str) -> tuple[SliceRef, bool, tuple[SliceRef, ...]] | None:
    """Where ``profile`` runs on a GPU whose instances are ``layout``: (slice, create?, idle slices to
    destroy), or None. An idle instance of the profile first; else a new one beside the instances that
    stay; else a new one where only idle instances are in the way (busy ones are never touched)."""
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


class ClusterIndex:
    """The indexes over one snapshot's nodes (``nodes`` is the snapshot's own dict, read, never written)."""

    def __init__(self, nodes: dict[str, NodeState]) -> None:
        self.nodes = nodes
        self._facts: dict[str, NodeFacts] = {}
        self.version = 0
        """Counts node changes (reservations, releases, finished batches, puts)."""
        self.changed_at: dict[str, int] = {}
        """Node -> the :attr:`version` of its last change (absent: unchanged since the index was built)."""
        self.nowhere: set[Config] = set()
        """Configurations found to fit on no node (a walk of every node's :meth:`fit`), until any node
        changes: the placement reads and fills it."""
        self.instances_generation = 0
        """Moves when a node's instances per profile may have moved."""
        self._idle_epoch = 0
        self._idle_moves: dict[str, int] = {}
        self._instances_of: dict[str, dict[str, int] | None] = {}
        self._instances_total: tuple[int, dict[str, int]] | None = None
        self._routes: dict[tuple[tuple[str, ...], bool], list[str]] = {}
        self._capacity: dict[bool, tuple[list[tuple], list[str], dict[str, int]]] = {}
        self._warm: dict[str, set[str]] | None = None
        self._warm_of: dict[str, frozenset[str]] = {}
        self._idle_totals: dict[str, dict[str | None, int]] | None = None
        self._idle_of: dict[str, dict[str, dict[str | None, int]]] = {}
        self._deferred: set[str] | None = None
        self._cpu_fits: dict[str, Fit] = {}
        self._warm_fit_of: dict[tuple[str, Worker], Fit] = {}
        self._gpu_fits: dict[tuple[str, str, int, str], Fit | None] = {}
        self._slot_bits: dict[SliceRef, int] = {}
        self.memory: dict[str, dict[str, int]] = {}
        """Per function and MIG profile, the GPU memory one of its workers holds there (MiB; absent: not
        limited): what a new worker's fit weighs (:meth:`use_memory`)."""

    def use_memory(self, memory: dict[str, dict[str, int]]) -> None:
        """Weigh new workers' fits with ``memory`` (function -> MIG profile -> MiB per worker) from now
        on; what was worked out with other figures is forgotten. The same dict again changes nothing."""
        if memory is self.memory:
            return
        self.memory = memory
        for facts in self._facts.values():
            facts.cold_fits = {}

    # -- per-node facts ---------------------------------------------------------------------------
    def facts(self, node_name: str) -> NodeFacts:
        facts = self._facts.get(node_name)
        if facts is None:
            facts = self._facts[node_name] = NodeFacts()
        return facts

    def carry(self, node_name: str) -> Carry:
        """What a change about to be made to the node may keep (:meth:`Carry.kept`)."""
        return Carry(self._facts.get(node_name))

    def idle_compute(self, node_name: str) -> int:
        """The node's compute slices no busy instance holds."""
        facts = self.facts(node_name)
        if facts.idle_compute < 0:
            facts.idle_compute = self.nodes[node_name].idle_compute_slices()
        return facts.idle_compute

    def idle_profiles(self, node_name: str) -> frozenset[str]:
        """The MIG profiles of the node's idle instances."""
        facts = self.facts(node_name)
        if facts.idle_profiles is None:
            facts.idle_profiles = frozenset(s.ref.profile for s in self.nodes[node_name].slices if not s.busy)
        return facts.idle_profiles

    def layout(self, node_name: str) -> Layout:
        """The node's MIG instances as sorted (profile, start, busy)."""
        facts = self.facts(node_name)
        if facts.layout is None:
            facts.layout = tuple(sorted((s.ref.profile, s.ref.start, s.busy) for s in self.nodes[node_name].slices))
        return facts.layout

    def idle_by_kind(self, node_name: str) -> dict[str, dict[str | None, int]]:
        """:func:`idle_by_kind` of the node (carried over a change of one worker count)."""
        facts = self.facts(node_name)
        if facts.idle_by_kind is None:
            facts.idle_by_kind = idle_by_kind(self.nodes[node_name])
        return facts.idle_by_kind

    def instances(self, node_name: str) -> dict[str, int]:
        """:func:`instances_by_profile` of the node (kept over a change that only makes an instance busy
        or idle)."""
        facts = self.facts(node_name)
        if facts.instances is None:
            facts.instances = instances_by_profile(self.nodes[node_name])
        return facts.instances

    def stocked_profiles(self, node_name: str) -> frozenset[str]:
        """:func:`stocked_profiles` of the node."""
        facts = self.facts(node_name)
        if facts.stocked is None:
            facts.stocked = stocked_profiles(self.nodes[node_name])
        return facts.stocked

    def idle_by_function(self, node_name: str, profile: str) -> dict[str, int]:
        """:func:`idle_by_function` of the node."""
        facts = self.facts(node_name)
        found = facts.by_function.get(profile)
        if found is None:
            found = facts.by_function[profile] = idle_by_function(self.nodes[node_name], profile)
        return found

    def _warm_functions(self, node_name: str) -> frozenset[str]:
        """Functions with an idle warm worker on the node: those of its idle counts where they are known,
        else a scan."""
        facts = self.facts(node_name)
        if facts.warm is None:
            if facts.idle_by_kind is not None:
                facts.warm = frozenset(facts.idle_by_kind)
            else:
                facts.warm = frozenset(k[0] for k, v in self.nodes[node_name].idle_workers.items() if v > 0)
        return facts.warm

    # -- fits -------------------------------------------------------------------------------------
    def fit(self, node_name: str, config: Config, function: str | None = None) -> Fit | None:
        """Where ``config`` runs on the node (None: it does not fit); with ``function``, the fit takes an
        idle warm worker of it when one waits on that slice (or another idle instance of its profile),
        and a new worker's fit is one whose instance has room for its GPU memory (:meth:`cold_fit`)."""
        facts = self.facts(node_name)
        fit = facts.fits.get(config, _UNKNOWN)
        if fit is _UNKNOWN:
            fit = facts.fits[config] = self._fit(node_name, facts, config)
        if fit is None or function is None:
            return fit
        key = (config, function)
        if not fit.create:
            warm = facts.warm_fits.get(key, _UNKNOWN)
            if warm is _UNKNOWN:
                worker = self._idle_worker(self.nodes[node_name], function, fit.slice)
                warm = facts.warm_fits[key] = None if worker is None else self._warm_fit_on(node_name, worker)
            if warm is not None:
                return warm
        if fit.slice is None or function not in self.memory:
            return fit
        cold = facts.cold_fits.get(key, _UNKNOWN)
        if cold is _UNKNOWN:
            cold = facts.cold_fits[key] = self.cold_fit(node_name, fit, function)
        return cold

    def cold_fit(self, node_name: str, fit: Fit, function: str) -> Fit | None:
        """A new worker of ``function`` where the node's fit ``fit`` would start it, its GPU memory
        weighed: on a new instance, when the instance holds it at all; on an idle instance of the
        profile, the first (in layout order) with room for it; else on a new instance beside the others
        where the GPU has space; else on the idle instance where the fewest idle workers of other
        functions are stopped first (``Fit.evict``, :func:`esg.memory.evictions`); None when no instance
        of the profile can hold it."""
        node = self.nodes[node_name]
        ref = fit.slice
        if ref is None or node.gpu_model is None:
            return fit
        need = worker_mb(self.memory, function, ref.profile)
        if not need:
            return fit
        capacity = instance_memory_mb(node.gpu_model, ref.profile)
        if fit.create:
            return fit if need <= capacity else None
        best: tuple[int, SliceRef, tuple[tuple[str, int], ...]] | None = None
        for profile, start, busy in self.layout(node_name):
            if busy or profile != ref.profile:
                continue
            here = SliceRef(profile, start)
            stop = self.stops_for(node_name, here, function)
            if stop is None:
                continue
            if not stop:
                return fit if here == ref else Fit(node_name, here)
            count = sum(n for _, n in stop)
            if best is None or count < best[0]:
                best = (count, here, stop)
        # no idle instance has room: a new instance beside the others, where the GPU has space for one,
        # before stopping another function's workers (they would start again cold, and stop others)
        beside = mig.best_start(node.gpu_model, ref.profile, tuple((p, st) for p, st, _ in self.layout(node_name)))
        if beside is not None and need <= capacity:
            return Fit(node_name, SliceRef(ref.profile, beside), True)
        return None if best is None else Fit(node_name, best[1], False, (), None, best[2])

    def stops_for(self, node_name: str, ref: SliceRef, function: str) -> tuple[tuple[str, int], ...] | None:
        """The idle workers to stop on instance ``ref`` of the node so that a new worker of ``function``
        fits its GPU memory (:func:`esg.memory.evictions`: () when it fits already, None when it cannot)."""
        node = self.nodes[node_name]
        need = worker_mb(self.memory, function, ref.profile)
        if not need or node.gpu_model is None:
            return ()
        idle = idle_on(node, ref)
        return evictions(idle, {f: worker_mb(self.memory, f, ref.profile) for f in idle},
                         instance_memory_mb(node.gpu_model, ref.profile), need)

    @staticmethod
    def _idle_worker(node: NodeState, function: str, slice_: SliceRef | None) -> Worker | None:
        key = (function, slice_)
        if node.idle_workers.get(key, 0) > 0:
            return key
        if slice_ is None:
            return None
        for s in node.slices:
            if not s.busy and s.ref.profile == slice_.profile and node.idle_workers.get((function, s.ref), 0) > 0:
                return (function, s.ref)
        return None

    def _warm_fit_on(self, node_name: str, worker: Worker) -> Fit:
        key = (node_name, worker)
        fit = self._warm_fit_of.get(key)
        if fit is None:
            fit = self._warm_fit_of[key] = Fit(node_name, worker[1], False, (), worker)
        return fit

    def _fit(self, node_name: str, facts: NodeFacts, config: Config) -> Fit | None:
        """The fit, shared between nodes' states with the same layout (fits are immutable): looked up by
        the layout's code, one integer (:meth:`layout_code`), rather than the layout itself."""
        node = self.nodes[node_name]
        if node.vcpus_free < config.vcpus:
            return None
        if config.gpu is None:
            fit = self._cpu_fits.get(node_name)
            if fit is None:
                fit = self._cpu_fits[node_name] = Fit(node_name)
            return fit
        if node.gpu_model is None:
            return None
        if facts.layout_code < 0:
            facts.layout_code = self.layout_code(node)
        key = (node_name, node.gpu_model, facts.layout_code, config.gpu)
        found = self._gpu_fits.get(key, _UNKNOWN)
        if found is _UNKNOWN:
            placed = gpu_fit(node.gpu_model, self.layout(node_name), config.gpu)
            found = self._gpu_fits[key] = None if placed is None else Fit(node_name, placed[0], placed[1], placed[2])
        return found

    def layout_code(self, node: NodeState) -> int:
        """The node's MIG instances with their busy states as one integer: two bits per instance
        (profile, start), the first for an idle one, the second for a busy one, given in the order this
        index first saw each instance. Two nodes have the same code exactly when they have the same
        :meth:`layout` (a node holds an instance at most once)."""
        code = 0
        for s in node.slices:
            bit = self._slot_bits.get(s.ref)
            if bit is None:
                bit = self._slot_bits[s.ref] = 1 << (2 * len(self._slot_bits))
            code |= bit << 1 if s.busy else bit
        return code

    # -- across nodes -----------------------------------------------------------------------------
    def route(self, preferred: tuple[str, ...], gpu: bool) -> list[str]:
        """The nodes to try, in order: ``preferred`` ones first (those that exist), then the rest by free
        capacity for GPU (idle compute slices, then vCPUs) or CPU work (vCPUs); ties by name."""
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
            for name in self.nodes:
                self._index_warm(name)
        return self._warm.get(function, _NONE)

    def idle_totals(self, function: str) -> dict[str | None, int]:
        """``function``'s idle warm workers summed over the nodes by kind (positive counts only; a move
        makes a new dict)."""
        if self._idle_totals is None:
            self._idle_totals = {}
            for name in self.nodes:
                self._count_idle(name, None)
        return self._idle_totals.get(function, _NO_KINDS)

    def idle_generation(self, function: str) -> int:
        """Moves whenever ``function``'s idle workers may have moved on any node."""
        return self._idle_epoch + self._idle_moves.get(function, 0)

    def instances_total(self) -> dict[str, int]:
        """The cluster's MIG instances counted by profile (the same dict while
        :attr:`instances_generation` stays)."""
        total = self._instances_total
        if total is not None and total[0] == self.instances_generation:
            return total[1]
        per_profile: dict[str, int] = {}
        for name in self.nodes:
            counts = self._instances_of[name] = self.instances(name)  # (what the next change compares)
            for profile, n in counts.items():
                per_profile[profile] = per_profile.get(profile, 0) + n
        self._instances_total = (self.instances_generation, per_profile)
        return per_profile

    def idle_by_function_total(self, profile: str) -> dict[str, int]:
        """Per function, its idle workers on idle instances of ``profile`` over every node."""
        total: dict[str, int] = {}
        for name in self.nodes:
            for f, n in self.idle_by_function(name, profile).items():
                total[f] = total.get(f, 0) + n
        return total

    def changed_since(self, version: int) -> list[str]:
        """The nodes that changed after :attr:`version` was ``version``."""
        if version >= self.version:
            return []
        return [n for n, v in self.changed_at.items() if v > version]

    # -- changes ----------------------------------------------------------------------------------
    def defer(self, names: set[str] | None = None) -> None:
        """Until :meth:`flush`: changes only record their node (a driver building a snapshot from reports
        and hundreds of claims updates each node's indexes once). ``names``: nodes whose states were
        replaced, their facts forgotten."""
        self._deferred = set() if names is None else set(names)
        for name in self._deferred:
            self._facts[name] = NodeFacts()

    def flush(self) -> None:
        """End :meth:`defer`: each node changed meanwhile is indexed afresh (in name order)."""
        changed, self._deferred = self._deferred, None
        for name in sorted(changed or ()):
            self.changed(name)

    def changed(self, node_name: str, workers: bool | str = True, kept: NodeFacts | None = None) -> None:
        """The node's state changed: its facts become ``kept`` (None: start afresh) and the indexes
        across nodes follow. ``workers``: its idle workers may have changed too (a function's name:
        only that function's; False: none)."""
        self._facts[node_name] = NodeFacts() if kept is None else kept
        if self._deferred is not None:
            self._deferred.add(node_name)
            return
        self.version += 1
        self.changed_at[node_name] = self.version
        if workers is True:
            self._idle_epoch += 1
        elif workers is not False:
            self._idle_moves[workers] = self._idle_moves.get(workers, 0) + 1
        self.nowhere.clear()
        instances = self._facts[node_name].instances
        if instances is None or instances is not self._instances_of.get(node_name):
            self.instances_generation += 1
            self._instances_of[node_name] = instances
        moved = False
        for gpu, (ordered, names, places) in self._capacity.items():
            if _reorder(ordered, names, places, node_name, self._capacity_key(node_name, gpu)):
                moved = True
        if moved:
            self._routes.clear()  # the routes follow the order of nodes, not their keys
        if workers is not False and self._idle_totals is not None:
            self._count_idle(node_name, None if workers is True else workers)
        if workers is False or self._warm is None:
            return
        if workers is True:
            self._index_warm(node_name)
            return
        counts = self._facts[node_name].idle_by_kind
        state = self.nodes[node_name]
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

    def _count_idle(self, node_name: str, function: str | None) -> None:
        """Move the idle totals by what changed in the node's idle counts since they were last counted
        (``function``: only its counts may have)."""
        old = self._idle_of.get(node_name, _NO_IDLE)
        new = self._idle_of[node_name] = self.idle_by_kind(node_name)
        if function is not None:
            self._move_idle(function, old.get(function), new.get(function))
            return
        for f, counts in old.items():
            self._move_idle(f, counts, new.get(f))
        for f, counts in new.items():
            if f not in old:
                self._move_idle(f, None, counts)

    def _move_idle(self, function: str, old: dict[str | None, int] | None, new: dict[str | None, int] | None) -> None:
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

    def _index_warm(self, node_name: str) -> None:
        assert self._warm is not None
        old = self._warm_of.get(node_name, _NONE)
        new = self._warm_of[node_name] = self._warm_functions(node_name)
        for f in old - new:
            self._warm[f].discard(node_name)
        for f in new - old:
            self._warm.setdefault(f, set()).add(node_name)


def _reorder(ordered: list[tuple], names: list[str], places: dict[str, int], name: str, key: tuple) -> bool:
    """Put node ``name``'s new sort ``key`` into the capacity order (``ordered``, the nodes' ``names`` in
    the same order, each node's place in ``places``); whether the order of nodes changed. A key that
    still sorts between its neighbours takes its old key's place (a node's key moves at nearly every
    change of it, its place among the others seldom)."""
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
    """``preferred``'s nodes (those in ``nodes``, each once, in their order), then the rest of ``order``."""
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
    """``bisect.bisect_left(ordered, key)``, written out (compiled, a call into ``bisect`` is a generic
    call, four at every change of a node)."""
    lo, hi = 0, len(ordered)
    while lo < hi:
        mid = (lo + hi) // 2
        if ordered[mid] < key:
            lo = mid + 1
        else:
            hi = mid
    return lo
