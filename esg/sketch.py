"""A streaming quantile sketch with relative-error guarantees and bounded memory (DDSketch's scheme).

A sample ``x`` is counted in bucket ``i = ceil(log_gamma(x))`` with ``gamma = (1 + a) / (1 - a)``;
the bucket's representative value ``2 gamma^i / (gamma + 1)`` is within relative error ``a`` of every
value the bucket holds, so any quantile read back is within ``a`` of a sample of the right rank.
Buckets are plain integer counts keyed by index: two sketches merge by adding counts, and a store can
hold one as a hash incremented in place (HINCRBY) by any number of writers. Memory is bounded by
``max_buckets``: beyond it the lowest buckets are folded into one (only the lowest quantiles lose
accuracy; a latency sketch is read at its median and above). Values at or below :data:`MIN_VALUE` are
counted as :data:`MIN_VALUE`.

Masson, Rim and Lee, "DDSketch: a fast and fully-mergeable quantile sketch with relative-error
guarantees", VLDB 2019.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

RELATIVE_ACCURACY = 0.01
MAX_BUCKETS = 512
MIN_VALUE = 1e-3
"""Milliseconds: run times below a microsecond are counted as one."""


@dataclass
class QuantileSketch:
    accuracy: float = RELATIVE_ACCURACY
    max_buckets: int = MAX_BUCKETS
    counts: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not 0 < self.accuracy < 1:
            raise ValueError(f"accuracy must be in (0, 1), got {self.accuracy!r}")
        if self.max_buckets < 2:
            raise ValueError(f"max_buckets must be at least 2, got {self.max_buckets!r}")
        self._gamma = (1 + self.accuracy) / (1 - self.accuracy)
        self._log_gamma = math.log(self._gamma)

    @property
    def count(self) -> int:
        return sum(self.counts.values())

    def index(self, value: float) -> int:
        """The bucket ``value`` is counted in."""
        if not math.isfinite(value):
            raise ValueError(f"a sketch counts finite values, got {value!r}")
        return math.ceil(math.log(max(value, MIN_VALUE)) / self._log_gamma)

    def value(self, index: int) -> float:
        """The value a bucket stands for (within ``accuracy`` of all it holds)."""
        return 2 * self._gamma ** index / (self._gamma + 1)

    def add(self, value: float, n: int = 1) -> None:
        i = self.index(value)
        self.counts[i] = self.counts.get(i, 0) + n
        self._bound()

    def update(self, values: Iterable[float]) -> None:
        for v in values:
            self.add(v)

    def merge(self, counts: Mapping[int, int]) -> None:
        """Add another sketch's bucket counts (same accuracy)."""
        for i, n in counts.items():
            if n > 0:
                self.counts[i] = self.counts.get(i, 0) + n
        self._bound()

    def quantile(self, q: float) -> float | None:
        """The ``q``-quantile (0 <= q <= 1) of what was counted; None when empty."""
        if not 0 <= q <= 1:
            raise ValueError(f"q must be in [0, 1], got {q!r}")
        total = self.count
        if total == 0:
            return None
        rank = q * (total - 1)
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen > rank:
                return self.value(i)
        return self.value(max(self.counts))

    def _bound(self) -> None:
        if len(self.counts) <= self.max_buckets:
            return
        keys = sorted(self.counts)
        fold = keys[:len(keys) - self.max_buckets + 1]
        total = sum(self.counts.pop(i) for i in fold)
        self.counts[fold[-1]] = total
