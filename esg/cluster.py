"""The cluster as the scheduler sees it: nodes with vCPUs and one MIG-partitioned GPU each.

A :class:`ClusterSnapshot` is built by the driver (the live service from agent heartbeats and its own
in-flight batches, the emulator from its node models) and handed to the scheduler, which reserves on it
while it decides. Every change of a node goes through it -- :meth:`ClusterSnapshot.reserve`,
:meth:`~ClusterSnapshot.release`, :meth:`~ClusterSnapshot.finish`, a driver's :meth:`~ClusterSnapshot.put`
-- so that its :class:`~esg.index.ClusterIndex` (``snapshot.index``) follows: the index answers what is
derived from the states (fits, routes, idle workers, instances), the snapshot changes the states.
:meth:`ClusterSnapshot.fit` answers "can this configuration run on this node now, and on which MIG
slice": an idle slice of the wanted profile, else a new instance placed beside the instances that stay,
destroying idle ones only when they are in the way (busy slices are never touched).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass

from esg.index import ClusterIndex, gpu_fit
from esg.model import Config
from esg.state import Fit, NodeState, Slice, SliceRef

__all__ = ["Claim", "ClusterSnapshot", "Fit", "NodeReport", "NodeState", "Slice", "SliceRef", "gpu_fit",
           "retrack", "tracked"]


class ClusterSnapshot:
    """The nodes' states and their index. A driver may keep one snapshot across steps and put only the
    nodes that changed (:meth:`put`): what the index derived from the other nodes stays."""

    def __init__(self, nodes: dict[str, NodeState], tracks_workers: bool = False) -> None:
        self.nodes = nodes
        self.tracks_workers = tracks_workers
        """Whether ``NodeState.idle_workers`` is filled in (the emulator knows every worker)."""
        self.index = ClusterIndex(nodes)

    @classmethod
    def of(cls, nodes: Iterable[NodeState]) -> ClusterSnapshot:
        return cls({n.name: n for n in nodes})

    def copy(self) -> ClusterSnapshot:
        return copy.deepcopy(self)

    def __repr__(self) -> str:
        return f"ClusterSnapshot({self.nodes!r}, tracks_workers={self.tracks_workers})"

    def put(self, state: NodeState) -> None:
        """Replace one node's state (what was derived from it is derived again when asked)."""
        self.nodes[state.name] = state
        self.index.changed(state.name)

    # -- queries (the index's; here for the callers that hold a snapshot) --------------------------
    @property
    def version(self) -> int:
        """Counts node changes (:attr:`ClusterIndex.version`)."""
        return self.index.version

    @property
    def nowhere(self) -> set[Config]:
        return self.index.nowhere

    def use_memory(self, memory: dict[str, dict[str, int]]) -> None:
        """Weigh new workers' fits by their GPU memory (:meth:`ClusterIndex.use_memory`)."""
        self.index.use_memory(memory)

    def fit(self, node_name: str, config: Config, function: str | None = None) -> Fit | None:
        """Where ``config`` runs on the node (None: it does not fit); with ``function``, the fit takes an
        idle warm worker of it when one waits on that slice."""
        return self.index.fit(node_name, config, function)

    def route(self, preferred: tuple[str, ...], gpu: bool) -> list[str]:
        return self.index.route(preferred, gpu)

    def by_capacity(self, gpu: bool) -> list[str]:
        """Node names, most free capacity first: idle compute slices for GPU work, vCPUs for CPU work."""
        return self.index.route((), gpu)

    def max_free_vcpus(self) -> int:
        """The most free vCPUs on any node (0 with no nodes)."""
        if not self.nodes:
            return 0
        return self.nodes[self.index.route((), False)[0]].vcpus_free

    def nodes_with_warm(self, function: str) -> frozenset[str] | set[str]:
        return self.index.nodes_with_warm(function)

    def idle_totals(self, function: str) -> dict[str | None, int]:
        return self.index.idle_totals(function)

    def idle_compute(self, node_name: str) -> int:
        return self.index.idle_compute(node_name)

    def idle_profiles(self, node_name: str) -> frozenset[str]:
        return self.index.idle_profiles(node_name)

    def layout(self, node_name: str) -> tuple[tuple[str, int, bool], ...]:
        return self.index.layout(node_name)

    def changed_since(self, version: int) -> list[str]:
        return self.index.changed_since(version)

    # -- changes ------------------------------------------------------------------------------------
    def reserve(self, config: Config, fit: Fit) -> None:
        """Claim ``fit`` for a batch of ``config``: its vCPUs, its slice (created, and the instances in
        its way destroyed with their workers), the idle warm worker it takes, and the idle workers it
        stops for the new worker's GPU memory (``fit.evict``)."""
        node = self.nodes[fit.node]
        carry = self.index.carry(fit.node)
        taken = 0
        before = 0
        node.vcpus_free -= config.vcpus
        if fit.warm_worker is not None and (before := node.idle_workers.get(fit.warm_worker, 0)) > 0:
            node.idle_workers[fit.warm_worker] -= 1
        if fit.slice is not None:
            if fit.destroy:
                node.slices = [s for s in node.slices if s.ref not in fit.destroy]
                carry.instances = carry.idle = None
            for s in node.slices:
                if s.ref == fit.slice:
                    taken = 0 if s.busy else 1
                    s.busy = True
                    break
            else:
                node.slices.append(Slice(fit.slice, busy=True))
                carry.instances = None
                taken = 1
        killed = False
        if fit.destroy:
            for k in [k for k in node.idle_workers if k[1] is not None and k[1] in fit.destroy]:
                del node.idle_workers[k]  # destroying a MIG instance kills its workers
                killed = True
        for function, n in fit.evict:  # idle workers stopped for the new worker's GPU memory
            key = (function, fit.slice)
            left = node.idle_workers.get(key, 0) - n
            if left > 0:
                node.idle_workers[key] = left
            elif key in node.idle_workers:
                del node.idle_workers[key]
            killed = True
        if killed:
            carry.by_kind = None
        kept = carry.kept(node, fit.slice, -taken, fit.warm_worker, before)
        self.index.changed(fit.node, True if killed else (fit.warm_worker[0] if fit.warm_worker is not None
                                                          else False), kept)

    def release(self, config: Config, fit: Fit) -> None:
        """Undo :meth:`reserve`'s claim (the slice stays, idle; destroyed slices stay destroyed)."""
        self._release(self.nodes[fit.node], config, fit)
        self.index.changed(fit.node, False)

    @staticmethod
    def _release(node: NodeState, config: Config, fit: Fit) -> None:
        node.vcpus_free = min(node.vcpus_total, node.vcpus_free + config.vcpus)
        for s in node.slices:
            if s.ref == fit.slice:
                s.busy = False

    def finish(self, function: str, config: Config, fit: Fit) -> None:
        """A reserved batch ended (or a worker started ahead of its batch is ready): :meth:`release`,
        and its worker waits idle and warm on its slice (a slice the state did not show yet is there
        now)."""
        node = self.nodes[fit.node]
        carry = self.index.carry(fit.node)
        freed = 0
        if fit.slice is not None:
            for s in node.slices:
                if s.ref == fit.slice:
                    freed = 1 if s.busy else 0
                    break
            else:
                node.slices.append(Slice(fit.slice))
                carry.instances = None
        self._release(node, config, fit)
        key = (function, fit.slice)
        before = node.idle_workers.get(key, 0)
        node.idle_workers[key] = before + 1
        self.index.changed(fit.node, function, carry.kept(node, fit.slice, freed, key, before))


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
    snap = ClusterSnapshot({n: r.state for n, r in seen.items()}, tracks_workers=True)
    snap.index.defer()
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
    for name, r in seen.items():
        snap.nodes[name] = r.state
    snap.index.defer(set(seen))
    _claim(snap, seen, claims)


def _reported(reports: Iterable[NodeReport]) -> dict[str, NodeReport]:
    """The reports by node, each state made ready for its claims: every vCPU free (the claims take
    theirs again)."""
    seen: dict[str, NodeReport] = {}
    for r in reports:
        r.state.vcpus_free = r.state.vcpus_total
        seen[r.state.name] = r
    return seen


def _claim(snap: ClusterSnapshot, seen: dict[str, NodeReport], claims: Iterable[Claim]) -> None:
    """Reserve (and finish) ``claims`` on the ``seen`` nodes of ``snap``, whose indexes follow once at the
    end (the index defers them)."""
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
    snap.index.flush()
