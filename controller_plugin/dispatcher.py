"""The dispatcher: the agents, the channel to them, and the batches in flight on them.

It owns the :class:`~controller_plugin.health.AgentRegistry` (agents known by their heartbeats, each
behind a virtual invoker id), the :class:`~controller_plugin.channel.SchedulerChannel`, and the batches
sent and not yet answered. From these it builds the cluster snapshot the core plans on
(:func:`esg.cluster.tracked`): nodes as their heartbeats report them -- MIG layout, busy slices, idle
warm workers by function and slice -- with this process's batches kept on them until a heartbeat shows
them: a batch the heartbeat does not know yet stays reserved, one answered since is finished there (its
worker idle on its slice). So ESG_Dispatch's warm-start and reconfiguration passes see what the
emulator's see. A view that was stale anyway (a worker evicted, a slice gone) costs the batch a cold
start or a MIG change at the agent, which says so in its result.

* :meth:`Dispatcher.stage` puts a step's batches and pre-warms on their nodes' streams (in the loop's
  pipeline) and :meth:`Dispatcher.sent` records them in flight;
* :meth:`Dispatcher.complete` matches a result to its batch (results of batches not in flight, and
  duplicates, are ignored; a batch a former leader sent and this one adopted is in flight);
* :meth:`Dispatcher.expire` finds agents silent past the agent timeout (:mod:`controller_plugin.health`:
  measured by reads, not by the clock) and revokes their batches (:mod:`agent_channel.claims`): those
  that had not started are handed back to run elsewhere, those that had are handed back to be answered
  with an error -- never run twice -- and those already answered stay in flight for their result;
* :meth:`Dispatcher.adopt` takes over a batch a former leader sent that its agent had started;
* :meth:`Dispatcher.read_loop` is the body of the thread that reads results and heartbeats.

**Pre-warms** are kept on their nodes' views as batches are -- their slice and vCPUs held while the
worker starts -- until a heartbeat names them answered (``done``): that report shows the worker idle,
or shows none if the pre-warm failed, and says what the agent did with it (``prewarmed``: started a
worker, found one warm, failed, expired...), which goes to the decision log for the costs. Nothing else answers a pre-warm; one its agent never reports is
dropped after :data:`PREWARM_KEEP_S` and with its agent, and never taken back from the stream (it
costs an idle worker at most, within its keep-alive).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import redis

from agent_channel import claims, protocol
from controller_plugin.channel import SchedulerChannel, Staged
from controller_plugin.deadletters import DeadLetters
from controller_plugin.health import Agent, AgentRegistry
from controller_plugin.metrics import Metrics
from controller_plugin.workflows import PrewarmSend, Send
from esg.cluster import Claim, ClusterSnapshot, NodeReport, retrack, tracked
from esg.events import Dispatch, Prewarm

log = logging.getLogger("esg.scheduler")

READ_BLOCK_MS = 250
#: How long an answered batch is kept on its node's view when no heartbeat says it was answered (a
#: backstop: each heartbeat names the batches its agent answered recently).
FINISHED_KEEP_S = 30.0
#: How long a pre-warm stays on its node's view when no heartbeat says it was done (a backstop longer
#: than any cold start).
PREWARM_KEEP_S = 120.0


@dataclass(frozen=True)
class Warmed:
    """A pre-warm a heartbeat named done."""

    prewarm: Prewarm
    sent_ms: int
    """When it was sent (epoch ms)."""
    ready: bool
    """That heartbeat showed an idle worker of its function on its slice."""
    done: protocol.PrewarmDone | None
    """What the agent did with it (None: an older agent, which does not say)."""


@dataclass(frozen=True)
class Delivered:
    """One read's results and heartbeats, in the order they were read: one inbox item per read, even an
    empty one (its start time moves the horizon silent agents are measured against)."""

    messages: tuple[protocol.Heartbeat | protocol.BatchResult, ...]
    started_s: float = 0.0
    """When the read started (monotonic s)."""
    caught_up: bool = True
    results_at: dict[str, str] = field(default_factory=dict)
    """Per node, the id of the last result read up to and with this read (the results streams are
    trimmed to it once the ledger recorded what came before)."""


@dataclass(frozen=True)
class ReadMark:
    """Put before a read's messages in the main loop's turn: when that read started, whether it caught up,
    and how far it read each node's results stream."""

    started_s: float
    caught_up: bool
    results_at: dict[str, str]


@dataclass(frozen=True)
class Lost:
    """An agent found silent, and what became of its batches."""

    agent: Agent
    rerun: list[Dispatch]
    """Revoked before they started: to run again elsewhere."""
    started: list[Dispatch]
    """Started there: answered with an error, never run again."""


@dataclass(frozen=True)
class InFlight:
    dispatch: Dispatch
    entry_id: str
    """The dispatch's entry in its node's stream."""
    claim: Claim
    """What the snapshot keeps on the node for it (made once, not at every turn)."""
    ttl_s: int = protocol.DATA_TTL_S
    """How long its claim is kept (its data's TTL: past the controller's deadline)."""


class Dispatcher:
    def __init__(self, channel: SchedulerChannel, registry: AgentRegistry, incarnation: str,
                 metrics: Metrics) -> None:
        self.channel = channel
        self.registry = registry
        self.incarnation = incarnation
        self.metrics = metrics
        self.inflight: dict[str, InFlight] = {}
        self.finished: dict[str, tuple[Dispatch, float, Claim]] = {}
        """Answered batches no heartbeat has shown answered yet, with when (monotonic s)."""
        self._sets: dict[str, tuple[protocol.Heartbeat, frozenset[str], frozenset[str]]] = {}
        self.prewarming: dict[str, tuple[Prewarm, float, int]] = {}
        """Pre-warms sent that no heartbeat has named done yet, with when (monotonic s, epoch ms)."""
        self._view: ClusterSnapshot | None = None
        """The snapshot handed to the last step, kept across turns (None: build it anew at the next
        :meth:`snapshot`). The step's reservations stay on it as the claims of what it sent; a result
        finishes its batch on it; a heartbeat rebuilds its node alone."""
        self._view_done: dict[str, frozenset[str]] = {}
        """Per node of the view: the answered batch ids of the report it was built from (a result of
        one of these is in the report already, so not finished again)."""
        self._stale: set[str] = set()
        """Nodes of the view to build again from their latest report (and claims) at the next snapshot."""
        self._revoking: dict[str, Agent] = {}
        self._read_results: dict[str, str] = {}
        """Agents found lost whose batches are still to be revoked (Redis failed the last try)."""
        self.warmed: list[Warmed] = []
        """Pre-warms heartbeats named done since the caller last took them (:meth:`take_warmed`)."""
        self.count = 0
        self.prewarms = 0
        self.ignored = 0
        self.stale_starts = 0
        """Batches the agent had to start cold or carve a slice for, though the view said otherwise."""

    # -- agents -------------------------------------------------------------------------------------
    def heartbeat(self, hb: protocol.Heartbeat, mono: float) -> Agent | None:
        """Record a heartbeat; the agent if it just joined (or came back)."""
        joined = self.registry.heartbeat(hb, mono)
        self._stale.add(hb.node)
        outcomes = {o.prewarm_id: o for o in hb.prewarmed} if hb.prewarmed else {}
        for batch_id in hb.done:
            gone = self.finished.pop(batch_id, None)
            if gone is not None:
                self._stale.add(gone[0].node)
            warming = self.prewarming.pop(batch_id, None)
            if warming is not None:
                p = warming[0]
                self._stale.add(p.node)
                ready = any(w.count > 0 and w.function == p.function and w.slice == p.fit.slice for w in hb.idle)
                self.warmed.append(Warmed(p, warming[2], ready, outcomes.get(batch_id)))
        if self.finished:
            old = [b for b, (_, t, _) in self.finished.items() if mono - t > FINISHED_KEEP_S]
            for b in old:
                self._stale.add(self.finished.pop(b)[0].node)
        if self.prewarming:
            for p in [p for p, (_, t, _) in self.prewarming.items() if mono - t > PREWARM_KEEP_S]:
                self._stale.add(self.prewarming.pop(p)[0].node)
        return joined

    def expire(self, horizon_s: float) -> list[Lost]:
        """Agents silent as of the read that started at ``horizon_s``, each with its unanswered batches
        revoked (:meth:`revoke`). Raises what revoking raised (Redis failing: the agent stays lost and its
        batches are revoked at the next call; fenced: this scheduler no longer leads)."""
        for agent in self.registry.expire(horizon_s):
            self._view = None
            self._revoking[agent.node] = agent
            for b in [b for b, (d, _, _) in self.finished.items() if d.node == agent.node]:
                del self.finished[b]
            for p in [p for p, (w, _, _) in self.prewarming.items() if w.node == agent.node]:
                del self.prewarming[p]
        out = []
        for node, agent in list(self._revoking.items()):
            rerun, started = self.revoke([f for f in self.inflight.values() if f.dispatch.node == node])
            del self._revoking[node]
            out.append(Lost(agent, rerun, started))
        return out

    def revoke(self, flights: list[InFlight]) -> tuple[list[Dispatch], list[Dispatch]]:
        """Take ``flights`` back from their agents: (those revoked before they started, to run again; those
        that had started, to answer with an error). Those already answered stay in flight: their result
        is in the node's results stream."""
        rerun: list[Dispatch] = []
        started: list[Dispatch] = []
        by_node: dict[str, list[InFlight]] = {}
        for f in flights:
            by_node.setdefault(f.dispatch.node, []).append(f)
        for node, fs in by_node.items():
            verdicts = self.channel.revoke(node, [(f.dispatch.batch_id, f.entry_id, f.ttl_s) for f in fs], give_up=True)
            for f, v in zip(fs, verdicts):
                if v == claims.DONE:
                    continue
                del self.inflight[f.dispatch.batch_id]
                (rerun if v == claims.REVOKED else started).append(f.dispatch)
        return rerun, started

    def adopt(self, d: Dispatch, entry_id: str, ttl_s: int) -> None:
        """A batch a former leader sent that its agent took: in flight here now, its result awaited."""
        self.inflight[d.batch_id] = InFlight(d, entry_id, Claim(d.batch_id, d.function, d.config, d.fit), ttl_s)
        self._view = None

    def snapshot(self) -> ClusterSnapshot:
        """The live agents as their heartbeats report them, with this process's batches the reports do
        not show yet kept on them (:func:`esg.cluster.tracked`).

        The same object from turn to turn: the step reserves what it sends on it, :meth:`complete`
        finishes what comes back, and only the nodes whose agents reported since are built again
        (:func:`esg.cluster.retrack`); a change of the live agents builds it all again."""
        if self._view is not None and self._stale:
            live = {a.node: a for a in self.registry.live()}
            if live.keys() != self._view.nodes.keys():
                self._view = None
            else:
                stale = {n: live[n] for n in self._stale if n in live}
                retrack(self._view, [self._report(a) for a in stale.values()], self._claims(stale))
        if self._view is None:
            self._view_done = {}
            self._view = tracked([self._report(a) for a in self.registry.live()], self._claims())
        self._stale.clear()
        return self._view

    def forget_view(self) -> None:
        """Build the next snapshot anew (the last step reserved something that was not sent)."""
        self._view = None

    def _report(self, agent: Agent) -> NodeReport:
        running, done = self._batch_sets(agent.heartbeat)
        self._view_done[agent.node] = done
        return NodeReport(agent.heartbeat.node_state(), running, done)

    def _claims(self, nodes: dict | None = None) -> list[Claim]:
        """This process's claims (on ``nodes`` only, if given)."""
        claims = [c for _, _, c in self.finished.values()]
        claims += [f.claim for f in self.inflight.values()]
        claims += [Claim(p.prewarm_id, p.function, p.config, p.fit) for p, _, _ in self.prewarming.values()]
        if nodes is not None:
            claims = [c for c in claims if c.fit.node in nodes]
        return claims

    def _batch_sets(self, hb: protocol.Heartbeat) -> tuple[frozenset[str], frozenset[str]]:
        """A heartbeat's running and answered batch ids as sets, made once per heartbeat (a burst's
        heartbeat names thousands; every turn plans over them)."""
        got = self._sets.get(hb.node)
        if got is None or got[0] is not hb:
            got = self._sets[hb.node] = (hb, frozenset(hb.running), frozenset(hb.done))
        return got[1], got[2]

    # -- batches ------------------------------------------------------------------------------------
    def stage(self, pipe, sends: Sequence[Send], prewarms: Sequence[PrewarmSend] = ()) -> Staged:
        """Add the batches, then the pre-warms, in ``pipe`` (its first commands); their entry ids are
        ``staged.entry_ids(replies)``, in that order."""
        return self.channel.stage(pipe, [s.message for s in sends] + [p.message for p in prewarms])

    def prewarmed(self, prewarms: Sequence[PrewarmSend], mono: float, sent_ms: int = 0) -> None:
        """The pre-warms went out (at ``sent_ms``): kept on their nodes' views until a heartbeat names
        them done."""
        for p in prewarms:
            self.prewarming[p.prewarm.prewarm_id] = (p.prewarm, mono, sent_ms)
            self.metrics.prewarms.inc()
        self.prewarms += len(prewarms)

    def sent(self, sends: Sequence[Send], entry_ids: Sequence) -> None:
        for s, entry_id in zip(sends, entry_ids):
            entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            d = s.dispatch
            ttl = s.message.data_ttl_s if s.message is not None else InFlight.ttl_s
            self.inflight[d.batch_id] = InFlight(d, entry_id, Claim(d.batch_id, d.function, d.config, d.fit), ttl)
        if sends:
            self.metrics.sent([s.dispatch for s in sends])
        self.count += len(sends)

    def take_warmed(self) -> list[Warmed]:
        out, self.warmed = self.warmed, []
        return out

    def complete(self, rm: protocol.BatchResult) -> Dispatch | None:
        """The batch ``rm`` answers, if this scheduler is still waiting for it (from the node it was sent to)."""
        flight = self.inflight.get(rm.batch_id)
        if flight is None or flight.dispatch.node != rm.node:
            if flight is not None:
                log.warning("result of batch %s came from node %s, but it was sent to %s: ignored", rm.batch_id,
                            rm.node, flight.dispatch.node)
            self.ignored += 1
            return None  # a duplicate, a batch taken back, or one of a scheduler that did not hand it on
        del self.inflight[rm.batch_id]
        d = flight.dispatch
        c = flight.claim    # built, not dataclasses.replace'd: that reads the fields' list at every call
        self.finished[d.batch_id] = (d, time.monotonic(), Claim(c.batch_id, c.function, c.config, c.fit, True))
        view = self._view
        if (view is not None and d.node in view.nodes and d.node not in self._stale
                and d.batch_id not in self._view_done.get(d.node, ())):
            view.finish(d.function, d.config, d.fit)
        cold_miss = bool(rm.cold and d.fit.warm_worker is not None)
        if cold_miss or (rm.reconfigured and not d.fit.reconfigures):
            self.stale_starts += 1
            log.info("batch %s on %s: the view was stale; the agent %s", d.batch_id, d.node,
                     "started a new worker" if cold_miss else f"carved its slice ({rm.reconfigured} MIG change(s))")
        return d

    # -- the reader thread ----------------------------------------------------------------------------
    def read_loop(self, stop: threading.Event, deliver: Callable[[object], None], dead_letters: DeadLetters) -> None:
        """Results and heartbeats to ``deliver`` (the main loop's inbox), each read's in one
        :class:`Delivered`; malformed ones to dead letters."""
        failing = False
        while not stop.is_set():
            try:
                read = self.channel.read(READ_BLOCK_MS)
                failing = False
            except redis.RedisError as exc:
                if not failing:
                    log.error("reading results and heartbeats failed (%s); retrying", exc)
                failing = True
                stop.wait(0.5)
                continue
            messages: list[protocol.Heartbeat | protocol.BatchResult] = []
            for e in read.entries:
                try:
                    m = protocol.decode(e.raw or b"")
                except protocol.ProtocolError as exc:
                    dead_letters.put(e.raw, str(exc), e.stream, e.id)
                    continue
                if isinstance(m, protocol.Heartbeat | protocol.BatchResult) and self.channel.believe(e, m):
                    messages.append(self.channel.sanitize(m) if isinstance(m, protocol.BatchResult) else m)
                    if isinstance(m, protocol.BatchResult):
                        self._read_results[m.node] = e.id
                elif isinstance(m, protocol.Heartbeat | protocol.BatchResult):
                    log.warning("a %s naming node %r on %s, which is not that node's: set aside as forged",
                                type(m).__name__, m.node, e.stream)
                    dead_letters.put(e.raw, f"a {type(m).__name__} naming node {m.node!r} on {e.stream}",
                                     e.stream, e.id)
                else:
                    dead_letters.put(e.raw, f"unexpected {type(m).__name__} on {e.stream}", e.stream, e.id)
            if messages or not stop.is_set():
                deliver(Delivered(tuple(messages), read.started_s, read.caught_up, dict(self._read_results)))
