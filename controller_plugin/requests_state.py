"""One accepted activation on its way through its app's DAG: what each function returned, and where.

The scheduler never holds intermediate data: an entry function's dispatch carries the activation's
``content``; every other function's carries references to its predecessors' outputs (the agent that
produced each and its key in the data store: :meth:`Run.inputs_for`), which the agent running it reads
and composes (:func:`esg.protocol.compose_input`: one predecessor's output, or an object keyed by the
predecessors' DAG names). Only the sinks' results come back inline: the app's result is its sink's
result, or with several sinks an object keyed by name (:meth:`Run.final`). When the request ends its
stored outputs are deleted (:meth:`Run.data_keys`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from controller_plugin import wire
from controller_plugin.ledger import LedgerEntry
from controller_plugin.metadata import AppPlan
from esg.protocol import InputRef


@dataclass(frozen=True)
class Outcome:
    """How a whole activation ends (what its WhiskActivation says)."""

    status_code: int
    result: Any
    start_ms: int
    end_ms: int
    init_ms: int | None = None
    logs: tuple[str, ...] = ()
    timed_out: bool = False


@dataclass(frozen=True)
class FunctionResult(Outcome):
    """What one function returned for one activation: inline ``result``, or its output's ``output_key``
    (``output_bytes`` long) on ``node``."""

    output_key: str | None = None
    output_bytes: int = 0
    node: str = ""


@dataclass
class Run:
    msg: wire.ActivationMessage
    plan: AppPlan
    entry: LedgerEntry
    results: dict[str, FunctionResult] = field(default_factory=dict)

    @property
    def activation_id(self) -> str:
        return self.msg.activation_id

    def inputs_for(self, function: str) -> tuple[Any, tuple[InputRef, ...]]:
        """``(value, inputs)`` of ``function``'s run request: the call's parameters for an entry function,
        else references to its predecessors' outputs."""
        preds = self.plan.app.predecessors(function)
        if not preds:
            return ({} if self.msg.content is None else self.msg.content), ()
        refs = []
        for p in preds:
            r = self.results[p]
            refs.append(InputRef(self.plan.functions[p].short, r.output_key or "", r.node, r.output_bytes))
        return None, tuple(refs)

    def record(self, function: str, result: FunctionResult) -> None:
        self.results[function] = result

    def data_keys(self) -> tuple[str, ...]:
        return tuple(r.output_key for r in self.results.values() if r.output_key)

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
