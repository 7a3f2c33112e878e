"""``esg plan``: the JSON contract of ``docs/architecture.md`` §6, exactness flags, prices and bad input."""

from __future__ import annotations

import json

import pytest

from esg_cli.main import main
from tests.core._helpers import SLICES_A100, grid_rows, write_app, write_profile

APP = {"name": "expanded-imgclass", "slo_ms": 300,
       "functions": ["pre", "cls-a", "cls-b", "cls-c", "vote"],
       "edges": [["pre", "cls-a"], ["pre", "cls-b"], ["pre", "cls-c"],
                 ["cls-a", "vote"], ["cls-b", "vote"], ["cls-c", "vote"]]}
BASE = {"pre": 8.0, "cls-a": 40.0, "cls-b": 55.0, "cls-c": 35.0, "vote": 3.0}


@pytest.fixture
def example(tmp_path):
    app = write_app(tmp_path / "app.json", APP)
    prof = tmp_path / "profiles"
    prof.mkdir()
    rows = {}
    for i, f in enumerate(APP["functions"]):
        rows[f] = grid_rows(i, BASE[f])
        write_profile(prof, f, rows[f])
    return app, prof, rows


def _plan(capsys, *args) -> tuple[int, str, str]:
    rc = main(["plan", *map(str, args)])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def _json_plan(capsys, app, prof, *extra) -> dict:
    rc, out, err = _plan(capsys, "--app", app, "--profiles", prof, "--json", *extra)
    assert rc == 0, err
    return json.loads(out)


def _check_schema(data: dict, functions, top_k: int) -> None:
    assert set(data) == {"feasible", "paths", "search_ms"}
    assert isinstance(data["feasible"], bool)
    assert isinstance(data["search_ms"], float) and data["search_ms"] >= 0
    assert isinstance(data["paths"], list) and len(data["paths"]) <= top_k
    assert data["feasible"] == bool(data["paths"])
    for p in data["paths"]:
        assert set(p) == {"cost", "latency_ms", "configs"}
        assert isinstance(p["cost"], float) and isinstance(p["latency_ms"], float)
        assert set(p["configs"]) == set(functions)
        for c in p["configs"].values():
            assert set(c) == {"batch", "vcpus", "gpu"}
            assert type(c["batch"]) is int and type(c["vcpus"]) is int
            assert c["gpu"] is None or isinstance(c["gpu"], str)
    costs = [p["cost"] for p in data["paths"]]
    assert costs == sorted(costs)


def _latency(rows, path) -> float:
    lat = {f: next(r[3] for r in rows[f] if (r[0], r[1], r[2]) == (c["batch"], c["vcpus"], c["gpu"]))
           for f, c in path["configs"].items()}
    return lat["pre"] + max(lat["cls-a"], lat["cls-b"], lat["cls-c"]) + lat["vote"]


@pytest.mark.parametrize("top_k", [1, 3, 7])
def test_json_schema_sorted_and_top_k(capsys, example, top_k):
    app, prof, rows = example
    data = _json_plan(capsys, app, prof, "--top-k", top_k)
    _check_schema(data, APP["functions"], top_k)
    assert data["feasible"] and len(data["paths"]) == top_k
    for p in data["paths"]:
        assert p["latency_ms"] == pytest.approx(_latency(rows, p))
        assert p["latency_ms"] <= APP["slo_ms"]


def test_infeasible_slo(capsys, example):
    app, prof, _ = example
    data = _json_plan(capsys, app, prof, "--slo-ms", 1)
    _check_schema(data, APP["functions"], 1)
    assert data == {**data, "feasible": False, "paths": []}
    rc, out, _ = _plan(capsys, "--app", app, "--profiles", prof, "--slo-ms", 1)
    assert rc == 0 and "no feasible path" in out


@pytest.mark.parametrize("slo", [60, 90, 150, 300, 2000])
def test_exact_equals_brute_force(capsys, example, slo):
    app, prof, rows = example
    exact = _json_plan(capsys, app, prof, "--slo-ms", slo, "--top-k", 5, "--exact")
    brute = _json_plan(capsys, app, prof, "--slo-ms", slo, "--top-k", 5, "--brute-force")
    _check_schema(exact, APP["functions"], 5)
    _check_schema(brute, APP["functions"], 5)
    assert [p["cost"] for p in exact["paths"]] == pytest.approx([p["cost"] for p in brute["paths"]])
    for p in brute["paths"]:
        assert _latency(rows, p) <= slo
    grouped = _json_plan(capsys, app, prof, "--slo-ms", slo, "--top-k", 5, "--max-group", 2)
    _check_schema(grouped, APP["functions"], 5)
    if grouped["feasible"]:
        assert grouped["paths"][0]["cost"] >= exact["paths"][0]["cost"] - 1e-9
        assert all(_latency(rows, p) <= slo for p in grouped["paths"])


@pytest.mark.parametrize("pv,pg", [(1.0, 12.1), (2.0, 0.0), (0.0, 5.0), (0.5, 100.0)])
def test_prices_follow_the_cost_formula(capsys, example, pv, pg):
    app, prof, rows = example
    data = _json_plan(capsys, app, prof, "--top-k", 4, "--exact",
                      "--price-vcpu", pv, "--price-gpu-slice", pg)
    for p in data["paths"]:
        expected = 0.0
        for f, c in p["configs"].items():
            lat = next(r[3] for r in rows[f] if (r[0], r[1], r[2]) == (c["batch"], c["vcpus"], c["gpu"]))
            expected += (pv * c["vcpus"] + pg * SLICES_A100[c["gpu"]]) * lat / c["batch"]
        assert p["cost"] == pytest.approx(expected)


def test_default_prices_are_the_documented_ones(capsys, example):
    app, prof, _ = example
    a = _json_plan(capsys, app, prof, "--top-k", 3)["paths"]
    b = _json_plan(capsys, app, prof, "--top-k", 3, "--price-vcpu", 1.0, "--price-gpu-slice", 12.1)["paths"]
    assert a == b


def test_text_output(capsys, example):
    app, prof, _ = example
    rc, out, _ = _plan(capsys, "--app", app, "--profiles", prof, "--top-k", 2)
    assert rc == 0
    assert "#1" in out and "#2" in out and "search" in out
    for f in APP["functions"]:
        assert f in out


def test_help(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["plan", "--help"])
    assert exc.value.code == 0
    assert "--brute-force" in capsys.readouterr().out


# ---------------------------------------------------------------------------------------- bad input


def _bad(capsys, args, *needles):
    rc, out, err = _plan(capsys, *args)
    assert rc == 2, (out, err)
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_app_with_a_cycle(capsys, example, tmp_path):
    _, prof, _ = example
    app = write_app(tmp_path / "cyc.json", {**APP, "edges": APP["edges"] + [["vote", "pre"]]})
    _bad(capsys, ["--app", app, "--profiles", prof], "cycle", str(app))


def test_self_loop(capsys, example, tmp_path):
    _, prof, _ = example
    app = write_app(tmp_path / "loop.json", {**APP, "edges": [["pre", "pre"]]})
    _bad(capsys, ["--app", app, "--profiles", prof], "pre")


def test_function_without_profile(capsys, example):
    app, prof, _ = example
    (prof / "cls-b.json").unlink()
    _bad(capsys, ["--app", app, "--profiles", prof], "cls-b", "no profile")


def test_missing_profiles_directory(capsys, example, tmp_path):
    app, _, _ = example
    _bad(capsys, ["--app", app, "--profiles", tmp_path / "nowhere"], "nowhere")


def test_missing_app_file(capsys, example, tmp_path):
    _, prof, _ = example
    _bad(capsys, ["--app", tmp_path / "none.json", "--profiles", prof], "none.json")


@pytest.mark.parametrize("batch", [0, -4])
def test_batch_not_positive(capsys, example, batch):
    app, prof, _ = example
    write_profile(prof, "vote", [(batch, 1, None, 3.0)])
    _bad(capsys, ["--app", app, "--profiles", prof], "vote.json", "batch")


def test_unknown_mig_profile(capsys, example):
    app, prof, _ = example
    write_profile(prof, "cls-a", [(1, 1, "5g.25gb", 3.0)])
    _bad(capsys, ["--app", app, "--profiles", prof], "cls-a.json", "5g.25gb", "A100-40GB")


def test_mig_profile_of_another_model(capsys, example):
    app, prof, _ = example
    write_profile(prof, "cls-a", [(1, 1, "1g.6gb", 3.0)])  # an A30 profile in an A100 table
    _bad(capsys, ["--app", app, "--profiles", prof], "cls-a.json", "1g.6gb")


@pytest.mark.parametrize("slo", ["0", "-5"])
def test_slo_not_positive(capsys, example, slo):
    app, prof, _ = example
    _bad(capsys, ["--app", app, "--profiles", prof, f"--slo-ms={slo}"], "slo")


def test_app_file_slo_not_positive(capsys, example, tmp_path):
    _, prof, _ = example
    app = write_app(tmp_path / "zero.json", {**APP, "slo_ms": 0})
    _bad(capsys, ["--app", app, "--profiles", prof], "slo_ms")


def test_profile_not_json(capsys, example):
    app, prof, _ = example
    (prof / "pre.json").write_text('{"function": "pre", "configs": [')
    _bad(capsys, ["--app", app, "--profiles", prof], "pre.json")


@pytest.mark.parametrize("field,value", [("latency_ms", "fast"), ("latency_ms", -1), ("vcpus", 1.5),
                                          ("gpu", 3)])
def test_malformed_profile_field(capsys, example, field, value):
    app, prof, _ = example
    data = json.loads((prof / "pre.json").read_text())
    data["configs"][1][field] = value
    (prof / "pre.json").write_text(json.dumps(data))
    _bad(capsys, ["--app", app, "--profiles", prof], "pre.json", field, "configs[1]")


@pytest.mark.parametrize("field", ["configs", "gpu_model", "function"])
def test_profile_missing_field(capsys, example, field):
    app, prof, _ = example
    data = json.loads((prof / "pre.json").read_text())
    del data[field]
    (prof / "pre.json").write_text(json.dumps(data))
    _bad(capsys, ["--app", app, "--profiles", prof], "pre.json", field)


def test_unknown_gpu_model(capsys, example):
    app, prof, _ = example
    write_profile(prof, "pre", [(1, 1, None, 3.0)], gpu_model="V100-16GB")
    _bad(capsys, ["--app", app, "--profiles", prof], "pre.json", "gpu_model", "V100-16GB")


def test_unknown_fields_are_kept_and_ignored(capsys, example):
    app, prof, rows = example
    write_profile(prof, "pre", [(*r[:3], r[3]) for r in rows["pre"]], note="measured on node 3")
    data = _json_plan(capsys, app, prof)
    assert data["feasible"]


@pytest.mark.parametrize("args,needle", [(["--top-k", "0"], "--top-k"), (["--max-group", "0"], "--max-group"),
                                         (["--price-vcpu=-1"], "price")])
def test_bad_flags(capsys, example, args, needle):
    app, prof, _ = example
    _bad(capsys, ["--app", app, "--profiles", prof, *args], needle)


def test_slo_percentile_plans_each_configuration_at_its_percentile_of_the_tables_spread(tmp_path, capsys):
    from esg.tail import spread_factor

    app = write_app(tmp_path / "chain.json", {"name": "chain", "slo_ms": 104, "functions": ["a", "b"],
                                              "edges": [["a", "b"]]})
    prof = tmp_path / "profiles"
    prof.mkdir()
    write_profile(prof, "a", [(1, 1, None, 50.0), (1, 2, None, 45.0)])
    write_profile(prof, "b", [(1, 1, None, 50.0)], latency_cv=0.2)   # b's table: a wider spread
    plain = _json_plan(capsys, app, prof)
    assert plain["paths"][0]["configs"]["a"]["vcpus"] == 1 and plain["paths"][0]["latency_ms"] == 100.0
    # at p90: a at the default 5 % spread, b at its table's 20 % (mean-1 log-normal factors)
    cheap = 50.0 * spread_factor(0.05, 90) + 50.0 * spread_factor(0.2, 90)
    fast = 45.0 * spread_factor(0.05, 90) + 50.0 * spread_factor(0.2, 90)
    assert 104.0 < fast < 114.0 < cheap
    assert not _json_plan(capsys, app, prof, "--slo-percentile", "90")["feasible"]
    tail = _json_plan(capsys, app, prof, "--slo-percentile", "90", "--slo-ms", "114")
    assert tail["paths"][0]["configs"]["a"]["vcpus"] == 2
    assert tail["paths"][0]["latency_ms"] == pytest.approx(fast)
    assert _json_plan(capsys, app, prof, "--slo-ms", "114")["paths"][0]["configs"]["a"]["vcpus"] == 1
    rc, out, _ = _plan(capsys, "--app", app, "--profiles", prof, "--slo-percentile", "90", "--slo-ms", "114")
    assert rc == 0 and "run times at p90" in out and f"{45.0 * spread_factor(0.05, 90):8.1f} ms" in out
