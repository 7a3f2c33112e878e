"""``esg profile`` records a GPU worker's memory (``gpu_memory_mb``) where NVML can say, and only there."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from esg_files import load_profile
from profiles.gpu_memory import MIB, process_memory_mb
from profiles.grid import parse_grid
from profiles.host import GpuHost, Host
from profiles.profiler import Profiler, ProfilerSettings, partial_path
from profiles.store import PartialStore
from profiles.targets import resolve

from .helpers import ACTIONS, read_json

KIND = "H100-80GB:whole"
UUID = "GPU-memory-test"


def _target():
    _what, [target] = resolve(str(ACTIONS / "pinned.py"), {"seed": 1})
    return target


def _host(gpu: bool = True) -> Host:
    """This machine's CPUs, with a GPU whose one slice is the whole GPU (the action still runs on the CPU:
    the point is what the profiler does with the memory figure)."""
    g = GpuHost("NVIDIA H100 80GB HBM3", KIND, False, {KIND: (UUID,)}) if gpu else None
    return Host("h", "cpu", tuple(sorted(os.sched_getaffinity(0))), g, None if gpu else "no GPU")


def _options(out: Path, gpus: str) -> ProfilerSettings:
    return ProfilerSettings(parse_grid("1,2", "1", gpus, KIND), 1, KIND, out, 0, progress=False)


def test_a_gpu_groups_worker_memory_is_recorded_in_the_table(tmp_path):
    calls = []

    def probe(uuid, pids):
        calls.append(uuid)
        assert pids and all(os.path.exists(f"/proc/{p}") for p in pids)   # the worker is still up
        return 1500

    report = Profiler(_target(), _options(tmp_path, f"none,{KIND}"), _host(), log=lambda m: None,
                      memory_probe=probe).run()
    assert len(report.measured) == 4 and not report.failed
    assert calls == [UUID]                                  # once, for the GPU group, not the CPU one
    assert load_profile(tmp_path / "pinned.json").gpu_memory_mb == 1500
    table = read_json(tmp_path / "pinned.json")
    assert table["worker_gpu_memory"] == [{"vcpus": 1, "gpu": KIND, "gpu_memory_mb": 1500}]


def test_no_figure_without_a_gpu_or_when_nvml_cannot_say(tmp_path):
    calls = []
    Profiler(_target(), _options(tmp_path / "cpu", "none"), _host(gpu=False), log=lambda m: None,
             memory_probe=lambda uuid, pids: calls.append(uuid) or 1500).run()
    assert calls == []
    assert "gpu_memory_mb" not in read_json(tmp_path / "cpu" / "pinned.json")

    logs = []
    Profiler(_target(), _options(tmp_path / "gpu", KIND), _host(), log=logs.append,
             memory_probe=lambda uuid, pids: None).run()
    table = read_json(tmp_path / "gpu" / "pinned.json")
    assert "gpu_memory_mb" not in table and "worker_gpu_memory" not in table
    assert any("GPU memory" in m and "not known" in m for m in logs)


def test_a_group_measured_again_keeps_the_larger_figure_and_resumes_it(tmp_path):
    path = partial_path(tmp_path, "f")
    store = PartialStore.open(path, {"k": 1})
    store.record_gpu_memory(1, "1g.10gb", 1800)
    store.record_gpu_memory(1, "1g.10gb", 1700)
    store.record_gpu_memory(2, "3g.40gb", 1900)
    again = PartialStore.open(path, {"k": 1})
    assert again.gpu_memory == {"1c/1g.10gb": {"vcpus": 1, "gpu": "1g.10gb", "gpu_memory_mb": 1800},
                                "2c/3g.40gb": {"vcpus": 2, "gpu": "3g.40gb", "gpu_memory_mb": 1900}}
    table = tmp_path / "f.json"                             # a finished table of the same key
    table.write_text(json.dumps({"configs": [], "measured": {"key": {"k": 1}},
                                 "worker_gpu_memory": list(again.gpu_memory.values())}))
    path.unlink()
    assert PartialStore.open(path, {"k": 1}, table=table).gpu_memory == again.gpu_memory


class _Nvml:
    def __init__(self, procs, known=UUID):
        self.procs, self.known = procs, known

    def nvmlDeviceGetHandleByUUID(self, uuid):
        if uuid != self.known:
            raise RuntimeError("NVML_ERROR_NOT_FOUND")
        return "handle"

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        assert handle == "handle"
        return [SimpleNamespace(pid=pid, usedGpuMemory=used) for pid, used in self.procs]


def test_nvml_per_process_memory_of_the_workers_processes():
    procs = [(10, 1000 * MIB), (11, MIB // 2), (99, 5000 * MIB)]       # 99 is not the worker's
    assert process_memory_mb(_Nvml(procs), UUID, [10, 11]) == 1001    # 1000.5 MiB, rounded up
    assert process_memory_mb(_Nvml(procs), "MIG-other", [10, 11]) is None
    assert process_memory_mb(_Nvml(procs), UUID, [12]) is None
    assert process_memory_mb(_Nvml([(10, None)]), UUID, [10]) is None        # not available
    assert process_memory_mb(_Nvml([(10, (1 << 64) - 1)]), UUID, [10]) is None
    assert process_memory_mb(_Nvml([(10, 0)]), UUID, [10]) is None
    assert process_memory_mb(object(), UUID, [10]) is None                   # a binding without the calls
