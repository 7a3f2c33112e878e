"""A warm worker's GPU memory, for the ``gpu_memory_mb`` of the tables ``esg profile`` writes.

Read through NVML once a (vCPUs, GPU) group has run all its configurations (its largest batch last): the
GPU memory NVML reports for the worker's processes (the sandbox's process tree) on the group's MIG
instance, or on the GPU for a whole-GPU kind. That is the CUDA context, the weights and what the
runtime's allocator keeps after the largest batch (onnxruntime's CUDA arena keeps what it grew to).
Where NVML cannot say -- no driver, a device NVML cannot find by UUID, no process of the worker among
those it reports, a per-process figure it reports as not available -- there is no figure, and the table
has no ``gpu_memory_mb``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

MIB = 1 << 20
_NOT_AVAILABLE = (1 << 64) - 1      # NVML_VALUE_NOT_AVAILABLE as an unsigned long long

MemoryProbe = Callable[[str, Sequence[int]], "int | None"]
"""(device UUID, the worker's process ids) -> the MiB they hold on that device, or None if unknown."""


def process_memory_mb(nvml: Any, device_uuid: str, pids: Sequence[int]) -> int | None:
    """The GPU memory (MiB, rounded up) that ``pids`` hold on the device ``device_uuid`` (a MIG UUID or a
    GPU's), per NVML's compute processes of that device; None where NVML cannot tell."""
    try:
        handle = nvml.nvmlDeviceGetHandleByUUID(device_uuid)
        procs = nvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except Exception:  # noqa: BLE001 - NVMLError, or a binding without the call: no figure
        return None
    wanted = set(pids)
    used = [p.usedGpuMemory for p in procs if int(p.pid) in wanted]
    if not used or any(u is None or int(u) == _NOT_AVAILABLE for u in used):
        return None
    total = sum(int(u) for u in used)
    return math.ceil(total / MIB) if total > 0 else None


def nvml_memory_probe(device_uuid: str, pids: Sequence[int]) -> int | None:
    """:func:`process_memory_mb` through the agent's NVML backend (read-only under ``ESG_NVML_READ_ONLY``)."""
    from invoker_agent.nvml_backend import open_backend
    try:
        backend = open_backend()
    except Exception:  # noqa: BLE001 - no usable NVML: no figure
        return None
    try:
        return process_memory_mb(backend.nvml, device_uuid, pids)
    finally:
        try:
            backend.close()
        except Exception:  # noqa: BLE001
            pass
