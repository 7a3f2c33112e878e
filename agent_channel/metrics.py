"""Prometheus plumbing the scheduler and the agents share: bounded label values, cached children, and the
``/metrics`` endpoint (on loopback unless told otherwise).

**Bounded labels.** A label's values must stay few (Prometheus keeps one series per combination). App and
function names come from users: :class:`Bounded` passes the first ``limit`` distinct values it sees and
maps every later one to :data:`OTHER`, so a flood of one-off action names costs one more series, not one
per name. Node names are bounded by the cluster, GPU models and MIG profiles by the geometry tables.

**Cheap increments.** ``metric.labels(...)`` takes the metric's lock and builds a key on every call; on
the live path that was measurable. :class:`Children` keeps each labelled child in a dict the first time
it is asked for, so an increment is a dict look-up and the child's own (uncontended) lock.
"""

from __future__ import annotations

import threading
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server

OTHER = "_other"
"""The label value every app or function name past a :class:`Bounded`'s limit is counted under."""
DEFAULT_HOST = "127.0.0.1"
"""Where metrics are served unless ``--metrics-host`` says otherwise: loopback, so that nothing off the
machine reads them by accident (a deployment that scrapes from elsewhere binds its pod or host address)."""


class Bounded:
    """The first ``limit`` distinct values as themselves, every later one as :data:`OTHER`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._seen: dict[str, str] = {}
        self._lock = threading.Lock()

    def __call__(self, value: str) -> str:
        got = self._seen.get(value)
        if got is not None:
            return got
        with self._lock:     # values past the limit are not kept: memory stays bounded too
            if value in self._seen or len(self._seen) < self.limit:
                self._seen[value] = value
                return value
            return OTHER

    def __len__(self) -> int:
        return len(self._seen)


class Children:
    """A labelled metric's children, each made once (``metric.labels`` is called on a miss only)."""

    def __init__(self, metric: Any) -> None:
        self.metric = metric
        self._children: dict[tuple[str, ...], Any] = {}

    def get(self, *labels: str) -> Any:
        child = self._children.get(labels)
        if child is None:
            child = self._children[labels] = self.metric.labels(*labels)
        return child

    def keys(self) -> list[tuple[str, ...]]:
        return list(self._children)


class Endpoint:
    """A registry served on ``host:port`` in a daemon thread until :meth:`close`."""

    def __init__(self, registry: CollectorRegistry, port: int, host: str = DEFAULT_HOST) -> None:
        self._server: tuple[Any, threading.Thread] | None = start_http_server(port, addr=host, registry=registry)
        self.port = self._server[0].server_port
        self.host = host

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"

    def close(self) -> None:
        """Stop serving (the port is free again)."""
        if self._server is not None:
            httpd, thread = self._server
            httpd.shutdown()
            httpd.server_close()
            thread.join(timeout=5)
            self._server = None
