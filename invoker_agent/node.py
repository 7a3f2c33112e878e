"""The node agent without its transport: what a Kafka (or any) main loop calls.

``NodeAgent.create(name=..., vcpus=..., fake_gpu="A100-40GB", runner="process", journal=...)`` builds the
MIG backend (fake or real NVML), the reconciler (recovering its journal first) and the worker pool. The
main loop then calls :meth:`NodeAgent.apply_layout` for MIG plans, :meth:`NodeAgent.run_batch` for
dispatched batches and :meth:`NodeAgent.heartbeat` for the periodic node report, and
:meth:`NodeAgent.close` on shutdown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict
from functools import partial
from typing import Any

from agent_channel.protocol import RunRequest
from esg import mig
from esg.defaults import KEEP_ALIVE_MS
from invoker_agent.actions import ActionCode
from invoker_agent.mig_backend import GpuInfo, MigBackend, MigOperationError
from invoker_agent.nvml_backend import open_backend
from invoker_agent.reconcile import DesiredLayout, GpuReport, Reconciler
from invoker_agent.runtime_client import RuntimeResult
from invoker_agent.sandbox import Mount, gpu_devices, sandbox
from invoker_agent.whole_gpu import WholeGpuBackend, cuda_device
from invoker_agent.workers import (
    DeviceLookup,
    ProcessWorker,
    WorkerFactory,
    WorkerKey,
    WorkerPool,
    WorkerSpec,
)


class NodeAgent:
    def __init__(self, name: str, vcpus: int, backend: MigBackend, pool: WorkerPool, reconciler: Reconciler,
                 recovered: list[str] | None = None) -> None:
        self.name = name
        self.vcpus = vcpus
        self.backend = backend
        self.pool = pool
        self.reconciler = reconciler
        self.recovered = recovered or []
        self.started_at = time.time()

    @classmethod
    def create(cls, name: str, vcpus: int | None = None, fake_gpu: str | None = None, fake_gpu_count: int = 1,
               runner: str = "process", journal: str | None = None, idle_ttl_s: float = KEEP_ALIVE_MS / 1000,
               worker_factory: WorkerFactory | None = None, fake_mig: bool = True, gpu_share: int = 1) -> NodeAgent:
        """Build a node agent; raises :class:`MigOperationError` / ``ValueError`` with a clear message.
        ``runner="twin"`` takes its ``worker_factory`` (:class:`invoker_agent.twin.TwinFactory`). A GPU
        without MIG mode is offered whole, to ``gpu_share`` batches at once (:mod:`invoker_agent.whole_gpu`);
        ``fake_mig=False`` turns the fake GPU's MIG mode off."""
        backend = WholeGpuBackend(open_backend(fake_gpu, fake_gpu_count, fake_mig=fake_mig), gpu_share)
        if runner == "twin":
            if worker_factory is None:
                raise ValueError("--runner twin needs its profiles (--profiles DIR)")
            factory = worker_factory
        elif runner == "process":
            sandbox()                             # fail at start-up, by name, where no sandbox can be made
            factory = partial(ProcessWorker, devices=_device_lookup(backend))
        elif runner == "docker":
            from invoker_agent.docker_workers import DockerWorkerFactory
            factory = DockerWorkerFactory(name)   # fails at start-up, by name, if no engine answers
        else:
            raise ValueError(f"unknown runner {runner!r} (process, docker or twin)")
        slice_exists = _slice_checker(backend)
        pool = WorkerPool(factory=factory, idle_ttl_s=idle_ttl_s, slice_exists=slice_exists)
        reconciler = Reconciler(backend, journal=journal, busy_slices=pool.busy_slices)
        recovered = reconciler.recover()
        return cls(name, vcpus or len(os.sched_getaffinity(0)), backend, pool, reconciler, recovered)

    def apply_layout(self, desired: Mapping[int, DesiredLayout | Iterable]) -> dict[int, GpuReport]:
        """Reconcile each listed GPU to its desired layout (idle workers on doomed slices are evicted)."""
        for gpu, spec in desired.items():
            try:
                state = self.reconciler.read_state(gpu)
                layout = DesiredLayout.of(spec)
                model = next(g.model for g in self.backend.gpus() if g.index == gpu)
                target, _ = self.reconciler.plan(model, layout, state) if model else ([], "")
            except (MigOperationError, StopIteration, ValueError):
                continue
            keep = set(target)
            for s in state:
                if (s.profile, s.start) not in keep and s.mig_uuid and not s.busy:
                    self.pool.evict_slice(s.mig_uuid)
        return self.reconciler.reconcile(desired)

    def run_batch(self, key: WorkerKey, spec: WorkerSpec, action: ActionCode, requests: Sequence[RunRequest],
                  time_limit_ms: int | None = None, keep_alive_s: float | None = None,
                  before_start: Callable[[], None] | None = None) -> list[RuntimeResult]:
        return self.pool.run(key, spec, action, requests, time_limit_ms, keep_alive_s, before_start)

    def heartbeat(self) -> dict[str, Any]:
        """A JSON-ready report of this node: GPUs, MIG slices (busy or not), warm workers."""
        gpus = []
        try:
            infos = self.backend.gpus()
        except MigOperationError as e:
            return {"node": self.name, "vcpus": self.vcpus, "error": str(e), "ts": time.time()}
        for g in infos:
            entry: dict[str, Any] = {"index": g.index, "uuid": g.uuid, "model": g.model,
                                     "mig_enabled": g.mig_enabled, "slices": []}
            if _has_slices(g):
                try:
                    entry["slices"] = [asdict(s) for s in self.reconciler.read_state(g.index)]
                except MigOperationError as e:
                    entry["error"] = str(e)
            gpus.append(entry)
        return {"node": self.name, "vcpus": self.vcpus, "gpus": gpus, "warm_workers": self.pool.warm_count(),
                "busy_slices": sorted(self.pool.busy_slices()), "ts": time.time()}

    def slice_profile(self, mig_uuid: str) -> str | None:
        """The MIG profile of the instance ``mig_uuid`` on this node (None: not there)."""
        try:
            for g in self.backend.gpus():
                if _has_slices(g):
                    for s in self.reconciler.read_state(g.index):
                        if s.mig_uuid == mig_uuid:
                            return s.profile
        except MigOperationError:
            return None
        return None

    def close(self) -> None:
        self.pool.shutdown()
        cleanup = getattr(self.pool.factory, "cleanup", None)   # the docker runner's leftover containers
        if cleanup is not None:
            cleanup()


def _device_lookup(backend: MigBackend) -> DeviceLookup:
    """The device nodes a sandboxed worker needs for a MIG instance (or a whole GPU's slot), by its UUID:
    those of its GPU and of that instance alone (:func:`invoker_agent.sandbox.gpu_devices`; none on the
    fake)."""
    def lookup(uuid: str) -> list[Mount]:
        try:
            for g in backend.gpus():
                if g.uuid == cuda_device(uuid):
                    return gpu_devices(g.index)
                if g.mig_enabled:
                    for c in backend.compute_instances(g.index):
                        if c.mig_uuid == uuid:
                            return gpu_devices(g.index, c.gi_id, c.ci_id)
        except MigOperationError:
            pass
        return []
    return lookup


def _slice_checker(backend: MigBackend):
    walk = getattr(backend, "mig_devices", None)        # unprivileged MIG-handle walk when available

    def exists(uuid: str) -> bool:
        try:
            for g in backend.gpus():
                if not _has_slices(g):
                    continue
                uuids = walk(g.index).values() if walk else (c.mig_uuid for c in backend.compute_instances(g.index))
                if uuid in uuids:
                    return True
            return False
        except MigOperationError:
            return False
    return exists


def _has_slices(g: GpuInfo) -> bool:
    """Whether batches run on slices of ``g``: MIG instances of a known model, or a whole GPU's slots."""
    return g.model is not None and (g.mig_enabled or mig.is_whole(g.model))
