"""Malformed input set aside, never dropped silently: the dead-letter topic ``{prefix}esgdeadletter``.

Each record holds the original bytes; its headers say why (``esg-reason``), where it came from
(``esg-topic``: a Kafka topic, or a Redis stream of the agent channel) and its position there
(``esg-offset``: a Kafka offset or a stream entry id). Both readers (activations from Kafka, agent
messages from Redis) put their rejects here, so an operator looks in one place.
"""

from __future__ import annotations

import logging
import threading

from controller_plugin.bus import Bus
from controller_plugin.metrics import Metrics

log = logging.getLogger("esg.scheduler")


class DeadLetters:
    def __init__(self, bus: Bus, topic: str, metrics: Metrics) -> None:
        self.bus = bus
        self.topic = topic
        self.metrics = metrics
        self.count = 0
        self._lock = threading.Lock()

    def put(self, raw: bytes | None, reason: str, source: str, position: object) -> None:
        log.warning("dead letter: %s at %s: %s", source, position, reason)
        headers = [("esg-reason", reason.encode()), ("esg-topic", source.encode()),
                   ("esg-offset", str(position).encode())]
        self.bus.send(self.topic, raw if raw is not None else b"", headers=headers)
        self.metrics.dead_letters.labels(source).inc()
        with self._lock:
            self.count += 1

    def flush(self) -> None:
        self.bus.flush()
