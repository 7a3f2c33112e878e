"""Acks on ``completed{C}`` and the WhiskActivation records they carry (reference/openwhisk.md §3).

A blocking call gets one CombinedCompletionAndResultMessage with the full record; a non-blocking call
a CompletionMessage (its record goes to the activation store). ``transid`` and ``activationId`` are
echoed unchanged; ``instance`` is the virtual invoker id of the topic the activation came from. An
oversize record is shrunk to the activation id (:func:`wire.encode_ack`); the store has the full one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from controller_plugin import wire
from controller_plugin.metadata import DEFAULT_LIMITS, ActionMeta
from controller_plugin.requests_state import Outcome


def activation_record(msg: wire.ActivationMessage, action: ActionMeta | None, outcome: Outcome) -> dict[str, Any]:
    """The WhiskActivation of ``msg`` ending with ``outcome``; ``action`` is None if it was never read."""
    start = max(outcome.start_ms, int(msg.transid[1]) if isinstance(msg.transid[1], int) else outcome.start_ms)
    wait = max(0, start - int(msg.transid[1])) if isinstance(msg.transid[1], int) else 0
    limits: Mapping[str, Any] = action.limits if action is not None else DEFAULT_LIMITS
    return wire.whisk_activation(
        msg, start_ms=start, end_ms=max(outcome.end_ms, start), status_code=outcome.status_code,
        result=outcome.result, logs=list(outcome.logs), kind=action.kind if action is not None else "unknown",
        limits=limits, wait_time_ms=wait, init_time_ms=outcome.init_ms, timed_out=outcome.timed_out,
        version=action.version if action is not None else None,
        publish=False)


def error_outcome(message: str, status_code: int, now_ms: int) -> Outcome:
    return Outcome(status_code, {"error": message}, now_ms, now_ms)


def ack_bytes(msg: wire.ActivationMessage, record: dict[str, Any], instance: wire.InvokerInstance) -> bytes:
    """The one ack for ``msg``: Combined with the record if blocking, else Completion."""
    if msg.blocking:
        return wire.encode_ack(wire.combined(msg, record, instance))
    is_system = record["response"]["statusCode"] == wire.STATUS_WHISK_ERROR
    return wire.encode_ack(wire.completion(msg, instance, is_system_error=is_system))


def health_ack(msg: wire.ActivationMessage, instance: wire.InvokerInstance) -> bytes:
    """A health test action's answer: identical transid, isSystemError false."""
    return wire.encode_ack(wire.completion(msg, instance, is_system_error=False))
