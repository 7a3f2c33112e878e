"""OpenWhisk's Kafka message shapes, field for field (classic ``ShardingContainerPoolBalancer`` path).

Pure: JSON in, JSON out, no Kafka client. What the controller sends on ``invoker{N}`` is parsed into an
:class:`ActivationMessage`; what an invoker sends back (acks on ``completed{C}``, pings on ``health``) is
built here and encoded with :func:`encode` / :func:`encode_ack`.

Read rules follow spray-json as OpenWhisk uses it: an optional field may be absent, every other field is
required, unknown fields are ignored. Anything malformed raises :class:`WireError` naming the field.
Writes are compact UTF-8 JSON with optional fields omitted when unset, as OpenWhisk's producer writes them.

The ``transid`` is kept as the raw JSON value and written back unchanged: the controller compares it by
id, start, extraLogging flag *and* parent, and recognises health-test acks only by it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from esg.nesting import MAX_MESSAGE_NESTING, MAX_NESTING, text_deeper_than
from openwhisk_status import MAX_RESULT_BYTES, STATUS_CODES, STATUS_WHISK_ERROR

#: OpenWhisk's ``whisk.activation.serdes-overhead``: what a Kafka message adds around a payload.
SERDES_OVERHEAD_BYTES = 6068
#: ``max.request.size`` of OpenWhisk's activation and ack producers (``ActivationEntityLimit
#: .MAX_ACTIVATION_LIMIT``): the largest result plus the overhead, 1_054_644 bytes.
MAX_MESSAGE_BYTES = MAX_RESULT_BYTES + SERDES_OVERHEAD_BYTES
#: Kafka's record-batch header (v2) and maximal per-record overhead, in bytes.
_BATCH_HEADER_BYTES = 61
_MAX_RECORD_OVERHEAD_BYTES = 21

HEALTH_TEST_NAMESPACE = "whisk.system"
HEALTH_TEST_ACTION_PREFIX = "invokerHealthTestAction"
HEALTH_TRANSID = "sid_invokerHealth"

_ACTIVATION_ID = re.compile(r"[0-9a-f]{32}")
_CONTROLLER_ID = re.compile(r"[a-zA-Z0-9._-]{1,128}")
_BYTE_SIZE = re.compile(r"(\d+)\s*(B|KB|MB|GB)", re.IGNORECASE)
_SIZE_UNIT = {"B": 1, "KB": 1024, "MB": 1024**2, "GB": 1024**3}


class WireError(ValueError):
    """A Kafka message that does not have OpenWhisk's shape; ``field`` names the offending field."""

    def __init__(self, field: str, problem: str) -> None:
        super().__init__(f"{field}: {problem}")
        self.field = field
        self.problem = problem


# --- reading helpers --------------------------------------------------------------------------------


def _load_object(data: bytes | str, what: str) -> dict[str, Any]:
    if data is None:
        raise WireError(what, "empty message (no value)")
    try:
        # Kafka carries UTF-8: json.loads would also take UTF-16/32 bytes, which nothing else here reads
        text = data.decode("utf-8") if isinstance(data, bytes | bytearray) else data
        value = _DECODER.decode(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise WireError(what, f"not valid JSON ({exc})") from None
    except _NotJson as exc:
        raise WireError(what, f"not valid JSON ({exc} is no JSON value)") from None
    except RecursionError:
        raise WireError(what, "nested too deeply") from None
    if not isinstance(value, dict):
        raise WireError(what, f"expected a JSON object, got {_json_type(value)}")
    if text_deeper_than(text, value, MAX_MESSAGE_NESTING):
        raise WireError(what, f"a value nests deeper than {MAX_NESTING} levels")
    return value


class _NotJson(ValueError):
    pass


def _not_json(constant: str) -> Any:
    """Python's json reads NaN and Infinity; JSON (and spray-json) does not."""
    raise _NotJson(constant)


#: One decoder for every message (``json.loads`` with an argument builds a decoder at each call).
_DECODER = json.JSONDecoder(parse_constant=_not_json)


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object"


def _required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise WireError(path, "missing")
    return obj[key]


def _typed(value: Any, types: type | tuple[type, ...], expected: str, path: str) -> Any:
    # bool is an int in Python; JSON keeps them apart.
    if not isinstance(value, types) or (isinstance(value, bool) and bool not in _as_tuple(types)):
        raise WireError(path, f"expected {expected}, got {_json_type(value)}")
    return value


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _req_str(obj: Mapping[str, Any], key: str, path: str) -> str:
    return _typed(_required(obj, key, path), str, "a string", path)


# OpenWhisk's rule for the name of every entity and namespace (its EntityName): at most 256 characters
# matching this expression; a real controller never sends another, and a record's document id
# (``namespace/activationId``) is built from it.
ENTITY_NAME_MAX_LENGTH = 256
_ENTITY_NAME = re.compile(r"\A([\w]|[\w][\w@ .-]*[\w@.-]+)\Z", re.ASCII)


def _entity_name(value: str, path: str) -> str:
    if len(value) > ENTITY_NAME_MAX_LENGTH:
        raise WireError(path, f"an entity name is at most {ENTITY_NAME_MAX_LENGTH} characters, got {len(value)}")
    if not _ENTITY_NAME.match(value):
        raise WireError(path, f"not an OpenWhisk entity name: {value[:80]!r}")
    return value


def _req_obj(obj: Mapping[str, Any], key: str, path: str) -> dict[str, Any]:
    return _typed(_required(obj, key, path), dict, "an object", path)


def _opt_str(obj: Mapping[str, Any], key: str, path: str) -> str | None:
    value = obj.get(key)
    return None if value is None else _typed(value, str, "a string", path)


def _activation_id(value: Any, path: str) -> str:
    _typed(value, str, "a string", path)
    if not _ACTIVATION_ID.fullmatch(value):
        raise WireError(path, f"expected 32 lowercase hex characters, got {value!r}")
    return value


# --- building blocks --------------------------------------------------------------------------------


@dataclass(frozen=True)
class EntityName:
    """A FullyQualifiedEntityName: ``path`` is ``ns`` or ``ns/pkg``."""

    path: str
    name: str
    version: str | None = None
    binding: str | None = None

    @property
    def qualified(self) -> str:
        """``path/name`` without version: the activation's ``path`` annotation, e.g. ``guest/resize``."""
        return f"{self.path}/{self.name}"

    @property
    def namespace(self) -> str:
        return self.path.split("/", 1)[0]

    @classmethod
    def from_json(cls, value: Any, path: str = "action") -> EntityName:
        if isinstance(value, str):  # the plain "ns/pkg/a" form is readable too
            parts = value.strip("/").split("/")
            if len(parts) < 2 or not all(parts):
                raise WireError(path, f"expected 'namespace[/package]/name', got {value!r}")
            for part in parts:
                _entity_name(part, path)
            return cls(path="/".join(parts[:-1]), name=parts[-1])
        obj = _typed(value, dict, "an object or a string", path)
        entity_path = _req_str(obj, "path", f"{path}.path")
        for segment in entity_path.split("/"):
            _entity_name(segment, f"{path}.path")
        return cls(path=entity_path, name=_entity_name(_req_str(obj, "name", f"{path}.name"), f"{path}.name"),
                   version=_opt_str(obj, "version", f"{path}.version"),
                   binding=_opt_str(obj, "binding", f"{path}.binding"))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "name": self.name}
        if self.version is not None:
            out["version"] = self.version
        if self.binding is not None:
            out["binding"] = self.binding
        return out


@dataclass(frozen=True)
class Identity:
    """The invoking user. ``authkey`` is OpenWhisk's ``GenericAuthKey``: any JSON object; ``api_key``
    (``uuid:key``) is its ``BasicAuthenticationAuthKey`` form, None when the object is of another kind.
    Both stay out of ``repr`` so they never reach a log."""

    subject: str
    namespace: str
    namespace_uuid: str
    api_key: str | None = field(repr=False)
    rights: tuple[str, ...]
    limits: Mapping[str, Any]
    authkey: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @property
    def basic_auth(self) -> str | None:
        """The ``uuid:key`` to call the REST API as this user, when the key has that form."""
        return self.api_key if self.api_key and ":" in self.api_key else None

    @classmethod
    def from_json(cls, value: Any, path: str = "user") -> Identity:
        obj = _typed(value, dict, "an object", path)
        ns = _req_obj(obj, "namespace", f"{path}.namespace")
        authkey = _req_obj(obj, "authkey", f"{path}.authkey")
        rights = _typed(_required(obj, "rights", f"{path}.rights"), list, "an array", f"{path}.rights")
        for i, right in enumerate(rights):
            _typed(right, str, "a string", f"{path}.rights[{i}]")
        return cls(subject=_req_str(obj, "subject", f"{path}.subject"),
                   namespace=_entity_name(_req_str(ns, "name", f"{path}.namespace.name"), f"{path}.namespace.name"),
                   namespace_uuid=_req_str(ns, "uuid", f"{path}.namespace.uuid"),
                   api_key=_opt_str(authkey, "api_key", f"{path}.authkey.api_key"),
                   rights=tuple(rights), limits=_req_obj(obj, "limits", f"{path}.limits"), authkey=authkey)


@dataclass(frozen=True)
class ControllerInstance:
    """The controller that published an activation; its acks go to ``completed{as_string}``."""

    as_string: str
    instance_type: str = "controller"

    @classmethod
    def from_json(cls, value: Any, path: str = "rootControllerIndex") -> ControllerInstance:
        obj = _typed(value, dict, "an object", path)
        as_string = _req_str(obj, "asString", f"{path}.asString")
        if not _CONTROLLER_ID.fullmatch(as_string):
            raise WireError(f"{path}.asString", f"expected [a-zA-Z0-9._-]{{1,128}}, got {as_string!r}")
        instance_type = _opt_str(obj, "instanceType", f"{path}.instanceType") or "controller"
        return cls(as_string=as_string, instance_type=instance_type)


@dataclass(frozen=True)
class InvokerInstance:
    """An InvokerInstanceId: who acks (``instance``) and how much memory it offers the controller."""

    instance: int
    user_memory_mb: int
    unique_name: str | None = None
    displayed_name: str | None = None

    def to_json(self) -> dict[str, Any]:
        # tags and dedicatedNamespaces are required on read since OpenWhisk 59b67fe96: always sent.
        out: dict[str, Any] = {"instance": self.instance, "userMemory": f"{self.user_memory_mb} MB",
                               "instanceType": "invoker", "tags": [], "dedicatedNamespaces": []}
        if self.unique_name is not None:
            out["uniqueName"] = self.unique_name
        if self.displayed_name is not None:
            out["displayedName"] = self.displayed_name
        return out

    @classmethod
    def from_json(cls, value: Any, path: str = "instance") -> InvokerInstance:
        obj = _typed(value, dict, "an object", path)
        instance = _typed(_required(obj, "instance", f"{path}.instance"), int, "an integer", f"{path}.instance")
        memory = _req_str(obj, "userMemory", f"{path}.userMemory")
        kind = _req_str(obj, "instanceType", f"{path}.instanceType")
        if kind != "invoker":
            raise WireError(f"{path}.instanceType", f"expected 'invoker', got {kind!r}")
        return cls(instance=instance, user_memory_mb=_parse_memory_mb(memory, f"{path}.userMemory"),
                   unique_name=_opt_str(obj, "uniqueName", f"{path}.uniqueName"),
                   displayed_name=_opt_str(obj, "displayedName", f"{path}.displayedName"))


def _parse_memory_mb(text: str, path: str) -> int:
    match = _BYTE_SIZE.fullmatch(text.strip())
    if not match:
        raise WireError(path, f"expected '<n> B|KB|MB|GB', got {text!r}")
    size = int(match.group(1)) * _SIZE_UNIT[match.group(2).upper()]
    if size % _SIZE_UNIT["MB"]:
        raise WireError(path, f"not a whole number of MB: {text!r}")
    return size // _SIZE_UNIT["MB"]


# --- ActivationMessage (controller -> invoker{N}) ---------------------------------------------------


@dataclass(frozen=True)
class ActivationMessage:
    """One activation the controller published. ``raw`` is the message as received (for dead letters)."""

    transid: list[Any]
    action: EntityName
    revision: str | None
    user: Identity
    activation_id: str
    root_controller: ControllerInstance
    blocking: bool
    init_args: tuple[str, ...]
    locked_args: Mapping[str, str]
    content: Any = None
    cause: str | None = None
    trace_context: Mapping[str, Any] | None = None
    raw: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @property
    def is_health_test(self) -> bool:
        """A controller's invoker health test action (``whisk.system/invokerHealthTestAction{C}``)."""
        return is_health_test_action(self.action)

    @property
    def caused_by_sequence(self) -> bool:
        return self.cause is not None


def is_health_test_action(action: EntityName) -> bool:
    return action.path == HEALTH_TEST_NAMESPACE and action.name.startswith(HEALTH_TEST_ACTION_PREFIX)


def parse_activation(data: bytes | str) -> ActivationMessage:
    """Parse an ActivationMessage as the controller writes it; raise :class:`WireError` if malformed."""
    obj = _load_object(data, "ActivationMessage")
    transid = _typed(_required(obj, "transid", "transid"), list, "an array", "transid")
    if len(transid) < 2 or not isinstance(transid[0], str):
        raise WireError("transid", "expected [id, startMillis, ...]")
    revision = _required(obj, "revision", "revision")
    if revision is not None:
        _typed(revision, str, "a string or null", "revision")
    init_args = _typed(_required(obj, "initArgs", "initArgs"), list, "an array", "initArgs")
    for i, name in enumerate(init_args):
        _typed(name, str, "a string", f"initArgs[{i}]")
    locked_args = _req_obj(obj, "lockedArgs", "lockedArgs")
    for name, scheme in locked_args.items():
        _typed(scheme, str, "a string", f"lockedArgs.{name}")
    cause = obj.get("cause")
    trace_context = obj.get("traceContext")
    if trace_context is not None:
        _typed(trace_context, dict, "an object", "traceContext")
    return ActivationMessage(
        transid=transid,
        action=EntityName.from_json(_required(obj, "action", "action")),
        revision=revision,
        user=Identity.from_json(_required(obj, "user", "user")),
        activation_id=_activation_id(_required(obj, "activationId", "activationId"), "activationId"),
        root_controller=ControllerInstance.from_json(_required(obj, "rootControllerIndex", "rootControllerIndex")),
        blocking=_typed(_required(obj, "blocking", "blocking"), bool, "a boolean", "blocking"),
        init_args=tuple(init_args),
        locked_args=locked_args,
        content=obj.get("content"),
        cause=None if cause is None else _activation_id(cause, "cause"),
        trace_context=trace_context,
        raw=obj,
    )


# --- WhiskActivation (the record embedded in acks) ---------------------------------------------------


def whisk_activation(msg: ActivationMessage, *, start_ms: int, end_ms: int, status_code: int,
                     result: Any = None, size: int | None = None, logs: list[str] | tuple[str, ...] = (),
                     kind: str, limits: Mapping[str, Any], wait_time_ms: int,
                     init_time_ms: int | None = None, timed_out: bool = False,
                     version: str | None = None, publish: bool = False,
                     extra_annotations: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The activation record an invoker writes for ``msg``, with the annotations it adds
    (and ``extra_annotations``, e.g. the scheduler's ``esg-config``).

    ``namespace`` is the invoking user's namespace. ``init_time_ms`` is given only for a cold start,
    ``size`` is the byte length of the raw reply the action's container returned. ``version`` defaults
    to the version in the message's action name (OpenWhisk's default for a new action is ``0.0.1``).
    """
    if status_code not in STATUS_CODES:
        raise ValueError(f"status_code must be 0..3, got {status_code}")
    response: dict[str, Any] = {"statusCode": status_code}
    if result is not None:
        response["result"] = result
    if size is not None:
        response["size"] = size
    annotations: list[dict[str, Any]] = [
        {"key": "limits", "value": dict(limits)},
        {"key": "path", "value": msg.action.qualified},
        {"key": "kind", "value": kind},
        {"key": "timeout", "value": timed_out},
        {"key": "waitTime", "value": wait_time_ms},
    ]
    if init_time_ms is not None:
        annotations.append({"key": "initTime", "value": init_time_ms})
    if msg.caused_by_sequence:
        annotations.append({"key": "causedBy", "value": "sequence"})
    if msg.action.binding is not None:
        annotations.append({"key": "binding", "value": msg.action.binding})
    annotations += [{"key": k, "value": v} for k, v in (extra_annotations or {}).items()]
    record: dict[str, Any] = {
        "namespace": msg.user.namespace, "name": msg.action.name, "subject": msg.user.subject,
        "activationId": msg.activation_id, "start": start_ms, "end": end_ms, "duration": end_ms - start_ms,
        "response": response, "logs": list(logs), "version": version or msg.action.version or "0.0.1",
        "publish": publish, "annotations": annotations,
    }
    if msg.cause is not None:
        record["cause"] = msg.cause
    return record


def status_code_of(response: Mapping[str, Any] | str) -> int | None:
    """The ``response.statusCode`` of a full WhiskActivation; None for a shrunk (id-only) response."""
    if isinstance(response, str):
        return None
    return response["response"]["statusCode"]


# --- Acknowledgements (invoker -> completed{C}) ------------------------------------------------------


@dataclass(frozen=True)
class CompletionMessage:
    """Frees the activation's slot on the invoker; carries no result."""

    transid: list[Any]
    activation_id: str
    is_system_error: bool
    instance: InvokerInstance

    def to_json(self) -> dict[str, Any]:
        return {"transid": self.transid, "activationId": self.activation_id,
                "isSystemError": self.is_system_error, "instance": self.instance.to_json()}

    def shrink(self) -> CompletionMessage:
        return self


@dataclass(frozen=True)
class ResultMessage:
    """Completes a blocking caller's wait; frees nothing. ``response`` is a WhiskActivation or, shrunk, its id."""

    transid: list[Any]
    response: Mapping[str, Any] | str

    def to_json(self) -> dict[str, Any]:
        return {"transid": self.transid, "response": self.response}

    def shrink(self) -> ResultMessage:
        return replace(self, response=_activation_id_of(self.response))


@dataclass(frozen=True)
class CombinedCompletionAndResultMessage:
    """Both at once: the result for a blocking caller and the freed slot."""

    transid: list[Any]
    response: Mapping[str, Any] | str
    is_system_error: bool
    instance: InvokerInstance

    def to_json(self) -> dict[str, Any]:
        return {"transid": self.transid, "response": self.response,
                "isSystemError": self.is_system_error, "instance": self.instance.to_json()}

    def shrink(self) -> CombinedCompletionAndResultMessage:
        return replace(self, response=_activation_id_of(self.response))


Ack = CompletionMessage | ResultMessage | CombinedCompletionAndResultMessage


def _activation_id_of(response: Mapping[str, Any] | str) -> str:
    return response if isinstance(response, str) else response["activationId"]


def completion(msg: ActivationMessage, instance: InvokerInstance, *, is_system_error: bool = False
               ) -> CompletionMessage:
    return CompletionMessage(transid=msg.transid, activation_id=msg.activation_id,
                             is_system_error=is_system_error, instance=instance)


def result(msg: ActivationMessage, activation: Mapping[str, Any]) -> ResultMessage:
    return ResultMessage(transid=msg.transid, response=activation)


def combined(msg: ActivationMessage, activation: Mapping[str, Any], instance: InvokerInstance
             ) -> CombinedCompletionAndResultMessage:
    """The one-message answer; ``isSystemError`` is true exactly for status 3 (whisk internal error)."""
    return CombinedCompletionAndResultMessage(
        transid=msg.transid, response=activation,
        is_system_error=status_code_of(activation) == STATUS_WHISK_ERROR, instance=instance)


def encode_ack(ack: Ack, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """Encode an ack; if Kafka's producer would refuse it as too large, encode its shrunk form instead.

    OpenWhisk's ``MessagingActiveAck`` sends the ack, and on ``RecordTooLargeException`` re-sends
    ``ack.shrink`` (the response reduced to the activation id); the controller then reads the full
    record from the activation store, so whoever sends a shrunk ack must have stored the record.
    """
    data = encode(ack.to_json())
    if record_size_upper_bound(len(data)) > max_bytes:
        return encode(ack.shrink().to_json())
    return data


def encode_combined(ack: CombinedCompletionAndResultMessage, response_json: bytes,
                    max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """:func:`encode_ack` of ``ack`` when ``response_json`` is ``encode(ack.response)``: the record's JSON,
    encoded once for the ack and for the ledger, goes into the ack's bytes as it is. The same bytes as
    :func:`encode_ack` (the keys in ``to_json``'s order), shrunk by the same rule."""
    data = b"".join((b'{"transid":', encode(ack.transid), b',"response":', response_json,
                     b',"isSystemError":', b"true" if ack.is_system_error else b"false",
                     b',"instance":', encode(ack.instance.to_json()), b"}"))
    if record_size_upper_bound(len(data)) > max_bytes:
        return encode(ack.shrink().to_json())
    return data


def record_size_upper_bound(value_bytes: int) -> int:
    """Size Kafka's producer assumes for a record with no key or headers (``estimateSizeInBytesUpperBound``).

    The producer refuses a record (``RecordTooLargeException``) when this exceeds ``max.request.size``.
    """
    null_key, no_headers = 1, 1
    return (_BATCH_HEADER_BYTES + _MAX_RECORD_OVERHEAD_BYTES + null_key
            + _varint_size(value_bytes) + value_bytes + no_headers)


def _varint_size(n: int) -> int:
    """Bytes of Kafka's zig-zag varint encoding of a non-negative ``n``."""
    zigzag = n << 1
    size = 1
    while zigzag >= 0x80:
        zigzag >>= 7
        size += 1
    return size


def parse_ack(data: bytes | str) -> Ack:
    """Tell the three ack kinds apart as the controller does: by which fields are present."""
    obj = _load_object(data, "AcknowledgementMessage")
    transid = _typed(_required(obj, "transid", "transid"), list, "an array", "transid")
    is_system_error = _typed(obj.get("isSystemError", False), bool, "a boolean", "isSystemError")
    if "response" in obj:
        response = _typed(obj["response"], (dict, str), "an object or an activation id", "response")
        if isinstance(response, str):
            _activation_id(response, "response")
        else:
            _activation_id(_required(response, "activationId", "response.activationId"), "response.activationId")
        if "instance" in obj:
            return CombinedCompletionAndResultMessage(transid, response, is_system_error,
                                                      InvokerInstance.from_json(obj["instance"]))
        return ResultMessage(transid, response)
    if "instance" in obj:
        activation_id = _activation_id(_required(obj, "activationId", "activationId"), "activationId")
        return CompletionMessage(transid, activation_id, is_system_error, InvokerInstance.from_json(obj["instance"]))
    raise WireError("AcknowledgementMessage", "has neither 'response' nor 'instance'")


# --- PingMessage (invoker -> health) ----------------------------------------------------------------


def ping_message(instance: InvokerInstance, is_enabled: bool = True) -> dict[str, Any]:
    """What an invoker sends on ``health`` every second; ``isEnabled: false`` takes it offline at once."""
    return {"name": instance.to_json(), "isEnabled": is_enabled}


def parse_ping(data: bytes | str) -> tuple[InvokerInstance, bool]:
    """``(instance, isEnabled)`` of a PingMessage; OpenWhisk 1.0.0 omits ``isEnabled`` (read as true)."""
    obj = _load_object(data, "PingMessage")
    instance = InvokerInstance.from_json(_required(obj, "name", "name"), "name")
    return instance, _typed(obj.get("isEnabled", True), bool, "a boolean", "isEnabled")


# --- encoding and topics ----------------------------------------------------------------------------


#: One encoder for every message (``json.dumps`` with arguments builds an encoder at each call).
_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def encode(value: Any) -> bytes:
    """Compact UTF-8 JSON, as OpenWhisk's producer writes it; never NaN or Infinity (ValueError)."""
    return _ENCODER.encode(value).encode("utf-8")


def invoker_topic(instance: int, prefix: str = "") -> str:
    return f"{prefix}invoker{instance}"


def completed_topic(controller: str | ControllerInstance, prefix: str = "") -> str:
    if isinstance(controller, ControllerInstance):
        controller = controller.as_string
    return f"{prefix}completed{controller}"


def health_topic(prefix: str = "") -> str:
    return f"{prefix}health"


_COMMON_TOPIC_CONFIG = {"segment.bytes": str(512 * 1024**2), "retention.bytes": str(1024**3)}

#: Per-kind settings OpenWhisk creates its topics with (``whisk.kafka.topics.<kind>``), 1 partition each.
TOPIC_CONFIGS: dict[str, dict[str, str]] = {
    "invoker": {"retention.ms": "172800000", "max.message.bytes": str(MAX_MESSAGE_BYTES)},
    "completed": {"retention.ms": "3600000", "max.message.bytes": str(MAX_MESSAGE_BYTES)},
    "health": {"retention.ms": "3600000"},
    "cache-invalidation": {"retention.ms": "300000"},
    "events": {"retention.ms": "3600000"},
}


def topic_config(kind: str) -> dict[str, str]:
    """The full config of a topic of ``kind`` (``invoker``, ``completed``, ``health``, ...)."""
    if kind not in TOPIC_CONFIGS:
        raise KeyError(f"unknown topic kind {kind!r} (known: {', '.join(TOPIC_CONFIGS)})")
    return {**_COMMON_TOPIC_CONFIG, **TOPIC_CONFIGS[kind]}
