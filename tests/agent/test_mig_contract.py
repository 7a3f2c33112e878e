"""One contract suite for the MIG backend + reconciler, on the fake always and on real NVML where present.

On a real GPU only read-only tests run unless ESG_ALLOW_MIG_CHANGES=1.
"""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from esg import mig
from invoker_agent.mig_backend import (
    NVML_ERROR_IN_USE,
    NVML_ERROR_INSUFFICIENT_RESOURCES,
    NVML_ERROR_NO_PERMISSION,
    MigBackend,
    MigOperationError,
)
from invoker_agent.reconcile import Reconciler


def counts(layout):
    return sorted(mig.layout_counts(layout))


# --- read-only: safe on any host ---------------------------------------------------------------

def test_backend_lists_gpus_and_state(mig_env):
    b = mig_env.backend
    assert isinstance(b, MigBackend)
    gpu = next(g for g in b.gpus() if g.index == mig_env.gpu)
    assert gpu.uuid.startswith("GPU-") and gpu.mig_enabled and gpu.model in mig.GEOMETRIES
    try:
        gis = b.gpu_instances(mig_env.gpu)
    except MigOperationError as e:
        if e.code == NVML_ERROR_NO_PERMISSION:
            pytest.skip("listing GPU instances needs root or the mig/config capability")
        raise
    geo = mig.geometry(gpu.model)
    for gi in gis:                                       # every GI's placement is one of its profile's
        assert (gi.start, gi.size) in geo.profile(gi.profile).placements()
    for ci in b.compute_instances(mig_env.gpu):
        assert ci.mig_uuid.startswith("MIG-")


def test_profile_ids_are_read_from_nvml_and_match_the_geometry(mig_env):
    geo = mig.geometry(mig_env.model)
    for name, prof in mig_env.backend._gi_profiles(mig_env.gpu).items():
        assert name in geo.profiles, f"NVML reports profile {name} unknown to esg.mig"
        assert prof.gi_profile_id == geo.profile(name).gi_profile_id
        assert prof.compute_slices == geo.profile(name).compute_slices


def test_utilisation_is_not_supported_in_mig_mode(mig_env):
    dev = mig_env.nvml.nvmlDeviceGetHandleByIndex(mig_env.gpu)
    with pytest.raises(pynvml.NVMLError_NotSupported):
        mig_env.nvml.nvmlDeviceGetUtilizationRates(dev)


# --- MIG changes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("model", ["A100-40GB", "H100-80GB", "A30"])
def test_every_valid_layout_is_created_with_explicit_placements(make_fake_env, model):
    env = make_fake_env(model)
    rec = Reconciler(env.backend)
    layouts = mig.valid_layouts(model)
    assert layouts
    for lc in layouts:
        profiles = [p for p, n in lc for _ in range(n)]
        report = rec.reconcile_gpu(0, profiles)
        assert report.status == "success", (lc, report.reason)
        assert counts(env.host.layout(0)) == sorted(lc)
        uuids = {s.mig_uuid for s in report.slices}
        assert len(uuids) == len(profiles) and all(u.startswith("MIG-") for u in uuids)
        assert rec.reconcile_gpu(0, []).status == "success"
        assert env.host.layout(0) == []
    assert env.nvml.calls["nvmlDeviceCreateGpuInstance"] == 0      # never driver auto-placement


def test_three_g_plus_three_g_blocks_any_one_g(make_fake_env):
    env = make_fake_env("A100-40GB")
    b = env.backend
    b.create_gpu_instance(0, "3g.20gb", 0)
    b.create_gpu_instance(0, "3g.20gb", 4)
    for start in range(7):
        with pytest.raises(MigOperationError) as e:
            b.create_gpu_instance(0, "1g.5gb", start)
        assert e.value.code == NVML_ERROR_INSUFFICIENT_RESOURCES
    report = Reconciler(b).reconcile_gpu(0, ["3g.20gb", "3g.20gb", "1g.5gb"])
    assert report.status == "failed" and "impossible" in report.reason
    assert env.host.layout(0) == [("3g.20gb", 0), ("3g.20gb", 4)]       # nothing touched


def test_four_g_plus_three_g_is_allowed(mig_env):
    mig_env.require_changes()
    rec = Reconciler(mig_env.backend)
    names = mig.geometry(mig_env.model).profiles
    four = next(n for n, p in names.items() if p.compute_slices == 4)
    three = next(n for n, p in names.items() if p.compute_slices == 3)
    try:
        report = rec.reconcile_gpu(mig_env.gpu, [four, three])
        assert report.status == "success", report.reason
        assert report.layout == sorted([(four, 0), (three, 4)])
    finally:
        rec.reconcile_gpu(mig_env.gpu, [])


def test_driver_auto_placement_fails_19_19_14_9_but_the_reconciler_never_uses_it(make_fake_env):
    env = make_fake_env("A100-40GB")
    nv = env.nvml
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    for pid in (19, 19, 14):
        nv.nvmlDeviceCreateGpuInstance(dev, pid)
    with pytest.raises(pynvml.NVMLError_InsufficientResources):
        nv.nvmlDeviceCreateGpuInstance(dev, 9)
    env.host.reset()
    for pid in (9, 19, 14, 19):                     # the documented working order
        nv.nvmlDeviceCreateGpuInstance(dev, pid)
    env.host.reset()
    auto = nv.calls["nvmlDeviceCreateGpuInstance"]
    report = Reconciler(env.backend).reconcile_gpu(0, ["1g.5gb", "1g.5gb", "2g.10gb", "3g.20gb"])
    assert report.status == "success", report.reason
    assert counts(report.layout) == [("1g.5gb", 2), ("2g.10gb", 1), ("3g.20gb", 1)]
    assert nv.calls["nvmlDeviceCreateGpuInstance"] == auto


def test_a_busy_instance_survives_the_replanning_of_the_others(make_fake_env):
    env = make_fake_env("A100-40GB")
    rec = Reconciler(env.backend)
    assert rec.reconcile_gpu(0, ["3g.20gb", "2g.10gb", "1g.5gb", "1g.5gb"]).status == "success"
    three = next(s for s in rec.read_state(0) if s.profile == "3g.20gb")
    env.host.attach_pid(0, three.gi_id, three.ci_id, 4242)
    report = rec.reconcile_gpu(0, ["3g.20gb", "1g.5gb", "1g.5gb", "1g.5gb", "1g.5gb"])
    assert report.status == "success", report.reason
    kept = next(s for s in report.slices if s.profile == "3g.20gb")
    assert (kept.gi_id, kept.mig_uuid, kept.start) == (three.gi_id, three.mig_uuid, three.start)
    assert counts(report.layout) == [("1g.5gb", 4), ("3g.20gb", 1)]
    # a layout without the busy 3g: everything else is replanned, the 3g stays and the GPU is pending
    report = rec.reconcile_gpu(0, ["4g.20gb"])
    assert report.status == "pending" and "busy" in report.reason
    assert three.mig_uuid in {s.mig_uuid for s in report.slices}
    env.host.detach_pid(4242)
    report = rec.reconcile_gpu(0, ["4g.20gb", "2g.10gb"])
    assert report.status == "success" and counts(report.layout) == [("2g.10gb", 1), ("4g.20gb", 1)]


def test_a_slice_the_worker_pool_marks_busy_is_never_destroyed(make_fake_env):
    env = make_fake_env("A30")
    busy: set[str] = set()
    rec = Reconciler(env.backend, busy_slices=lambda: busy)
    assert rec.reconcile_gpu(0, ["2g.12gb", "1g.6gb", "1g.6gb"]).status == "success"
    two = next(s for s in rec.read_state(0) if s.profile == "2g.12gb")
    busy.add(two.mig_uuid)
    report = rec.reconcile_gpu(0, ["4g.24gb"])
    assert report.status == "pending" and report.destroyed == [] and report.created == []
    assert two.mig_uuid in env.host.mig_uuids()


def test_busy_instance_cannot_be_destroyed_in_use(make_fake_env):
    env = make_fake_env("A100-40GB")
    b = env.backend
    gi = b.create_gpu_instance(0, "2g.10gb", 0)
    ci = b.create_compute_instance(0, gi.gi_id)
    with pytest.raises(MigOperationError) as e:          # GI with a live CI
        b.destroy_gpu_instance(0, gi.gi_id)
    assert e.value.code == NVML_ERROR_IN_USE
    env.host.attach_pid(0, gi.gi_id, ci.ci_id, 7)
    assert b.running_pids(0) == {gi.gi_id: [7]}
    with pytest.raises(MigOperationError) as e:          # CI with a process
        b.destroy_compute_instance(0, gi.gi_id, ci.ci_id)
    assert e.value.code == NVML_ERROR_IN_USE
    nv = env.nvml
    with pytest.raises(pynvml.NVMLError_InUse):          # pynvml's own exception class at the surface
        nv.nvmlGpuInstanceDestroy(nv.nvmlDeviceGetGpuInstanceById(nv.nvmlDeviceGetHandleByIndex(0), gi.gi_id))


def test_crash_between_gi_and_ci_creation_is_reconciled_on_restart(make_fake_env, tmp_path):
    env = make_fake_env("A100-40GB")
    journal = tmp_path / "mig-journal.json"
    rec = Reconciler(env.backend, journal=str(journal))
    env.nvml.fail_next_compute_instance()
    report = rec.reconcile_gpu(0, ["3g.20gb", "4g.20gb"])
    assert report.status == "failed"
    assert any(s.ci_id is None for s in rec.read_state(0))       # a GI left without its CI
    assert '"op": "create"' in journal.read_text()
    # restart: a new process (new NVML handles) on the same GPUs, reading the same journal
    from invoker_agent.fake_nvml import FakeNvml
    from invoker_agent.nvml_backend import NvmlBackend
    rec2 = Reconciler(NvmlBackend(FakeNvml(env.host)), journal=str(journal))
    done = rec2.recover()
    assert len(done) == 1 and "destroyed" in done[0]
    assert all(s.ci_id is not None for s in rec2.read_state(0))
    assert '"gpus": {}' in journal.read_text()
    report = rec2.reconcile_gpu(0, ["3g.20gb", "4g.20gb"])
    assert report.status == "success" and report.layout == [("3g.20gb", 4), ("4g.20gb", 0)]


def test_a_gi_without_ci_found_outside_the_journal_gets_its_ci(make_fake_env):
    env = make_fake_env("H100-80GB")
    env.backend.create_gpu_instance(0, "2g.20gb", 0)
    report = Reconciler(env.backend).reconcile_gpu(0, [("2g.20gb", 0)])
    assert report.status == "success" and report.slices[0].mig_uuid.startswith("MIG-")


def test_permission_errors_are_reported_clearly(make_fake_env):
    env = make_fake_env("A100-40GB", root=False)
    report = Reconciler(env.backend).reconcile_gpu(0, ["7g.40gb"])
    assert report.status == "failed"
    assert "NO_PERMISSION" in report.reason and "mig/config" in report.reason
    with pytest.raises(MigOperationError) as e:
        env.backend.create_gpu_instance(0, "7g.40gb", 0)
    assert e.value.code == NVML_ERROR_NO_PERMISSION
    capable = make_fake_env("A100-40GB", root=False, mig_config_capability=True)
    assert Reconciler(capable.backend).reconcile_gpu(0, ["7g.40gb"]).status == "success"


def test_compute_instance_info_device_is_the_parent_yet_uuid_resolution_finds_the_mig_device(make_fake_env):
    env = make_fake_env("A100-40GB")
    nv, b = env.nvml, env.backend
    gi = b.create_gpu_instance(0, "3g.20gb", 4)
    ci = b.create_compute_instance(0, gi.gi_id)
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    ci_handle = nv.nvmlGpuInstanceGetComputeInstanceById(nv.nvmlDeviceGetGpuInstanceById(dev, gi.gi_id), ci.ci_id)
    info = nv.nvmlComputeInstanceGetInfo(ci_handle)
    parent_uuid = nv.nvmlDeviceGetUUID(info.device)
    assert parent_uuid == b.gpus()[0].uuid and parent_uuid.startswith("GPU-")
    assert ci.mig_uuid.startswith("MIG-") and ci.mig_uuid != parent_uuid
    assert b.mig_uuid(0, gi.gi_id, ci.ci_id) == ci.mig_uuid


def test_impossible_layout_or_unknown_profile_touches_nothing(make_fake_env):
    env = make_fake_env("A100-40GB")
    rec = Reconciler(env.backend)
    assert rec.reconcile_gpu(0, ["2g.10gb"]).status == "success"
    before = env.host.layout(0)
    calls = sum(env.nvml.calls.values())
    for spec, words in ((["7g.40gb", "1g.5gb"], "impossible"), (["5g.25gb"], "unknown"),
                        ([("3g.20gb", 2)], "cannot start"), ([("3g.20gb", 0), ("2g.10gb", 2)], "overlaps"),
                        (["1g.5gb+me", "1g.5gb+me"], "impossible")):
        report = rec.reconcile_gpu(0, spec)
        assert report.status == "failed" and words in report.reason, (spec, report.reason)
    assert env.host.layout(0) == before
    creates = [k for k in env.nvml.calls if "Create" in k or "Destroy" in k]
    assert sum(env.nvml.calls[k] for k in creates) == 2 and sum(env.nvml.calls.values()) - calls < 40


def test_reconcile_is_idempotent_and_fixes_fragmentation(make_fake_env):
    env = make_fake_env("A100-40GB")
    rec = Reconciler(env.backend)
    assert rec.reconcile_gpu(0, [("1g.5gb", 1), ("1g.5gb", 3), ("1g.5gb", 5)]).status == "success"
    report = rec.reconcile_gpu(0, ["3g.20gb", "3g.20gb"])          # fragmented 1g's must go
    assert report.status == "success" and report.layout == [("3g.20gb", 0), ("3g.20gb", 4)]
    again = rec.reconcile_gpu(0, ["3g.20gb", "3g.20gb"])
    assert again.status == "success" and again.created == [] and again.destroyed == []


def test_reset_wipes_instances_keeps_mode_and_reconcile_restores(make_fake_env):
    env = make_fake_env("A100-40GB")
    rec = Reconciler(env.backend)
    rec.reconcile_gpu(0, ["7g.40gb"])
    env.host.reset()
    assert env.host.layout(0) == [] and env.backend.gpus()[0].mig_enabled
    assert rec.reconcile_gpu(0, ["7g.40gb"]).created == [("7g.40gb", 0)]


def test_mig_device_handles_have_holes_and_are_reused(make_fake_env):
    env = make_fake_env("A100-40GB")
    b, nv = env.backend, env.nvml
    made = []
    for start in (0, 1, 2):
        gi = b.create_gpu_instance(0, "1g.5gb", start)
        made.append(b.create_compute_instance(0, gi.gi_id))
    b.destroy_compute_instance(0, made[1].gi_id, made[1].ci_id)
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 1)
    gi = b.create_gpu_instance(0, "2g.10gb", 4)
    new = b.create_compute_instance(0, gi.gi_id)
    h = nv.nvmlDeviceGetMigDeviceHandleByIndex(dev, 1)                  # the index is reused
    assert nv.nvmlDeviceGetUUID(h) == new.mig_uuid != made[1].mig_uuid
    assert b.compute_instances(0)  # the walk skips holes
    b.destroy_compute_instance(0, made[1].gi_id, made[1].ci_id)      # already gone: done


def test_fake_rules_init_stale_handles_byref_and_fault_injection(make_fake_env):
    from invoker_agent.fake_nvml import FakeNvml
    env = make_fake_env("A100-40GB")
    fresh = FakeNvml(env.host)
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fresh.nvmlDeviceGetCount()
    nv = env.nvml
    dev = nv.nvmlDeviceGetHandleByIndex(0)
    gi = nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, ctypes.byref(nv.c_nvmlGpuInstancePlacement_t(0, 4)))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):              # struct passed without byref
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, nv.c_nvmlGpuInstancePlacement_t(4, 4))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):              # not one of 3g's placements
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, ctypes.byref(nv.c_nvmlGpuInstancePlacement_t(2, 4)))
    with pytest.raises(pynvml.NVMLError_InsufficientResources):        # "already exists" is an overlap
        nv.nvmlDeviceCreateGpuInstanceWithPlacement(dev, 9, ctypes.byref(nv.c_nvmlGpuInstancePlacement_t(0, 4)))
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, 0x12)
    with pytest.raises(pynvml.NVMLError_NotSupported):                 # 8-slice profile: not on A100
        nv.nvmlDeviceGetGpuInstanceProfileInfo(dev, pynvml.NVML_GPU_INSTANCE_PROFILE_8_SLICE)
    with pytest.raises(pynvml.NVMLError_NotSupported):                 # a 4-slice CI in a 3g GI
        nv.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE)
    nv.nvmlGpuInstanceDestroy(gi)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):              # stale handle
        nv.nvmlGpuInstanceGetInfo(gi)
    with pytest.raises(pynvml.NVMLError_NotFound):
        nv.nvmlDeviceGetGpuInstanceById(dev, 1)
    nv.fail_call("nvmlDeviceCreateGpuInstanceWithPlacement", k=2, code=pynvml.NVML_ERROR_UNKNOWN)
    report = Reconciler(env.backend).reconcile_gpu(0, ["3g.20gb", "2g.10gb", "1g.5gb"])
    assert report.status == "failed" and "UNKNOWN" in report.reason
    assert Reconciler(env.backend).reconcile_gpu(0, ["3g.20gb", "2g.10gb", "1g.5gb"]).status == "success"


def test_mig_mode_change_ampere_pending_until_reset_hopper_at_once(make_fake_env):
    for model, immediate in (("A100-40GB", False), ("H100-80GB", True)):
        env = make_fake_env(model)
        nv = env.nvml
        dev = nv.nvmlDeviceGetHandleByIndex(0)
        assert nv.nvmlDeviceSetMigMode(dev, 0) == pynvml.NVML_SUCCESS
        assert nv.nvmlDeviceGetMigMode(dev) == ([0, 0] if immediate else [1, 0])
        env.host.reset()
        assert nv.nvmlDeviceGetMigMode(dev) == [0, 0]
        assert nv.nvmlDeviceGetMaxMigDeviceCount(dev) == 0
        report = Reconciler(env.backend).reconcile_gpu(0, ["1g.10gb" if immediate else "1g.5gb"])
        assert report.status == "failed" and "MIG mode is disabled" in report.reason
    env = make_fake_env("A100-40GB", root=False)
    with pytest.raises(pynvml.NVMLError_NoPermission):
        env.nvml.nvmlDeviceSetMigMode(env.nvml.nvmlDeviceGetHandleByIndex(0), 0)
