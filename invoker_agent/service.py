"""The agent's Kafka side: take dispatches, run them concurrently, answer, heartbeat, drain.

Threads:

* **the consumer loop** (the caller of :meth:`AgentService.run`): polls ``{prefix}esgdispatch{node}``
  with consumer group ``esg-agent-{node}`` on *assigned* partitions (no group join), hands each
  dispatch to the batch pool, and commits offsets. It is the only thread touching the consumer.
* **the batch pool**: a bounded ``ThreadPoolExecutor`` (``max_batches`` threads); each thread runs one
  :class:`~invoker_agent.batch.BatchRunner` batch and publishes its :class:`~esg.protocol.ResultMessage`
  to ``{prefix}esgresults``, waiting for the broker's ack. The loop stops polling while ``max_batches``
  batches are in flight.
* **the heartbeat thread**: every ``heartbeat_s`` (also while draining) publishes a :class:`~esg.protocol.Heartbeat` to
  ``{prefix}esgheartbeat`` and evicts warm workers idle past their TTL.

**Commits.** Auto-commit is off. An offset is committed once its batch is answered (or the record was
skipped), and only when every earlier offset of its partition is too (:class:`OffsetTracker`), so a
restarted agent re-reads exactly the dispatches it had not finished. A redelivered batch id that this
agent has already taken is skipped (:class:`RecentBatches`), never run twice.

**Draining.** :meth:`AgentService.stop` (SIGTERM / SIGINT) stops polling; running batches finish and are
answered and committed; then a final heartbeat with ``draining: true`` goes out and the pool closes.
"""

from __future__ import annotations

import json
import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from queue import Empty, SimpleQueue
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition
from kafka.structs import OffsetAndMetadata

from esg.protocol import (
    HEARTBEAT_TOPIC,
    RESULTS_TOPIC,
    DispatchMessage,
    ProtocolError,
    ResultMessage,
    decode,
    dispatch_topic,
    encode,
)
from invoker_agent import runtime_client as rt
from invoker_agent.batch import BatchRunner, failed_ids
from invoker_agent.heartbeat import HeartbeatBuilder
from invoker_agent.node import NodeAgent
from invoker_agent.offsets import OffsetTracker, RecentBatches

log = logging.getLogger("esg.agent")


@dataclass(frozen=True)
class ServiceSettings:
    node: str
    topic_prefix: str = ""
    heartbeat_s: float = 1.0
    max_batches: int = 4
    publish_timeout_s: float = 10.0

    @property
    def dispatch_topic(self) -> str:
        return dispatch_topic(self.node, self.topic_prefix)

    @property
    def results_topic(self) -> str:
        return self.topic_prefix + RESULTS_TOPIC

    @property
    def heartbeat_topic(self) -> str:
        return self.topic_prefix + HEARTBEAT_TOPIC

    @property
    def group_id(self) -> str:
        return f"esg-agent-{self.node}"


class AgentService:
    def __init__(self, settings: ServiceSettings, node: NodeAgent, runner: BatchRunner,
                 heartbeats: HeartbeatBuilder, consumer: KafkaConsumer, producer: KafkaProducer,
                 partitions: list[TopicPartition]) -> None:
        self.settings = settings
        self.node = node
        self.runner = runner
        self.heartbeats = heartbeats
        self.consumer = consumer
        self.producer = producer
        self.partitions = partitions
        self.offsets = OffsetTracker()
        self.recent = RecentBatches()
        self._finished: SimpleQueue[tuple[TopicPartition, int]] = SimpleQueue()
        self._stop = threading.Event()          # stop taking dispatches (drain)
        self._hb_stop = threading.Event()       # stop heartbeating (after the drain)
        self._draining = False
        self._executor = ThreadPoolExecutor(max_workers=settings.max_batches, thread_name_prefix="batch")
        self._inflight: set[Future] = set()
        self._hb_thread = threading.Thread(target=self._heartbeat_loop, name="heartbeat", daemon=True)

    # --- control ---------------------------------------------------------------------------------
    def stop(self) -> None:
        """Begin draining (safe from a signal handler): no new dispatches; running ones finish."""
        self._draining = True
        self._stop.set()

    def run(self) -> int:
        self.consumer.assign(self.partitions)
        self._hb_thread.start()
        log.info("agent %s: consuming %s (group %s)", self.settings.node, self.settings.dispatch_topic,
                 self.settings.group_id)
        try:
            while not self._stop.is_set():
                self._collect_finished()
                free = self.settings.max_batches - len(self._inflight)
                if free <= 0:
                    self._stop.wait(0.05)
                    continue
                records = self.consumer.poll(timeout_ms=200, max_records=free)
                for tp, recs in records.items():
                    for rec in recs:
                        self._accept(tp, rec.offset, rec.value)
            log.info("agent %s: draining, %d batch(es) running", self.settings.node, len(self._inflight))
            for fut in list(self._inflight):
                fut.result()
            self._collect_finished()
        finally:
            self._executor.shutdown(wait=True)
            self._hb_stop.set()
            self._hb_thread.join(timeout=self.settings.heartbeat_s + 5)
            self._publish(self.settings.heartbeat_topic, encode(self.heartbeats.build(draining=True)))
            self.producer.flush(timeout=self.settings.publish_timeout_s)
            self.node.close()
            self.consumer.close()
            self.producer.close(timeout=self.settings.publish_timeout_s)
            log.info("agent %s: stopped", self.settings.node)
        return 0

    # --- dispatches ------------------------------------------------------------------------------
    def _accept(self, tp: TopicPartition, offset: int, raw: bytes | None) -> None:
        self.offsets.taken(tp, offset)
        try:
            msg = decode(raw or b"")
            if not isinstance(msg, DispatchMessage):
                raise ProtocolError(f"expected a dispatch message, got a {type(msg).__name__}")
        except ProtocolError as e:
            log.warning("skipping malformed dispatch at %s:%d: %s", tp.topic, offset, e)
            batch_id, ids = salvage(raw)
            if batch_id is not None:
                self._answer(failed_ids(batch_id, self.settings.node, ids, rt.WHISK_ERROR,
                                        f"malformed dispatch: {e}"))
            self._finished.put((tp, offset))
            return
        if not self.recent.add(msg.batch_id):
            log.warning("batch %s delivered again (offset %d): already taken, not run twice", msg.batch_id, offset)
            self._finished.put((tp, offset))
            return
        if msg.node != self.settings.node:
            log.warning("batch %s is addressed to node %r but arrived on %s; running it here",
                        msg.batch_id, msg.node, tp.topic)
        fut = self._executor.submit(self._run_batch, msg)
        self._inflight.add(fut)
        fut.add_done_callback(lambda _f, tp=tp, offset=offset: self._finished.put((tp, offset)))

    def _run_batch(self, msg: DispatchMessage) -> None:
        result = self.runner.run(msg)
        self._answer(result)

    def _answer(self, result: ResultMessage) -> None:
        codes = [r.status_code for r in result.results]
        log.info("batch %s answered: codes %s%s", result.batch_id, codes,
                 f" ({result.error})" if result.error else "")
        self._publish(self.settings.results_topic, encode(result))

    def _collect_finished(self) -> None:
        self._inflight = {f for f in self._inflight if not f.done()}
        while True:
            try:
                tp, offset = self._finished.get_nowait()
            except Empty:
                break
            self.offsets.finished(tp, offset)
        points = self.offsets.to_commit()
        if points:
            try:
                self.consumer.commit({tp: OffsetAndMetadata(o, "", -1) for tp, o in points.items()})
                self.offsets.committed(points)
            except Exception as e:  # noqa: BLE001 - retried at the next loop turn
                log.warning("offset commit failed (will retry): %s", e)

    # --- heartbeats ------------------------------------------------------------------------------
    def _heartbeat_loop(self) -> None:
        while not self._hb_stop.is_set():
            try:
                self._publish(self.settings.heartbeat_topic, encode(self.heartbeats.build(self._draining)))
                gone = self.node.pool.evict_idle()
                log.debug("heartbeat: %d warm worker(s), %d evicted", self.node.pool.warm_count(), gone)
            except Exception:  # noqa: BLE001 - a heartbeat failure must not end the thread
                log.exception("heartbeat failed")
            self._hb_stop.wait(self.settings.heartbeat_s)

    def _publish(self, topic: str, value: bytes) -> None:
        try:
            self.producer.send(topic, value).get(timeout=self.settings.publish_timeout_s)
        except Exception as e:  # noqa: BLE001
            log.error("publishing to %s failed: %s", topic, e)


def salvage(raw: bytes | None) -> tuple[str | None, list[str]]:
    """The batch id and activation ids of a malformed dispatch, where they can still be read."""
    try:
        data: Any = json.loads(raw or b"")
    except (ValueError, UnicodeDecodeError, RecursionError):
        return None, []
    if not isinstance(data, dict) or not isinstance(data.get("batch_id"), str):
        return None, []
    reqs = data.get("requests")
    ids = [r["activation_id"] for r in reqs if isinstance(r, dict) and isinstance(r.get("activation_id"), str)] \
        if isinstance(reqs, list) else []
    return data["batch_id"], ids
