"""A small in-process invoker agent for the scheduler's integration tests (not shipped).

It speaks ``esg/protocol.py`` like the real ``esg agent``: heartbeats on ``esgheartbeat``, batches from
``esgdispatch{node}``, results on ``esgresults``. Actions run as Python callables by fully qualified
name (default: echo the input), so tests need no action code or worker processes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
from kafka.admin import NewTopic
from kafka.errors import TopicAlreadyExistsError

from esg import protocol

Handler = Callable[[Any], Any]


class AgentDouble:
    def __init__(self, kafka: str, node: str, prefix: str = "", vcpus: int = 8, memory_mb: int = 2048,
                 handlers: dict[str, Handler] | None = None, heartbeat_s: float = 0.2,
                 gpu_model: str | None = None, run_delay_s: float = 0.0) -> None:
        self.node = node
        self.prefix = prefix
        self.vcpus = vcpus
        self.memory_mb = memory_mb
        self.handlers = dict(handlers or {})
        self.heartbeat_s = heartbeat_s
        self.gpu_model = gpu_model
        self.run_delay_s = run_delay_s
        self.batches: list[protocol.DispatchMessage] = []
        self.answering = True
        self.heartbeating = True
        self._stop = threading.Event()
        self._seq = 0
        topic = protocol.dispatch_topic(node, prefix)
        admin = KafkaAdminClient(bootstrap_servers=kafka, request_timeout_ms=5000)
        try:
            for t in (topic, prefix + protocol.RESULTS_TOPIC, prefix + protocol.HEARTBEAT_TOPIC):
                if t not in admin.list_topics():
                    try:
                        admin.create_topics([NewTopic(t, 1, 1)])
                    except TopicAlreadyExistsError:
                        pass
        finally:
            admin.close()
        self.producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=1)
        self.consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=20, max_poll_records=500)
        tp = TopicPartition(topic, 0)
        self.consumer.assign([tp])
        self.consumer.seek_to_end(tp)
        self.consumer.position(tp)
        self._threads = [threading.Thread(target=self._beat, daemon=True),
                         threading.Thread(target=self._serve, daemon=True)]
        for t in self._threads:
            t.start()

    def heartbeat(self) -> protocol.Heartbeat:
        self._seq += 1
        return protocol.Heartbeat(self.node, self.vcpus, self.vcpus, self.memory_mb, self.gpu_model,
                                  seq=self._seq, sent_ms=int(time.time() * 1000))

    def _beat(self) -> None:
        while not self._stop.is_set():
            if self.heartbeating:
                self.producer.send(self.prefix + protocol.HEARTBEAT_TOPIC, protocol.encode(self.heartbeat()))
                self.producer.flush(timeout=5)
            self._stop.wait(self.heartbeat_s)

    def _serve(self) -> None:
        while not self._stop.is_set():
            for recs in self.consumer.poll(timeout_ms=50).values():
                out = []
                for rec in recs:
                    msg = protocol.decode(rec.value)
                    assert isinstance(msg, protocol.DispatchMessage)
                    self.batches.append(msg)
                    if self.answering:
                        out.append(self.run(msg))
                if self.run_delay_s:
                    time.sleep(self.run_delay_s)
                for res in out:
                    if self.answering:
                        self.producer.send(self.prefix + protocol.RESULTS_TOPIC, protocol.encode(res))
                if out:
                    self.producer.flush(timeout=5)

    def run(self, msg: protocol.DispatchMessage) -> protocol.ResultMessage:
        handler = self.handlers.get(msg.action.path, lambda v: v)
        results = []
        for r in msg.requests:
            start = int(time.time() * 1000)
            try:
                value = handler(r.value)
                code = 1 if isinstance(value, dict) and "error" in value else 0
            except Exception as exc:
                value, code = {"error": f"{type(exc).__name__}: {exc}"}, 2
            results.append(protocol.RunResult(r.activation_id, code, value, start, int(time.time() * 1000),
                                              init_ms=5 if len(self.batches) == 1 else None,
                                              logs=(f"ran {msg.function}",)))
        return protocol.ResultMessage(msg.batch_id, self.node, tuple(results))

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=5)
        self.consumer.close(autocommit=False)
        self.producer.close(timeout=2)
