"""Function outputs passed from agent to agent: intermediate data never goes through the scheduler.

**Producing.** When a batch's function is not its app's sink, each successful output's JSON (the bytes
the action's runtime replied with, or encoded here for a batch entry point's items) is kept in this
node's memory (:class:`LocalOutputs`) for a successor placed here, and written to
the store under ``esg:{prefix}:node:{node}:data:{activationId}:{function}`` (the node's own key space: no
other agent can write it) with the dispatch's TTL -- in the same
``MULTI`` as the result message (:meth:`invoker_agent.channel.AgentChannel.answer`), so by the time the
scheduler learns of the result a successor on any node can read it. The result then carries only the
key and the size. A sink's output (and a plain action's) comes back inline: the scheduler needs it for
the ack.

**Consuming.** A request's inputs are references (:class:`agent_channel.protocol.InputRef`). Each is read from this
node's copy when there is one (its producer ran here and the copy was not evicted), else from the store,
with one ``MGET`` for the whole batch. A reference that is nowhere (expired, or the request already
ended) answers that activation with a whisk error naming the input.

**Limits.** An inline result above OpenWhisk's 1 MiB (:data:`openwhisk_status.MAX_RESULT_BYTES`) is a
developer error worded as OpenWhisk's invoker words it; a stored output above
:data:`agent_channel.protocol.MAX_DATA_BYTES` is a developer error naming that limit.

**Local copies** are bounded by bytes (least recently used go first) and expire with their TTL; the
store's key is the fallback, so evicting one only costs a read.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import redis

from agent_channel.keys import Keys
from agent_channel.protocol import MAX_DATA_BYTES, DispatchMessage, RunResult, compose_input
from openwhisk_status import MAX_RESULT_BYTES, STATUS_DEVELOPER_ERROR

log = logging.getLogger("esg.agent")


@dataclass(frozen=True)
class Write:
    """An output to store with the result: ``blob`` under ``key`` for ``ttl_s`` seconds."""

    key: str
    blob: bytes
    ttl_s: int


@dataclass(frozen=True)
class MissingInput:
    """A request whose inputs could not all be read: answered with a whisk error."""

    error: str


class LocalOutputs:
    """Outputs kept on this node, by store key: at most ``limit_bytes``, each until its TTL."""

    def __init__(self, limit_bytes: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.limit_bytes = limit_bytes
        self.clock = clock
        self.bytes = 0
        self._items: OrderedDict[str, tuple[Any, int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def put(self, key: str, value: Any, size: int, ttl_s: float) -> None:
        if size > self.limit_bytes:
            return
        with self._lock:
            old = self._items.pop(key, None)
            if old is not None:
                self.bytes -= old[1]
            self._items[key] = (value, size, self.clock() + ttl_s)
            self.bytes += size
            while self.bytes > self.limit_bytes:
                _, (_, gone, _) = self._items.popitem(last=False)
                self.bytes -= gone

    def get(self, key: str) -> tuple[bool, Any]:
        """``(True, value)`` for a live copy, else ``(False, None)``."""
        with self._lock:
            item = self._items.get(key)
            if item is None:
                return False, None
            value, size, expires = item
            if self.clock() > expires:
                del self._items[key]
                self.bytes -= size
                return False, None
            self._items.move_to_end(key)
            return True, value

    def __len__(self) -> int:
        return len(self._items)


class DataPlane:
    def __init__(self, client: redis.Redis, keys: Keys, local: LocalOutputs, node: str = "") -> None:
        self.r = client
        self.keys = keys
        self.local = local
        self.node = node
        self.local_reads = 0
        self.store_reads = 0

    # -- inputs -------------------------------------------------------------------------------------
    def inputs(self, msg: DispatchMessage) -> list[Any]:
        """Each request's input: the call's parameters, its predecessors' outputs composed, or a
        :class:`MissingInput`."""
        found: dict[str, Any] = {}
        remote: list[str] = []
        local = 0
        for req in msg.requests:
            for ref in req.inputs:
                if not self.keys.is_data_of(ref.node, ref.key):
                    continue    # not an output its producer stored: never read (answered as missing below)
                hit, value = self.local.get(ref.key)
                if hit:
                    found[ref.key] = value
                    local += 1
                elif ref.key not in remote:
                    remote.append(ref.key)
        if remote:
            for key, blob in zip(remote, self.r.mget(remote)):
                if blob is not None:
                    found[key] = json.loads(blob)
        if local or remote:
            log.debug("batch %s: %d input(s) from this node, %d from the store", msg.batch_id, local, len(remote))
        self.local_reads += local
        self.store_reads += len(remote)
        out: list[Any] = []
        for req in msg.requests:
            if not req.inputs:
                out.append(req.value)
                continue
            missing = [ref.name for ref in req.inputs if ref.key not in found]
            if missing:
                out.append(MissingInput(f"the output of {', '.join(missing)} (input of {msg.function}) is no "
                                        "longer in the data store (expired, or the request already ended)"))
            else:
                out.append(compose_input([(ref.name, found[ref.key]) for ref in req.inputs]))
        return out

    # -- outputs ------------------------------------------------------------------------------------
    def outputs(self, msg: DispatchMessage, results: Sequence[RunResult],
                raws: Mapping[str, bytes] | None = None) -> tuple[list[RunResult], list[Write]]:
        """Results as the scheduler gets them, and the outputs to store with them (see the module doc).
        ``raws``: outputs' JSON by activation id, where the runtime's reply already is it."""
        raws = raws or {}
        out: list[RunResult] = []
        writes: list[Write] = []
        for r in results:
            if r.status_code != 0:
                out.append(r)
            elif msg.return_output:
                out.append(_inline(r, raws.get(r.activation_id)))
            else:
                blob = raws.get(r.activation_id) or json.dumps(r.result, separators=(",", ":")).encode()
                if len(blob) > MAX_DATA_BYTES:
                    out.append(replace(r, status_code=STATUS_DEVELOPER_ERROR, result={
                        "error": f"The output of {msg.function} is {len(blob)} bytes, above the limit of "
                                 f"{MAX_DATA_BYTES} bytes for data passed to its successors."}))
                    continue
                key = self.keys.data(self.node or msg.node, r.activation_id, msg.function)
                self.local.put(key, r.result, len(blob), msg.data_ttl_s)
                writes.append(Write(key, blob, msg.data_ttl_s))
                out.append(replace(r, result=None, output_key=key, output_bytes=len(blob)))
        return out, writes


def _inline(r: RunResult, raw: bytes | None) -> RunResult:
    size = len(raw) if raw is not None else len(json.dumps(r.result, separators=(",", ":")).encode())
    if size <= MAX_RESULT_BYTES:
        return r
    return replace(r, status_code=STATUS_DEVELOPER_ERROR, result={
        "error": f"The action produced a response that exceeded the allowed length: {size} > "
                 f"{MAX_RESULT_BYTES} bytes."})
