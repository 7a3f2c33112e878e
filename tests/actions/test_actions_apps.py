"""Whole apps, end to end through their functions, with the scheduler's data rules (local_run)."""

import json
from pathlib import Path

import pytest

from actions.local_run import function_params, run_app, topological_order
from actions.local_run import main as local_run_main

APPS = sorted((Path(__file__).resolve().parents[2] / "apps").glob("*.json"))


def test_all_four_apps_are_present():
    assert [p.stem for p in APPS] == ["background-elimination", "depth-recognition",
                                      "expanded-image-classification", "image-classification"]


@pytest.mark.parametrize("app", APPS, ids=lambda p: p.stem)
def test_app_runs_end_to_end(app):
    spec = json.loads(app.read_text())
    run = run_app(app, {"seed": 5, "size": 64})
    assert run.error is None, run.result
    assert list(run.results) == topological_order(spec["functions"], spec["edges"])
    r = run.result
    if spec["name"] == "image-classification":
        assert r["model"] == "resnet50" and len(r["top5"]) == 5
    elif spec["name"] == "expanded-image-classification":
        assert set(r["models"]) == {"resnet50", "densenet121", "inceptionv3"}
        assert 1 <= r["majority"]["votes"] <= 3 and len(r["top5"]) == 5
    elif spec["name"] == "depth-recognition":
        assert r["stats"]["max"] >= r["stats"]["min"] and r["preview"]["png"]
    else:
        assert 0 <= r["foreground_fraction"] <= 1 and r["image"]["png"]
    assert len(json.dumps(r)) < 100_000  # the app's answer is small


def test_data_rules_entry_single_and_multiple_predecessors():
    edges = [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]
    results = {"a": {"x": 1}, "b": {"y": 2}, "c": {"z": 3}}
    assert function_params("a", edges, {"p": 0}, {}) == {"p": 0}
    assert function_params("b", edges, {"p": 0}, results) == {"x": 1}
    assert function_params("d", edges, {"p": 0}, results) == {"b": {"y": 2}, "c": {"z": 3}}


def test_fan_in_with_fake_functions_and_error_stops_the_run():
    spec = {"name": "t", "functions": ["a", "b", "c", "d"],
            "edges": [["a", "b"], ["a", "c"], ["b", "d"], ["c", "d"]]}
    seen = {}

    def fn(name):
        def main(args):
            seen[name] = args
            return {"from": name}
        return main

    run = run_app(spec, {"p": 1}, resolve=fn)
    assert seen["d"] == {"b": {"from": "b"}, "c": {"from": "c"}} and run.result == {"from": "d"}
    run = run_app(spec, {}, resolve=lambda n: (lambda a: {"error": "boom"}) if n == "b" else fn(n))
    assert run.error == "b" and run.result == {"error": "boom"} and "d" not in run.results


def test_topological_order_rejects_cycles_and_unknown_functions():
    with pytest.raises(ValueError, match="cycle"):
        topological_order(["a", "b"], [["a", "b"], ["b", "a"]])
    with pytest.raises(ValueError, match="not in"):
        topological_order(["a"], [["a", "z"]])


def test_cli_prints_the_result(capsys):
    assert local_run_main([str(APPS[-1]), '{"seed": 1, "size": 64}']) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["app"] == "image-classification" and set(out["latency_ms"]) == {"preprocess", "resnet50"}
    assert local_run_main([str(APPS[-1]), "{}"]) == 1  # no image, no seed: preprocess's error
    assert "failed" in json.loads(capsys.readouterr().out)
