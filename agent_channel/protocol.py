"""Messages between the scheduler and the invoker agents, shared by both sides, and the data-passing rule.

Transport-free: the messages travel as single-field entries of Redis streams (:mod:`agent_channel.keys`
names the streams); :func:`encode` writes plain JSON (UTF-8, compact) and :func:`decode` validates every field,
raising :class:`ProtocolError` naming the one that is wrong.

* :class:`DispatchMessage` (scheduler -> one node's agent): a batch of one function, where to answer
  (``reply_to``), whether its outputs come back inline (``return_output``: the app's sinks) or stay in
  the data store, and per activation either the call's parameters (entry functions) or references to
  its predecessors' outputs (:class:`InputRef`) -- never the outputs themselves; where its batch
  needs a new worker on a MIG instance whose GPU memory idle workers of other functions hold, the idle
  workers to stop there first (``evict``).
* :class:`PrewarmMessage` (scheduler -> one node's agent, on the same stream as dispatches): start a
  worker of one function in one configuration (its MIG slice carved as a dispatch's is, then the
  runtime's cold start and ``/init``) and keep it idle for at most ``keep_alive_ms``; no job runs and
  nothing is answered -- the worker shows in the agent's heartbeats as an idle warm worker, and the
  pre-warm's id in their ``running`` / ``done`` lists, as a batch's, with what the agent did with it
  (:class:`PrewarmDone`: started a worker, found one warm, failed, taken too late or twice).
* :class:`BatchResult` (agent -> the scheduler named in ``reply_to``): per activation its status,
  timings, logs, and either the result inline or the key and size of the stored output; per batch the
  function, configuration and measured run time, and the MIG change the agent made for it (instances
  created or destroyed, and how long that took: what the scheduler learns its MIG change time from).
* :class:`Heartbeat` (every agent, once a second): the node's vCPUs, memory, MIG slices, warm workers,
  its idle warm workers by (function, vCPUs, slice), and the batches it is running and has recently
  answered (so the scheduler knows which of its own reservations the report already shows), with the
  outcome of each pre-warm among them.

**Data flow** (:func:`compose_input`): an entry function gets the call's parameters; a function with one
predecessor gets that predecessor's output; with several, an object keyed by the predecessors' names in
the app's DAG. The app's result is its sink's result (several sinks: an object keyed by name).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from esg.cluster import NodeState, Slice, SliceRef
from esg.errors import EsgError
from esg.model import Config
from esg.nesting import MAX_MESSAGE_NESTING, MAX_NESTING, text_deeper_than
from openwhisk_status import STATUS_CODES

#: The limit on one function's output passed to its successors through the data store (Redis takes
#: values up to 512 MB; intermediate tensors of the shipped apps are below 1 MB).
MAX_DATA_BYTES = 64 * 1_048_576
DATA_TTL_S = 600
"""How long a batch's stored outputs, and the scheduler's claim on it, live at most by default: past the
controller's deadline (the scheduler deletes the outputs when the request ends)."""


class ProtocolError(EsgError):
    """A scheduler/agent message is malformed."""


@dataclass(frozen=True)
class ActionRef:
    """The OpenWhisk action a batch runs: fully qualified name and the revision to run."""

    namespace: str
    name: str
    revision: str | None = None
    kind: str = "python:3"
    timeout_ms: int = 60000
    memory_mb: int = 256

    @property
    def path(self) -> str:
        return f"{self.namespace}/{self.name}"


@dataclass(frozen=True)
class InputRef:
    """A predecessor's output, where its producer left it: kept on ``node`` and stored under ``key``."""

    name: str
    """The predecessor's name in the app's DAG (the key of a multi-predecessor input)."""
    key: str
    node: str
    bytes: int = 0


@dataclass(frozen=True)
class RunRequest:
    """One activation to run, in a batch's dispatch and at the action runtime's ``/run``: ``value`` for
    an entry function, else ``inputs`` to compose (the agent composes them into ``value`` before it
    runs the batch). ``time_limit_at_ms``: when the action's time limit runs out (epoch ms; ``/run``
    sends it as OpenWhisk's ``deadline``; None: not sent) -- not the request's SLO deadline.
    ``init_env``: the activation's init arguments (OpenWhisk's ``initArgs``), the environment a worker
    started for it gets at ``/init``. ``api_key``: the caller's ``uuid:key``, to read the action as the
    caller (never shown). A dispatch carries every field but ``inputs``, ``init_env`` and ``api_key``."""

    activation_id: str
    transaction_id: str = ""
    value: Any = None
    time_limit_at_ms: int | None = None
    namespace: str = ""
    inputs: tuple[InputRef, ...] = ()
    init_env: Mapping[str, Any] | None = None
    api_key: str | None = field(default=None, repr=False)


@dataclass(frozen=True)
class DispatchMessage:
    batch_id: str
    node: str
    app: str
    function: str
    action: ActionRef
    config: Config
    slice: SliceRef | None
    destroy: tuple[SliceRef, ...]
    requests: tuple[RunRequest, ...]
    reply_to: str = ""
    """The stream the scheduler that sent it reads results from."""
    return_output: bool = True
    """True for an app's sink (and plain actions): results come back inline for the ack; otherwise
    outputs are stored for the successors and only referenced."""
    data_ttl_s: int = DATA_TTL_S
    """How long stored outputs live at most (the scheduler deletes them when the request ends)."""
    keep_alive_ms: int | None = None
    """How long the batch's worker may wait idle after it for the next batch (None: the agent's
    ``--idle-ttl-s``)."""
    epoch: int = 0
    """The leader epoch of the scheduler that sent it: an agent refuses it once its node has been told of
    a newer one (``controller_plugin/lease.py``)."""
    evict: tuple[tuple[str, int], ...] = ()
    """Idle warm workers (function, how many) to stop on ``slice`` before the batch's new worker starts
    there: the GPU memory they hold is what it lacks (:attr:`esg.state.Fit.evict`). Empty (and absent on
    the wire): none."""


@dataclass(frozen=True)
class PrewarmMessage:
    """Start a worker of ``function`` (``action``) with ``config`` on ``node`` before a batch needs it:
    the slice carved as for a dispatch (``slice``, ``destroy``), the runtime started and ``/init``-ed with
    the action's code, then idle for at most ``keep_alive_ms``. Nothing runs and nothing is answered;
    where an idle worker of the same action, revision and slice is already there, none is started and
    that one stays idle for at least ``keep_alive_ms``. ``api_key``: a caller's ``uuid:key`` to read the action as (None: the agent's own key);
    ``init_env``: the environment a worker started for the function's activations gets at ``/init``."""

    prewarm_id: str
    node: str
    app: str
    function: str
    action: ActionRef
    config: Config
    slice: SliceRef | None
    destroy: tuple[SliceRef, ...]
    keep_alive_ms: int | None
    """None: the agent's idle TTL (``--idle-ttl-s``)."""
    reply_to: str = ""
    """The results stream of the scheduler that sent it (nothing is answered there; it names the sender)."""
    init_env: Mapping[str, Any] | None = None
    api_key: str | None = field(default=None, repr=False)
    sent_ms: int | None = None
    """When the scheduler sent it (its wall clock, ms since the epoch; None: not said). An agent that takes
    it after its keep-alive has run out since then drops it: the worker would have been gone already."""
    namespace: str = ""
    """The namespace whose calls the worker will serve (the caller of ``api_key``; workers are keyed by it:
    empty, the action's own)."""
    epoch: int = 0
    """The leader epoch of the scheduler that sent it (as a dispatch's: its MIG destroy list is fenced too)."""


@dataclass(frozen=True)
class RunResult:
    """The outcome of one activation, with OpenWhisk's status codes (0 ok, 1 app, 2 developer, 3 system).

    A successful non-sink activation has ``result`` None and its output stored under ``output_key``
    (``output_bytes`` long); everything else carries ``result`` inline.
    """

    activation_id: str
    status_code: int
    result: Any
    start_ms: int
    end_ms: int
    init_ms: int | None = None
    logs: tuple[str, ...] = ()
    timeout: bool = False
    output_key: str | None = None
    output_bytes: int = 0


@dataclass(frozen=True)
class BatchResult:
    """One batch answered; ``function``, ``config`` and ``run_ms`` (the batch's measured run time,
    cold start excluded) describe the run for whoever learns from it."""

    batch_id: str
    node: str
    results: tuple[RunResult, ...]
    error: str | None = None
    function: str = ""
    config: Config | None = None
    run_ms: float | None = None
    cold: bool | None = None
    """Whether the batch started a new worker (None: not said)."""
    reconfigured: int = 0
    """MIG instances the agent created or destroyed for this batch (its slice was carved here)."""
    overlapped_start: bool = False
    """A warm batch during which another worker started on the node (a process or container coming
    up), or one the agent ran as several (its requests came from several namespaces, whose workers are
    kept apart): its ``run_ms`` is not one run of its configuration, so no profile learns from it."""
    reconfig_ms: float | None = None
    """The wall time (ms) the agent spent carving this batch's slice when that changed ``reconfigured``
    instances (None: it changed none, or did not measure; an older agent's results have none)."""

    @property
    def succeeded(self) -> bool:
        """No batch error, and every activation answered with status 0."""
        return self.error is None and bool(self.results) and all(r.status_code == 0 for r in self.results)


@dataclass(frozen=True)
class IdleWorkers:
    """Idle warm workers of one function on one MIG instance (None: CPU only) with ``vcpus`` vCPUs."""

    function: str
    vcpus: int
    slice: SliceRef | None
    count: int


#: What an agent did with a pre-warm (:attr:`PrewarmDone.outcome`).
PREWARM_OUTCOMES = ("started", "warm", "failed", "expired", "repeated", "dropped", "revoked")


@dataclass(frozen=True)
class PrewarmDone:
    """What the agent did with one pre-warm its heartbeat names done, so the scheduler's decision log
    (and ``esg replay``'s costs) charge only what ran. ``outcome``: ``started`` (a worker was started
    and ``/init``-ed), ``warm`` (an idle worker was there already: its keep-alive was extended, nothing
    started), ``failed``, ``expired`` (taken after its keep-alive had run out since it was sent: not
    started), ``repeated`` (delivered again, or taken before a restart: not started) or ``dropped``
    (the agent stopped before it could start it) or ``revoked`` (taken back by the scheduler, or sent by an
    older leader than the node was told of: not started)."""

    prewarm_id: str
    outcome: str
    reconfigured: int = 0
    """MIG instances the agent created or destroyed for it (its slice carved there)."""
    reconfig_ms: float | None = None
    """The wall time (ms) those changes took (None: none made, or not measured), as a batch's."""


@dataclass(frozen=True)
class Heartbeat:
    node: str
    vcpus_total: int
    vcpus_free: int
    memory_mb: int
    gpu_model: str | None
    slices: tuple[Slice, ...] = ()
    """The node's MIG instances, as the scheduler's :class:`esg.cluster.Slice` holds them."""
    warm: tuple[tuple[str, Config], ...] = ()
    draining: bool = False
    seq: int = 0
    sent_ms: int = 0
    idle: tuple[IdleWorkers, ...] = ()
    running: tuple[str, ...] = ()
    """Batch ids the agent has taken and not yet answered (what the slices and workers above show busy)."""
    done: tuple[str, ...] = ()
    """Batch ids the agent answered recently (their workers are idle above again)."""
    prewarmed: tuple[PrewarmDone, ...] = ()
    """The outcomes of the pre-warms among ``done`` (an older agent's heartbeats have none)."""
    stream_recoveries: int = 0
    """How often the agent found its dispatch stream's consumer group gone (Redis lost its data) and made
    it again."""

    def node_state(self) -> NodeState:
        """The node as the scheduler plans on it (its slices copied: the scheduler's reservations mark
        its own copy, never this message)."""
        idle: dict[tuple[str, SliceRef | None], int] = {}
        for w in self.idle:
            if w.count > 0:
                idle[(w.function, w.slice)] = idle.get((w.function, w.slice), 0) + w.count
        return NodeState(self.node, self.vcpus_total, self.vcpus_free, self.gpu_model,
                         [Slice(s.ref, s.busy, s.uuid) for s in self.slices], set(self.warm),
                         self.memory_mb, idle)


# -- encoding --------------------------------------------------------------------------------------

Message = DispatchMessage | PrewarmMessage | BatchResult | Heartbeat


#: One encoder for every message (``json.dumps`` with arguments builds an encoder at each call).
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def encode(msg: Message) -> bytes:
    return _ENCODER.encode(to_dict(msg)).encode()


def to_dict(msg: Message) -> dict[str, Any]:
    if isinstance(msg, DispatchMessage):
        out = {"type": "dispatch", "batch_id": msg.batch_id, "node": msg.node, "app": msg.app,
               "function": msg.function, "action": _action(msg.action),
               "config": msg.config.to_dict(), "slice": _slice(msg.slice),
               "destroy": [_slice(s) for s in msg.destroy], "reply_to": msg.reply_to,
               "return_output": msg.return_output, "data_ttl_s": msg.data_ttl_s,
               "requests": [_request(r) for r in msg.requests]}
        if msg.keep_alive_ms is not None:
            out["keep_alive_ms"] = msg.keep_alive_ms
        if msg.epoch:
            out["epoch"] = msg.epoch
        if msg.evict:
            out["evict"] = [{"function": f, "count": n} for f, n in msg.evict]
        return out
    if isinstance(msg, PrewarmMessage):
        out = {"type": "prewarm", "prewarm_id": msg.prewarm_id, "node": msg.node, "app": msg.app,
               "function": msg.function, "action": _action(msg.action), "config": msg.config.to_dict(),
               "slice": _slice(msg.slice), "destroy": [_slice(s) for s in msg.destroy],
               "reply_to": msg.reply_to}
        if msg.keep_alive_ms is not None:
            out["keep_alive_ms"] = msg.keep_alive_ms
        if msg.sent_ms is not None:
            out["sent_ms"] = msg.sent_ms
        if msg.init_env:
            out["init_env"] = dict(msg.init_env)
        if msg.api_key:
            out["api_key"] = msg.api_key
        if msg.namespace:
            out["namespace"] = msg.namespace
        if msg.epoch:
            out["epoch"] = msg.epoch
        return out
    if isinstance(msg, BatchResult):
        out = {"type": "result", "batch_id": msg.batch_id, "node": msg.node, "error": msg.error,
               "function": msg.function, "config": None if msg.config is None else msg.config.to_dict(),
               "run_ms": msg.run_ms, "cold": msg.cold, "reconfigured": msg.reconfigured,
               "overlapped_start": msg.overlapped_start, "results": [_run_result(r) for r in msg.results]}
        if msg.reconfig_ms is not None:
            out["reconfig_ms"] = msg.reconfig_ms
        return out
    return {"type": "heartbeat", "node": msg.node, "vcpus_total": msg.vcpus_total,
            "vcpus_free": msg.vcpus_free, "memory_mb": msg.memory_mb, "gpu_model": msg.gpu_model,
            "slices": [{**_slice(s.ref), "busy": s.busy, "uuid": s.uuid} for s in msg.slices],
            "warm": [{"function": f, "config": c.to_dict()} for f, c in msg.warm],
            "draining": msg.draining, "seq": msg.seq, "sent_ms": msg.sent_ms,
            "idle": [{"function": w.function, "vcpus": w.vcpus, "slice": _slice(w.slice), "count": w.count}
                     for w in msg.idle],
            "running": list(msg.running), "done": list(msg.done),
            "prewarmed": [_prewarm_done_dict(p) for p in msg.prewarmed], "stream_recoveries": msg.stream_recoveries}


def _prewarm_done_dict(p: PrewarmDone) -> dict[str, Any]:
    out: dict[str, Any] = {"prewarm_id": p.prewarm_id, "outcome": p.outcome, "reconfigured": p.reconfigured}
    if p.reconfig_ms is not None:
        out["reconfig_ms"] = p.reconfig_ms
    return out


def _action(a: ActionRef) -> dict[str, Any]:
    return {"namespace": a.namespace, "name": a.name, "revision": a.revision, "kind": a.kind,
            "timeout_ms": a.timeout_ms, "memory_mb": a.memory_mb}


def _slice(ref: SliceRef | None) -> dict[str, Any] | None:
    return None if ref is None else {"profile": ref.profile, "start": ref.start}


def _request(r: RunRequest) -> dict[str, Any]:
    out = {"activation_id": r.activation_id, "transaction_id": r.transaction_id, "value": r.value,
           "time_limit_at_ms": r.time_limit_at_ms, "namespace": r.namespace}
    if r.inputs:
        out["inputs"] = [{"name": i.name, "key": i.key, "node": i.node, "bytes": i.bytes} for i in r.inputs]
    if r.init_env:
        out["init_env"] = dict(r.init_env)
    if r.api_key:
        out["api_key"] = r.api_key
    return out


def _run_result(r: RunResult) -> dict[str, Any]:
    out = {"activation_id": r.activation_id, "status_code": r.status_code, "result": r.result,
           "start_ms": r.start_ms, "end_ms": r.end_ms, "init_ms": r.init_ms, "logs": list(r.logs),
           "timeout": r.timeout}
    if r.output_key is not None:
        out["output_key"] = r.output_key
        out["output_bytes"] = r.output_bytes
    return out


# -- decoding --------------------------------------------------------------------------------------

def decode(raw: bytes | str) -> Message:
    try:
        text = raw.decode("utf-8") if isinstance(raw, bytes | bytearray) else raw
        data = json.loads(text)
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ProtocolError(f"not JSON: {exc}") from None
    except RecursionError:
        raise ProtocolError("not JSON: nested too deeply") from None
    if not isinstance(data, dict):
        raise ProtocolError("a message must be a JSON object")
    if text_deeper_than(text, data, MAX_MESSAGE_NESTING):
        raise ProtocolError(f"a value in the message nests deeper than {MAX_NESTING} levels")
    kind = data.get("type")
    try:
        if kind == "dispatch":
            return _dispatch(data)
        if kind == "prewarm":
            return _prewarm(data)
        if kind == "result":
            return _result(data)
        if kind == "heartbeat":
            return _heartbeat(data)
    except (KeyError, TypeError, ValueError, OverflowError) as exc:
        if isinstance(exc, ProtocolError):
            raise
        raise ProtocolError(f"{kind} message: bad or missing field {exc}") from None
    raise ProtocolError(f"unknown message type {kind!r}")


def _need(d: dict, key: str, typ: type | tuple[type, ...], where: str) -> Any:
    if key not in d:
        raise ProtocolError(f"{where}: missing field {key!r}")
    v = d[key]
    if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
        raise ProtocolError(f"{where}: field {key!r} has the wrong type")
    return v


def _opt_slice(d: Any, where: str) -> SliceRef | None:
    if d is None:
        return None
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: a slice must be an object")
    return SliceRef(_need(d, "profile", str, where), _need(d, "start", int, where))


def _config(d: Any, where: str) -> Config:
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: field 'config' must be an object")
    try:
        return Config(_need(d, "batch", int, where), _need(d, "vcpus", int, where), d.get("gpu"))
    except ValueError as exc:
        raise ProtocolError(f"{where}: config: {exc}") from None


def _action_ref(d: dict, w: str) -> ActionRef:
    a = _need(d, "action", dict, w)
    revision, kind = a.get("revision"), a.get("kind", "python:3")
    if (revision is not None and not isinstance(revision, str)) or not isinstance(kind, str):
        raise ProtocolError(f"{w}.action: 'revision' and 'kind' must be strings")
    return ActionRef(_need(a, "namespace", str, w + ".action"), _need(a, "name", str, w + ".action"),
                     revision, kind, int(a.get("timeout_ms", 60000)), int(a.get("memory_mb", 256)))


def _keep_alive(d: dict, w: str, required: bool) -> int | None:
    """A message's ``keep_alive_ms``: a non-negative integer (absent: None, unless ``required``)."""
    if "keep_alive_ms" not in d and not required:
        return None
    v = _need(d, "keep_alive_ms", int, w)
    if v < 0:
        raise ProtocolError(f"{w}: field 'keep_alive_ms' must be >= 0")
    return v


def _prewarm(d: dict) -> PrewarmMessage:
    w = "prewarm"
    return PrewarmMessage(_need(d, "prewarm_id", str, w), _need(d, "node", str, w), _need(d, "app", str, w),
                          _need(d, "function", str, w), _action_ref(d, w), _config(d.get("config"), w),
                          _opt_slice(d.get("slice"), w), _slices(d.get("destroy", []), w),
                          _keep_alive(d, w, required=False), _need(d, "reply_to", str, w),
                          _opt_env(d.get("init_env"), w + ".init_env"), _opt_str(d.get("api_key"), w + ".api_key"),
                          _need(d, "sent_ms", int, w) if "sent_ms" in d else None,
                          _need(d, "namespace", str, w) if "namespace" in d else "", _epoch(d, w))


def _slices(xs: Any, where: str) -> tuple[SliceRef, ...]:
    if not isinstance(xs, list):
        raise ProtocolError(f"{where}: field 'destroy' must be a list of slices")
    out = tuple(_opt_slice(s, where) for s in xs)
    if any(s is None for s in out):
        raise ProtocolError(f"{where}: field 'destroy' holds a null slice")
    return out  # type: ignore[return-value]


def _dispatch(d: dict) -> DispatchMessage:
    w = "dispatch"
    action = _action_ref(d, w)
    wr = w + ".requests"
    reqs = tuple(RunRequest(_need(r, "activation_id", str, wr), _need(r, "transaction_id", str, wr),
                            r.get("value"), _time_limit_at(r, wr), _need(r, "namespace", str, wr),
                            tuple(_input_ref(i, wr + ".inputs") for i in r.get("inputs", ())),
                            _opt_env(r.get("init_env"), wr + ".init_env"), _opt_str(r.get("api_key"), wr + ".api_key"))
                 for r in _need(d, "requests", list, w))
    if not reqs:
        raise ProtocolError("dispatch: field 'requests' is empty")
    ttl = d.get("data_ttl_s", DATA_TTL_S)
    if isinstance(ttl, bool) or not isinstance(ttl, int) or ttl <= 0:
        raise ProtocolError("dispatch: field 'data_ttl_s' must be a positive integer")
    return DispatchMessage(_need(d, "batch_id", str, w), _need(d, "node", str, w), _need(d, "app", str, w),
                           _need(d, "function", str, w), action, _config(d.get("config"), w),
                           _opt_slice(d.get("slice"), w),
                           _slices(d.get("destroy", []), w), reqs,
                           _need(d, "reply_to", str, w), bool(d.get("return_output", True)), ttl,
                           _keep_alive(d, w, required=False), _epoch(d, w), _evict(d.get("evict", []), w))


def _evict(xs: Any, w: str) -> tuple[tuple[str, int], ...]:
    """A dispatch's ``evict``: a list of ``{"function": name, "count": n}`` (absent: none)."""
    where = w + ".evict"
    if not isinstance(xs, list):
        raise ProtocolError(f"{w}: field 'evict' must be a list")
    out = []
    for x in xs:
        if not isinstance(x, dict):
            raise ProtocolError(f"{where}: an entry must be an object")
        function, count = _need(x, "function", str, where), _need(x, "count", int, where)
        if not function:
            raise ProtocolError(f"{where}: 'function' must not be empty")
        if count < 1:
            raise ProtocolError(f"{where}: 'count' must be a positive integer, got {count}")
        out.append((function, count))
    return tuple(out)


def _epoch(d: dict, w: str) -> int:
    """A message's leader ``epoch`` (absent: 0, an older scheduler's)."""
    if "epoch" not in d:
        return 0
    v = _need(d, "epoch", int, w)
    if v < 0:
        raise ProtocolError(f"{w}: field 'epoch' must be >= 0")
    return v


def _time_limit_at(r: Any, where: str) -> int:
    """A request's ``time_limit_at_ms``; a dispatch written before the field had its name (still pending
    in a node's stream across an upgrade) carries it as ``deadline_ms``."""
    if isinstance(r, dict) and "time_limit_at_ms" not in r and "deadline_ms" in r:
        return _need(r, "deadline_ms", int, where)
    return _need(r, "time_limit_at_ms", int, where)


def _opt_str(v: Any, where: str) -> str | None:
    if v is not None and not isinstance(v, str):
        raise ProtocolError(f"{where}: must be a string")
    return v


def _opt_env(d: Any, where: str) -> Mapping[str, Any] | None:
    if d is not None and not isinstance(d, dict):
        raise ProtocolError(f"{where}: must be an object")
    return d or None


def _input_ref(i: Any, where: str) -> InputRef:
    if not isinstance(i, dict):
        raise ProtocolError(f"{where}: an input must be an object")
    return InputRef(_need(i, "name", str, where), _need(i, "key", str, where), _need(i, "node", str, where),
                    int(i.get("bytes", 0)))


def _result(d: dict) -> BatchResult:
    w = "result"
    results = []
    for r in _need(d, "results", list, w):
        code = _need(r, "status_code", int, w + ".results")
        if code not in STATUS_CODES:
            raise ProtocolError(f"{w}.results: status_code must be 0-3, got {code}")
        key = r.get("output_key")
        if key is not None and not isinstance(key, str):
            raise ProtocolError(f"{w}.results: field 'output_key' has the wrong type")
        results.append(RunResult(_need(r, "activation_id", str, w + ".results"), code, r.get("result"),
                                 _need(r, "start_ms", int, w + ".results"), _need(r, "end_ms", int, w + ".results"),
                                 r.get("init_ms"), tuple(r.get("logs", ())), bool(r.get("timeout", False)),
                                 key, int(r.get("output_bytes", 0)) if key is not None else 0))
    config = d.get("config")
    run_ms = d.get("run_ms")
    cold = d.get("cold")
    reconfigured = d.get("reconfigured", 0)
    if cold is not None and not isinstance(cold, bool):
        raise ProtocolError(f"{w}: field 'cold' has the wrong type")
    overlapped = d.get("overlapped_start", False)   # absent from an older agent's results
    if not isinstance(overlapped, bool):
        raise ProtocolError(f"{w}: field 'overlapped_start' has the wrong type")
    if isinstance(reconfigured, bool) or not isinstance(reconfigured, int) or reconfigured < 0:
        raise ProtocolError(f"{w}: field 'reconfigured' must be a non-negative integer")
    return BatchResult(_need(d, "batch_id", str, w), _need(d, "node", str, w), tuple(results), d.get("error"),
                         str(d.get("function") or ""), None if config is None else _config(config, w),
                         None if run_ms is None else float(run_ms), cold, reconfigured, overlapped,
                         _opt_ms(d, "reconfig_ms", w))


def _opt_ms(d: dict, key: str, where: str) -> float | None:
    """An optional duration in milliseconds (absent or null: None): a finite number >= 0."""
    v = d.get(key)
    if v is None:
        return None
    try:
        ms = float(v) if isinstance(v, int | float) and not isinstance(v, bool) else math.nan
    except OverflowError:   # an integer beyond any float
        ms = math.inf
    if not math.isfinite(ms) or ms < 0:
        raise ProtocolError(f"{where}: field {key!r} must be a finite number of milliseconds >= 0")
    return ms


def _heartbeat(d: dict) -> Heartbeat:
    w = "heartbeat"
    slices = tuple(Slice(_opt_slice(s, w), bool(s.get("busy", False)), s.get("uuid"))
                   for s in d.get("slices", []))
    warm = tuple((_need(x, "function", str, w), _config(x.get("config"), w)) for x in d.get("warm", []))
    idle = tuple(_idle(x, w + ".idle") for x in d.get("idle", []))
    return Heartbeat(_need(d, "node", str, w), _need(d, "vcpus_total", int, w), _need(d, "vcpus_free", int, w),
                     _need(d, "memory_mb", int, w), d.get("gpu_model"), slices, warm,
                     bool(d.get("draining", False)), int(d.get("seq", 0)), int(d.get("sent_ms", 0)), idle,
                     _ids(d.get("running", []), w + ".running"), _ids(d.get("done", []), w + ".done"),
                     tuple(_prewarm_done(x, w + ".prewarmed") for x in _list(d.get("prewarmed", []), w + ".prewarmed")),
                     _need(d, "stream_recoveries", int, w) if "stream_recoveries" in d else 0)


def _list(xs: Any, where: str) -> list:
    if not isinstance(xs, list):
        raise ProtocolError(f"{where}: must be a list")
    return xs


def _prewarm_done(x: Any, where: str) -> PrewarmDone:
    if not isinstance(x, dict):
        raise ProtocolError(f"{where}: an entry must be an object")
    outcome = _need(x, "outcome", str, where)
    if outcome not in PREWARM_OUTCOMES:
        raise ProtocolError(f"{where}: 'outcome' must be one of {', '.join(PREWARM_OUTCOMES)}, got {outcome!r}")
    reconfigured = x.get("reconfigured", 0)
    if isinstance(reconfigured, bool) or not isinstance(reconfigured, int) or reconfigured < 0:
        raise ProtocolError(f"{where}: field 'reconfigured' must be a non-negative integer")
    return PrewarmDone(_need(x, "prewarm_id", str, where), outcome, reconfigured, _opt_ms(x, "reconfig_ms", where))


def _idle(x: Any, where: str) -> IdleWorkers:
    if not isinstance(x, dict):
        raise ProtocolError(f"{where}: an entry must be an object")
    count = _need(x, "count", int, where)
    vcpus = _need(x, "vcpus", int, where)
    if count < 0 or vcpus < 1:
        raise ProtocolError(f"{where}: 'count' must be >= 0 and 'vcpus' >= 1")
    return IdleWorkers(_need(x, "function", str, where), vcpus, _opt_slice(x.get("slice"), where), count)


def _ids(xs: Any, where: str) -> tuple[str, ...]:
    if not isinstance(xs, list) or not all(isinstance(x, str) for x in xs):
        raise ProtocolError(f"{where}: must be a list of batch ids")
    return tuple(xs)


# -- data flow -------------------------------------------------------------------------------------

def compose_input(outputs: Sequence[tuple[str, Any]]) -> Any:
    """A function's input from its predecessors' ``(name, output)``: the one output, or an object keyed
    by name when there are several."""
    if len(outputs) == 1:
        return outputs[0][1]
    return {name: value for name, value in outputs}
