"""What a scheduler that takes the lead finds, and how it carries on without running anything twice.

A former leader -- killed, paused past its lease, cut off from Redis -- leaves activations at every stage.
The new leader (epoch E) first tells every node its epoch (from then on the nodes' agents refuse
whatever an older leader sent, :mod:`agent_channel.claims`), so nothing left in the streams can start
any more without it knowing. Then, per node, it reads:

* the **dispatch stream**: each entry of an older epoch is revoked in one fenced script
  (:meth:`~controller_plugin.channel.SchedulerChannel.revoke`): one its agent had not claimed can never
  start now and leaves the stream (its function runs again here); one its agent had claimed is running
  and is **adopted** -- in flight here, its result awaited, never sent again;
* the **results stream**: the results the former leader had not recorded yet (it trims a results
  stream only as far as its ledger recorded what it read: ``controller_plugin/service.py``), each the
  outcome of one function for its activations.

With the ledger's ``open`` entries and what each recorded of its app's finished functions (the ledger's
``f:{function}`` fields), every open activation is **resumed** where it was (:class:`esg.events.Resume`):
its finished functions are not run again, its running batches are awaited, and only functions neither
finished nor running are enqueued -- all of them, for an activation none of whose functions started.
The ``acking`` entries are finished by :meth:`~controller_plugin.ack_pipeline.AckPipeline.resolve` a
moment later. The data this needs is small; reading it is a few round trips per node.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field

from agent_channel import claims, protocol
from controller_plugin.channel import SchedulerChannel
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.requests_state import FunctionResult
from esg.cluster import Fit
from esg.events import Dispatch
from esg.model import Job

log = logging.getLogger("esg.scheduler")

#: A pre-warm's claim is kept this long once revoked (it expires with its keep-alive anyway).
PREWARM_REVOKE_TTL_S = 600


@dataclass
class Adopted:
    """A batch a former leader sent that its agent had claimed: it runs, and this leader awaits it."""

    message: protocol.DispatchMessage
    entry_id: str


@dataclass
class Found:
    """What a new leader found in Redis."""

    open: list[LedgerEntry] = field(default_factory=list)
    acking: list[LedgerEntry] = field(default_factory=list)
    progress: dict[str, dict[str, FunctionResult]] = field(default_factory=dict)
    """Per open activation, what its finished functions returned (from the ledger and the results streams)."""
    adopted: list[Adopted] = field(default_factory=list)
    revoked: int = 0
    results_at: dict[str, str] = field(default_factory=dict)
    """Per node, the last results-stream entry read here (live reading goes on after it)."""

    def running(self, activation_id: str) -> list[Adopted]:
        return [a for a in self.adopted if any(r.activation_id == activation_id for r in a.message.requests)]


def encode_progress(result: FunctionResult) -> str:
    """One finished function's result as the ledger keeps it (a result message of one activation)."""
    return protocol.encode(protocol.BatchResult("", result.node, (result.run,), config=result.config)).decode()


def decode_progress(blob: str) -> FunctionResult | None:
    try:
        m = protocol.decode(blob)
    except protocol.ProtocolError:
        return None
    if not isinstance(m, protocol.BatchResult) or len(m.results) != 1:
        return None
    return FunctionResult(m.results[0], m.node, m.config)


def take_over(ledger: Ledger, channel: SchedulerChannel, nodes: Iterable[str], epoch: int) -> Found:
    """Tell ``nodes`` the new ``epoch``, then read and settle what the former leader left (module doc).
    Every write is fenced: raises what a fenced script raises if the lease went meanwhile."""
    nodes = sorted(set(nodes))
    channel.tell_epoch(nodes, epoch)
    found = Found()
    for e in ledger.unfinished():
        (found.open if e.state == "open" else found.acking).append(e)
    open_ids = {e.activation_id for e in found.open}
    for e in found.open:
        found.progress[e.activation_id] = {f: r for f, blob in e.progress.items()
                                           if (r := decode_progress(blob)) is not None}
    for node in nodes:
        _settle_stream(channel, node, epoch, found)
    adopted = {a.message.batch_id: a for a in found.adopted}
    for node in nodes:
        for e in channel.unread_results(node):
            found.results_at[node] = e.id
            try:
                rm = protocol.decode(e.raw or b"")
            except protocol.ProtocolError:
                continue
            if not isinstance(rm, protocol.BatchResult) or not channel.believe(e, rm):
                continue
            rm = channel.sanitize(rm)
            adopted.pop(rm.batch_id, None)      # answered since it was read as running: its result is here
            if not rm.function:
                continue
            for r in rm.results:
                if r.activation_id in open_ids:
                    found.progress[r.activation_id][rm.function] = FunctionResult(r, rm.node, rm.config)
    found.adopted = list(adopted.values())
    log.info("takeover (epoch %d): %d open and %d acking activations, %d batches running adopted, %d revoked "
             "before they started", epoch, len(found.open), len(found.acking), len(found.adopted), found.revoked)
    return found


def _settle_stream(channel: SchedulerChannel, node: str, epoch: int, found: Found) -> None:
    """Revoke what an older leader sent ``node``; adopt what its agent had started."""
    batches: list[tuple[str, str, int]] = []
    messages: list[protocol.DispatchMessage | None] = []
    for eid, m in channel.pending(node):
        if m is None or m.epoch >= epoch:
            continue
        if isinstance(m, protocol.DispatchMessage):
            batches.append((m.batch_id, eid, m.data_ttl_s))
            messages.append(m)
        else:
            batches.append((m.prewarm_id, eid, PREWARM_REVOKE_TTL_S))
            messages.append(None)
    for (_, eid, _), m, verdict in zip(batches, messages, channel.revoke(node, batches)):
        if m is None:
            continue
        if verdict == claims.REVOKED:
            found.revoked += 1
        elif verdict == claims.RUNNING:
            found.adopted.append(Adopted(m, eid))


def adopted_dispatch(a: Adopted, arrival_ms: dict[str, float], slo_ms: float, now_ms: float) -> Dispatch:
    """The core's view of an adopted batch: its jobs (requests' arrivals as their activations' acceptance)
    on the slice it was sent to."""
    m = a.message
    jobs = tuple(Job(f"{r.activation_id}/{m.function}", r.activation_id, m.app, m.function,
                     arrival_ms.get(r.activation_id, now_ms), arrival_ms.get(r.activation_id, now_ms) + slo_ms, now_ms)
                 for r in m.requests)
    return Dispatch(m.batch_id, m.app, m.function, jobs, m.config, Fit(m.node, m.slice, False, m.destroy))
