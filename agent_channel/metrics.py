"""Prometheus plumbing the scheduler and the agents share: bounded label values, cached children, and the
``/metrics`` endpoint (on loopback unless told otherwise).

**Bounded labels.** A label's values must stay few (Prometheus keeps one series per combination). App and
function names come from users: :class:`Bounded` passes the first ``limit`` distinct values it sees and
maps every later one to :data:`OTHER`, so a flood of one-off action names costs one more series, not one
per name. Node names are bounded by the cluster, GPU models and MIG profiles by the geometry tables.

**Cheap increments.** ``metric.labels(...)`` takes the metric's lock and builds a key on every call; on
the live path that was measurable. :class:`Children` keeps each labelled child in a dict the first time
it is asked for, so an increment is a dict look-up and the child's own (uncontended) lock. Even so,
``prometheus_client``'s histogram ``observe`` (a lock, a Python loop over the buckets) made the per-app
model cost eight times the unlabelled one per activation (``benchmarks/bench_metrics.py``): the
scheduler's main loop, the only writer of its hot series, counts into :class:`FastCounter` and
:class:`FastHistogram` instead -- plain numbers behind no lock, a bisection for the bucket -- which the
registry reads at scrape time. A scrape taken in the middle of an update may see a bucket count and the
sum one observation apart; the next one sees both.
"""

from __future__ import annotations

import threading
from bisect import bisect_left
from collections.abc import Iterator, Sequence
from typing import Any

from prometheus_client import CollectorRegistry, start_http_server
from prometheus_client.core import CounterMetricFamily, HistogramMetricFamily, Metric
from prometheus_client.utils import floatToGoString

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


class _Family:
    """A labelled metric family whose children one thread updates without locks, collected by the registry."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry) -> None:
        self.name, self.documentation, self.labelnames = name, documentation, tuple(labelnames)
        self._children: dict[tuple[str, ...], Any] = {}
        if not self.labelnames:
            self._children[()] = self._child()
        registry.register(self)

    def _child(self) -> Any:
        raise NotImplementedError

    def labels(self, *values: str) -> Any:
        child = self._children.get(values)
        if child is None:
            if len(values) != len(self.labelnames):
                raise ValueError(f"{self.name}: expected labels {self.labelnames}, got {values}")
            child = self._children[values] = self._child()
        return child

    def describe(self) -> list[Metric]:
        return [self._family()]

    def _family(self) -> Metric:
        raise NotImplementedError


class _CounterChild:
    __slots__ = ("value",)

    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1.0) -> None:
        self.value += amount


class FastCounter(_Family):
    """A counter (``name`` without ``_total``) for one writer thread: ``labels(...).inc(n)``."""

    def _child(self) -> _CounterChild:
        return _CounterChild()

    def inc(self, amount: float = 1.0) -> None:
        self._children[()].inc(amount)

    def _family(self) -> CounterMetricFamily:
        return CounterMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            family.add_metric(values, child.value)
        yield family


class _HistogramChild:
    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)    # the last: above every bound (+Inf only)
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value


class FastHistogram(_Family):
    """A histogram for one writer thread: ``labels(...).observe(v)``; ``buckets`` are the upper bounds
    (``le``), +Inf added."""

    def __init__(self, name: str, documentation: str, labelnames: Sequence[str], registry: CollectorRegistry,
                 buckets: Sequence[float]) -> None:
        self.bounds = tuple(float(b) for b in buckets)
        super().__init__(name, documentation, labelnames, registry)

    def _child(self) -> _HistogramChild:
        return _HistogramChild(self.bounds)

    def observe(self, value: float) -> None:
        self._children[()].observe(value)

    def _family(self) -> HistogramMetricFamily:
        return HistogramMetricFamily(self.name, self.documentation, labels=self.labelnames)

    def collect(self) -> Iterator[Metric]:
        family = self._family()
        for values, child in list(self._children.items()):
            counts, total, buckets = list(child.counts), 0, []
            for bound, n in zip((*self.bounds, float("inf")), counts):
                total += n
                buckets.append((floatToGoString(bound), total))
            family.add_metric(values, buckets, child.sum)
        yield family


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
