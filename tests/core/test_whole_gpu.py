"""GPUs without MIG in the core: the whole GPU as one slice kind ``<MODEL>:whole`` (esg.mig), in profile
tables, the cost model, the cluster's fits and the emulator's nodes."""

from __future__ import annotations

import pytest

from esg import mig
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.cost import Prices
from esg.emulator.nodes import NodeModel
from esg.errors import MigError, ProfileError
from esg.model import Config
from esg.profiles import profile_from_dict


def test_the_kind_is_named_for_the_model_in_its_canonical_spelling():
    assert mig.whole_kind("H100") == mig.whole_kind("H100-80GB") == "H100-80GB:whole"
    assert mig.whole_model("A100", 1) == "A100-40GB:whole"
    assert mig.whole_model("A100-40GB", 4) == "A100-40GB:whole*4"
    assert mig.whole_kind("L4") == "L4:whole"                       # a model without MIG, as spelled
    assert mig.unshared("A100-40GB:whole*4") == "A100-40GB:whole" and mig.unshared("A30") == "A30"
    assert mig.is_whole("L4:whole") and not mig.is_whole("A100-40GB") and not mig.is_whole(None)


@pytest.mark.parametrize("share", [1, 3])
def test_a_whole_gpu_is_a_layout_of_fixed_slots_of_one_kind(share):
    model = mig.whole_model("H100-80GB", share)
    geo = mig.geometry(model)
    assert list(geo.profiles) == ["H100-80GB:whole"]
    assert geo.compute_slices == share and mig.gpu_share(model) == share
    slots = [("H100-80GB:whole", i) for i in range(share)]
    assert mig.place(model, [], slots) is not None                 # every slot at once
    assert mig.place(model, ["H100-80GB:whole"], slots) is None     # and not one more
    with pytest.raises(MigError):
        geo.profile("1g.10gb")                                     # no MIG profile on a whole GPU


def test_a_mig_geometry_does_not_hold_the_whole_kind():
    with pytest.raises(MigError):
        mig.geometry("H100-80GB").profile("H100-80GB:whole")


@pytest.mark.parametrize("name", ["H100:wholex", "bad name:whole", "H100:whole*0", "H100:whole*", "H100:whole*65"])
def test_malformed_whole_names_are_refused_by_name(name):
    with pytest.raises(MigError):
        mig.geometry(name)


def test_a_model_without_mig_needs_the_whole_form():
    with pytest.raises(MigError, match="whole"):
        mig.geometry("L4")
    assert mig.geometry("L4:whole").model == "L4:whole"


def test_a_whole_gpu_costs_all_of_its_compute_slices_per_slot_shared_or_not():
    prices = Prices()
    whole = Config(4, 2, "H100-80GB:whole")
    seven = Config(4, 2, "7g.80gb")
    for model in ("H100-80GB:whole", "H100-80GB:whole*4"):
        assert prices.rate(model, whole) == pytest.approx(prices.rate("H100-80GB", seven))
    # a model priced as the default's slices (H200 has no list price) and one without MIG at all
    assert mig.slice_price("H200:whole") == pytest.approx(7 * mig.slice_price(mig.DEFAULT_GPU_MODEL))
    assert mig.slice_price("L4:whole") == pytest.approx(mig.slice_price(mig.DEFAULT_GPU_MODEL))


def table(model: str, gpu: str | None) -> dict:
    return {"function": "f", "gpu_model": model,
            "configs": [{"batch": 1, "vcpus": 1, "gpu": gpu, "latency_ms": 5.0},
                        {"batch": 1, "vcpus": 1, "gpu": None, "latency_ms": 50.0}]}


def test_profile_tables_name_the_kind_in_gpu_model_and_configs():
    p = profile_from_dict(table("H100-80GB:whole", "H100-80GB:whole"), "f.json")
    assert p.gpu_model == "H100-80GB:whole" and p.entries[0].config.gpu == "H100-80GB:whole"
    assert profile_from_dict(table("L4:whole", "L4:whole"), "f.json").gpu_model == "L4:whole"


@pytest.mark.parametrize("model, gpu, needle", [
    ("H100-80GB", "H100-80GB:whole", "unknown to H100-80GB"),       # the kind in a MIG table
    ("H100-80GB:whole", "7g.80gb", "unknown to H100-80GB:whole"),   # a MIG profile in a whole table
    ("H100-80GB:whole*2", "H100-80GB:whole", "sharing"),            # a share is the agents' setting
    ("L4", "L4:whole", "gpu_model"),
])
def test_mismatched_tables_are_rejected_naming_the_field(model, gpu, needle):
    with pytest.raises(ProfileError, match=needle):
        profile_from_dict(table(model, gpu), "f.json")


def whole_node(name: str, share: int, busy: tuple[bool, ...]) -> NodeState:
    model = mig.whole_model("A100-40GB", share)
    return NodeState(name, 8, 8, model, [Slice(SliceRef("A100-40GB:whole", i), b) for i, b in enumerate(busy)])


def test_the_cluster_fits_a_batch_on_an_idle_slot_and_never_creates_one():
    kind = Config(1, 1, "A100-40GB:whole")
    snap = ClusterSnapshot.of([whole_node("n0", 2, (True, False))])
    fit = snap.fit("n0", kind)
    assert fit is not None and fit.slice == SliceRef("A100-40GB:whole", 1) and not fit.reconfigures
    full = ClusterSnapshot.of([whole_node("n1", 2, (True, True))])
    assert full.fit("n1", kind) is None
    assert full.fit("n1", Config(1, 1, "1g.5gb")) is None          # a MIG kind has no place there
    assert full.fit("n1", Config(1, 1, None)) is not None           # the CPU still has room


def test_an_emulated_whole_gpu_node_starts_with_its_slots_and_never_reconfigures():
    node = NodeModel("n0", 8, "A100-40GB:whole*2")
    assert sorted(node.slices) == [SliceRef("A100-40GB:whole", 0), SliceRef("A100-40GB:whole", 1)]
    state = node.snapshot(0.0)
    fit = ClusterSnapshot.of([state]).fit("n0", Config(1, 1, "A100-40GB:whole"))
    assert fit is not None and not fit.create and not fit.destroy
