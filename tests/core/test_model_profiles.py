"""App and profile validation: bad input is named, good input round-trips."""

import json

import pytest

from esg.errors import AppError, ProfileError
from esg.model import App, Config, app_from_dict
from esg.profiles import profile_from_dict
from esg_files import load_app, load_profile, load_profiles


def test_app_topology_and_descendants():
    app = App("d", 10, ("p", "x", "y", "v"), (("p", "x"), ("p", "y"), ("x", "v"), ("y", "v")))
    assert app.entries == ("p",) and app.sinks == ("v",)
    assert app.descendants("x") == ("x", "v")
    assert app.sub_app(["x", "v"]).edges == (("x", "v"),)


@pytest.mark.parametrize("data, needle", [
    ({"name": "a", "slo_ms": 10, "functions": ["x", "y"], "edges": [["x", "y"], ["y", "x"]]}, "cycle"),
    ({"name": "a", "slo_ms": 10, "functions": ["x", "x"], "edges": []}, "unique"),
    ({"name": "a", "slo_ms": 10, "functions": ["x"], "edges": [["x", "z"]]}, "'z'"),
    ({"name": "a", "slo_ms": 0, "functions": ["x"], "edges": []}, "slo_ms"),
    ({"name": "a", "slo_ms": -5, "functions": ["x"], "edges": []}, "slo_ms"),
    ({"name": "a", "functions": ["x"]}, "slo_ms"),
    ({"name": "a", "slo_ms": 10, "functions": []}, "functions"),
    ({"name": "a", "slo_ms": 10, "functions": ["x"], "edges": [["x"]]}, "pair"),
])
def test_bad_apps_are_rejected_naming_the_problem(data, needle):
    with pytest.raises(AppError, match=needle):
        app_from_dict(data, "app.json")


def test_shipped_app_files_are_valid():
    from pathlib import Path
    files = sorted(Path("apps").glob("*.json"))
    assert len(files) == 4
    for f in files:
        assert load_app(f).slo_ms > 0


def test_profile_keeps_unknown_fields_and_rejects_malformed(tmp_path):
    data = {"function": "f", "gpu_model": "A100-40GB", "note": "kept", "configs": [
        {"batch": 1, "vcpus": 1, "gpu": None, "latency_ms": 41.0, "p99_ms": 50.0},
        {"batch": 4, "vcpus": 2, "gpu": "1g.5gb", "latency_ms": 18.5}]}
    p = profile_from_dict(data, "f.json")
    assert p.latency(Config(4, 2, "1g.5gb")) == 18.5
    assert p.extra["note"] == "kept" and p.entries[0].extra["p99_ms"] == 50.0
    assert p.to_dict()["note"] == "kept"
    bad = dict(data, configs=[{"batch": 0, "vcpus": 1, "gpu": None, "latency_ms": 1.0}])
    with pytest.raises(ProfileError, match=r"f.json: configs\[0\].*'batch'"):
        profile_from_dict(bad, "f.json")
    bad = dict(data, configs=[{"batch": 1, "vcpus": 1, "gpu": "9g.99gb", "latency_ms": 1.0}])
    with pytest.raises(ProfileError, match="9g.99gb"):
        profile_from_dict(bad, "f.json")
    path = tmp_path / "f.json"
    path.write_text("{not json")
    with pytest.raises(ProfileError, match="f.json"):
        load_profile(path)
    path.write_text(json.dumps(data))
    with pytest.raises(ProfileError, match="function 'g' has no profile"):
        load_profiles(tmp_path, ["f", "g"])


def test_profile_gpu_memory_is_a_non_negative_integer_of_mib():
    data = {"function": "f", "gpu_model": "A100-40GB", "gpu_memory_mb": 2318, "configs": [
        {"batch": 1, "vcpus": 1, "gpu": "1g.5gb", "latency_ms": 5.0}]}
    p = profile_from_dict(data, "f.json")
    assert p.gpu_memory_mb == 2318 and "gpu_memory_mb" not in p.extra
    assert p.to_dict()["gpu_memory_mb"] == 2318
    assert profile_from_dict(dict(data, gpu_memory_mb=0), "f.json").gpu_memory_mb == 0     # 0: not known
    unknown = dict(data)
    del unknown["gpu_memory_mb"]
    assert profile_from_dict(unknown, "f.json").gpu_memory_mb == 0
    assert "gpu_memory_mb" not in profile_from_dict(unknown, "f.json").to_dict()
    for bad in (-1, 1.5, 2318.0, "2318", True, None, [2318]):
        with pytest.raises(ProfileError, match=r"f.json: field 'gpu_memory_mb'"):
            profile_from_dict(dict(data, gpu_memory_mb=bad), "f.json")
