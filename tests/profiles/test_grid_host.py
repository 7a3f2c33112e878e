"""Grid parsing and which configurations a machine can run (no workers started)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esg.model import Config
from profiles.grid import GridError, parse_grid
from profiles.host import GpuHost, Host
from profiles.profiler import _skip_reason


def test_grid_is_sorted_deduplicated_and_grouped_by_worker():
    grid = parse_grid("4,1,2,1", "2,1", "none,1g.5gb,cpu", "A100-40GB")
    assert grid.batches == (1, 2, 4) and grid.vcpus == (1, 2) and grid.gpus == (None, "1g.5gb")
    configs = grid.configs()
    assert configs[:3] == [Config(1, 1), Config(2, 1), Config(4, 1)]
    assert configs[-1] == Config(4, 2, "1g.5gb") and len(configs) == 12


def test_mig_names_follow_the_gpu_model():
    assert parse_grid("1", "1", "1g.10gb", "H100").gpus == ("1g.10gb",)
    with pytest.raises(GridError, match="'1g.5gb' is unknown to H100-80GB"):
        parse_grid("1", "1", "1g.5gb", "H100")


def _host(gpu: GpuHost | None, cpus: int = 2) -> Host:
    return Host("h", "cpu", tuple(range(cpus)), gpu, None if gpu else "NVML: LIBRARY_NOT_FOUND")


def test_mig_configuration_runs_only_on_an_existing_slice_of_that_profile():
    gpu = GpuHost("NVIDIA A100-SXM4-40GB", "A100-40GB", True, {"3g.20gb": ("MIG-abc",)})
    assert _skip_reason(Config(1, 1, "3g.20gb"), _host(gpu)) is None
    what, why = _skip_reason(Config(1, 1, "1g.5gb"), _host(gpu))
    assert what == "MIG profile 1g.5gb" and "no MIG slice of that profile" in why
    assert "MIG mode is off" in _skip_reason(Config(1, 1, "3g.20gb"), _host(GpuHost("g", "A100-40GB", False)))[1]
    assert "no NVIDIA GPU" in _skip_reason(Config(1, 1, "3g.20gb"), _host(None))[1]
    assert _skip_reason(Config(1, 3), _host(None)) == ("3 vCPUs", "needs 3 vCPUs, this machine has 2")


def test_a_gpu_with_mig_off_is_profiled_whole(monkeypatch, esg, tmp_path):
    """``esg profile`` on a GPU whose MIG mode is off (the fake NVML standing in for the driver): the host
    is its whole kind, one slice with the GPU's UUID, and the kind's configurations are measured there
    (the action runs on this CPU: the point is the table, as scripts/device-check writes it)."""
    from invoker_agent import nvml_backend
    from profiles.host import detect_gpu

    real_open = nvml_backend.open_backend
    monkeypatch.setattr(nvml_backend, "open_backend",
                        lambda *a, **kw: real_open("H100-80GB", fake_mig=False))
    gpu, why = detect_gpu()
    assert why is None and gpu.model == "H100-80GB:whole" and not gpu.mig_enabled
    assert list(gpu.slices) == ["H100-80GB:whole"] and gpu.slices["H100-80GB:whole"][0].startswith("GPU-")
    assert _skip_reason(Config(1, 1, "H100-80GB:whole"), _host(gpu)) is None
    action = str(Path(__file__).with_name("actions") / "pinned.py")
    r = esg("profile", action, "--batch", "1,2", "--vcpus", "1", "--gpu", "none,H100-80GB:whole",
            "--runs", "1", "--out", str(tmp_path), "--no-progress")
    assert r.code == 0, r.err
    table = json.loads((tmp_path / "pinned.json").read_text())
    assert table["gpu_model"] == "H100-80GB:whole"
    assert {c["gpu"] for c in table["configs"]} == {None, "H100-80GB:whole"}
    assert "onnxruntime" in table["measured"]["libraries"] and "gpu_driver" in table["measured"]
