"""GPUs without MIG on the agent: :class:`invoker_agent.whole_gpu.WholeGpuBackend` offers a GPU whose MIG
mode is off as fixed slots of its whole kind, on the fake NVML always and, read-only, on a real GPU with
MIG off where one is present; the agent's start-up checks (``--no-mig``, ``--gpu-share``, the CUDA
provider on a real GPU)."""

from __future__ import annotations

import argparse

import pytest

from esg.cluster import SliceRef
from esg_cli.agent import check_gpus
from esg_cli.errors import CliError
from invoker_agent.cuda_check import missing_cuda_package
from invoker_agent.fake_nvml import FakeHost, FakeNvml
from invoker_agent.mig_backend import NVML_ERROR_NOT_SUPPORTED, MigOperationError
from invoker_agent.node import NodeAgent
from invoker_agent.nvml_backend import MUTATING_CALLS, NvmlBackend, ReadOnlyNvml
from invoker_agent.reconcile import Reconciler
from invoker_agent.slices import SliceError, SliceManager
from invoker_agent.whole_gpu import WholeGpuBackend, cuda_device, model_for, slot_uuid
from invoker_agent.workers import WorkerSpec, worker_env


def _real_whole_gpu():
    try:
        import pynvml
        backend = NvmlBackend(ReadOnlyNvml(pynvml))
        if not any(not g.mig_enabled for g in backend.gpus()):
            return None
        return backend
    except Exception:
        return None


@pytest.fixture(params=["fake", pytest.param("nvml", marks=pytest.mark.gpu)])
def whole(request):
    """A MIG backend whose GPU 0 (or the first real GPU with MIG off) runs without MIG, read-only."""
    if request.param == "fake":
        nvml = FakeNvml(FakeHost.with_gpus("H100-80GB", mig_enabled=False))
        return NvmlBackend(ReadOnlyNvml(nvml)), nvml
    backend = _real_whole_gpu()
    if backend is None:
        pytest.skip("no NVIDIA GPU with MIG mode off on this machine")
    return backend, None


def gpu_of(backend: WholeGpuBackend):
    return backend.whole_gpus[0]


def test_a_gpu_without_mig_is_listed_as_its_whole_kind(whole):
    inner, _ = whole
    b = WholeGpuBackend(inner)
    g = gpu_of(b)
    assert g.model == model_for(g.name) + ":whole" and not g.mig_enabled
    kind = g.model
    assert [(gi.profile, gi.start) for gi in b.gpu_instances(g.index)] == [(kind, 0)]
    assert [c.mig_uuid for c in b.compute_instances(g.index)] == [g.uuid]      # CUDA takes the GPU's UUID
    assert b.running_pids(g.index) == {}


def test_shared_slots_are_told_apart_and_name_the_gpu_to_cuda(whole):
    inner, _ = whole
    b = WholeGpuBackend(inner, share=3)
    g = gpu_of(b)
    uuids = [c.mig_uuid for c in b.compute_instances(g.index)]
    assert uuids == [slot_uuid(g.uuid, i, 3) for i in range(3)] and len(set(uuids)) == 3
    assert {cuda_device(u) for u in uuids} == {g.uuid}
    assert g.model.endswith(":whole*3")


def test_nothing_is_created_or_destroyed_on_a_whole_gpu(whole):
    inner, nvml = whole
    b = WholeGpuBackend(inner)
    g = gpu_of(b)
    for call in (lambda: b.create_gpu_instance(g.index, g.model, 0), lambda: b.create_compute_instance(g.index, 0),
                 lambda: b.destroy_compute_instance(g.index, 0, 0), lambda: b.destroy_gpu_instance(g.index, 0)):
        with pytest.raises(MigOperationError) as err:
            call()
        assert err.value.code == NVML_ERROR_NOT_SUPPORTED
    report = Reconciler(b).reconcile_gpu(g.index, [g.model])           # the fixed layout: nothing to do
    assert report.status == "success" and not report.created and not report.destroyed
    if nvml is not None:
        assert not any(nvml.calls[name] for name in MUTATING_CALLS)


def test_a_gpu_in_mig_mode_passes_through_unchanged(make_fake_env):
    env = make_fake_env("A100-40GB")
    b = WholeGpuBackend(env.backend)
    assert b.whole_gpus == [] and b.gpus() == env.backend.gpus()
    report = Reconciler(b).reconcile_gpu(0, ["3g.20gb"])
    assert report.status == "success" and [p for p, _ in env.host.layout(0)] == ["3g.20gb"]


def test_the_slice_manager_reserves_whole_slots_and_refuses_other_kinds():
    node = NodeAgent.create("n0", vcpus=2, fake_gpu="A100-40GB", fake_mig=False, gpu_share=2)
    try:
        slices = SliceManager(node)
        assert slices.gpu_model == "A100-40GB:whole*2"
        uuid = slices.ensure(SliceRef("A100-40GB:whole", 1))
        assert [s.busy for s in slices.status()] == [False, True]
        assert worker_env(WorkerSpec((0,), uuid))["CUDA_VISIBLE_DEVICES"] == uuid.split("/slot")[0]
        slices.release(uuid)
        assert [s.busy for s in slices.status()] == [False, False]
        for bad in (SliceRef("A100-40GB:whole", 2), SliceRef("1g.5gb", 0)):
            with pytest.raises(SliceError):
                slices.ensure(bad)
        assert node.pool.slice_exists(uuid)
    finally:
        node.close()


@pytest.mark.parametrize("name, model", [
    ("NVIDIA H100 80GB HBM3", "H100-80GB"), ("NVIDIA A100-SXM4-40GB", "A100-40GB"), ("NVIDIA L4", "L4"),
    ("Tesla T4", "T4"), ("NVIDIA A10G", "A10G"), ("NVIDIA GeForce RTX 4090", "RTX-4090"),
    ("NVIDIA RTX A6000", "RTX-A6000"), ("NVIDIA H100 PCIe", "H100-80GB"),
])
def test_the_model_a_whole_gpu_is_named_by(name, model):
    assert model_for(name) == model


def test_cuda_visibility_of_each_kind_of_slice():
    assert cuda_device(None) == "" and cuda_device("MIG-1234") == "MIG-1234"
    assert cuda_device("GPU-ab") == "GPU-ab" and cuda_device(slot_uuid("GPU-ab", 1, 2)) == "GPU-ab"


def args(**kw) -> argparse.Namespace:
    base = {"no_mig": False, "gpu_share": 1, "fake_gpu": "A100-40GB", "runner": "process"}
    return argparse.Namespace(**{**base, **kw})


def test_no_mig_refuses_a_gpu_in_mig_mode_without_touching_it():
    node = NodeAgent.create("n0", vcpus=1, fake_gpu="A100-40GB")
    try:
        with pytest.raises(CliError, match="MIG mode on.*-mig 0"):
            check_gpus(node, args(no_mig=True))
        with pytest.raises(CliError, match="--gpu-share"):
            check_gpus(node, args(gpu_share=2))
        check_gpus(node, args())
    finally:
        node.close()


def test_an_agent_on_a_real_gpu_without_the_cuda_provider_refuses_to_start():
    """The GPU is the fake's, taken for real (no --fake-gpu in the flags); the onnxruntime is this
    machine's own, the CPU package: the agent names onnxruntime-gpu."""
    node = NodeAgent.create("n0", vcpus=1, fake_gpu="H100-80GB", fake_mig=False)
    try:
        problem = missing_cuda_package()
        if problem is None:
            pytest.skip("onnxruntime here offers the CUDA provider")
        with pytest.raises(CliError) as err:
            check_gpus(node, args(fake_gpu=None, no_mig=True))
        assert "onnxruntime-gpu" in str(err.value) and "\n" not in str(err.value)
        check_gpus(node, args(fake_gpu=None, runner="docker"))      # actions run in their own image there
    finally:
        node.close()


@pytest.mark.parametrize("providers, wheels, library, needle", [
    (None, (), (), "onnxruntime is not installed: install onnxruntime-gpu"),
    (["CPUExecutionProvider"], ("cudart", "cudnn"), (), "install onnxruntime-gpu in place of onnxruntime"),
    (["CUDAExecutionProvider", "CPUExecutionProvider"], ("cudart",), (), "nvidia-cudnn-cu12"),
    (["CUDAExecutionProvider", "CPUExecutionProvider"], (), ("cudnn",), "nvidia-cuda-runtime-cu12"),
    (["CUDAExecutionProvider", "CPUExecutionProvider"], ("cudart",), ("cudnn",), None),
])
def test_the_missing_package_is_named(providers, wheels, library, needle):
    got = missing_cuda_package(lambda: providers, lambda name: name in wheels,
                               lambda name: f"lib{name}.so" if name in library else None)
    assert got == needle if needle is None else needle in got


def test_the_read_only_guard_refuses_every_change_before_nvml_sees_it():
    nvml = FakeNvml(FakeHost.with_gpus("A100-40GB"))
    guarded = ReadOnlyNvml(nvml)
    backend = NvmlBackend(guarded)
    with pytest.raises(MigOperationError) as err:
        backend.create_gpu_instance(0, "3g.20gb", 0)
    assert err.value.code_name == "NO_PERMISSION" and guarded.refused == ["nvmlDeviceCreateGpuInstanceWithPlacement"]
    assert not any(nvml.calls[name] for name in MUTATING_CALLS)
    assert backend.gpus()[0].mig_enabled                            # reads go through


def test_esg_nvml_read_only_guards_the_real_backend(monkeypatch):
    import pynvml

    from invoker_agent import nvml_backend

    made = []
    monkeypatch.setattr(nvml_backend, "NvmlBackend", lambda module: made.append(module) or module)
    monkeypatch.setenv("ESG_NVML_READ_ONLY", "1")
    assert isinstance(nvml_backend.open_backend(), ReadOnlyNvml) and made[0]._nvml is pynvml
    monkeypatch.delenv("ESG_NVML_READ_ONLY")
    assert nvml_backend.open_backend() is pynvml
