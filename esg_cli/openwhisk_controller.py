"""What OpenWhisk's controller does above its load balancer, for the REST stand-in: invoke an action as
its caller, run a sequence component by component, and fire a trigger's rules.

* **An action** (``PrimitiveActions.invokeSimpleAction``) goes to the :data:`Invoker` the stand-in is
  given (the embedded cluster's controller driver, which publishes the ActivationMessage on Kafka): the
  resolved action with its parameters merged through its package and binding, the call's payload, the
  caller's identity, and for a component the sequence's activation id as ``cause``.
* **A sequence** (``SequenceActions.invokeSequence``) runs here, as OpenWhisk's controller runs it: each
  component is an activation of its own, invoked blocking with the previous component's result (an
  object or array; otherwise no payload) and ``cause`` = the sequence's activation id, so the invoker
  (the scheduler) sees plain activations and annotates each record ``causedBy: sequence``. A component
  whose result holds ``error`` ends the sequence with that response; a missing component is the
  application error ``Sequence component does not exist.``; a component not answered within its time
  limit + 1 minute is the whisk error ``Timeout reached when retrieving activation <id> for sequence
  component.``; more than :data:`SEQUENCE_LIMIT` atomic actions, ``Too many actions in the sequence.``
  The sequence's own record -- written to the activation store by the controller, as OpenWhisk's
  does -- has the last component's response, the components' activation ids as its ``logs``, the
  summed component durations as ``duration``, and the annotations ``topmost``, ``path``,
  ``kind: sequence``, ``waitTime``, ``causedBy`` (inner sequences), ``binding`` and ``limits`` (with the
  largest component memory).
* **A trigger** (``Triggers.activate``): with no active rule, nothing (the route answers 204). Otherwise
  a trigger activation (``end`` 0, ``response.result`` the payload) whose ``logs`` are, one JSON string
  per rule, what invoking the rule's action answered: ``{"statusCode", "success", "activationId"|"error",
  "rule", "action"}``. Each rule's action is invoked through the stand-in's own invoke route as the
  caller (``postActivation`` POSTs to the controller's API with the caller's key), non-blocking, with
  the trigger's parameters, ``__ow_headers`` (the request's headers) and the payload.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from controller_plugin.activation_store import ActivationStore, StoreError
from esg_cli.openwhisk_entities import SEQUENCE_LIMIT, Identity
from openwhisk_status import STATUS_APPLICATION_ERROR, STATUS_SUCCESS, STATUS_WHISK_ERROR

COMPONENT_WAIT_ADDON_S = 60.0
"""A sequence waits for each component its time limit plus one minute."""


@dataclass(frozen=True)
class Invocation:
    """One activation of a (non-sequence) action, as the controller hands it to its load balancer."""

    fqn: str
    """The action's ``ns/[pkg/]name``, a binding resolved to the bound package's action."""
    doc: dict[str, Any]
    """The action's document, its parameters merged through its package and binding."""
    params: Any
    user: Identity
    blocking: bool
    timeout_s: float
    cause: str | None = None
    binding: str | None = None


Invoker = Callable[[Invocation], "dict[str, Any] | str"]
"""Publishes an Invocation; returns its WhiskActivation, or its id when not blocking or not answered in
time. Raises when no invoker can take it (the controller's 503)."""


class NoInvoker(Exception):
    """No invoker is plugged in, or it refused the activation (no healthy invoker): the caller's 503."""


def new_id() -> str:
    return uuid.uuid4().hex


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass
class _Accounting:
    """``SequenceAccounting``: where a running sequence stands."""

    response: dict[str, Any]
    atomic: int
    logs: list[str]
    duration: int = 0
    max_memory: int | None = None
    stop: bool = False

    def fail(self, status: int, message: str, activation_id: str | None = None) -> None:
        if activation_id is not None:
            self.logs.append(activation_id)
        self.response = {"statusCode": status, "result": {"error": message}}
        self.stop = True

    def took(self, record: dict[str, Any], atomic: int) -> None:
        self.logs.append(record["activationId"])
        self.atomic = atomic
        self.duration += int(record.get("duration") or 0)
        limits = next((a["value"] for a in record.get("annotations") or [] if a.get("key") == "limits"), None)
        memory = limits.get("memory") if isinstance(limits, dict) else None
        if isinstance(memory, int):
            self.max_memory = memory if self.max_memory is None else max(self.max_memory, memory)
        response = record.get("response") or {}
        result = response.get("result")
        if atomic > SEQUENCE_LIMIT:
            response = {"statusCode": STATUS_APPLICATION_ERROR, "result": {"error": "Too many actions in the sequence."}}
            self.stop = True
        elif isinstance(result, dict) and "error" in result:
            self.stop = True
        self.response = response


class Controller:
    """Invokes actions and sequences and fires triggers for the stand-in.

    ``resolve(user, fqn)`` gives a component's ``(fqn, merged document, binding)`` or None when it does
    not exist; ``invoker()`` the current :data:`Invoker`; ``store_url`` the activation store the
    controller's own records (sequences, triggers) are written to.
    """

    def __init__(self, resolve: Callable[[Identity, str], tuple[str, dict[str, Any], str | None] | None],
                 invoker: Callable[[], Invoker | None], store_url: Callable[[], str | None]) -> None:
        self.resolve = resolve
        self.invoker = invoker
        self.store_url = store_url

    # -- actions ---------------------------------------------------------------------------------------
    def invoke(self, user: Identity, fqn: str, doc: dict[str, Any], params: Any, blocking: bool, wait_s: float,
               binding: str | None = None, received_ms: int | None = None) -> dict[str, Any] | str:
        """A call of ``fqn`` from the API: the activation's record, or its id (not blocking, or not done
        within ``wait_s``)."""
        if doc["exec"]["kind"] != "sequence":
            return self._primitive(Invocation(fqn, doc, params, user, blocking, wait_s, None, binding))
        aid = new_id()
        done: dict[str, Any] = {}
        start_ms = now_ms()

        def run() -> None:
            done["record"] = self._sequence(user, fqn, doc, params, aid, None, binding, 0,
                                            received_ms or start_ms)[0]

        worker = threading.Thread(target=run, name=f"sequence-{aid[:8]}", daemon=True)
        worker.start()
        if not blocking:
            return aid
        worker.join(wait_s)
        return done.get("record") or aid

    def _primitive(self, inv: Invocation) -> dict[str, Any] | str:
        invoker = self.invoker()
        if invoker is None:
            raise NoInvoker("no controller is plugged in")
        return invoker(inv)

    # -- sequences -------------------------------------------------------------------------------------
    def _sequence(self, user: Identity, fqn: str, doc: dict[str, Any], params: Any, aid: str, cause: str | None,
                  binding: str | None, atomic: int, received_ms: int) -> tuple[dict[str, Any], int]:
        """Run the sequence ``fqn`` as activation ``aid``; its record (stored) and the atomic actions run."""
        start = now_ms()
        acc = _Accounting({"statusCode": STATUS_SUCCESS, "result": params if params is not None else {}},
                          atomic, [])
        for component in doc["exec"]["components"]:
            if acc.stop:
                break
            if acc.atomic >= SEQUENCE_LIMIT:
                acc.fail(STATUS_APPLICATION_ERROR, "Too many actions in the sequence.")
                break
            self._component(user, component, acc, aid)
        end = now_ms()
        annotations: list[dict[str, Any]] = [
            {"key": "topmost", "value": cause is None}, {"key": "path", "value": fqn},
            {"key": "kind", "value": "sequence"}]
        if cause is not None:
            annotations.append({"key": "causedBy", "value": "sequence"})
        annotations.append({"key": "waitTime", "value": max(0, start - received_ms)})
        if binding is not None:
            annotations.append({"key": "binding", "value": binding})
        if acc.max_memory is not None:
            limits = doc.get("limits") or {}
            annotations.append({"key": "limits", "value": {"timeout": limits.get("timeout", 60000),
                                                          "memory": acc.max_memory, "logs": limits.get("logs", 10),
                                                          "concurrency": limits.get("concurrency", 1)}})
        record: dict[str, Any] = {
            "namespace": user.namespace, "name": fqn.rpartition("/")[2], "subject": user.subject,
            "activationId": aid, "start": start, "end": end, "response": acc.response, "logs": acc.logs,
            "version": doc.get("version", "0.0.1"), "publish": False, "annotations": annotations,
            "duration": acc.duration}
        if cause is not None:
            record["cause"] = cause
        self.store(record)
        return record, acc.atomic

    def _component(self, user: Identity, component: str, acc: _Accounting, seq_id: str) -> None:
        """Run one component of sequence ``seq_id`` with the previous result, into ``acc``."""
        previous = acc.response.get("result")
        payload = previous if isinstance(previous, dict | list) else None
        resolved = self.resolve(user, component.strip("/"))
        if resolved is None:
            acc.fail(STATUS_APPLICATION_ERROR, "Sequence component does not exist.")
            return
        cfqn, cdoc, cbinding = resolved
        try:
            if cdoc["exec"]["kind"] == "sequence":
                record, atomic = self._sequence(user, cfqn, cdoc, payload, new_id(), seq_id, cbinding, acc.atomic,
                                                now_ms())
            else:
                wait = (cdoc.get("limits") or {}).get("timeout", 60000) / 1000 + COMPONENT_WAIT_ADDON_S
                answer = self._primitive(Invocation(cfqn, cdoc, payload, user, True, wait, seq_id, cbinding))
                if isinstance(answer, str):
                    acc.fail(STATUS_WHISK_ERROR,
                             f"Timeout reached when retrieving activation {answer} for sequence component.", answer)
                    return
                record, atomic = answer, acc.atomic + 1
        except Exception:  # noqa: BLE001 - the controller's recover: any failure is "Sequence failed."
            acc.fail(STATUS_WHISK_ERROR, "Sequence failed.")
            return
        acc.took(record, atomic)

    # -- triggers --------------------------------------------------------------------------------------
    def fire(self, user: Identity, trigger: dict[str, Any], payload: dict[str, Any] | None,
             headers: dict[str, str], post: Callable[[str, dict[str, Any]], tuple[int, Any]]) -> str | None:
        """Fire ``trigger``: the trigger activation's id, or None when no rule is active. ``post(action,
        args)`` invokes a rule's action as the caller (the invoke route: ``(HTTP status, body)``)."""
        rules = {name: rule for name, rule in (trigger.get("rules") or {}).items() if rule.get("status") == "active"}
        if not rules:
            return None
        aid = new_id()
        params = {p["key"]: p["value"] for p in trigger.get("parameters") or []}
        args = {**params, "__ow_headers": headers, **(payload or {})}
        record = {"namespace": user.namespace, "name": trigger["name"], "subject": user.subject,
                  "activationId": aid, "start": now_ms(), "end": 0,
                  "response": {"statusCode": STATUS_SUCCESS, "result": payload if payload is not None else {}},
                  "logs": [], "version": trigger.get("version", "0.0.1"), "publish": False, "annotations": []}

        def activate() -> None:
            logs = []
            for name, rule in rules.items():
                action = f"{rule['action']['path']}/{rule['action']['name']}"
                try:
                    status, body = post(action, args)
                except Exception:  # noqa: BLE001 - recorded as the controller records it
                    status, body = 500, {"error": "There was an internal server error."}
                entry: dict[str, Any] = {"rule": name, "action": action}
                if status in (200, 202) and isinstance(body, dict) and "activationId" in body:
                    entry.update(statusCode=STATUS_SUCCESS, success=True, activationId=body["activationId"])
                else:
                    code = STATUS_WHISK_ERROR if status >= 500 else STATUS_APPLICATION_ERROR
                    error = body.get("error") if isinstance(body, dict) else None
                    entry.update(statusCode=code, success=False,
                                 error=error if isinstance(error, str) else "There was an internal server error.")
                logs.append(json.dumps(entry, separators=(",", ":")))
            self.store(dict(record, logs=logs))

        threading.Thread(target=activate, name=f"trigger-{aid[:8]}", daemon=True).start()
        return aid

    # -- records ---------------------------------------------------------------------------------------
    def store(self, record: dict[str, Any]) -> None:
        """Write a record the controller made (``activationStore.storeAfterCheck``); a store that fails
        loses it, as the controller's does, and is seen by the next read."""
        url = self.store_url()
        if url is None:
            return
        store = ActivationStore(url)
        try:
            store.put_many([record])
        except StoreError:
            pass
        finally:
            store.close()
