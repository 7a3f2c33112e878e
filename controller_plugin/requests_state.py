"""One accepted activation on its way through its app's DAG: inputs routed, results collected.

Data flow (DESIGN §3): an entry function gets the activation's ``content``; a function with one
predecessor gets that predecessor's result; with several, an object keyed by the predecessors' short
(DAG) names. The app's result is its sink's result, or with several sinks an object keyed by name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller_plugin import wire
from controller_plugin.ledger import LedgerEntry
from controller_plugin.metadata import AppPlan


@dataclass(frozen=True)
class Outcome:
    """What one function returned, or how a whole activation ends (what its WhiskActivation says)."""

    status_code: int
    result: Any
    start_ms: int
    end_ms: int
    init_ms: int | None = None
    logs: tuple[str, ...] = ()
    timed_out: bool = False


FunctionResult = Outcome


@dataclass
class Run:
    msg: wire.ActivationMessage
    plan: AppPlan
    entry: LedgerEntry
    results: dict[str, FunctionResult] = field(default_factory=dict)
    batches: set[str] = field(default_factory=set)
    """Batches of this activation now in flight."""

    @property
    def activation_id(self) -> str:
        return self.msg.activation_id

    def input_for(self, function: str) -> Any:
        app = self.plan.app
        preds = app.predecessors(function)
        if not preds:
            return {} if self.msg.content is None else self.msg.content
        if len(preds) == 1:
            return self.results[preds[0]].result
        return {self.plan.functions[p].short: self.results[p].result for p in preds}

    def record(self, function: str, result: FunctionResult) -> None:
        self.results[function] = result

    def final(self) -> Outcome:
        """The app's outcome once every sink finished."""
        app = self.plan.app
        sinks = app.sinks
        value = (self.results[sinks[0]].result if len(sinks) == 1
                 else {self.plan.functions[s].short: self.results[s].result for s in sinks})
        return self._outcome(0, value)

    def failed(self, function: str) -> Outcome:
        """The outcome when ``function`` failed: its status and error, the app fails with it."""
        r = self.results[function]
        value = r.result
        if len(self.plan.functions) > 1 and isinstance(value, dict) and "error" in value:
            value = {**value, "function": self.plan.functions[function].short}
        return self._outcome(r.status_code, value, timed_out=r.timed_out)

    def _outcome(self, status: int, value: Any, timed_out: bool = False) -> Outcome:
        rs = list(self.results.values())
        inits = [r.init_ms for r in rs if r.init_ms is not None]
        logs: list[str] = []
        multi = len(self.plan.functions) > 1
        for f, r in self.results.items():
            short = self.plan.functions[f].short
            logs.extend(f"[{short}] {line}" if multi else line for line in r.logs)
        return Outcome(status, value, min(r.start_ms for r in rs), max(r.end_ms for r in rs),
                       sum(inits) if inits else None, tuple(logs), timed_out)
