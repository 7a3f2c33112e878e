"""One accepted activation on its way through its app's DAG: what each function returned, and where.

The scheduler never holds intermediate data: an entry function's dispatch carries the activation's
run arguments (``content`` with locked arguments unlocked and init arguments taken out,
:mod:`controller_plugin.arguments`) and its init arguments, the environment of a worker started for it; every other function's carries references to its predecessors' outputs (the agent that
produced each and its key in the data store: :meth:`Run.inputs_for`), which the agent running it reads
and composes (:func:`agent_channel.protocol.compose_input`: one predecessor's output, or an object keyed by the
predecessors' DAG names). Only the sinks' results come back inline: the app's result is its sink's
result, or with several sinks an object keyed by name (:meth:`Run.final`). When the request ends its
stored outputs are deleted (:meth:`Run.data_keys`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from agent_channel.protocol import InputRef, RunResult
from controller_plugin import wire
from controller_plugin.ledger import LedgerEntry
from controller_plugin.metadata import AppPlan
from esg.defaults import config_annotation
from esg.model import Config


@dataclass(frozen=True)
class Outcome:
    """How a whole activation ends (what its WhiskActivation says), under the names
    :class:`agent_channel.protocol.RunResult` uses. A type of its own because it is not one function's
    run: an app's outcome is folded from all its functions' results (:meth:`Run.final`: first start, last
    end, summed init time, every function's logs, the configurations that ran), and it has no output in
    a data store; an error the scheduler answers by itself (:func:`controller_plugin.acks.error_outcome`)
    has no run at all."""

    status_code: int
    result: Any
    start_ms: int
    """When its first function's container began: its cold start's ``init_ms`` before the run, as
    OpenWhisk's invoker starts a record at ``/init`` (``ContainerProxy``: ``initRunInterval``)."""
    end_ms: int
    init_ms: int | None = None
    logs: tuple[str, ...] = ()
    timeout: bool = False
    configs: Mapping[str, Any] | None = None
    """What ran, by DAG name: configuration and where its profile came from (annotation ``esg-config``)."""
    replied: bool = False
    """The result is what the action's container answered (a success or an application error), so the
    record gives its size (``response.size``); not for an error the system made up."""


@dataclass(frozen=True)
class FunctionResult:
    """What one function returned for one activation: the agent's ``run`` result (or the one the
    scheduler writes when the agent's answer is unusable), the ``node`` whose data store holds its
    output (``run.output_key``) and the configuration it ran with."""

    run: RunResult
    node: str = ""
    config: Config | None = None


@dataclass
class Run:
    msg: wire.ActivationMessage
    plan: AppPlan
    entry: LedgerEntry
    args: Any = None
    """The run arguments of the entry functions (None: the activation's ``content`` as it came)."""
    init_env: dict[str, Any] = field(default_factory=dict)
    results: dict[str, FunctionResult] = field(default_factory=dict)

    @property
    def activation_id(self) -> str:
        return self.msg.activation_id

    def inputs_for(self, function: str) -> tuple[Any, tuple[InputRef, ...]]:
        """``(value, inputs)`` of ``function``'s run request: the call's parameters for an entry function,
        else references to its predecessors' outputs."""
        preds = self.plan.app.predecessors(function)
        if not preds:
            if self.args is not None:
                return self.args, ()
            return ({} if self.msg.content is None else self.msg.content), ()
        refs = []
        for p in preds:
            r = self.results[p]
            refs.append(InputRef(self.plan.functions[p].short, r.run.output_key or "", r.node, r.run.output_bytes))
        return None, tuple(refs)

    def record(self, function: str, result: FunctionResult) -> None:
        self.results[function] = result

    def data_keys(self) -> tuple[str, ...]:
        return tuple(r.run.output_key for r in self.results.values() if r.run.output_key)

    def final(self) -> Outcome:
        """The app's outcome once every sink finished."""
        app = self.plan.app
        sinks = app.sinks
        value = (self.results[sinks[0]].run.result if len(sinks) == 1
                 else {self.plan.functions[s].short: self.results[s].run.result for s in sinks})
        return self._outcome(0, value)

    def failed(self, function: str) -> Outcome:
        """The outcome when ``function`` failed: its status and error, the app fails with it."""
        r = self.results[function].run
        value = r.result
        if len(self.plan.functions) > 1 and isinstance(value, dict) and "error" in value:
            value = {**value, "function": self.plan.functions[function].short}
        return self._outcome(r.status_code, value, timeout=r.timeout)

    def _outcome(self, status: int, value: Any, timeout: bool = False) -> Outcome:
        rs = [r.run for r in self.results.values()]
        inits = [r.init_ms for r in rs if r.init_ms is not None]
        logs: list[str] = []
        multi = len(self.plan.functions) > 1
        for f, r in self.results.items():
            short = self.plan.functions[f].short
            logs.extend(_tagged(short, line) if multi else line for line in r.run.logs)
        configs = {self.plan.functions[f].short: config_annotation(r.config, self.plan.functions[f].profile)
                   for f, r in self.results.items() if r.config is not None}
        # it started when its first container started initialising (OpenWhisk's record includes initTime)
        return Outcome(status, value, min(r.start_ms - (r.init_ms or 0) for r in rs), max(r.end_ms for r in rs),
                       sum(inits) if inits else None, tuple(logs), timeout, configs or None,
                       replied=status in (0, 1) and not timeout)


_STREAM = re.compile(r"\A(\S+ *std(?:out|err): )(.*)\Z", re.S)


def _tagged(short: str, line: str) -> str:
    """An app's log line named by its function: ``<time> stdout: [pre] text``."""
    m = _STREAM.match(line)
    return f"{m[1]}[{short}] {m[2]}" if m else f"[{short}] {line}"
