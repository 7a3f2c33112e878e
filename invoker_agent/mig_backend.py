"""The MIG backend port: the small set of operations the reconciler needs from a GPU node.

Two implementations share one adapter (:class:`invoker_agent.nvml_backend.NvmlBackend`): over the real
``pynvml`` module, or over :class:`invoker_agent.fake_nvml.FakeNvml`, an in-memory stand-in for the same
module surface. Backend failures are :class:`MigOperationError`, which keeps NVML's return code.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

# NVML return codes the agent reasons about (values from nvml.h; pynvml uses the same numbers).
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_IN_USE = 19
NVML_ERROR_INSUFFICIENT_RESOURCES = 23

CODE_NAMES = {
    1: "UNINITIALIZED", 2: "INVALID_ARGUMENT", 3: "NOT_SUPPORTED", 4: "NO_PERMISSION",
    6: "NOT_FOUND", 9: "DRIVER_NOT_LOADED", 12: "LIBRARY_NOT_FOUND", 16: "RESET_REQUIRED",
    19: "IN_USE", 23: "INSUFFICIENT_RESOURCES", 999: "UNKNOWN",
}

_HINTS = {
    NVML_ERROR_NO_PERMISSION: "needs root or read access to the mig/config capability "
                              "(/proc/driver/nvidia/capabilities/mig/config)",
    NVML_ERROR_IN_USE: "processes or compute instances still use it",
    NVML_ERROR_INSUFFICIENT_RESOURCES: "the placement overlaps another instance or a profile limit is reached",
    NVML_ERROR_NOT_SUPPORTED: "MIG is not supported or not enabled on this GPU",
}


class MigOperationError(RuntimeError):
    """A backend operation failed; ``code`` is NVML's return code (e.g. 19 for IN_USE)."""

    def __init__(self, operation: str, code: int, detail: str = "") -> None:
        self.operation = operation
        self.code = code
        self.code_name = CODE_NAMES.get(code, f"code {code}")
        hint = detail or _HINTS.get(code, "")
        super().__init__(f"{operation}: NVML {self.code_name}" + (f" ({hint})" if hint else ""))


@dataclass(frozen=True)
class GpuInfo:
    index: int
    uuid: str
    name: str            # marketing name as NVML reports it, e.g. "NVIDIA A100-SXM4-40GB"
    model: str | None    # esg.mig geometry key ("A100-40GB"), None when the model is not a known MIG GPU
    mig_enabled: bool    # current MIG mode
    mig_pending: bool    # pending MIG mode (applies after a GPU reset on Ampere)


@dataclass(frozen=True)
class GpuInstance:
    gpu: int
    gi_id: int
    profile: str         # esg.mig profile name, e.g. "3g.20gb"
    start: int           # placement start, in memory slices
    size: int            # placement size, in memory slices


@dataclass(frozen=True)
class ComputeInstance:
    gpu: int
    gi_id: int
    ci_id: int
    mig_uuid: str        # "MIG-<uuid>", what CUDA_VISIBLE_DEVICES takes


@runtime_checkable
class MigBackend(Protocol):
    """What the reconciler asks of a node's GPUs. All methods may raise :class:`MigOperationError`."""

    def gpus(self) -> list[GpuInfo]: ...

    def gpu_instances(self, gpu: int) -> list[GpuInstance]: ...

    def compute_instances(self, gpu: int) -> list[ComputeInstance]: ...

    def running_pids(self, gpu: int) -> dict[int, list[int]]:
        """Pids of compute processes per GPU-instance id (instances without processes are absent)."""
        ...

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance:
        """Create a GI of ``profile`` at an explicit placement (never driver auto-placement)."""
        ...

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        """Create one compute instance spanning the whole GI and return it with its MIG UUID."""
        ...

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        """Destroy a CI; one already gone counts as done."""
        ...

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None: ...

    def mig_uuid(self, gpu: int, gi_id: int, ci_id: int) -> str:
        """The MIG device UUID of (GI, CI), found by walking the GPU's MIG device handles."""
        ...
