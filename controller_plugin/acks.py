"""Acks on ``completed{C}`` and the WhiskActivation records they carry (``docs/openwhisk-wire.md`` §3, §4).

A blocking call gets one CombinedCompletionAndResultMessage with the full record; a non-blocking call
a CompletionMessage (its record goes to the activation store). ``transid`` and ``activationId`` are
echoed unchanged; ``instance`` is the virtual invoker id of the topic the activation came from. An
oversize record is shrunk to the activation id (:func:`wire.encode_ack`); the store has the full one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from controller_plugin import wire
from controller_plugin.metadata import ActionMeta
from controller_plugin.requests_state import Outcome
from openwhisk_status import DEFAULT_LIMITS, STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR


def activation_record(msg: wire.ActivationMessage, action: ActionMeta | None, outcome: Outcome) -> dict[str, Any]:
    """The WhiskActivation of ``msg`` ending with ``outcome``; ``action`` is None if it was never read.

    A result holding NaN or an infinity has no JSON form (spray-json refuses it, the controller would
    drop the ack): the activation is answered as a developer error naming where the number is.
    """
    where = non_finite(outcome.result)
    if where is not None:
        outcome = replace(outcome, status_code=STATUS_DEVELOPER_ERROR, timeout=False,
                          result={"error": f"The action's result is not valid JSON: it holds a number JSON "
                                           f"cannot carry (NaN or Infinity) at {where}."})
    # OpenWhisk's invoker: the record starts when the container began /init (a cold start's initTime is
    # in start, end and duration); waitTime is the time from the controller's transaction start to that
    start = max(outcome.start_ms, int(msg.transid[1]) if isinstance(msg.transid[1], int) else outcome.start_ms)
    wait = max(0, start - int(msg.transid[1])) if isinstance(msg.transid[1], int) else 0
    limits: Mapping[str, Any] = action.limits if action is not None else DEFAULT_LIMITS
    # response.size: the length of the JSON the action's container answered (ActivationResponse)
    size = len(json.dumps(outcome.result)) if outcome.replied and where is None else None
    return wire.whisk_activation(
        msg, start_ms=start, end_ms=max(outcome.end_ms, start), status_code=outcome.status_code,
        result=outcome.result, size=size, logs=list(outcome.logs),
        kind=action.kind if action is not None else "unknown",
        limits=limits, wait_time_ms=wait, init_time_ms=outcome.init_ms, timed_out=outcome.timeout,
        version=action.version if action is not None else None,
        publish=False, extra_annotations={"esg-config": dict(outcome.configs)} if outcome.configs else None)


def non_finite(value: Any, path: str = "result") -> str | None:
    """Where ``value`` holds a NaN or infinite float (``result.a[2]``), or None."""
    stack = [(value, path)]
    while stack:
        v, p = stack.pop()
        if isinstance(v, float) and not math.isfinite(v):
            return p
        if isinstance(v, dict):
            stack.extend((x, f"{p}.{k}") for k, x in v.items())
        elif isinstance(v, list | tuple):
            stack.extend((x, f"{p}[{i}]") for i, x in enumerate(v))
    return None


def error_outcome(message: str, status_code: int, now_ms: int) -> Outcome:
    return Outcome(status_code, {"error": message}, now_ms, now_ms)


def ack_bytes(msg: wire.ActivationMessage, record: dict[str, Any], instance: wire.InvokerInstance,
              record_json: bytes | None = None) -> bytes:
    """The one ack for ``msg``: Combined with the record if blocking, else Completion. ``record_json``:
    ``wire.encode(record)`` when the caller has it (put into the ack as it is, not encoded again)."""
    if msg.blocking:
        ack = wire.combined(msg, record, instance)
        return wire.encode_ack(ack) if record_json is None else wire.encode_combined(ack, record_json)
    is_system = record["response"]["statusCode"] == STATUS_WHISK_ERROR
    return wire.encode_ack(wire.completion(msg, instance, is_system_error=is_system))


def health_ack(msg: wire.ActivationMessage, instance: wire.InvokerInstance) -> bytes:
    """A health test action's answer: identical transid, isSystemError false."""
    return wire.encode_ack(wire.completion(msg, instance, is_system_error=False))
