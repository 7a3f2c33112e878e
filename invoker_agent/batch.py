"""One dispatched batch, start to answer: action code, MIG slice, vCPUs, run, result message.

:meth:`BatchRunner.run` never raises: every failure becomes per-activation results with OpenWhisk's
codes, so the scheduler can answer each activation. An action that cannot be found is a developer
error (2); a slice that cannot exist, too many vCPUs, an unreachable OpenWhisk or an agent fault is a
whisk error (3). Each result carries its start and end (epoch ms), the cold start it paid (``init_ms``)
and the lines the action printed.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence

from esg.protocol import MAX_NESTING, DispatchMessage, ResultMessage, RunResult, deeper_than
from invoker_agent import runtime_client as rt
from invoker_agent.actions import ActionFetcher, ActionFetchError, ActionNotFound
from invoker_agent.heartbeat import WarmRegistry
from invoker_agent.node import NodeAgent
from invoker_agent.runner import WorkerKey, WorkerSpec
from invoker_agent.slices import SliceError, SliceManager
from invoker_agent.vcpus import VcpuAllocator, VcpuError

log = logging.getLogger("esg.agent")


class BatchRunner:
    def __init__(self, node: NodeAgent, fetcher: ActionFetcher, slices: SliceManager, vcpus: VcpuAllocator,
                 warm: WarmRegistry) -> None:
        self.node = node
        self.fetcher = fetcher
        self.slices = slices
        self.vcpus = vcpus
        self.warm = warm

    def run(self, msg: DispatchMessage) -> ResultMessage:
        try:
            return self._run(msg)
        except Exception as e:  # noqa: BLE001 - an agent bug answers the batch, never kills the agent
            log.exception("batch %s failed inside the agent", msg.batch_id)
            return failed(msg, self.node.name, rt.WHISK_ERROR, f"agent error: {type(e).__name__}: {e}")

    def _run(self, msg: DispatchMessage) -> ResultMessage:
        name = self.node.name
        fqn = f"/{msg.action.namespace}/{msg.action.name}"
        try:
            action = self.fetcher.get(fqn, msg.action.revision)
        except ActionNotFound as e:
            return failed(msg, name, rt.DEVELOPER_ERROR, str(e))
        except ActionFetchError as e:
            return failed(msg, name, rt.WHISK_ERROR, str(e))
        uuid = None
        if msg.slice is not None:
            try:
                uuid = self.slices.ensure(msg.slice, msg.destroy)
            except SliceError as e:
                return failed(msg, name, rt.WHISK_ERROR, str(e))
        try:
            try:
                ids = self.vcpus.acquire(msg.config.vcpus)
            except VcpuError as e:
                return failed(msg, name, rt.WHISK_ERROR, str(e))
            assert ids is not None
            try:
                # a warm worker serves any batch size: only its vCPUs and slice define it
                key = WorkerKey(action.fqn, action.revision, f"{msg.config.vcpus}c/{msg.config.gpu or 'cpu'}", uuid)
                spec = WorkerSpec(self.vcpus.host_ids(ids), uuid, msg.action.memory_mb)
                self.warm.note(key, msg.function, msg.config)
                reqs = [rt.RunRequest(r.value if isinstance(r.value, dict) else {"value": r.value},
                                      r.activation_id, r.transaction_id, r.deadline_ms) for r in msg.requests]
                log.info("batch %s: %s x%d on vCPUs %s%s", msg.batch_id, action.fqn, len(reqs), list(ids),
                         f", MIG {uuid}" if uuid else "")
                out = self.node.run_batch(key, spec, action, reqs, msg.action.timeout_ms)
            finally:
                self.vcpus.release(ids)
        finally:
            self.slices.release(uuid)
        return ResultMessage(msg.batch_id, name, tuple(_result(r) for r in out))


def _result(r: rt.RunResult) -> RunResult:
    start = r.started_ms if r.started_ms is not None else time.time() * 1000 - r.duration_ms
    code, result = r.status_code, r.result
    if deeper_than(result):    # it could not be written into the result message: the action's error
        code, result = rt.DEVELOPER_ERROR, {"error": f"The action's result nests deeper than {MAX_NESTING} levels."}
    return RunResult(r.activation_id, code, result, int(start), int(start + r.duration_ms),
                     None if r.init_ms is None else int(round(r.init_ms)), tuple(r.logs), r.timeout)


def failed(msg: DispatchMessage, node: str, code: int, error: str) -> ResultMessage:
    return failed_ids(msg.batch_id, node, [r.activation_id for r in msg.requests], code, error)


def failed_ids(batch_id: str, node: str, activation_ids: Sequence[str], code: int, error: str) -> ResultMessage:
    now = int(time.time() * 1000)
    return ResultMessage(batch_id, node, tuple(RunResult(a, code, {"error": error}, now, now)
                                               for a in activation_ids), error)
