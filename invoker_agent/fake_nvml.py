"""An in-memory fake of the ``pynvml`` module surface that the NVML backend uses.

``FakeNvml(host)`` behaves like the ``pynvml`` module for the MIG calls of
:mod:`invoker_agent.nvml_backend`, so the *same* backend code runs on a real GPU and on this fake. It
returns pynvml's own ctypes structures and opaque ctypes handles, expects ``byref(...)`` where the C API
takes pointers, and raises pynvml's own ``NVMLError`` subclasses. The GPU state lives in a
:class:`FakeHost`, which outlives a ``FakeNvml`` (one per agent process), so an agent "restart" is a new
``FakeNvml`` on the same host. Geometry comes from :func:`esg.mig.geometry`.

Rules enforced (``docs/mig.md``, "The fake backend"): init required; stale handles are INVALID_ARGUMENT; MIG calls with
MIG off are NOT_SUPPORTED; mode changes need root, are pending until reset on Ampere and immediate on
Hopper when idle; create/destroy/list need root or the mig/config capability; profile indexes out of
range are INVALID_ARGUMENT and unsupported ones NOT_SUPPORTED; placements not in the profile's list are
INVALID_ARGUMENT and overlaps INSUFFICIENT_RESOURCES; per-profile caps and one +me per GPU; deliberately
poor auto-placement (highest free start first), which reproduces the documented ``-cgi 19,19,14,9``
failure on A100; CI profiles must fit their GI; destroy with CIs or processes is IN_USE; MIG device
handles are slot-indexed, have holes and are reused; fresh ``MIG-<uuid4>`` per CI;
``ComputeInstanceGetInfo().device`` is the parent; memory of a MIG handle is its GI's; utilisation on a
MIG GPU is NOT_SUPPORTED; reset wipes GIs and CIs but keeps the mode; fault injection (fail the k-th
call of a function, fail CI creation, GI destroy latency); fake pids attached to a (GI, CI).
"""

from __future__ import annotations

import ctypes
import itertools
import threading
import time
import uuid as uuidlib
from collections import Counter
from dataclasses import dataclass, field

import pynvml

from esg.mig import GpuGeometry, MigProfile, geometry

MARKETING_NAMES = {
    "A100-40GB": "NVIDIA A100-SXM4-40GB",
    "A100-80GB": "NVIDIA A100-SXM4-80GB",
    "H100-80GB": "NVIDIA H100 80GB HBM3",
    "H200": "NVIDIA H200",
    "A30": "NVIDIA A30",
}
HOPPER = {"H100-80GB", "H200"}
SM_PER_SLICE = {"A100-40GB": 14, "A100-80GB": 14, "H100-80GB": 16, "H200": 16, "A30": 14}
_CI_SLICES_BY_INDEX = {0: 1, 1: 2, 2: 3, 3: 4, 4: 7}   # NVML_COMPUTE_INSTANCE_PROFILE_{1,2,3,4,7}_SLICE


def _err(code: int) -> pynvml.NVMLError:
    return pynvml.NVMLError(code)


def gi_profile_index(prof: MigProfile, geo: GpuGeometry) -> int:
    """The NVML_GPU_INSTANCE_PROFILE_* index under which NVML lists ``prof``."""
    if prof.media_extensions:
        return pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV1 if prof.compute_slices == 1 \
            else pynvml.NVML_GPU_INSTANCE_PROFILE_2_SLICE_REV1
    if prof.compute_slices == 1 and prof.memory_slices == 2 and geo.memory_slices == 8:
        return pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    return {1: 0, 2: 1, 3: 2, 4: 3, 7: 4}[prof.compute_slices]


@dataclass(eq=False)
class FakeCi:
    id: int
    slices: int
    start: int
    profile_id: int
    uuid: str
    slot: int
    pids: set[int] = field(default_factory=set)


@dataclass(eq=False)
class FakeGi:
    id: int
    profile: MigProfile
    start: int
    cis: dict[int, FakeCi] = field(default_factory=dict)
    pids: set[int] = field(default_factory=set)   # processes on the GI outside any CI (rare)

    @property
    def mask(self) -> int:
        return ((1 << self.profile.memory_slices) - 1) << self.start


@dataclass(eq=False)
class FakeGpu:
    index: int
    model: str
    geo: GpuGeometry
    uuid: str
    mig_current: int = 1
    mig_pending: int = 1
    gis: dict[int, FakeGi] = field(default_factory=dict)
    slots: list[tuple[int, int] | None] = field(default_factory=list)

    @property
    def max_mig_devices(self) -> int:
        return self.geo.compute_slices

    def busy(self) -> bool:
        return any(gi.pids or any(ci.pids for ci in gi.cis.values()) for gi in self.gis.values())


class FakeHost:
    """The simulated machine: GPUs and their MIG state, shared by every FakeNvml "process"."""

    def __init__(self, models: list[str], mig_enabled: bool = True, vm_passthrough: bool = False) -> None:
        self.lock = threading.RLock()
        self.vm_passthrough = vm_passthrough
        self.gpus: list[FakeGpu] = []
        for i, m in enumerate(models):
            geo = geometry(m)
            mode = 1 if mig_enabled else 0
            self.gpus.append(FakeGpu(i, geo.model, geo, f"GPU-{uuidlib.uuid4()}", mode, mode,
                                     slots=[None] * geo.compute_slices))
        self.gi_destroy_latency_s = 0.0

    @classmethod
    def with_gpus(cls, model: str, count: int = 1, **kw) -> FakeHost:
        return cls([model] * count, **kw)

    def reset(self, gpu: int | None = None) -> None:
        """A GPU reset or reboot: GIs and CIs vanish, the pending MIG mode becomes current."""
        with self.lock:
            for g in self.gpus if gpu is None else [self.gpus[gpu]]:
                g.gis.clear()
                g.slots = [None] * g.max_mig_devices
                g.mig_current = g.mig_pending

    def attach_pid(self, gpu: int, gi_id: int, ci_id: int | None, pid: int) -> None:
        """Pretend ``pid`` runs CUDA work on (GI, CI) of ``gpu``."""
        with self.lock:
            gi = self.gpus[gpu].gis[gi_id]
            (gi.cis[ci_id].pids if ci_id is not None else gi.pids).add(pid)

    def detach_pid(self, pid: int) -> None:
        with self.lock:
            for g in self.gpus:
                for gi in g.gis.values():
                    gi.pids.discard(pid)
                    for ci in gi.cis.values():
                        ci.pids.discard(pid)

    def mig_uuids(self) -> set[str]:
        with self.lock:
            return {ci.uuid for g in self.gpus for gi in g.gis.values() for ci in gi.cis.values()}

    def layout(self, gpu: int) -> list[tuple[str, int]]:
        with self.lock:
            return sorted((gi.profile.name, gi.start) for gi in self.gpus[gpu].gis.values())


_DEV, _GI, _CI, _MIG = 0x1_0000, 0x10_0000, 0x20_0000, 0x30_0000


class FakeNvml:
    """One process's view of a :class:`FakeHost` through the pynvml module surface."""

    # pynvml names the backend uses, re-exported so ``FakeNvml`` can replace the module.
    NVMLError = pynvml.NVMLError
    c_nvmlGpuInstance_t = pynvml.c_nvmlGpuInstance_t
    c_nvmlComputeInstance_t = pynvml.c_nvmlComputeInstance_t
    c_nvmlGpuInstancePlacement_t = pynvml.c_nvmlGpuInstancePlacement_t

    def __init__(self, host: FakeHost, root: bool = True, mig_config_capability: bool = False) -> None:
        self.host = host
        self.root = root
        self.mig_config_capability = mig_config_capability
        self._init_count = 0
        self._handles: dict[int, tuple[str, object, object]] = {}
        self._addr = itertools.count(1)
        self.calls: Counter[str] = Counter()
        self._faults: dict[str, list[tuple[int, int]]] = {}
        self._fail_ci_code: int | None = None

    def __getattr__(self, name: str):
        if name.startswith("NVML_"):
            return getattr(pynvml, name)
        raise AttributeError(f"FakeNvml does not implement pynvml.{name}")

    # --- fault injection -------------------------------------------------------------------------
    def fail_call(self, function: str, k: int = 1, code: int = pynvml.NVML_ERROR_UNKNOWN) -> None:
        """Make the k-th next call of ``function`` (a pynvml name) raise ``NVMLError(code)``."""
        self._faults.setdefault(function, []).append((self.calls[function] + k, code))

    def fail_next_compute_instance(self, code: int = pynvml.NVML_ERROR_UNKNOWN) -> None:
        """The next CI creation fails after its GI was created (a half-done create)."""
        self._fail_ci_code = code

    # --- plumbing --------------------------------------------------------------------------------
    def _enter(self, name: str, privileged: bool = False) -> None:
        self.calls[name] += 1
        for n, code in self._faults.get(name, []):
            if n == self.calls[name]:
                raise _err(code)
        if self._init_count <= 0:
            raise _err(pynvml.NVML_ERROR_UNINITIALIZED)
        if privileged and not (self.root or self.mig_config_capability):
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)

    def _handle(self, ctype, kind: str, base: int, *obj) -> object:
        addr = base + next(self._addr)
        self._handles[addr] = (kind, *obj)
        return ctypes.cast(ctypes.c_void_p(addr), ctype)

    def _resolve(self, handle, kind: str):
        try:
            addr = ctypes.cast(handle, ctypes.c_void_p).value
        except (TypeError, ctypes.ArgumentError):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT) from None
        if kind == "dev" and addr is not None and _DEV <= addr < _DEV + len(self.host.gpus):
            return self.host.gpus[addr - _DEV]
        if kind == "mig" and addr is not None and _MIG <= addr < _MIG + 0x10_0000:
            off = addr - _MIG
            gpu_i, slot = divmod(off, 0x100)
            if gpu_i < len(self.host.gpus):
                gpu = self.host.gpus[gpu_i]
                if slot < len(gpu.slots) and gpu.slots[slot] is not None:
                    gi_id, ci_id = gpu.slots[slot]
                    return gpu, gpu.gis[gi_id], gpu.gis[gi_id].cis[ci_id]
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        entry = self._handles.get(addr)
        if entry is None or entry[0] != kind:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        if kind == "gi":
            _, gpu, gi = entry
            if gpu.gis.get(gi.id) is not gi:          # destroyed or wiped: stale handle
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            return gpu, gi
        _, gpu, gi, ci = entry
        if gpu.gis.get(gi.id) is not gi or gi.cis.get(ci.id) is not ci:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu, gi, ci

    def _mig_on(self, gpu: FakeGpu) -> None:
        if gpu.mig_current != 1:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def _dev_handle(self, gpu: FakeGpu):
        return ctypes.cast(ctypes.c_void_p(_DEV + gpu.index), pynvml.c_nvmlDevice_t)

    def _gi_profile_by_id(self, gpu: FakeGpu, profile_id: int) -> MigProfile:
        for p in gpu.geo.profiles.values():
            if p.gi_profile_id == profile_id:
                return p
        raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)

    @staticmethod
    def _deref(ref):
        """The object behind ``byref(x)``; anything else is a caller bug the C API would not survive."""
        obj = getattr(ref, "_obj", None)
        if obj is None:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return obj

    # --- init ------------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        self._init_count += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self._init_count -= 1

    # --- devices ---------------------------------------------------------------------------------
    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.host.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int):
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.host.gpus):
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._dev_handle(self.host.gpus[index])

    def nvmlDeviceGetName(self, handle) -> str:
        self._enter("nvmlDeviceGetName")
        with self.host.lock:
            try:
                return MARKETING_NAMES[self._resolve(handle, "dev").model]
            except pynvml.NVMLError:
                gpu, gi, _ = self._resolve(handle, "mig")
                return f"{MARKETING_NAMES[gpu.model]} MIG {gi.profile.name}"

    def nvmlDeviceGetUUID(self, handle) -> str:
        self._enter("nvmlDeviceGetUUID")
        with self.host.lock:
            try:
                return self._resolve(handle, "dev").uuid
            except pynvml.NVMLError:
                return self._resolve(handle, "mig")[2].uuid

    def nvmlDeviceGetMigMode(self, handle) -> list[int]:
        self._enter("nvmlDeviceGetMigMode")
        gpu = self._resolve(handle, "dev")
        return [gpu.mig_current, gpu.mig_pending]

    def nvmlDeviceSetMigMode(self, handle, mode: int) -> int:
        self._enter("nvmlDeviceSetMigMode")
        if not self.root:
            raise _err(pynvml.NVML_ERROR_NO_PERMISSION)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            if mode not in (0, 1):
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if mode == 0 and gpu.gis:
                raise _err(pynvml.NVML_ERROR_IN_USE)
            if gpu.busy():
                return pynvml.NVML_ERROR_IN_USE
            gpu.mig_pending = mode
            if self.host.vm_passthrough:
                return pynvml.NVML_ERROR_RESET_REQUIRED
            if gpu.model in HOPPER:
                gpu.mig_current = mode
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetMemoryInfo(self, handle, version=None):
        self._enter("nvmlDeviceGetMemoryInfo")
        with self.host.lock:
            mem = pynvml.c_nvmlMemory_t()
            try:
                gpu = self._resolve(handle, "dev")
                mb = gpu.geo.profile(max(gpu.geo.profiles.values(),
                                         key=lambda p: p.memory_slices).name).memory_mb
            except pynvml.NVMLError:
                _, gi, _ = self._resolve(handle, "mig")
                mb = gi.profile.memory_mb
            mem.total, mem.free, mem.used = mb << 20, mb << 20, 0
            return mem

    def nvmlDeviceGetUtilizationRates(self, handle):
        self._enter("nvmlDeviceGetUtilizationRates")
        gpu = self._resolve(handle, "dev")
        if gpu.mig_current == 1:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return pynvml.c_nvmlUtilization_t()

    # --- GPU instance profiles and instances -----------------------------------------------------
    def nvmlDeviceGetGpuInstanceProfileInfo(self, handle, profile: int, version: int = 2):
        self._enter("nvmlDeviceGetGpuInstanceProfileInfo")
        gpu = self._resolve(handle, "dev")
        self._mig_on(gpu)
        if not 0 <= profile < pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        for p in gpu.geo.profiles.values():
            if gi_profile_index(p, gpu.geo) == profile:
                return self._gi_profile_info(gpu, p, version)
        raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)

    nvmlDeviceGetGpuInstanceProfileInfoV = nvmlDeviceGetGpuInstanceProfileInfo

    def nvmlDeviceGetGpuInstanceProfileInfoById(self, handle, profile_id: int):
        self._enter("nvmlDeviceGetGpuInstanceProfileInfoById")
        gpu = self._resolve(handle, "dev")
        self._mig_on(gpu)
        return self._gi_profile_info(gpu, self._gi_profile_by_id(gpu, profile_id), 2)

    def _gi_profile_info(self, gpu: FakeGpu, p: MigProfile, version: int):
        info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t() if version == 2 \
            else pynvml.c_nvmlGpuInstanceProfileInfo_t()
        info.id = p.gi_profile_id
        info.sliceCount = p.compute_slices
        info.instanceCount = p.max_count
        info.multiprocessorCount = p.compute_slices * SM_PER_SLICE[gpu.model]
        info.copyEngineCount = p.compute_slices
        info.decoderCount = 1 if p.media_extensions or p.compute_slices >= 2 else 0
        info.jpegCount = info.ofaCount = 1 if p.media_extensions or p.compute_slices == 7 else 0
        info.memorySizeMB = p.memory_mb
        if version == 2:
            info.name = f"MIG {p.name}".encode()
        return info

    def nvmlDeviceGetGpuInstancePossiblePlacements(self, handle, profile_id, placements_ref, count_ref):
        self._enter("nvmlDeviceGetGpuInstancePossiblePlacements", privileged=True)
        gpu = self._resolve(handle, "dev")
        self._mig_on(gpu)
        p = self._gi_profile_by_id(gpu, profile_id)
        count = self._deref(count_ref)
        if placements_ref is None:
            count.value = len(p.starts)
            return pynvml.NVML_SUCCESS
        if len(placements_ref) < len(p.starts):
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
        for i, s in enumerate(p.starts):
            placements_ref[i].start, placements_ref[i].size = s, p.memory_slices
        count.value = len(p.starts)
        return pynvml.NVML_SUCCESS

    nvmlDeviceGetGpuInstancePossiblePlacements_v2 = nvmlDeviceGetGpuInstancePossiblePlacements

    def nvmlDeviceGetGpuInstanceRemainingCapacity(self, handle, profile_id: int) -> int:
        self._enter("nvmlDeviceGetGpuInstanceRemainingCapacity", privileged=True)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            p = self._gi_profile_by_id(gpu, profile_id)
            return sum(1 for s in p.starts if self._place_error(gpu, p, s) is None)

    def _place_error(self, gpu: FakeGpu, p: MigProfile, start: int) -> int | None:
        if start not in p.starts:
            return pynvml.NVML_ERROR_INVALID_ARGUMENT
        mask = ((1 << p.memory_slices) - 1) << start
        if any(gi.mask & mask for gi in gpu.gis.values()):
            return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        if sum(gi.profile.name == p.name for gi in gpu.gis.values()) >= p.max_count:
            return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        if p.media_extensions and any(gi.profile.media_extensions for gi in gpu.gis.values()):
            return pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        return None

    def _new_gi(self, gpu: FakeGpu, p: MigProfile, start: int):
        gi_id = next(i for i in itertools.count(1) if i not in gpu.gis)
        gi = FakeGi(gi_id, p, start)
        gpu.gis[gi_id] = gi
        return self._handle(pynvml.c_nvmlGpuInstance_t, "gi", _GI, gpu, gi)

    def nvmlDeviceCreateGpuInstance(self, handle, profile_id: int):
        """Driver auto-placement, deliberately poor: the highest free start wins."""
        self._enter("nvmlDeviceCreateGpuInstance", privileged=True)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            p = self._gi_profile_by_id(gpu, profile_id)
            for s in sorted(p.starts, reverse=True):
                if self._place_error(gpu, p, s) is None:
                    return self._new_gi(gpu, p, s)
            raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)

    def nvmlDeviceCreateGpuInstanceWithPlacement(self, handle, profile_id: int, placement):
        self._enter("nvmlDeviceCreateGpuInstanceWithPlacement", privileged=True)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            p = self._gi_profile_by_id(gpu, profile_id)
            pl = self._deref(placement)
            if pl.size != p.memory_slices:
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            code = self._place_error(gpu, p, pl.start)
            if code is not None:
                raise _err(code)
            return self._new_gi(gpu, p, pl.start)

    def nvmlDeviceGetGpuInstances(self, handle, profile_id: int, instances_ref, count_ref):
        self._enter("nvmlDeviceGetGpuInstances", privileged=True)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            p = self._gi_profile_by_id(gpu, profile_id)
            found = sorted((gi for gi in gpu.gis.values() if gi.profile is p), key=lambda g: g.id)
            if len(instances_ref) < len(found):
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, gi in enumerate(found):
                instances_ref[i] = self._handle(pynvml.c_nvmlGpuInstance_t, "gi", _GI, gpu, gi)
            self._deref(count_ref).value = len(found)
            return pynvml.NVML_SUCCESS

    def nvmlDeviceGetGpuInstanceById(self, handle, gi_id: int):
        self._enter("nvmlDeviceGetGpuInstanceById", privileged=True)
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            gi = gpu.gis.get(gi_id)
            if gi is None:
                raise _err(pynvml.NVML_ERROR_NOT_FOUND)
            return self._handle(pynvml.c_nvmlGpuInstance_t, "gi", _GI, gpu, gi)

    def nvmlGpuInstanceGetInfo(self, gi_handle):
        self._enter("nvmlGpuInstanceGetInfo")
        with self.host.lock:
            gpu, gi = self._resolve(gi_handle, "gi")
            info = pynvml.c_nvmlGpuInstanceInfo_t()
            info.device = self._dev_handle(gpu)
            info.id, info.profileId = gi.id, gi.profile.gi_profile_id
            info.placement.start, info.placement.size = gi.start, gi.profile.memory_slices
            return info

    def nvmlGpuInstanceDestroy(self, gi_handle) -> int:
        self._enter("nvmlGpuInstanceDestroy", privileged=True)
        if self.host.gi_destroy_latency_s:
            time.sleep(self.host.gi_destroy_latency_s)
        with self.host.lock:
            gpu, gi = self._resolve(gi_handle, "gi")
            if gi.cis or gi.pids:
                raise _err(pynvml.NVML_ERROR_IN_USE)
            del gpu.gis[gi.id]
            return pynvml.NVML_SUCCESS

    # --- compute instances -----------------------------------------------------------------------
    def nvmlGpuInstanceGetComputeInstanceProfileInfo(self, gi_handle, profile: int, eng_profile: int,
                                                     version: int = 2):
        self._enter("nvmlGpuInstanceGetComputeInstanceProfileInfo")
        gpu, gi = self._resolve(gi_handle, "gi")
        if not 0 <= profile < pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT or \
                eng_profile != pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED:
            raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        slices = _CI_SLICES_BY_INDEX.get(profile)
        if slices is None or slices > gi.profile.compute_slices:
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        info = pynvml.c_nvmlComputeInstanceProfileInfo_v2_t() if version == 2 \
            else pynvml.c_nvmlComputeInstanceProfileInfo_t()
        info.id = profile
        info.sliceCount = slices
        info.instanceCount = gi.profile.compute_slices // slices
        info.multiprocessorCount = slices * SM_PER_SLICE[gpu.model]
        if version == 2:
            name = gi.profile.name if slices == gi.profile.compute_slices \
                else f"{slices}c.{gi.profile.name}"
            info.name = f"MIG {name}".encode()
        return info

    nvmlGpuInstanceGetComputeInstanceProfileInfoV = nvmlGpuInstanceGetComputeInstanceProfileInfo

    def nvmlGpuInstanceCreateComputeInstance(self, gi_handle, profile_id: int):
        self._enter("nvmlGpuInstanceCreateComputeInstance", privileged=True)
        with self.host.lock:
            gpu, gi = self._resolve(gi_handle, "gi")
            if self._fail_ci_code is not None:
                code, self._fail_ci_code = self._fail_ci_code, None
                raise _err(code)
            slices = _CI_SLICES_BY_INDEX.get(profile_id)
            if slices is None or slices > gi.profile.compute_slices:
                raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
            used = 0
            for ci in gi.cis.values():
                used |= ((1 << ci.slices) - 1) << ci.start
            if sum(ci.slices == slices for ci in gi.cis.values()) >= gi.profile.compute_slices // slices:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            for start in range(0, gi.profile.compute_slices - slices + 1, slices):
                mask = ((1 << slices) - 1) << start
                if not used & mask:
                    break
            else:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES)
            try:
                slot = gpu.slots.index(None)
            except ValueError:
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES) from None
            ci_id = next(i for i in itertools.count(0) if i not in gi.cis)
            ci = FakeCi(ci_id, slices, start, profile_id, f"MIG-{uuidlib.uuid4()}", slot)
            gi.cis[ci_id] = ci
            gpu.slots[slot] = (gi.id, ci_id)
            return self._handle(pynvml.c_nvmlComputeInstance_t, "ci", _CI, gpu, gi, ci)

    def nvmlGpuInstanceGetComputeInstances(self, gi_handle, profile_id: int, instances_ref, count_ref):
        self._enter("nvmlGpuInstanceGetComputeInstances", privileged=True)
        with self.host.lock:
            gpu, gi = self._resolve(gi_handle, "gi")
            if profile_id not in _CI_SLICES_BY_INDEX:
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            found = sorted((c for c in gi.cis.values() if c.profile_id == profile_id), key=lambda c: c.id)
            if len(instances_ref) < len(found):
                raise _err(pynvml.NVML_ERROR_INSUFFICIENT_SIZE)
            for i, ci in enumerate(found):
                instances_ref[i] = self._handle(pynvml.c_nvmlComputeInstance_t, "ci", _CI, gpu, gi, ci)
            self._deref(count_ref).value = len(found)
            return pynvml.NVML_SUCCESS

    def nvmlGpuInstanceGetComputeInstanceById(self, gi_handle, ci_id: int):
        self._enter("nvmlGpuInstanceGetComputeInstanceById", privileged=True)
        with self.host.lock:
            gpu, gi = self._resolve(gi_handle, "gi")
            ci = gi.cis.get(ci_id)
            if ci is None:
                raise _err(pynvml.NVML_ERROR_NOT_FOUND)
            return self._handle(pynvml.c_nvmlComputeInstance_t, "ci", _CI, gpu, gi, ci)

    def nvmlComputeInstanceGetInfo(self, ci_handle):
        self._enter("nvmlComputeInstanceGetInfo")
        with self.host.lock:
            gpu, gi, ci = self._resolve(ci_handle, "ci")
            info = pynvml.c_nvmlComputeInstanceInfo_t()
            info.device = self._dev_handle(gpu)            # the PARENT GPU, as real NVML does
            info.gpuInstance = self._handle(pynvml.c_nvmlGpuInstance_t, "gi", _GI, gpu, gi)
            info.id, info.profileId = ci.id, ci.profile_id
            info.placement.start, info.placement.size = ci.start, ci.slices
            return info

    nvmlComputeInstanceGetInfo_v2 = nvmlComputeInstanceGetInfo

    def nvmlComputeInstanceDestroy(self, ci_handle) -> int:
        self._enter("nvmlComputeInstanceDestroy", privileged=True)
        with self.host.lock:
            gpu, gi, ci = self._resolve(ci_handle, "ci")
            if ci.pids:
                raise _err(pynvml.NVML_ERROR_IN_USE)
            del gi.cis[ci.id]
            gpu.slots[ci.slot] = None
            return pynvml.NVML_SUCCESS

    # --- MIG device handles ----------------------------------------------------------------------
    def nvmlDeviceGetMaxMigDeviceCount(self, handle) -> int:
        self._enter("nvmlDeviceGetMaxMigDeviceCount")
        gpu = self._resolve(handle, "dev")
        return gpu.max_mig_devices if gpu.mig_current == 1 else 0

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle, index: int):
        self._enter("nvmlDeviceGetMigDeviceHandleByIndex")
        with self.host.lock:
            gpu = self._resolve(handle, "dev")
            self._mig_on(gpu)
            if not 0 <= index < gpu.max_mig_devices:
                raise _err(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            if gpu.slots[index] is None:
                raise _err(pynvml.NVML_ERROR_NOT_FOUND)
            return ctypes.cast(ctypes.c_void_p(_MIG + gpu.index * 0x100 + index), pynvml.c_nvmlDevice_t)

    def nvmlDeviceIsMigDeviceHandle(self, handle) -> int:
        self._enter("nvmlDeviceIsMigDeviceHandle")
        try:
            self._resolve(handle, "mig")
            return 1
        except pynvml.NVMLError:
            self._resolve(handle, "dev")
            return 0

    def nvmlDeviceGetGpuInstanceId(self, handle) -> int:
        self._enter("nvmlDeviceGetGpuInstanceId")
        return self._resolve(handle, "mig")[1].id

    def nvmlDeviceGetComputeInstanceId(self, handle) -> int:
        self._enter("nvmlDeviceGetComputeInstanceId")
        return self._resolve(handle, "mig")[2].id

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, handle):
        self._enter("nvmlDeviceGetDeviceHandleFromMigDeviceHandle")
        return self._dev_handle(self._resolve(handle, "mig")[0])

    def nvmlDeviceGetComputeRunningProcesses(self, handle) -> list:
        self._enter("nvmlDeviceGetComputeRunningProcesses")
        with self.host.lock:
            try:
                gpu, gi, ci = self._resolve(handle, "mig")
                pairs = [(gi, ci)]
            except pynvml.NVMLError:
                gpu = self._resolve(handle, "dev")
                pairs = [(g, c) for g in gpu.gis.values() for c in g.cis.values()]
            return [pynvml.nvmlFriendlyObject({
                "pid": pid, "usedGpuMemory": 0, "gpuInstanceId": g.id, "computeInstanceId": c.id})
                for g, c in pairs for pid in sorted(c.pids)]

    nvmlDeviceGetComputeRunningProcesses_v3 = nvmlDeviceGetComputeRunningProcesses
