"""The agent's main loop: take dispatches, run them concurrently, answer, heartbeat, drain.

Threads:

* **the batch threads** (``max_batches`` of them): each gets one dispatch at a time from the node's
  stream (:class:`~invoker_agent.intake.Intake`: one idle thread reads for all the idle ones, ``COUNT``
  as many as they are, and the others take what it read), runs it with the
  :class:`~invoker_agent.batch.BatchHandler` and answers it through
  :class:`~invoker_agent.channel.AgentChannel` (outputs, result and the dispatch's acknowledgement in
  one ``MULTI``, shared by the dispatches read together). First they run the dispatches an earlier
  incarnation took and never answered (the consumer group's pending list). No read asks for more than
  the idle threads can start, so an undelivered dispatch waits in the stream, where a scheduler can
  still take it back.
* **the pre-warm threads** (``max_prewarms`` of them, by default one per vCPU: a pool of their own, whose
  threads start as pre-warms come): each starts one pre-warm's
  worker at a time, so a batch never waits behind a worker's start-up (a batch thread that reads a
  pre-warm hands it over and reads again); more pre-warms than threads wait their turn in the pool.
* **the heartbeat thread**: every ``heartbeat_s`` (also while draining), and at once when a pre-warm
  finishes, publishes a :class:`~agent_channel.protocol.Heartbeat` and evicts warm workers idle past
  their TTL.
* the caller of :meth:`AgentService.run` waits for :meth:`AgentService.stop`.

**At most once** (:mod:`agent_channel.claims`): a batch starts only once the agent took its claim. A
batch the scheduler revoked (it declared this agent lost, or a new leader took it back), or one of an
older leader epoch than the node was told of, is retired without running; one this node had started
before a restart is answered with a developer error, as a container that died is, and not run again.
A batch id this process has already taken is not run twice (:class:`RecentBatches`). A dispatch whose
``reply_to`` is not one of the node's own results streams is refused (logged and retired). A malformed
dispatch is answered with status 3 for each activation whose id can be read, when it says where to
answer; otherwise it is logged and retired.

**Pre-warms** (:class:`~agent_channel.protocol.PrewarmMessage`) come on the same stream and are read
by the same threads. A pre-warm is retired from the stream as soon as it is read (at most once: one
lost with a crash costs a later batch a cold start, nothing else, so it is neither resumed nor
answered; one an earlier incarnation took and never retired is retired unstarted and named done), then
handed to the pre-warm threads, where :meth:`~invoker_agent.batch.BatchHandler.prewarm` starts its
worker (one taken after its keep-alive ran out since it was sent is dropped, :func:`prewarm_expired`);
its id is in the heartbeats' ``running`` list meanwhile and in ``done`` after, as a batch's, so the
scheduler knows when the reported idle workers include it, with its outcome
(:class:`~agent_channel.protocol.PrewarmDone`: started a worker, found one warm, failed, expired,
repeated, or dropped when the agent stopped first), which the scheduler's decision log keeps for the
costs. Outcomes are also counted (:class:`PrewarmCounts`) and logged; none is fatal.

**Draining.** :meth:`AgentService.stop` (SIGTERM / SIGINT) stops taking dispatches; running batches
finish and are answered, pre-warms being started finish and those still waiting for a pre-warm thread
are dropped; then a final heartbeat with ``draining: true`` goes out and the pool closes.
Dispatches not yet taken stay in the stream for the next incarnation.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any

import redis

from agent_channel import claims
from agent_channel.protocol import (
    BatchResult,
    DispatchMessage,
    PrewarmDone,
    PrewarmMessage,
    ProtocolError,
    decode,
)
from agent_channel.streams import Entry
from invoker_agent.batch import BatchHandler, failed, failed_ids
from invoker_agent.channel import AgentChannel
from invoker_agent.data import Write
from invoker_agent.heartbeat import HeartbeatBuilder
from invoker_agent.intake import Intake
from invoker_agent.metrics import AgentMetrics
from invoker_agent.node import NodeAgent
from invoker_agent.workers import PrewarmOutcome
from openwhisk_status import STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR

log = logging.getLogger("esg.agent")

#: How long one blocking read waits before the reader looks at its stop flag again.
READ_BLOCK_MS = 200
#: How long answering a batch is retried while Redis is unreachable.
ANSWER_RETRY_S = 60.0


@dataclass(frozen=True)
class AgentSettings:
    node: str
    heartbeat_s: float = 1.0
    max_batches: int = 4
    max_prewarms: int | None = None
    """Pre-warms starting their workers at once, on threads of their own (the rest wait their turn).
    None: as many as the node has vCPUs -- no limit of the agent's own, as in the emulator: each pre-warm
    holds at least one vCPU in the scheduler's view of the node, so no more can be in flight. (A bound of
    two delayed the third pre-warm of a burst by a whole cold start, and live hit rates fell 10-15
    points below the emulator's on the twin cluster.)"""
    alive_file: str | None = None
    """A file whose modification time the heartbeat thread renews at every turn, whether or not Redis
    took the heartbeat (``deploy/healthcheck.py alive``: a liveness probe that needs no other service)."""


class RecentBatches:
    """The last ``size`` batch ids taken, so a dispatch sent twice is not run twice."""

    def __init__(self, size: int = 4096) -> None:
        self.size = size
        self._ids: dict[str, None] = {}
        self._lock = threading.Lock()

    def add(self, batch_id: str) -> bool:
        """Remember ``batch_id``; False when it was already there."""
        with self._lock:
            if batch_id in self._ids:
                return False
            self._ids[batch_id] = None
            while len(self._ids) > self.size:
                del self._ids[next(iter(self._ids))]
            return True

    def __contains__(self, batch_id: object) -> bool:
        return batch_id in self._ids


@dataclass
class PrewarmCounts:
    """Pre-warms taken by this agent, by outcome."""

    started: int = 0
    warm: int = 0
    """Already warm there: nothing done."""
    failed: int = 0
    repeated: int = 0
    """Delivered again, or taken before a restart: not started."""
    expired: int = 0
    """Taken after its keep-alive had run out since it was sent: not started (:func:`prewarm_expired`)."""
    dropped: int = 0
    """Still waiting for a pre-warm thread when the agent stopped: not started."""
    revoked: int = 0
    """Taken back by the scheduler, or sent by an older leader: not started."""


def prewarm_expired(msg: PrewarmMessage, now_ms: int, idle_ttl_s: float) -> bool:
    """Whether a pre-warm taken at ``now_ms`` (wall clock) comes too late: its keep-alive (none given:
    the agent's idle TTL) has run out since it was sent, so the worker it asks for would already be gone
    (e.g. read from the stream's backlog after the agent was down). A message that does not say when it
    was sent is never too late."""
    if msg.sent_ms is None:
        return False
    keep_ms = idle_ttl_s * 1000 if msg.keep_alive_ms is None else msg.keep_alive_ms
    return now_ms - msg.sent_ms > keep_ms


class AgentService:
    def __init__(self, settings: AgentSettings, node: NodeAgent, batches: BatchHandler,
                 heartbeats: HeartbeatBuilder, channel: AgentChannel, metrics: AgentMetrics | None = None) -> None:
        self.settings = settings
        self.metrics = metrics
        self.node = node
        self.batches = batches
        self.heartbeats = heartbeats
        self.channel = channel
        self.recent = RecentBatches()
        self.prewarms = PrewarmCounts()
        self._count_lock = threading.Lock()
        self._stop = threading.Event()          # stop taking dispatches (drain)
        self._hb_stop = threading.Event()       # stop heartbeating (after the drain)
        self._hb_wake = threading.Event()       # beat now: a pre-warm finished, or heartbeating stops
        self._draining = False
        self._resumed: deque[Entry] = deque()
        self._intake = Intake(lambda count, block_ms: channel.take(count, block_ms, cohort=True), self._stop,
                              READ_BLOCK_MS, settings.max_batches)
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)
        self._prewarm_pool = ThreadPoolExecutor(settings.max_prewarms or max(1, node.vcpus),
                                                thread_name_prefix="prewarm")

    # --- control ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Begin draining: no new dispatches; running ones finish. From any thread, but not from a signal
        handler (it sets an event, whose lock the interrupted thread may hold)."""
        self._draining = True
        self._stop.set()

    def run(self) -> int:
        self._hb_thread.start()
        log.info("agent %s: reading %s", self.settings.node, self.channel.stream)
        threads = [threading.Thread(target=self._batch_loop, name=f"batch-{i}", daemon=True)
                   for i in range(self.settings.max_batches)]
        try:
            self._resumed.extend(self._pending())
            if self._resumed:
                log.info("agent %s: resuming %d dispatch(es) taken before a restart", self.settings.node,
                         len(self._resumed))
            for t in threads:
                t.start()
            while not self._stop.wait(0.5):
                pass
            log.info("agent %s: draining", self.settings.node)
        finally:
            self._stop.set()
            for t in threads:
                if t.is_alive():
                    t.join()
            self._prewarm_pool.shutdown(wait=True)  # those waiting are dropped (_start_prewarm), not started
            self._hb_stop.set()
            self._hb_wake.set()
            self._hb_thread.join(timeout=self.settings.heartbeat_s + 5)
            self._beat(draining=True)
            self.node.close()
            p = self.prewarms
            log.info("agent %s: stopped (pre-warms: %d started, %d already warm, %d failed, %d repeated, "
                     "%d expired, %d dropped, %d revoked)", self.settings.node, p.started, p.warm, p.failed,
                     p.repeated, p.expired, p.dropped, p.revoked)
        return 0

    def _pending(self) -> list[Entry]:
        """What an earlier incarnation took and never answered; asked again while Redis fails."""
        while not self._stop.is_set():
            try:
                return self.channel.pending()
            except redis.RedisError as e:
                log.error("reading the dispatches taken before a restart failed (%s); retrying", e)
                self._stop.wait(0.5)
        return []

    def _batch_loop(self) -> None:
        while True:
            resumed = True
            try:
                if self._stop.is_set():
                    raise IndexError        # draining: only what was read already (below)
                entry: Entry | None = self._resumed.popleft()
            except IndexError:
                resumed = False
                try:
                    entry = self._intake.next()
                except redis.RedisError as e:
                    log.error("reading dispatches failed (%s); retrying", e)
                    self._stop.wait(0.5)
                    continue
                if entry is None:
                    return
            try:
                self._handle(entry, resumed)
            except Exception:  # noqa: BLE001 - left pending: the next incarnation runs it again
                log.exception("dispatch %s could not be answered", entry.id)
            finally:
                self.channel.settle(entry.id)

    # --- dispatches ------------------------------------------------------------------------------
    def _handle(self, entry: Entry, resumed: bool = False) -> None:
        try:
            msg = decode(entry.raw or b"")
            if not isinstance(msg, DispatchMessage | PrewarmMessage):
                raise ProtocolError(f"expected a dispatch or pre-warm message, got a {type(msg).__name__}")
        except ProtocolError as e:
            self._malformed(entry, e)
            return
        if not self.channel.answers_to(msg.reply_to):
            log.warning("%s %s asks for answers on %r, not a results stream of node %s: refused", type(msg).__name__,
                        getattr(msg, "batch_id", None) or getattr(msg, "prewarm_id", ""), msg.reply_to,
                        self.settings.node)
            self._answer_safely(entry.id, "", None)
            return
        if isinstance(msg, PrewarmMessage):
            if resumed:     # taken by an earlier incarnation that died before retiring it: at most once
                log.info("pre-warm %s was taken before a restart: retired, not started", msg.prewarm_id)
                self._answer_safely(entry.id, "", None)
                self._prewarm_done(msg, "repeated")     # the scheduler's claim ends with it
                return
            self._prewarm(entry, msg)
            return
        if not self.recent.add(msg.batch_id):
            log.warning("batch %s delivered again (entry %s): already taken, not run twice", msg.batch_id, entry.id)
            self._answer_safely(entry.id, "", None)
            return
        verdict = self._claim(msg.batch_id, msg.epoch, msg.data_ttl_s)
        if verdict != claims.CLAIMED:
            self._not_run(entry, msg, verdict)
            return
        self.heartbeats.batches.taken(msg.batch_id)
        self.channel.describe(entry.id, (msg.function, msg.config))
        if msg.node != self.settings.node:
            log.warning("batch %s is addressed to node %r but arrived on %s; running it here",
                        msg.batch_id, msg.node, entry.stream)
        with self._intake.running():
            result, writes = self.batches.run(msg)
        codes = [r.status_code for r in result.results]
        log.info("batch %s answered: codes %s%s", result.batch_id, codes,
                 f" ({result.error})" if result.error else "")
        self._answer_safely(entry.id, msg.reply_to, result, writes, msg.data_ttl_s)
        self.heartbeats.batches.answered(msg.batch_id)
        if self.metrics is not None:
            self.metrics.batch(msg.function, result)

    def _claim(self, batch_id: str, epoch: int, ttl_s: int) -> str:
        """The claim's verdict (:mod:`agent_channel.claims`), asked again while Redis fails; :data:`claims.STALE`
        (not run) if Redis never answers within :data:`ANSWER_RETRY_S`."""
        deadline = time.monotonic() + ANSWER_RETRY_S
        while True:
            try:
                return self.channel.claim(batch_id, epoch, ttl_s)
            except redis.RedisError as e:
                if time.monotonic() > deadline or self._stop.is_set():
                    log.error("could not claim batch %s (%s): not run", batch_id, e)
                    return claims.STALE
                log.warning("claiming batch %s failed (%s); retrying", batch_id, e)
                time.sleep(0.5)

    def _not_run(self, entry: Entry, msg: DispatchMessage, verdict: str) -> None:
        """A batch whose claim this agent did not get: retired unrun; one it had started before a restart is
        answered with a developer error (it may have run part way; it is not run again)."""
        if verdict == claims.RUNNING:
            log.warning("batch %s was started before this agent restarted: answered with an error, not run again "
                        "(at most once)", msg.batch_id)
            result = failed(msg, self.settings.node, STATUS_DEVELOPER_ERROR,
                            f"the invoker agent on {self.settings.node} stopped while running this activation; it "
                            "is not run again (at most once)")
            self._answer_safely(entry.id, msg.reply_to, result, (), msg.data_ttl_s)
            return
        why = {claims.REVOKED: "taken back by the scheduler", claims.STALE: "sent by an older leader",
               claims.DONE: "answered already"}.get(verdict, verdict)
        log.warning("batch %s not run: %s (at most once)", msg.batch_id, why)
        self._answer_safely(entry.id, "", None)

    def _prewarm(self, entry: Entry, msg: PrewarmMessage) -> None:
        """Retire the pre-warm and hand it to the pre-warm threads: the batch thread that read it goes
        back to the stream at once, whatever the worker's start-up takes."""
        self._answer_safely(entry.id, "", None)      # retired first: a pre-warm runs at most once
        if not self.recent.add(msg.prewarm_id):
            log.info("pre-warm %s delivered again: already taken", msg.prewarm_id)
            if self.heartbeats.batches.is_running(msg.prewarm_id):
                self._count("repeated")     # the first is still starting: named done when it is
            else:
                self._prewarm_done(msg, "repeated")
            return
        verdict = self._claim(msg.prewarm_id, msg.epoch, max(60, (msg.keep_alive_ms or 0) // 1000))
        if verdict != claims.CLAIMED:
            log.info("pre-warm %s not started: %s", msg.prewarm_id, verdict)
            self._prewarm_done(msg, "revoked" if verdict in (claims.REVOKED, claims.STALE) else "repeated")
            return
        self.heartbeats.batches.taken(msg.prewarm_id)
        try:
            self._prewarm_pool.submit(self._start_prewarm, msg)
        except RuntimeError:    # the pool is shut down: the agent stopped meanwhile
            self._prewarm_done(msg, "dropped")

    def _start_prewarm(self, msg: PrewarmMessage) -> None:
        """On a pre-warm thread: start ``msg``'s worker (unless it is too late, or the agent stops) and
        name it done with what became of it."""
        outcome, reconfigured, reconfig_ms = "failed", 0, None
        try:
            now = int(time.time() * 1000)
            if self._stop.is_set():
                log.info("pre-warm %s of %s not started: the agent stops", msg.prewarm_id, msg.function)
                outcome = "dropped"
            elif prewarm_expired(msg, now, self.node.pool.idle_ttl_s):
                log.info("pre-warm %s of %s taken %d ms after it was sent, past its keep-alive: dropped",
                         msg.prewarm_id, msg.function, now - (msg.sent_ms or 0))
                outcome = "expired"
            else:
                out = self.batches.prewarm(msg)
                outcome, reconfigured, reconfig_ms = out.outcome, out.reconfigured, out.reconfig_ms
                self._log_prewarm(msg, out)
        finally:
            self._prewarm_done(msg, outcome, reconfigured, reconfig_ms)

    def _log_prewarm(self, msg: PrewarmMessage, out: PrewarmOutcome) -> None:
        where = f"{msg.config.label()}" + (f" on MIG {msg.slice.profile}@{msg.slice.start}" if msg.slice else "")
        if out.error is not None:
            log.warning("pre-warm %s of %s (%s) failed: %s", msg.prewarm_id, msg.function, where, out.error)
        elif out.warm:
            log.info("pre-warm %s of %s (%s): already warm, nothing to do", msg.prewarm_id, msg.function, where)
        else:
            keep = (f"{msg.keep_alive_ms} ms" if msg.keep_alive_ms is not None
                    else f"the idle TTL ({self.node.pool.idle_ttl_s:g} s)")
            log.info("pre-warm %s of %s (%s): worker ready in %.0f ms, idle for at most %s", msg.prewarm_id,
                     msg.function, where, out.init_ms or 0.0, keep)

    def _prewarm_done(self, msg: PrewarmMessage, outcome: str, reconfigured: int = 0,
                      reconfig_ms: float | None = None) -> None:
        """Name the pre-warm done in the next heartbeats, with its outcome, count it, and beat at once:
        the scheduler sees a pre-warmed worker when it is ready, not up to a heartbeat period later (a
        head arriving meanwhile would start another worker cold, where the emulator -- which knows the
        moment a worker is warm -- takes this one)."""
        self.heartbeats.batches.answered(msg.prewarm_id, PrewarmDone(msg.prewarm_id, outcome, reconfigured,
                                                                             reconfig_ms))
        self._count(outcome)
        self._hb_wake.set()

    def _count(self, outcome: str) -> None:
        with self._count_lock:
            setattr(self.prewarms, outcome, getattr(self.prewarms, outcome) + 1)
        if self.metrics is not None:
            self.metrics.prewarm(outcome)

    def _malformed(self, entry: Entry, e: ProtocolError) -> None:
        log.warning("skipping malformed dispatch %s: %s", entry.id, e)
        batch_id, ids, reply_to = salvage(entry.raw)
        if reply_to and not self.channel.answers_to(reply_to):
            reply_to = None     # never answered outside the node's own results streams
        result = None
        if batch_id is not None and reply_to:
            result = failed_ids(batch_id, self.settings.node, ids, STATUS_WHISK_ERROR, f"malformed dispatch: {e}")
        self._answer_safely(entry.id, reply_to or "", result)

    def _answer_safely(self, entry_id: str, reply_to: str, result: BatchResult | None,
                       writes: list[Write] | tuple = (), claim_ttl_s: int | None = None) -> None:
        """Answer (or, without a result, retire) a dispatch; retried while Redis is unreachable. If it
        never gets through, the dispatch stays pending and the next incarnation runs it again."""
        deadline = time.monotonic() + ANSWER_RETRY_S
        while True:
            try:
                if result is None:
                    self.channel.drop(entry_id)
                    self.channel.settle(entry_id)   # a pre-warm's cohort does not wait for its worker
                else:
                    self.channel.answer(entry_id, reply_to, result, writes, claim_ttl_s)
                return
            except redis.RedisError as e:
                if time.monotonic() > deadline:
                    log.error("could not answer dispatch %s: %s", entry_id, e)
                    return
                log.warning("answering dispatch %s failed (%s); retrying", entry_id, e)
                time.sleep(0.5)

    # --- heartbeats ------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        """A heartbeat every ``heartbeat_s``, and one as soon as a pre-warm finishes (those finishing
        together share it); the period restarts after each."""
        while not self._hb_stop.is_set():
            self._hb_wake.clear()
            self._beat(self._draining)
            self._touch_alive()
            try:
                gone = self.node.pool.evict_idle()
                log.debug("heartbeat: %d warm worker(s), %d evicted", self.node.pool.warm_count(), gone)
            except Exception:  # noqa: BLE001 - an eviction failure must not end the thread
                log.exception("evicting idle workers failed")
            self._hb_wake.wait(self.settings.heartbeat_s)

    def _touch_alive(self) -> None:
        path = self.settings.alive_file
        if path is None:
            return
        try:
            with open(path, "a"):
                os.utime(path)
        except OSError as e:
            log.error("cannot renew the liveness file %s: %s", path, e)

    def _beat(self, draining: bool) -> None:
        try:
            hb = self.heartbeats.build(draining)
            if self.channel.recoveries:
                hb = replace(hb, stream_recoveries=self.channel.recoveries)
            self.channel.heartbeat(hb)
        except Exception as e:  # noqa: BLE001 - a heartbeat failure must not end the thread
            log.error("heartbeat failed: %s", e)
            return
        if self.metrics is not None:
            self.metrics.heartbeat(hb, self.node.pool.warm_count())


def salvage(raw: bytes | None) -> tuple[str | None, list[str], str | None]:
    """The batch id, activation ids and ``reply_to`` of a malformed dispatch, where they can be read."""
    try:
        data: Any = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, [], None
    if not isinstance(data, dict):
        return None, [], None
    reply_to = data.get("reply_to") if isinstance(data.get("reply_to"), str) else None
    if not isinstance(data.get("batch_id"), str):
        return None, [], reply_to
    reqs = data.get("requests")
    ids = [r["activation_id"] for r in reqs if isinstance(r, dict) and isinstance(r.get("activation_id"), str)] \
        if isinstance(reqs, list) else []
    return data["batch_id"], ids, reply_to
