"""The ESG policy's plans, cached per (app, function, batch cap) over ranges of whole-millisecond budgets.

A plan made for budget B from a search over the whole (sub-)app holds for every budget from the
slowest returned path's latency up to B (:attr:`esg.planner.PlanResult.valid_from_ms`); a plan made in
groups holds for B only. Ranges of one key are kept disjoint and sorted, so a look-up is a bisection:
a new range is clipped above the ranges below it (every part of a valid range is valid).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Final

from esg.policies.base import Choice

MAX_RANGES: Final = 512  # per key; budgets are whole milliseconds, so this covers SLOs of seconds
MAX_EXACT: Final = 200_000


@dataclass
class _Ranges:
    highs: list[int] = field(default_factory=list)
    lows: list[float] = field(default_factory=list)
    choices: list[Choice] = field(default_factory=list)

    def get(self, budget: int) -> Choice | None:
        i = bisect.bisect_left(self.highs, budget)
        if i < len(self.highs) and self.lows[i] <= budget:
            return self.choices[i]
        return None

    def put(self, low: float, high: int, choice: Choice) -> None:
        i = bisect.bisect_left(self.highs, high)
        if i > 0:
            low = max(low, self.highs[i - 1] + 1)  # budgets are whole ms: keep the ranges disjoint
        if len(self.highs) >= MAX_RANGES:
            self.highs.clear()
            self.lows.clear()
            self.choices.clear()
            i = 0
        self.highs.insert(i, high)
        self.lows.insert(i, low)
        self.choices.insert(i, choice)


class PlanCache:
    """Choices by (app, function, batch cap) and whole-millisecond budget."""

    def __init__(self) -> None:
        self._ranges: dict[tuple, _Ranges] = {}
        self._exact: dict[tuple[tuple, int], Choice] = {}

    def get(self, key: tuple, budget: int) -> Choice | None:
        ranges = self._ranges.get(key)
        if ranges is not None:
            choice = ranges.get(budget)
            if choice is not None:
                return choice
        return self._exact.get((key, budget))

    def put(self, key: tuple, budget: int, choice: Choice, valid_from: float | None) -> None:
        """Keep ``choice`` for ``budget``, and down to ``valid_from`` when that is known."""
        if valid_from is None:
            if len(self._exact) >= MAX_EXACT:
                self._exact.clear()
            self._exact[(key, budget)] = choice
        else:
            self._ranges.setdefault(key, _Ranges()).put(valid_from, budget, choice)

    def drop_app(self, app: str) -> None:
        self._ranges = {k: v for k, v in self._ranges.items() if k[0] != app}
        self._exact = {k: v for k, v in self._exact.items() if k[0][0] != app}
