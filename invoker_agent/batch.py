"""One dispatched batch, start to answer: inputs, action code, MIG slice, vCPUs, run, result message.

:meth:`BatchHandler.run` never raises: every failure becomes per-activation results with OpenWhisk's
codes, so the scheduler can answer each activation. An action that cannot be found is a developer
error (2); a slice that cannot exist, too many vCPUs, an unreachable OpenWhisk, an input no longer in
the data store or an agent fault is a whisk error (3). Each result carries its start and end (epoch
ms), the cold start it paid (``init_ms``) and the lines the action printed; the message carries the
batch's function, configuration and measured run time, whether another worker's start loaded the
host while it ran (such a run time is not learned from), and the MIG instances changed for it with the
wall time that took (``reconfigured``, ``reconfig_ms``: the scheduler learns its MIG change time from
them). Outputs go through :class:`~invoker_agent.data.DataPlane`: inline for an app's sink, otherwise
stored and referenced.

**GPU memory.** A dispatch whose batch needs a new worker on its MIG slice may name idle workers to stop
there first (``evict``: function, how many): just before that worker starts, the agent stops up to that
many idle workers of each function on that same slice -- never a busy one, never one on another slice,
those whose keep-alive runs out first first, as keep-alive expiry would -- so their GPU memory is free
when it starts (:meth:`BatchHandler.evict`). Fewer there than named (the scheduler's view lagged): those
there are go, and the batch runs. A batch that finds a warm worker of its own stops nothing.

:meth:`BatchHandler.prewarm` does a batch's first half for a :class:`~agent_channel.protocol.PrewarmMessage`
-- the action's code, the slice, vCPUs for the start, a worker started and ``/init``-ed -- and stops
there: the worker waits idle under the pre-warm's keep-alive, and the outcome is only logged and
counted (a pre-warm that fails costs the next batch a cold start, nothing else).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import replace

from agent_channel.protocol import BatchResult, DispatchMessage, PrewarmMessage, RunResult
from esg.cluster import SliceRef
from esg.nesting import MAX_NESTING, deeper_than
from invoker_agent import runtime_client as rt
from invoker_agent.actions import ActionCode, ActionFetcher, ActionFetchError, ActionForbidden, ActionNotFound
from invoker_agent.data import DataPlane, MissingInput, Write
from invoker_agent.heartbeat import WarmRegistry
from invoker_agent.node import NodeAgent
from invoker_agent.slices import SliceError, SliceManager
from invoker_agent.vcpus import VcpuAllocator, VcpuError
from invoker_agent.workers import PrewarmOutcome, WorkerKey, WorkerSpec
from openwhisk_status import STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR

log = logging.getLogger("esg.agent")

#: How long a pre-warm waits for its vCPUs while batches hold them (a batch waits as long as it takes).
PREWARM_VCPU_WAIT_S = 5.0


class BatchHandler:
    def __init__(self, node: NodeAgent, fetcher: ActionFetcher, slices: SliceManager, vcpus: VcpuAllocator,
                 warm: WarmRegistry, data: DataPlane) -> None:
        self.node = node
        self.fetcher = fetcher
        self.slices = slices
        self.vcpus = vcpus
        self.warm = warm
        self.data = data

    def run(self, msg: DispatchMessage) -> tuple[BatchResult, list[Write]]:
        """The batch's result message and the outputs to store with it."""
        try:
            result, raws = self._run(msg)
            results, writes = self.data.outputs(msg, result.results, raws)
            return replace(result, results=tuple(results), function=msg.function, config=msg.config), writes
        except Exception as e:  # noqa: BLE001 - an agent bug answers the batch, never kills the agent
            log.exception("batch %s failed inside the agent", msg.batch_id)
            return failed(msg, self.node.name, STATUS_WHISK_ERROR, f"agent error: {type(e).__name__}: {e}"), []

    def _run(self, msg: DispatchMessage) -> tuple[BatchResult, dict[str, bytes]]:
        """The batch's results, and the outputs' bytes as the action's runtime wrote them (when it did)."""
        name = self.node.name
        values = self.data.inputs(msg)
        missing = {r.activation_id: v.error for r, v in zip(msg.requests, values) if isinstance(v, MissingInput)}
        if missing:
            runnable = [(r, v) for r, v in zip(msg.requests, values) if r.activation_id not in missing]
            ran, raws = self._run_values(msg, runnable) if runnable else (BatchResult(msg.batch_id, name, ()), {})
            now = int(time.time() * 1000)
            lost = tuple(RunResult(a, STATUS_WHISK_ERROR, {"error": why}, now, now) for a, why in missing.items())
            return replace(ran, results=ran.results + lost), raws
        return self._run_values(msg, list(zip(msg.requests, values)))

    def _run_values(self, msg: DispatchMessage, runnable: list) -> tuple[BatchResult, dict[str, bytes]]:
        """Run the requests of ``runnable`` (``(request, input)`` pairs) as one batch."""
        name = self.node.name

        def fail(code: int, error: str) -> tuple[BatchResult, dict[str, bytes]]:
            return failed_ids(msg.batch_id, name, [r.activation_id for r, _ in runnable], code, error,
                              msg.function), {}

        fqn = f"/{msg.action.namespace}/{msg.action.name}"
        try:
            # read as the caller (the first request's key; the agent's own key for another kind of key)
            action = self.fetcher.get(fqn, msg.action.revision,
                                      auth=next((r.api_key for r, _ in runnable if r.api_key), None))
        except (ActionNotFound, ActionForbidden) as e:
            return fail(STATUS_DEVELOPER_ERROR, str(e))
        except ActionFetchError as e:
            return fail(STATUS_WHISK_ERROR, str(e))
        uuid, changes, reconfig_ms = None, 0, None
        if msg.slice is not None:
            try:
                uuid, changes, reconfig_ms = self.carve(msg.slice, msg.destroy)
            except SliceError as e:
                return fail(STATUS_WHISK_ERROR, str(e))
        try:
            try:
                ids = self.vcpus.acquire(msg.config.vcpus)
            except VcpuError as e:
                return fail(STATUS_WHISK_ERROR, str(e))
            assert ids is not None
            try:
                # a warm worker serves any batch size on any vCPU count (it is re-pinned in place): only
                # its slice defines it, as in the emulator's node model -- and, as OpenWhisk keys its
                # containers, the namespace that calls it: a batch whose requests come from several
                # namespaces runs as one batch per namespace, one after the other, each on its own workers
                spec = WorkerSpec(self.vcpus.host_ids(ids), uuid, msg.action.memory_mb, msg.config)
                groups = by_caller(runnable, msg.action.namespace)
                log.info("batch %s: %s x%d on vCPUs %s%s", msg.batch_id, action.fqn, len(runnable), list(ids),
                         f", MIG {uuid}" if uuid else "")
                t0, starts = time.perf_counter(), self.node.pool.mark()
                keep_alive = None if msg.keep_alive_ms is None else msg.keep_alive_ms / 1000
                before_start = self._evicting(msg, uuid)
                out = []
                for caller, group in groups.items():
                    key = WorkerKey(action.fqn, action.revision, msg.config.gpu or "cpu", uuid, caller)
                    self.warm.note(key, msg.function, msg.config)
                    reqs = [replace(r, value=v if isinstance(v, dict) else {"value": v}, inputs=(),
                                    init_env=dict(r.init_env) if r.init_env else None) for r, v in group]
                    out += self.node.run_batch(key, spec, action, reqs, msg.action.timeout_ms, keep_alive,
                                               before_start)
                elapsed_ms = (time.perf_counter() - t0) * 1000
                # a batch split by namespace is not one run of its configuration: nothing learns from it
                overlapped = self.node.pool.starts_since(starts) > 0 or len(groups) > 1
            finally:
                self.vcpus.release(ids)
        finally:
            self.slices.release(uuid)
        init_ms = max((r.init_ms or 0.0 for r in out), default=0.0)
        cold = any(r.init_ms is not None for r in out)
        return (BatchResult(msg.batch_id, name, tuple(_result(r) for r in out),
                              run_ms=round(max(0.0, elapsed_ms - init_ms), 3), cold=cold, reconfigured=changes,
                              overlapped_start=overlapped and not cold, reconfig_ms=reconfig_ms),
                {r.activation_id: r.raw for r in out if r.raw is not None})

    def carve(self, target: SliceRef, destroy: tuple[SliceRef, ...]) -> tuple[str, int, float | None]:
        """:meth:`SliceManager.carve <invoker_agent.slices.SliceManager.carve>`, timed: the slice's MIG
        UUID, the instances created or destroyed for it, and the wall time that took (ms, on the monotonic
        clock, waiting for another batch's MIG change included; None when nothing changed)."""
        began = time.monotonic()
        uuid, changes = self.slices.carve(target, destroy)
        return uuid, changes, round((time.monotonic() - began) * 1000, 3) if changes else None

    def _evicting(self, msg: DispatchMessage, uuid: str | None) -> Callable[[], None] | None:
        """What runs before the batch's first new worker starts on MIG slice ``uuid``: the dispatch's
        evictions there, once (None: it names none, or the batch runs on CPU only)."""
        if not msg.evict or uuid is None:
            return None
        pending = [True]

        def before_start() -> None:
            if pending:
                pending.clear()
                try:
                    self.evict(msg, uuid)
                except Exception:  # noqa: BLE001 - a worker that would not stop fails no batch
                    log.exception("batch %s: stopping idle workers on MIG %s failed", msg.batch_id, uuid)
        return before_start

    def evict(self, msg: DispatchMessage, uuid: str) -> int:
        """Stop, for each (function, count) of ``msg.evict``, up to ``count`` idle workers of that function
        on MIG slice ``uuid`` (the function as the heartbeats name the workers'); how many went in all."""
        pool, total = self.node.pool, 0
        for function, count in msg.evict:
            keys = [k for k in pool.idle_counts() if k.slice_uuid == uuid and (self.warm.of(k) or ("",))[0] == function]
            gone = pool.stop_idle(keys, count)
            total += gone
            log.debug("batch %s: stopped %d of %d idle worker(s) of %s asked on MIG %s, freeing GPU memory for "
                      "a worker of %s", msg.batch_id, gone, count, function, uuid, msg.function)
        return total

    def prewarm(self, msg: PrewarmMessage) -> PrewarmOutcome:
        """Start a worker for ``msg`` and leave it idle; never raises."""
        try:
            return self._prewarm(msg)
        except Exception as e:  # noqa: BLE001 - an agent bug fails the pre-warm, never the agent
            log.exception("pre-warm %s failed inside the agent", msg.prewarm_id)
            return PrewarmOutcome(error=f"agent error: {type(e).__name__}: {e}")

    def _prewarm(self, msg: PrewarmMessage) -> PrewarmOutcome:
        fqn = f"/{msg.action.namespace}/{msg.action.name}"
        try:
            action = self.fetcher.get(fqn, msg.action.revision, auth=msg.api_key)
        except ActionFetchError as e:
            return PrewarmOutcome(error=str(e))
        uuid, changes, reconfig_ms = None, 0, None
        if msg.slice is not None:
            try:
                uuid, changes, reconfig_ms = self.carve(msg.slice, msg.destroy)
            except SliceError as e:
                return PrewarmOutcome(error=str(e))
        out = self._prewarm_on(msg, action, uuid)
        return replace(out, reconfigured=changes, reconfig_ms=reconfig_ms) if changes else out

    def _prewarm_on(self, msg: PrewarmMessage, action: ActionCode, uuid: str | None) -> PrewarmOutcome:
        """The pre-warm's worker started on its carved slice (``uuid``; None: CPU only), which it releases."""
        try:
            try:
                ids = self.vcpus.acquire(msg.config.vcpus, PREWARM_VCPU_WAIT_S)
            except VcpuError as e:
                return PrewarmOutcome(error=str(e))
            if ids is None:
                return PrewarmOutcome(error=f"{msg.config.vcpus} vCPUs not free within {PREWARM_VCPU_WAIT_S:.0f} s")
            try:
                key = WorkerKey(action.fqn, action.revision, msg.config.gpu or "cpu", uuid,
                                msg.namespace or msg.action.namespace)
                spec = WorkerSpec(self.vcpus.host_ids(ids), uuid, msg.action.memory_mb, msg.config)
                self.warm.note(key, msg.function, msg.config)
                return self.node.pool.prewarm(key, spec, action,
                                              None if msg.keep_alive_ms is None else msg.keep_alive_ms / 1000,
                                              dict(msg.init_env) if msg.init_env else None, msg.action.timeout_ms,
                                              msg.api_key)
            finally:
                self.vcpus.release(ids)
        finally:
            self.slices.release(uuid)


def by_caller(runnable: list, action_namespace: str) -> dict[str, list]:
    """``(request, input)`` pairs grouped by the namespace that called them (a request that does not say:
    the action's own), in the order the namespaces first appear."""
    groups: dict[str, list] = {}
    for pair in runnable:
        groups.setdefault(pair[0].namespace or action_namespace, []).append(pair)
    return groups


def _result(r: rt.RuntimeResult) -> RunResult:
    start = r.started_ms if r.started_ms is not None else time.time() * 1000 - r.duration_ms
    code, result = r.status_code, r.result
    if deeper_than(result):    # it could not be written into the result message: the action's error
        code, result = STATUS_DEVELOPER_ERROR, {"error": f"The action's result nests deeper than {MAX_NESTING} levels."}
    return RunResult(r.activation_id, code, result, int(start), int(start + r.duration_ms),
                     None if r.init_ms is None else int(round(r.init_ms)), tuple(r.logs), r.timeout)


def failed(msg: DispatchMessage, node: str, code: int, error: str) -> BatchResult:
    return failed_ids(msg.batch_id, node, [r.activation_id for r in msg.requests], code, error, msg.function)


def failed_ids(batch_id: str, node: str, activation_ids: Sequence[str], code: int, error: str,
               function: str = "") -> BatchResult:
    now = int(time.time() * 1000)
    return BatchResult(batch_id, node, tuple(RunResult(a, code, {"error": error}, now, now)
                                               for a in activation_ids), error, function)
