"""GPUs without MIG, offered whole: one slice kind ``<MODEL>:whole`` (``esg.mig``, "GPUs without MIG").

:class:`WholeGpuBackend` wraps the node's MIG backend (real NVML or the fake). A GPU in MIG mode passes
through unchanged; a GPU whose MIG mode is off, or a model without MIG, is presented to the reconciler,
the slice manager and the heartbeats as a fixed layout of ``share`` slots of its whole kind -- GPU
instances 0..share-1 at memory "slices" 0..share-1, each with one compute instance -- that always exist:
creating or destroying one is refused (NOT_SUPPORTED), and no MIG call reaches the driver for it. So
the agent carves nothing there, and a batch takes a slot as it takes a MIG slice.

A slot's UUID is the GPU's own (``GPU-<uuid>``), which ``CUDA_VISIBLE_DEVICES`` and the NVIDIA container
runtime accept; when several batches share the GPU (``--gpu-share N``) each slot's is the GPU's with
``/slot<i>`` after it, so the agent tells the slots apart, and :func:`cuda_device` gives CUDA the GPU's.
Processes on a whole GPU are not attributed to slots (NVML lists them per GPU): the agent's own
reservations say which slot is busy.
"""

from __future__ import annotations

import re

from esg import mig
from invoker_agent.mig_backend import (
    NVML_ERROR_NOT_SUPPORTED,
    ComputeInstance,
    GpuInfo,
    GpuInstance,
    MigBackend,
    MigOperationError,
)
from invoker_agent.nvml_backend import gpu_model_for

SLOT_SEPARATOR = "/slot"
_VENDOR_WORDS = ("NVIDIA", "Tesla", "GeForce", "Quadro")


def slot_uuid(gpu_uuid: str, slot: int, share: int) -> str:
    """The UUID the agent knows slot ``slot`` of a whole GPU by."""
    return gpu_uuid if share == 1 else f"{gpu_uuid}{SLOT_SEPARATOR}{slot}"


def cuda_device(uuid: str | None) -> str:
    """What ``CUDA_VISIBLE_DEVICES`` (or a container's device request) takes for a slice's UUID: a MIG
    UUID as it is, a whole GPU's slot as its GPU's UUID, nothing for CPU-only work (hides every GPU)."""
    return "" if not uuid else uuid.split(SLOT_SEPARATOR, 1)[0]


def model_for(name: str) -> str:
    """The model a whole GPU is named by, from NVML's name: a MIG model's canonical name
    ("NVIDIA H100 80GB HBM3" -> "H100-80GB"), otherwise the name without the vendor's words, spaces as
    dashes ("NVIDIA L4" -> "L4", "NVIDIA GeForce RTX 4090" -> "RTX-4090")."""
    known = gpu_model_for(name)
    if known is not None:
        return known
    words = [w for w in name.split() if w not in _VENDOR_WORDS]
    cleaned = re.sub(r"[^A-Za-z0-9._+-]", "", "-".join(words))[:64]
    return cleaned or "GPU"


class WholeGpuBackend:
    """:class:`~invoker_agent.mig_backend.MigBackend` over ``inner`` where every GPU without MIG mode is
    one whole-GPU kind in ``share`` fixed slots (the module's docstring says how)."""

    def __init__(self, inner: MigBackend, share: int = 1) -> None:
        if not 1 <= share <= mig.MAX_GPU_SHARE:
            raise ValueError(f"--gpu-share must be 1 to {mig.MAX_GPU_SHARE}, got {share}")
        self.inner = inner
        self.share = share
        self._whole: dict[int, GpuInfo] = {}
        for g in inner.gpus():
            if not g.mig_enabled:
                self._whole[g.index] = GpuInfo(g.index, g.uuid, g.name, mig.whole_model(model_for(g.name), share),
                                               False, g.mig_pending)

    @property
    def whole_gpus(self) -> list[GpuInfo]:
        """The GPUs offered whole (MIG mode off when the agent started)."""
        return [self._whole[i] for i in sorted(self._whole)]

    def _kind(self, gpu: int) -> str | None:
        g = self._whole.get(gpu)
        return None if g is None or g.model is None else mig.whole_kind(g.model)

    def _refuse(self, what: str, gpu: int) -> MigOperationError:
        return MigOperationError(f"{what} on GPU {gpu}", NVML_ERROR_NOT_SUPPORTED,
                                 "the GPU runs without MIG: it is offered whole, its slots are fixed")

    # --- MigBackend ------------------------------------------------------------------------------
    def gpus(self) -> list[GpuInfo]:
        return [self._whole.get(g.index, g) for g in self.inner.gpus()]

    def gpu_instances(self, gpu: int) -> list[GpuInstance]:
        kind = self._kind(gpu)
        if kind is None:
            return self.inner.gpu_instances(gpu)
        return [GpuInstance(gpu, i, kind, i, 1) for i in range(self.share)]

    def compute_instances(self, gpu: int) -> list[ComputeInstance]:
        g = self._whole.get(gpu)
        if g is None:
            return self.inner.compute_instances(gpu)
        return [ComputeInstance(gpu, i, 0, slot_uuid(g.uuid, i, self.share)) for i in range(self.share)]

    def running_pids(self, gpu: int) -> dict[int, list[int]]:
        return {} if gpu in self._whole else self.inner.running_pids(gpu)

    def create_gpu_instance(self, gpu: int, profile: str, start: int) -> GpuInstance:
        if gpu in self._whole:
            raise self._refuse(f"create GPU instance {profile} at {start}", gpu)
        return self.inner.create_gpu_instance(gpu, profile, start)

    def create_compute_instance(self, gpu: int, gi_id: int) -> ComputeInstance:
        if gpu in self._whole:
            raise self._refuse(f"create a compute instance in GI {gi_id}", gpu)
        return self.inner.create_compute_instance(gpu, gi_id)

    def destroy_compute_instance(self, gpu: int, gi_id: int, ci_id: int) -> None:
        if gpu in self._whole:
            raise self._refuse(f"destroy compute instance {ci_id} of GI {gi_id}", gpu)
        self.inner.destroy_compute_instance(gpu, gi_id, ci_id)

    def destroy_gpu_instance(self, gpu: int, gi_id: int) -> None:
        if gpu in self._whole:
            raise self._refuse(f"destroy GPU instance {gi_id}", gpu)
        self.inner.destroy_gpu_instance(gpu, gi_id)

    def mig_uuid(self, gpu: int, gi_id: int, ci_id: int) -> str:
        g = self._whole.get(gpu)
        if g is None:
            return self.inner.mig_uuid(gpu, gi_id, ci_id)
        return slot_uuid(g.uuid, gi_id, self.share)

    def mig_devices(self, gpu: int) -> dict[tuple[int, int], str]:
        """(GI id, CI id) -> UUID of every slice of ``gpu`` (a whole GPU's slots, or its MIG devices)."""
        g = self._whole.get(gpu)
        if g is not None:
            return {(i, 0): slot_uuid(g.uuid, i, self.share) for i in range(self.share)}
        walk = getattr(self.inner, "mig_devices", None)
        if walk is not None:
            return walk(gpu)
        return {(c.gi_id, c.ci_id): c.mig_uuid for c in self.inner.compute_instances(gpu)}

    def close(self) -> None:
        close = getattr(self.inner, "close", None)
        if close is not None:
            close()
