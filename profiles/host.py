"""The machine a profile run measures: CPU model, usable vCPU ids, and the GPU (through NVML) if any."""

from __future__ import annotations

import os
import platform
import socket
from dataclasses import dataclass, field


@dataclass(frozen=True)
class GpuHost:
    """The first NVIDIA GPU NVML reports, and its MIG slices: profile name -> MIG UUIDs."""

    name: str                       # as NVML reports it, e.g. "NVIDIA A100-SXM4-40GB"
    model: str | None               # esg.mig geometry key ("<MODEL>:whole" with MIG off), None if unknown
    mig_enabled: bool
    slices: dict[str, tuple[str, ...]] = field(default_factory=dict)
    driver: str | None = None       # NVIDIA driver version, as NVML reports it


@dataclass(frozen=True)
class Host:
    hostname: str
    cpu: str
    cpu_ids: tuple[int, ...]        # the vCPU ids this process may run on
    gpu: GpuHost | None
    gpu_error: str | None = None    # why no GPU was found (no driver, no device...)


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.lower().startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def detect_gpu() -> tuple[GpuHost | None, str | None]:
    """The first GPU and its MIG slices, or (None, why not). NVML raises without a driver: that is 'no GPU'."""
    from esg import mig
    from invoker_agent.mig_backend import MigOperationError
    try:
        from invoker_agent.nvml_backend import open_backend
        from invoker_agent.whole_gpu import WholeGpuBackend
        backend = WholeGpuBackend(open_backend())     # a GPU with MIG off: one slice, the whole GPU
    except MigOperationError as e:
        return None, f"NVML: {e.code_name}"
    except Exception as e:  # noqa: BLE001 - e.g. ImportError: no usable NVML here
        return None, f"NVML: {type(e).__name__}: {e}"
    try:
        gpus = backend.gpus()
        if not gpus:
            return None, "NVML reports no GPU"
        info = gpus[0]
        slices: dict[str, list[str]] = {}
        if info.mig_enabled or mig.is_whole(info.model):
            profile_of = {gi.gi_id: gi.profile for gi in backend.gpu_instances(info.index)}
            for ci in backend.compute_instances(info.index):
                slices.setdefault(profile_of.get(ci.gi_id, "?"), []).append(ci.mig_uuid)
        return GpuHost(info.name, info.model, info.mig_enabled,
                       {k: tuple(v) for k, v in slices.items()}, driver_version(backend.inner)), None
    except MigOperationError as e:
        return None, str(e)
    finally:
        try:
            backend.close()
        except Exception:  # noqa: BLE001
            pass


def driver_version(backend) -> str | None:
    """The driver's version through NVML (read-only), None where the backend cannot say."""
    nvml = getattr(backend, "nvml", None)
    try:
        version = nvml.nvmlSystemGetDriverVersion()  # type: ignore[union-attr]
    except Exception:  # noqa: BLE001 - the fake has no driver; an old pynvml may lack the call
        return None
    return version.decode() if isinstance(version, bytes) else str(version)


def library_versions() -> dict[str, str]:
    """The installed versions of what runs the actions on a GPU: onnxruntime (CPU or GPU package) and the
    CUDA libraries from NVIDIA's wheels, with onnxruntime's execution providers."""
    from importlib import metadata

    out: dict[str, str] = {}
    for dist in ("onnxruntime-gpu", "onnxruntime", "nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12",
                 "nvidia-cublas-cu12"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            continue
    try:
        import onnxruntime
        out["onnxruntime providers"] = ",".join(onnxruntime.get_available_providers())
    except ImportError:
        pass
    return out


def detect_host() -> Host:
    gpu, why = detect_gpu()
    return Host(socket.gethostname(), cpu_model(), tuple(sorted(os.sched_getaffinity(0))), gpu, why)
