"""The MIG backend over the ``pynvml`` module surface (nvidia-ml-py), or the fake of it.

Profile IDs are read at runtime from ``nvmlDeviceGetGpuInstanceProfileInfo(dev, index).id`` and matched
to esg.mig profile names by the name NVML reports; nothing here hard-codes an ID. GPU instances are only
created with explicit placements. A compute instance's MIG UUID is found by walking the parent's MIG
device handles and matching GI and CI ids (``ComputeInstanceGetInfo().device`` is the parent GPU).
"""

from __future__ import annotations

import ctypes
import os
import re
import threading
from dataclasses import dataclass

from esg import mig
from invoker_agent.mig_backend import (
    NVML_ERROR_INVALID_ARGUMENT,
    NVML_ERROR_NO_PERMISSION,
    NVML_ERROR_NOT_FOUND,
    NVML_ERROR_NOT_SUPPORTED,
    ComputeInstance,
    GpuInfo,
    GpuInstance,
    MigOperationError,
)

GI_PROFILE_COUNT = 0x12     # NVML_GPU_INSTANCE_PROFILE_COUNT in nvml.h (pynvml 12.535+)
CI_PROFILE_COUNT = 0x9      # NVML_COMPUTE_INSTANCE_PROFILE_COUNT
CI_ENGINE_SHARED = 0        # NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED


def gpu_model_for(name: str) -> str | None:
    """The esg.mig geometry key of a GPU from its NVML name ("NVIDIA A100-SXM4-80GB" -> "A100-80GB")."""
    n = name.upper()
    if "A100" in n:
        return "A100-80GB" if "80GB" in n else "A100-40GB"
    if "H100" in n:
        return "H100-80GB"
    if "H200" in n:
        return "H200"
    if re.search(r"\bA30\b", n):
        return "A30"
    return None


@dataclass(frozen=True)
class _Profile:
    name: str
    gi_profile_id: int
    compute_slices: int
    instance_count: int


class NvmlBackend:
    """:class:`invoker_agent.mig_backend.MigBackend` over ``nvml`` (the pynvml module or a FakeNvml)."""

    def __init__(self, nvml=None) -> None:
        if nvml is None:
            import pynvml as nvml
        self.nvml = nvml
        self._profiles: dict[int, dict[str, _Profile]] = {}
        self._models: dict[int, str | None] = {}
        self._lock = threading.Lock()
        self._call("initialise NVML", nvml.nvmlInit)

    def close(self) -> None:
        self._call("shut down NVML", self.nvml.nvmlShutdown)

    # --- helpers ---------------------------------------------------------------------------------
    def _call(self, operation: str, fn, *args):
        try:
            return fn(*args)
        except self.nvml.NVMLError as e:
            raise MigOperationError(operation, int(e.value)) from e

    def _device(self, gpu: int):
        return self._call(f"get handle of GPU {gpu}", self.nvml.nvmlDeviceGetHandleByIndex, gpu)

    def _gi_profiles(self, gpu: int) -> dict[str, _Profile]:
        """profile name -> its runtime NVML id, probing every GI profile index (cached per GPU)."""
        with self._lock:
            if gpu in self._profiles:
                return self._profiles[gpu]
        dev = self._device(gpu)
        found: dict[str, _Profile] = {}
        for index in range(GI_PROFILE_COUNT):
            try:
                info = self.nvml.nvmlDeviceGetGpuInstanceProfileInfo(dev, index)
            except self.nvml.NVMLError as e:
                if e.value in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise MigOperationError(f"read GPU instance profile {index} of GPU {gpu}", e.value) from e
            raw = info.name.decode() if isinstance(info.name, bytes) else str(info.name)
            name = raw.removeprefix("MIG ").strip()
            found[name] = _Profile(name, int(info.id), int(info.sliceCount), int(info.instanceCount))
        with self._lock:
            self._profiles[gpu] = found
        return found

    def _profile(self, gpu: int, name: str) -> _Profile:
        profiles = self._gi_profiles(gpu)
        if name not in profiles:
            raise MigOperationError(f"GPU {gpu} has no MIG profile {name!r} (has: {', '.join(profiles)})",
                                    NVML_ERROR_NOT_SUPPORTED, "unknown profile")
        return profiles[name]

    def _gi_handles(self, gpu: int, dev, prof: _Profile) -> list:
        arr = (self.nvml.c_nvmlGpuInstance_t * max(prof.instance_count, 1))()
        count = ctypes.c_uint(0)
        self._call(f"list {prof.name} GPU instances on GPU {gpu}",
                   self.nvml.nvmlDeviceGetGpuInstances, dev, prof.gi_profile_id, arr, ctypes.byref(count))
        return [arr[i] for i in range(count.value)]

    def _gi_handle(self, gpu: int, gi_id: int):
        dev = self._device(gpu)
        return self._call(f"get GPU instance {gi_id} on GPU {gpu}",
                          self.nvml.nvmlDeviceGetGpuInstanceById, dev, gi_id)

    def _ci_profiles(self, gi_handle) -> list[tuple[int, int, int]]:
        """(CI profile id, slice count, instance count) for each CI profile the GI supports."""
        out = []
        for index in range(CI_PROFILE_COUNT):
            try:
                info = self.nvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi_handle, index, CI_ENGINE_SHARED)
            except self.nvml.NVMLError as e:
                if e.value in (NVML_ERROR_NOT_SUPPORTED, NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise MigOperationError("read compute instance profiles", e.value) from e
            out.append((int(info.id), int(info.sliceCount), int(info.instanceCount)))
        return out

    def _mig_handles(self, gpu: int) -> list:
        dev = self._device(gpu)
        n = self._call(f"count MIG devices of GPU {gpu}", self.nvml.nvmlDeviceGetMaxMigDeviceCount, dev)
        handles = []
        for i in range(n):
            try:
                handles.append(self.nvml.nvmlDeviceGetMigDeviceHandleByIndex(dev, i))
            except self.nvml.NVMLError as e:
                if e.value == NVML_ERROR_NOT_FOUND:
                    continue                         # a hole: no MIG device at this index
                raise MigOperationError(f"get MIG device {i} of GPU {gpu}", e.value) from e
        return handles

    def mig_devices(self, gpu: int) -> dict[tuple[int, int], str]:
        """(GI id, CI id) -> MIG UUID for every MIG device of ``gpu`` (unprivileged calls only)."""
        out = {}
        for h in self._mig_handles(gpu):
            gi = self._call("read MIG device GI id", self.nvml.nvmlDeviceGetGpuInstanceId, h)
            ci = self._call("read MIG device CI id", self.nvml.nvmlDeviceGetComputeInstanceId, h)
            out[(gi, ci)] = self._call("read MIG device UUID", self.nvml.nvmlDeviceGetUUID, h)
        return out

    # --- MigBackend ------------------------------------------------------------------------------
    def gpus(self) -> list[GpuInfo]:
        out = []
        for i in range(self._call("count GPUs", self.nvml.nvmlDeviceGetCount)):
            dev = self._device(i)
            name = self._call(f"read name of GPU {i}", self.nvml.nvmlDeviceGetName, dev)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = self._call(f"read UUID of GPU {i}", self.nvml.nvmlDeviceGetUUID, dev)
            try:
                current, pending = self.nvml.nvmlDeviceGetMigMode(dev)
            except self.nvml.NVMLError as e:
                if e.value != NVML_ERROR_NOT_SUPPORTED:
                    raise MigOperationError(f"read MIG mode of GPU {i}", e.value) from e
                current = pending = 0
            out.append(GpuInfo(i, uuid, name, gpu_model_for(name), current == 1, pending == 1))
        return out

    def gpu_instances(self, gpu: int) -> list[GpuInstance]:
        dev = self._device(gpu)
        out = []
        for prof in self._gi_profiles(gpu).values():
            for h in self._gi_handles(gpu, dev, prof):
                info = self._call("read GPU instance info", self.nvml.nvmlGpuInstanceGetInfo, h)
                out.append(GpuInstance(gpu, int(info.id), prof.name,
                                       int(info.placement.start), int(info.placement.size)))
        return sorted(out, key=lambda g: (g.start, g.gi_id))

    def compute_instances(self, gpu: int) -> list[ComputeInstance]:
        uuids = self.mig_devices(gpu)
        out = []
        for gi in self.gpu_instances(gpu):
            h = self._gi_handle(gpu, gi.gi_id)
            for ci_profile_id, _slices, count in self._ci_profiles(h):
                arr = (self.nvml.c_nvmlComputeInstance_t * max(count, 1))()
                n = ctypes.c_uint(0)
                self._call(f"list compute instances of GI {gi.gi_id} on GPU {gpu}",
                           self.nvml.nvmlGpuInstanceGetComputeInstances, h, ci_profile_id, arr, ctypes.byref(n))
                for i in range(n.value):
                    info = self._call("read compute instance info", self.nvml.nvmlComputeInstanceGetInfo, arr[i])
                    ci_id = int(info.id)
                    uuid = uuids.get((gi.gi_id, ci_id)) or self.mig_uuid(gpu, gi.gi_id, ci_id)
                    out.append(ComputeInstance(gpu, gi.gi_id, ci_id, uuid))
        return out

    def running_pids(self, gpu: int) -> dict[int, list[int]]:
        out: dict[int, list[int]] = {}
        for h in self._mig_handles(gpu):
            gi = self._call("read MIG device GI id", self.nvml.nvmlDeviceGetGpuInstanceId, h)
            procs = self._call("list compute processes", self.nvml.nvmlDeviceGetComputeRunningProcesses, h)
            if procs:
                out.setdefault(gi, []).extend(int(p.pid) for p in procs)
        return out

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance:
        prof = self._profile(gpu, profile)
        dev = self._device(gpu)
        size = self._memory_slices(gpu, profile)
        placement = self.nvml.c_nvmlGpuInstancePlacement_t(start, size)
        h = self._call(f"create GPU instance {profile} at slice {start} on GPU {gpu}",
                       self.nvml.nvmlDeviceCreateGpuInstanceWithPlacement,
                       dev, prof.gi_profile_id, ctypes.byref(placement))
        info = self._call("read GPU instance info", self.nvml.nvmlGpuInstanceGetInfo, h)
        return GpuInstance(gpu, int(info.id), profile, int(info.placement.start), int(info.placement.size))

    def _memory_slices(self, gpu: int, profile: str) -> int:
        if gpu not in self._models:
            name = self._call(f"read name of GPU {gpu}", self.nvml.nvmlDeviceGetName, self._device(gpu))
            self._models[gpu] = gpu_model_for(name.decode() if isinstance(name, bytes) else name)
        model = self._models[gpu]
        if model is None:
            raise MigOperationError(f"GPU {gpu} is not a known MIG GPU", NVML_ERROR_NOT_SUPPORTED)
        return mig.geometry(model).profile(profile).memory_slices

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        h = self._gi_handle(gpu, gi_id)
        profiles = self._ci_profiles(h)
        if not profiles:
            raise MigOperationError(f"GI {gi_id} on GPU {gpu} supports no compute instance profile",
                                    NVML_ERROR_NOT_SUPPORTED)
        ci_profile_id = max(profiles, key=lambda p: p[1])[0]      # the full-size CI
        ci = self._call(f"create compute instance in GI {gi_id} on GPU {gpu}",
                        self.nvml.nvmlGpuInstanceCreateComputeInstance, h, ci_profile_id)
        info = self._call("read compute instance info", self.nvml.nvmlComputeInstanceGetInfo, ci)
        return ComputeInstance(gpu, gi_id, int(info.id), self.mig_uuid(gpu, gi_id, int(info.id)))

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        gi = self._gi_handle(gpu, gi_id)
        try:
            ci = self.nvml.nvmlGpuInstanceGetComputeInstanceById(gi, ci_id)
        except self.nvml.NVMLError as e:
            if e.value == NVML_ERROR_NOT_FOUND:
                return                                   # already gone: done
            raise MigOperationError(f"get compute instance {ci_id} of GI {gi_id} on GPU {gpu}", e.value) from e
        self._call(f"destroy compute instance {ci_id} of GI {gi_id} on GPU {gpu}",
                   self.nvml.nvmlComputeInstanceDestroy, ci)

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        h = self._gi_handle(gpu, gi_id)
        self._call(f"destroy GPU instance {gi_id} on GPU {gpu}", self.nvml.nvmlGpuInstanceDestroy, h)

    def mig_uuid(self, gpu: int, gi_id: int, ci_id: int) -> str:
        uuid = self.mig_devices(gpu).get((gi_id, ci_id))
        if uuid is None:
            raise MigOperationError(f"no MIG device for GI {gi_id} / CI {ci_id} on GPU {gpu}",
                                    NVML_ERROR_NOT_FOUND, "not among the GPU's MIG device handles")
        return uuid


#: pynvml functions that change a GPU's state. :class:`ReadOnlyNvml` refuses them.
MUTATING_CALLS = frozenset({
    "nvmlDeviceSetMigMode", "nvmlDeviceCreateGpuInstance", "nvmlDeviceCreateGpuInstanceWithPlacement",
    "nvmlGpuInstanceCreateComputeInstance", "nvmlGpuInstanceCreateComputeInstanceWithPlacement",
    "nvmlGpuInstanceDestroy", "nvmlComputeInstanceDestroy", "nvmlDeviceResetGpuLockedClocks",
    "nvmlDeviceResetMemoryLockedClocks", "nvmlDeviceSetGpuLockedClocks", "nvmlDeviceSetMemoryLockedClocks",
    "nvmlDeviceSetPersistenceMode", "nvmlDeviceSetComputeMode", "nvmlDeviceSetPowerManagementLimit",
    "nvmlDeviceSetApplicationsClocks", "nvmlDeviceResetApplicationsClocks", "nvmlDeviceClearEccErrorCounts",
    "nvmlDeviceSetEccMode", "nvmlDeviceSetGpuOperationMode", "nvmlDeviceSetDriverModel",
    "nvmlDeviceSetAccountingMode", "nvmlDeviceClearAccountingPids", "nvmlDeviceSetAutoBoostedClocksEnabled",
    "nvmlDeviceSetDefaultAutoBoostedClocksEnabled", "nvmlDeviceModifyDrainState", "nvmlDeviceRemoveGpu",
    "nvmlDeviceDiscoverGpus", "nvmlDeviceSetNvLinkUtilizationControl", "nvmlDeviceResetNvLinkErrorCounters",
})


class ReadOnlyNvml:
    """The ``pynvml`` module surface with every call in :data:`MUTATING_CALLS` refused (NO_PERMISSION,
    before NVML is asked): what ``ESG_NVML_READ_ONLY=1`` gives the agent, for a machine whose GPU state
    must not change (``scripts/device-check``)."""

    def __init__(self, nvml) -> None:
        self._nvml = nvml
        self.NVMLError = nvml.NVMLError
        self.refused: list[str] = []

    def __getattr__(self, name: str):
        if name in MUTATING_CALLS:
            def refuse(*_args, **_kw):
                self.refused.append(name)
                raise self._nvml.NVMLError(NVML_ERROR_NO_PERMISSION)
            return refuse
        return getattr(self._nvml, name)


def open_backend(fake_gpu: str | None = None, fake_gpu_count: int = 1, root: bool = True,
                 fake_mig: bool = True) -> NvmlBackend:
    """The backend for ``esg agent``: ``--fake-gpu MODEL`` gives the fake (its MIG mode off with
    ``fake_mig=False``: ``--no-mig``), otherwise real NVML.

    A node without the NVIDIA driver gets a clear :class:`MigOperationError`, not a ctypes trace.
    """
    if fake_gpu:
        from invoker_agent.fake_nvml import FakeHost, FakeNvml
        return NvmlBackend(FakeNvml(FakeHost.with_gpus(fake_gpu, fake_gpu_count, mig_enabled=fake_mig), root=root))
    try:
        import pynvml
    except ImportError as e:  # pragma: no cover - nvidia-ml-py is a dependency
        raise MigOperationError("import pynvml (nvidia-ml-py)", 12, str(e)) from e
    module = ReadOnlyNvml(pynvml) if os.environ.get("ESG_NVML_READ_ONLY") == "1" else pynvml
    try:
        return NvmlBackend(module)
    except MigOperationError as e:
        raise MigOperationError("initialise NVML", e.code,
                                "no usable NVIDIA driver on this node; use --fake-gpu MODEL to run "
                                "without a GPU") from e
