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

* :meth:`Dispatcher.stage` puts a step's batches on their nodes' streams (in the loop's pipeline) and
  :meth:`Dispatcher.sent` records them in flight;
* :meth:`Dispatcher.complete` matches a result to its batch (results of other incarnations, and
  duplicates, are ignored);
* :meth:`Dispatcher.expire` finds agents silent past the agent timeout and hands back their batches,
  taken back from the streams, for the caller to run again or fail;
* :meth:`Dispatcher.read_loop` is the body of the thread that reads results and heartbeats.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import redis

from agent_channel import protocol
from controller_plugin.channel import SchedulerChannel
from controller_plugin.deadletters import DeadLetters
from controller_plugin.health import Agent, AgentRegistry
from controller_plugin.metrics import Metrics
from controller_plugin.workflows import Send
from esg.cluster import Claim, ClusterSnapshot, NodeReport, tracked
from esg.events import Dispatch

log = logging.getLogger("esg.scheduler")

READ_BLOCK_MS = 250
#: How long an answered batch is kept on its node's view when no heartbeat says it was answered (a
#: backstop: each heartbeat names the batches its agent answered recently).
FINISHED_KEEP_S = 30.0


@dataclass(frozen=True)
class InFlight:
    dispatch: Dispatch
    entry_id: str
    """The dispatch's entry in its node's stream."""


class Dispatcher:
    def __init__(self, channel: SchedulerChannel, registry: AgentRegistry, incarnation: str,
                 metrics: Metrics) -> None:
        self.channel = channel
        self.registry = registry
        self.incarnation = incarnation
        self.metrics = metrics
        self.inflight: dict[str, InFlight] = {}
        self.finished: dict[str, tuple[Dispatch, float]] = {}
        """Answered batches no heartbeat has shown answered yet, with when (monotonic s)."""
        self.count = 0
        self.ignored = 0
        self.stale_starts = 0
        """Batches the agent had to start cold or carve a slice for, though the view said otherwise."""

    # -- agents -------------------------------------------------------------------------------------
    def heartbeat(self, hb: protocol.Heartbeat, mono: float) -> Agent | None:
        """Record a heartbeat; the agent if it just joined (or came back)."""
        joined = self.registry.heartbeat(hb, mono)
        for batch_id in hb.done:
            self.finished.pop(batch_id, None)
        if self.finished:
            old = [b for b, (_, t) in self.finished.items() if mono - t > FINISHED_KEEP_S]
            for b in old:
                del self.finished[b]
        return joined

    def expire(self, mono: float) -> list[tuple[Agent, list[Dispatch]]]:
        """Agents that went silent, each with its unanswered batches (taken back from its stream)."""
        out = []
        for agent in self.registry.expire(mono):
            lost = [f for f in self.inflight.values() if f.dispatch.node == agent.node]
            for f in lost:
                del self.inflight[f.dispatch.batch_id]
            for b in [b for b, (d, _) in self.finished.items() if d.node == agent.node]:
                del self.finished[b]
            try:
                self.channel.retract(agent.node, [f.entry_id for f in lost])
            except redis.RedisError as exc:  # the agent may still run them: their results are ignored
                log.warning("could not take back %d batches from %s: %s", len(lost), agent.node, exc)
            out.append((agent, [f.dispatch for f in lost]))
        return out

    def snapshot(self) -> ClusterSnapshot:
        """The live agents as their heartbeats report them, with this process's batches the reports do
        not show yet kept on them (:func:`esg.cluster.tracked`)."""
        reports = [NodeReport(a.heartbeat.node_state(), frozenset(a.heartbeat.running), frozenset(a.heartbeat.done))
                   for a in self.registry.live()]
        claims = [Claim(d.batch_id, d.function, d.config, d.fit, finished=True) for d, _ in self.finished.values()]
        claims += [Claim(f.dispatch.batch_id, f.dispatch.function, f.dispatch.config, f.dispatch.fit)
                   for f in self.inflight.values()]
        return tracked(reports, claims)

    # -- batches ------------------------------------------------------------------------------------
    def stage(self, pipe, sends: Sequence[Send]) -> int:
        return self.channel.stage(pipe, [s.message for s in sends])

    def sent(self, sends: Sequence[Send], entry_ids: Sequence) -> None:
        for s, entry_id in zip(sends, entry_ids):
            entry_id = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
            self.inflight[s.dispatch.batch_id] = InFlight(s.dispatch, entry_id)
            self.metrics.decisions.inc()
            self.metrics.batch_size.observe(len(s.dispatch.jobs))
        self.count += len(sends)

    def complete(self, rm: protocol.BatchResult) -> Dispatch | None:
        """The batch ``rm`` answers, if this incarnation is still waiting for it."""
        if not rm.batch_id.startswith(self.incarnation + "-"):
            self.ignored += 1
            return None  # a batch of an earlier incarnation: its activations are being finished anew
        flight = self.inflight.pop(rm.batch_id, None)
        if flight is None:
            return None  # a duplicate, or declared lost
        d = flight.dispatch
        self.finished[d.batch_id] = (d, time.monotonic())
        cold_miss = bool(rm.cold and d.fit.warm_worker is not None)
        if cold_miss or (rm.reconfigured and not d.fit.reconfigures):
            self.stale_starts += 1
            log.info("batch %s on %s: the view was stale; the agent %s", d.batch_id, d.node,
                     "started a new worker" if cold_miss else f"carved its slice ({rm.reconfigured} MIG change(s))")
        return d

    def purge_earlier(self, nodes: Sequence[str]) -> None:
        """Take back what earlier incarnations of this scheduler left in the nodes' streams."""
        mine = self.channel.reply_to
        gone = self.channel.purge(nodes, lambda m: m.reply_to == mine
                                  and not m.batch_id.startswith(self.incarnation + "-"))
        if gone:
            log.info("recovery: took back %d dispatches of an earlier incarnation", gone)

    # -- the reader thread ----------------------------------------------------------------------------
    def read_loop(self, stop: threading.Event, deliver: Callable[[object], None], dead_letters: DeadLetters) -> None:
        """Results and heartbeats to ``deliver`` (the main loop's inbox), malformed ones to dead letters."""
        failing = False
        while not stop.is_set():
            try:
                got = self.channel.read(READ_BLOCK_MS)
                failing = False
            except redis.RedisError as exc:
                if not failing:
                    log.error("reading results and heartbeats failed (%s); retrying", exc)
                failing = True
                stop.wait(0.5)
                continue
            for e in got:
                try:
                    m = protocol.decode(e.raw or b"")
                except protocol.ProtocolError as exc:
                    dead_letters.put(e.raw, str(exc), e.stream, e.id)
                    continue
                if isinstance(m, protocol.Heartbeat | protocol.BatchResult):
                    deliver(m)
                else:
                    dead_letters.put(e.raw, f"unexpected {type(m).__name__} on {e.stream}", e.stream, e.id)
