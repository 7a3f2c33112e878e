"""Plays the OpenWhisk controller's side of the Kafka protocol (``docs/openwhisk-wire.md``).

* Consumes ``health``: the first ping of instance N registers invoker N (Unhealthy) and sends it the
  health test action at once (``whisk.system/invokerHealthTestAction{C}``, ``transid=["sid_invokerHealth",
  <start ms>]``, ``revision: null``, ``blocking: false``, no ``content``); no ping for 10 s makes it
  Offline, a ping with ``isEnabled: false`` at once.
* Supervises each invoker as ``InvokerSupervision.scala``'s ``InvokerActor`` does: every completion
  (health test acks and user activations alike) goes into a ring buffer of the last 10 results --
  Success, SystemError (``isSystemError: true``) or Timeout (a forced completion: no completion within
  max(timeout, 60 s) x 2 + 1 min of the publish, as ``CommonLoadBalancer`` forces it). More than 3
  SystemErrors makes it Unhealthy, more than 3 Timeouts Unresponsive; a Success makes it Healthy again
  (Unhealthy: once the test action it sends after the Success succeeds too). Unhealthy and Unresponsive
  invokers get the test action on entering the state and every ``retest_s``.
* :meth:`ControllerDriver.invoke` publishes an ActivationMessage (the exact JSON of ``docs/openwhisk-wire.md`` §2: action with
  version, revision, the caller's identity -- the driver's own ``user`` unless the call names one --,
  content = the action's parameters merged with the call's) to a
  Healthy invoker (home invoker by OpenWhisk's hash, then the next ones), and for a blocking call waits
  for the result on ``completed{C}``; when the ack carries only the id (shrunk past Kafka's limit) or no
  result, the record is polled from the activation store (CouchDB), as ``PrimitiveActions.pollActivation``
  does.
* :meth:`ControllerDriver.invocation` is the REST stand-in's invoker: each call as its caller, with the
  action's document resolved through package and binding; a blocking call not answered within its wait
  is answered with its id (the controller's 202).
* Counts every ack per activation id, so a test can assert that each one was answered exactly once.

It is the controller the embedded cluster (``esg up``) and the integration tests use where a JVM
cannot run; it does not store activations (whoever completes one does: the invoker).
"""

from __future__ import annotations

import random
import string
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kafka import KafkaConsumer, KafkaProducer, TopicPartition

from controller_plugin import wire
from controller_plugin.activation_store import ActivationStore, StoreError, record_of
from esg_cli.openwhisk_controller import Invocation, NoInvoker

GUEST = {"subject": "guest", "namespace": {"name": "guest", "uuid": "23bc46b1-71f6-4ed5-8c54-816aa4f8c502"},
         "authkey": {"api_key": "23bc46b1-71f6-4ed5-8c54-816aa4f8c502:"
                                "123zO3xZCLrMN6v2BKK1dXYFpXlPkccOFqm12CdAsMgRU4VrNZ9lyGVCGuMDGIwP"},
         "rights": ["READ", "PUT", "DELETE", "ACTIVATE"], "limits": {}}
PING_TIMEOUT_S = 10.0
#: ``InvokerActor.bufferSize`` and ``bufferErrorTolerance``.
BUFFER_SIZE = 10
BUFFER_ERROR_TOLERANCE = 3
SUCCESS, SYSTEM_ERROR, TIMEOUT = "success", "system_error", "timeout"
#: The controller's defaults: ``timeout-factor``, ``timeout-addon``, ``time-limit.std``.
TIMEOUT_FACTOR = 2
TIMEOUT_ADDON_S = 60.0
STD_TIME_LIMIT_S = 60.0
POLL_S = 0.05


class DriverError(Exception):
    """No healthy invoker (the controller's 503), or no answer in time."""


@dataclass
class Invoker:
    instance: int
    status: str = "unhealthy"          # unhealthy | healthy | unresponsive | offline
    last_ping_s: float = 0.0
    memory_mb: int = 0
    test_sent_s: float = 0.0
    buffer: deque = field(default_factory=lambda: deque(maxlen=BUFFER_SIZE))
    """The last completions' results (``InvokerInfo.buffer``)."""


@dataclass
class AckLog:
    """Every ack seen for one activation."""

    completions: int = 0
    results: int = 0
    acks: list[dict[str, Any]] = field(default_factory=list)
    record: dict[str, Any] | None = None
    is_system_error: bool = False
    instance: int | None = None
    first_ack_s: float | None = None
    """``time.monotonic()`` of the first ack (for latency measurements)."""
    forced: bool = False
    """No completion came in time: the controller forced one (a Timeout in the invoker's buffer)."""
    done: threading.Event = field(default_factory=threading.Event)


@dataclass(frozen=True)
class Slot:
    """An activation in flight on an invoker, forced complete at ``deadline_s`` (monotonic)."""

    invoker: int
    deadline_s: float


def java_hash(s: str) -> int:
    """Java's ``String.hashCode`` (32-bit signed), which the controller's placement uses."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def transaction_id() -> list[Any]:
    alphabet = string.ascii_letters + string.digits
    return ["".join(random.choices(alphabet, k=32)), int(time.time() * 1000)]


class ControllerDriver:
    def __init__(self, kafka: str, prefix: str = "", controller_id: str = "0",
                 catalog: Callable[[str], dict[str, Any] | None] | None = None,
                 user: dict[str, Any] | None = None, retest_s: float = 60.0,
                 activation_store: str | None = None, timeout_factor: int = TIMEOUT_FACTOR,
                 timeout_addon_s: float = TIMEOUT_ADDON_S, std_time_limit_s: float = STD_TIME_LIMIT_S) -> None:
        self.prefix = prefix
        self.controller_id = controller_id
        self.catalog = catalog
        self.user = user or GUEST
        self.retest_s = retest_s
        self.activation_store = activation_store
        self.timeout_factor = timeout_factor
        self.timeout_addon_s = timeout_addon_s
        self.std_time_limit_s = std_time_limit_s
        self.slots: dict[str, Slot] = {}
        self.started_ms = int(time.time() * 1000)
        self.health_transid = [wire.HEALTH_TRANSID, self.started_ms]
        self.invokers: dict[int, Invoker] = {}
        self.acks: dict[str, AckLog] = defaultdict(AckLog)
        self.health_acks: list[dict[str, Any]] = []
        self.published: dict[str, dict[str, Any]] = {}
        self.published_s: dict[str, float] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self.producer = KafkaProducer(bootstrap_servers=kafka, acks=1, linger_ms=1,
                                      max_request_size=wire.MAX_MESSAGE_BYTES, max_block_ms=10000)
        self.consumer = KafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False,
                                      auto_offset_reset="earliest", fetch_max_wait_ms=20)
        self._health_tp = TopicPartition(wire.health_topic(prefix), 0)
        self._completed_tp = TopicPartition(wire.completed_topic(controller_id, prefix), 0)
        self._ensure_topics(kafka)
        self.consumer.assign([self._health_tp, self._completed_tp])
        self.consumer.seek_to_end(self._health_tp, self._completed_tp)
        for tp in (self._health_tp, self._completed_tp):
            self.consumer.position(tp)
        self._thread = threading.Thread(target=self._loop, name="controller-driver", daemon=True)
        self._thread.start()

    def _ensure_topics(self, kafka: str) -> None:
        """The controller creates ``completed{C}`` and ``health`` at start-up."""
        from kafka import KafkaAdminClient
        from kafka.admin import NewTopic
        from kafka.errors import TopicAlreadyExistsError

        admin = KafkaAdminClient(bootstrap_servers=kafka, request_timeout_ms=5000)
        try:
            have = set(admin.list_topics())
            new = [NewTopic(t, 1, 1, topic_configs=wire.topic_config(k))
                   for t, k in ((self._health_tp.topic, "health"), (self._completed_tp.topic, "completed"))
                   if t not in have]
            if new:
                try:
                    admin.create_topics(new)
                except TopicAlreadyExistsError:
                    pass
        finally:
            admin.close()

    # -- the consumer thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                batches = self.consumer.poll(timeout_ms=50)
            except Exception:  # the broker went away while stopping
                if self._stop.is_set():
                    return
                raise
            for tp, recs in batches.items():
                for rec in recs:
                    if tp == self._health_tp:
                        self._on_ping(rec.value)
                    else:
                        self._on_ack(rec.value)
            self._supervise()

    def _on_ping(self, raw: bytes) -> None:
        try:
            instance, enabled = wire.parse_ping(raw)
        except wire.WireError:
            return
        now = time.monotonic()
        with self._lock:
            for i in range(instance.instance + 1):  # lower unseen indices are padded as Offline
                self.invokers.setdefault(i, Invoker(i, status="offline"))
            inv = self.invokers[instance.instance]
            inv.last_ping_s = now
            inv.memory_mb = instance.user_memory_mb
            if not enabled:
                inv.status = "offline"
                return
            if inv.status == "offline":
                inv.status = "unhealthy"
                inv.test_sent_s = 0.0
        self._supervise()

    def _supervise(self) -> None:
        now = time.monotonic()
        with self._lock:
            for inv in self.invokers.values():
                if inv.status != "offline" and now - inv.last_ping_s > PING_TIMEOUT_S:
                    inv.status = "offline"
                if inv.status in ("unhealthy", "unresponsive") and (
                        inv.test_sent_s == 0.0 or now - inv.test_sent_s > self.retest_s):
                    self._test(inv, now)
            late = [(aid, slot) for aid, slot in self.slots.items() if now > slot.deadline_s]
            for aid, slot in late:
                del self.slots[aid]
                self.acks[aid].forced = True
                self.acks[aid].done.set()
                self._finished(slot.invoker, TIMEOUT, now)

    def _test(self, inv: Invoker, now: float) -> None:
        inv.test_sent_s = now
        self._send_health_test(inv.instance)

    def _finished(self, n: int, result: str, now: float) -> None:
        """``InvokerActor.handleCompletionMessage``: one completion's result into invoker ``n``'s buffer."""
        inv = self.invokers.get(n)
        if inv is None:
            return
        inv.buffer.append(result)
        if result == SUCCESS and inv.status == "unhealthy":
            self._test(inv, now)
        if (inv.status == "healthy" and result == SUCCESS) or inv.status == "offline":
            return
        entries = list(inv.buffer)
        if entries.count(SYSTEM_ERROR) > BUFFER_ERROR_TOLERANCE:
            new = "unhealthy"
        elif entries.count(TIMEOUT) > BUFFER_ERROR_TOLERANCE:
            new = "unresponsive"
        elif result == SUCCESS:
            new = "healthy"
        elif result == SYSTEM_ERROR and len(entries) <= BUFFER_ERROR_TOLERANCE:
            new = "unhealthy"
        elif result == TIMEOUT and len(entries) <= BUFFER_ERROR_TOLERANCE:
            new = "unresponsive"
        else:
            return
        if new != inv.status:
            inv.status = new
            if new in ("unhealthy", "unresponsive"):
                self._test(inv, now)  # entering the state sends the test action

    def _send_health_test(self, n: int) -> None:
        msg = {"transid": self.health_transid,
               "action": {"path": wire.HEALTH_TEST_NAMESPACE,
                          "name": f"{wire.HEALTH_TEST_ACTION_PREFIX}{self.controller_id}", "version": "0.0.1"},
               "revision": None,
               "user": {"subject": "whisk.system", "namespace": {"name": "whisk.system", "uuid": uuid.uuid4().hex},
                        "authkey": {"api_key": f"{uuid.uuid4()}:{uuid.uuid4().hex}"}, "rights": [], "limits": {}},
               "activationId": uuid.uuid4().hex,
               "rootControllerIndex": {"asString": self.controller_id, "instanceType": "controller"},
               "blocking": False, "initArgs": [], "lockedArgs": {}}
        self.producer.send(wire.invoker_topic(n, self.prefix), wire.encode(msg))
        self.producer.flush(timeout=5)

    def _on_ack(self, raw: bytes) -> None:
        try:
            ack = wire.parse_ack(raw)
        except wire.WireError:
            return
        obj = ack.to_json()
        now = time.monotonic()
        completes = isinstance(ack, wire.CompletionMessage | wire.CombinedCompletionAndResultMessage)
        result = SYSTEM_ERROR if completes and ack.is_system_error else SUCCESS
        if ack.transid == self.health_transid:  # recognised only by the transid, as the controller does
            with self._lock:
                self.health_acks.append(obj)
                if completes:
                    self._finished(ack.instance.instance, result, now)
            return
        if isinstance(ack, wire.CompletionMessage):
            aid = ack.activation_id
        else:
            aid = ack.response if isinstance(ack.response, str) else ack.response["activationId"]
        with self._lock:
            log = self.acks[aid]
            if log.first_ack_s is None:
                log.first_ack_s = now
            log.acks.append(obj)
            if completes:
                log.completions += 1
                log.is_system_error = ack.is_system_error
                log.instance = ack.instance.instance
                slot = self.slots.pop(aid, None)
                if slot is not None:  # after a forced completion the ack no longer counts
                    self._finished(slot.invoker, result, now)
            if isinstance(ack, wire.ResultMessage | wire.CombinedCompletionAndResultMessage):
                log.results += 1
                log.record = ack.response if isinstance(ack.response, dict) else None
            log.done.set()

    # -- the public side -------------------------------------------------------------------------------
    def healthy(self) -> list[int]:
        with self._lock:
            return sorted(i for i, inv in self.invokers.items() if inv.status == "healthy")

    def wait_healthy(self, count: int = 1, timeout: float = 15.0) -> list[int]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ids = self.healthy()
            if len(ids) >= count:
                return ids
            time.sleep(0.05)
        raise DriverError(f"{count} healthy invoker(s) expected within {timeout:.0f} s; "
                          f"states: {self.states()}")

    def states(self) -> dict[int, str]:
        with self._lock:
            return {i: inv.status for i, inv in self.invokers.items()}

    def buffers(self) -> dict[int, list[str]]:
        """Each invoker's ring buffer, oldest first."""
        with self._lock:
            return {i: list(inv.buffer) for i, inv in self.invokers.items()}

    def completion_timeout_s(self, timeout_ms: int) -> float:
        """When the controller forces a completion: max(timeout, std) x factor + addon."""
        return max(timeout_ms / 1000, self.std_time_limit_s) * self.timeout_factor + self.timeout_addon_s

    def _choose(self, fqn: str, ns: str) -> int:
        healthy = self.healthy()
        if not healthy:
            raise DriverError("no healthy invoker (the controller answers 503)")
        size = max(self.invokers) + 1
        home = abs(java_hash(ns) ^ java_hash(fqn)) % size
        for k in range(size):
            n = (home + k) % size
            if n in healthy:
                return n
        return healthy[0]

    def message(self, action: str, params: Any = None, *, blocking: bool = True, cause: str | None = None,
                activation_id: str | None = None, binding: str | None = None, user: dict[str, Any] | None = None,
                doc: dict[str, Any] | None = None) -> dict[str, Any]:
        """The ActivationMessage the controller would publish for a call of ``action`` (``ns/[pkg/]name``)
        by ``user`` (an Identity's JSON; default: the driver's); ``binding``: the package binding
        (``ns/name``) the call named, ``action`` being the bound action; ``doc``: the action's document
        with its parameters merged through package and binding (default: the catalog's)."""
        fqn = action.strip("/")
        path, _, name = fqn.rpartition("/")
        if doc is None:
            doc = self.catalog(fqn) if self.catalog is not None else None
        content: Any = params
        if doc is not None and (doc.get("parameters") or isinstance(params, dict | type(None))):
            content = {p["key"]: p["value"] for p in doc.get("parameters") or []}
            content.update(params or {})
        declared = [p for p in (doc or {}).get("parameters") or [] if isinstance(p, dict) and "key" in p]
        given = set(params) if isinstance(params, dict) else set()
        msg: dict[str, Any] = {
            "transid": transaction_id(),
            "action": {"path": path, "name": name, "version": (doc or {}).get("version", "0.0.1")},
            "revision": (doc or {}).get("_rev"), "user": user or self.user,
            "activationId": activation_id or uuid.uuid4().hex,
            "rootControllerIndex": {"asString": self.controller_id, "instanceType": "controller"},
            "blocking": blocking,
            # Parameters.initParameters and lockedParameters(the call's keys), as PrimitiveActions sends them
            "initArgs": [p["key"] for p in declared if p.get("init")],
            "lockedArgs": {p["key"]: p["encryption"] for p in declared
                           if p.get("encryption") and p["key"] not in given}}
        if content is not None:
            msg["content"] = content
        if binding is not None:
            msg["action"]["binding"] = binding
        if cause is not None:
            msg["cause"] = cause
        return msg

    def publish(self, action: str, params: Any = None, *, blocking: bool = True, cause: str | None = None,
                activation_id: str | None = None, invoker: int | None = None, binding: str | None = None,
                user: dict[str, Any] | None = None, doc: dict[str, Any] | None = None) -> str:
        """Publish one ActivationMessage of ``action`` to a healthy invoker; return its activation id."""
        msg = self.message(action, params, blocking=blocking, cause=cause, activation_id=activation_id,
                           binding=binding, user=user, doc=doc)
        n = invoker if invoker is not None else self._choose(action.strip("/"), msg["user"]["namespace"]["name"])
        aid = msg["activationId"]
        if doc is None:
            doc = self.catalog(action.strip("/")) if self.catalog is not None else None
        timeout_ms = int(((doc or {}).get("limits") or {}).get("timeout", 60_000))
        with self._lock:
            self.published[aid] = msg
            self.published_s[aid] = time.monotonic()
            self.slots[aid] = Slot(n, time.monotonic() + self.completion_timeout_s(timeout_ms))
        self.producer.send(wire.invoker_topic(n, self.prefix), wire.encode(msg))
        return aid

    def flush(self) -> None:
        self.producer.flush(timeout=10)

    def invoke(self, action: str, params: Any = None, *, blocking: bool = True, timeout: float = 30.0,
               cause: str | None = None, binding: str | None = None, user: dict[str, Any] | None = None,
               doc: dict[str, Any] | None = None) -> dict[str, Any] | str:
        """Like ``POST .../actions/{name}?blocking=...``: the WhiskActivation, or the id if not blocking."""
        aid = self.publish(action, params, blocking=blocking, cause=cause, binding=binding, user=user, doc=doc)
        self.flush()
        if not blocking:
            return aid
        return self.wait(aid, timeout)

    def invocation(self, inv: Invocation) -> dict[str, Any] | str:
        """The REST stand-in's :data:`~esg_cli.openwhisk_controller.Invoker`: publish ``inv`` as its
        caller; a blocking call not answered within its wait is answered with its id, as the controller
        answers it (202); no healthy invoker is :class:`NoInvoker` (503)."""
        try:
            aid = self.publish(inv.fqn, inv.params, blocking=inv.blocking, cause=inv.cause, binding=inv.binding,
                               user=inv.user.to_json(), doc=inv.doc)
        except DriverError as exc:
            raise NoInvoker(str(exc)) from None
        self.flush()
        if not inv.blocking:
            return aid
        try:
            return self.wait(aid, inv.timeout_s)
        except DriverError:
            return aid

    def wait(self, aid: str, timeout: float = 30.0) -> dict[str, Any]:
        """The record of ``aid`` once answered: from the ack, else (shrunk, or a completion alone) polled
        from the activation store."""
        log = self._ack_log(aid)
        if not log.done.wait(timeout):
            raise DriverError(f"activation {aid}: no answer within {timeout:.0f} s")
        if log.forced and not log.completions:
            raise DriverError(f"activation {aid}: no completion in time (the controller forced one)")
        if log.record is not None:
            return log.record
        if self.activation_store is None:
            raise DriverError(f"activation {aid}: acked without a result, and no activation store to read")
        rec = self.poll_record(aid, timeout)
        if rec is None:
            raise DriverError(f"activation {aid}: acked, and its record is not in the activation store "
                              f"within {timeout:.0f} s")
        return rec

    def poll_record(self, aid: str, timeout: float, namespace: str | None = None) -> dict[str, Any] | None:
        """The activation's record from the store (the stored document without CouchDB's fields); it is
        stored under the invoking user's ``namespace`` (default: the one it was published with)."""
        if namespace is None:
            msg = self.published.get(aid)
            namespace = (msg or {"user": self.user})["user"]["namespace"]["name"]
        store = ActivationStore(self.activation_store or "")
        deadline = time.monotonic() + timeout
        try:
            while True:
                try:
                    doc = store.get(namespace, aid)
                except StoreError:
                    doc = None
                if doc is not None:
                    return record_of(doc)
                if time.monotonic() > deadline:
                    return None
                time.sleep(POLL_S)
        finally:
            store.close()

    def wait_acked(self, ids: list[str], timeout: float = 30.0) -> list[str]:
        """Wait until every id has a completion; return those still missing."""
        deadline = time.monotonic() + timeout
        missing = list(ids)
        while missing and time.monotonic() < deadline:
            missing = [a for a in missing if not self._ack_log(a).completions]
            if missing:
                time.sleep(0.05)
        return missing

    def _ack_log(self, aid: str) -> AckLog:
        """``aid``'s log, made under the lock: the consumer thread may be making it for its first ack at
        the same moment, and two logs would leave the waiter on the one whose ``done`` is never set."""
        with self._lock:
            return self.acks[aid]

    def duplicates(self) -> dict[str, int]:
        """Activation ids answered more than once (completion count > 1)."""
        with self._lock:
            return {a: log.completions for a, log in self.acks.items() if log.completions > 1}

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
        self.consumer.close(autocommit=False)
        self.producer.close(timeout=2)

    def __enter__(self) -> ControllerDriver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
