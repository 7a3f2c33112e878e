"""Whether the actions this agent runs can use the GPU it found: onnxruntime's CUDA execution provider.

The process runner starts each action in this agent's own Python environment, and the actions pick the
CUDA provider when onnxruntime offers it (``actions/common/runtime.py``), or quietly run on the CPU. An
agent on a real GPU without that provider would hand out slices whose batches never touch the GPU
while the scheduler plans with GPU latencies, so it refuses to start, naming the package it lacks:

* ``onnxruntime-gpu``: onnxruntime is missing, or the CPU-only package is installed (no CUDA provider);
* ``nvidia-cuda-runtime-cu12`` / ``nvidia-cudnn-cu12``: the CUDA runtime or cuDNN the provider loads is
  found neither in NVIDIA's wheels (``site-packages/nvidia/*/lib``: ``onnxruntime-gpu[cuda,cudnn]``
  installs them) nor on the library path.
"""

from __future__ import annotations

import ctypes.util
import sys
from collections.abc import Callable
from pathlib import Path

GPU_EXTRA = "pip install 'esg-openwhisk[gpu]' (or the image's gpu target)"
#: (the library's name, as ctypes.util.find_library takes it, and the wheel that ships it).
CUDA_LIBRARIES = (("cudart", "nvidia-cuda-runtime-cu12"), ("cudnn", "nvidia-cudnn-cu12"))


def _providers() -> list[str] | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return list(onnxruntime.get_available_providers())


def _in_wheels(library: str) -> bool:
    """Whether NVIDIA's wheels put ``lib<library>.so*`` on this interpreter's path (``nvidia/*/lib``)."""
    for entry in sys.path:
        base = Path(entry or ".") / "nvidia"
        if base.is_dir() and any(base.glob(f"*/lib/lib{library}.so*")):
            return True
    return False


def missing_cuda_package(providers: Callable[[], list[str] | None] = _providers,
                         in_wheels: Callable[[str], bool] = _in_wheels,
                         find_library: Callable[[str], str | None] = ctypes.util.find_library) -> str | None:
    """One line naming the package that keeps actions off the GPU here, or None when nothing is missing."""
    found = providers()
    if found is None:
        return f"onnxruntime is not installed: install onnxruntime-gpu ({GPU_EXTRA})"
    if "CUDAExecutionProvider" not in found:
        return (f"onnxruntime offers no CUDA execution provider (providers: {', '.join(found) or 'none'}): "
                f"install onnxruntime-gpu in place of onnxruntime ({GPU_EXTRA})")
    for library, wheel in CUDA_LIBRARIES:
        if not in_wheels(library) and find_library(library) is None:
            return (f"onnxruntime's CUDA provider needs lib{library}, found neither as the wheel {wheel} nor on "
                    f"the library path: install {wheel} ({GPU_EXTRA})")
    return None
