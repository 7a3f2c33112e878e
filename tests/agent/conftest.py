"""Fixtures for the agent tests: MIG backends (the fake always, real NVML only where a GPU is present)."""

from __future__ import annotations

import os
from dataclasses import dataclass

import pytest

from invoker_agent.fake_nvml import FakeHost, FakeNvml
from invoker_agent.nvml_backend import NvmlBackend

ALLOW_MIG_CHANGES = os.environ.get("ESG_ALLOW_MIG_CHANGES") == "1"


def _real_nvml() -> NvmlBackend | None:
    try:
        import pynvml
        backend = NvmlBackend(pynvml)
        if not any(g.mig_enabled for g in backend.gpus()):
            return None
        return backend
    except Exception:
        return None


@dataclass
class MigEnv:
    kind: str                    # "fake" or "nvml"
    backend: NvmlBackend
    host: FakeHost | None        # the fake's simulated machine (None on real NVML)
    nvml: object                 # the pynvml module, or the FakeNvml standing in for it
    gpu: int = 0

    @property
    def model(self) -> str:
        return next(g.model for g in self.backend.gpus() if g.index == self.gpu)

    def require_changes(self) -> None:
        """Skip on a real GPU unless MIG changes were explicitly allowed."""
        if self.kind == "nvml" and not ALLOW_MIG_CHANGES:
            pytest.skip("changes MIG state: set ESG_ALLOW_MIG_CHANGES=1 on a GPU host to run")


def fake_env(model: str = "A100-40GB", **kw) -> MigEnv:
    host = FakeHost.with_gpus(model)
    nvml = FakeNvml(host, **kw)
    return MigEnv("fake", NvmlBackend(nvml), host, nvml)


@pytest.fixture(params=["fake", pytest.param("nvml", marks=pytest.mark.gpu)])
def mig_env(request) -> MigEnv:
    if request.param == "fake":
        return fake_env()
    backend = _real_nvml()
    if backend is None:
        pytest.skip("no NVIDIA GPU with MIG enabled on this machine")
    import pynvml
    gpu = next(g.index for g in backend.gpus() if g.mig_enabled)
    return MigEnv("nvml", backend, None, pynvml, gpu)


@pytest.fixture
def make_fake_env():
    """Factory: ``make_fake_env("H100-80GB", root=False)`` builds a fake GPU host and its backend."""
    return fake_env
