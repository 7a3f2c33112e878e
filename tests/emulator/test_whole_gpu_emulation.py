"""``esg emulate --no-mig``: nodes whose GPUs run without MIG, each one whole-GPU slice kind, and the
shipped whole-GPU tables derived from the A100 tables (``profiles/whole_tables.py``)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from esg_cli.main import main as esg_main
from profiles.whole_tables import whole_table

ROOT = Path(__file__).resolve().parents[2]
A100 = ROOT / "profiles" / "tables" / "a100"
A100_WHOLE = ROOT / "profiles" / "tables" / "a100-whole"
SMALL = ["--policies", "esg", "--slo", "moderate", "--load", "light", "--duration-s", "40", "--warmup-s", "10",
         "--nodes", "2", "--jobs", "1", "--no-plots"]


def test_the_shipped_whole_tables_are_what_the_derivation_writes():
    for path in sorted(A100.glob("*.json")):
        shipped = json.loads((A100_WHOLE / path.name).read_text())
        assert shipped == whole_table(json.loads(path.read_text())), path.name
        assert shipped["gpu_model"] == "A100-40GB:whole"
        kinds = {c["gpu"] for c in shipped["configs"]}
        assert kinds <= {None, "A100-40GB:whole"}
        full = {(c["batch"], c["vcpus"]): c["latency_ms"] for c in json.loads(path.read_text())["configs"]
                if c["gpu"] == "7g.40gb"}
        assert {(c["batch"], c["vcpus"]): c["latency_ms"] for c in shipped["configs"] if c["gpu"]} == full


def summary(out: Path) -> dict:
    with open(out / "summary.csv") as fh:
        return next(csv.DictReader(fh))


@pytest.mark.parametrize("share", [1, 2])
def test_emulate_no_mig_runs_on_whole_gpus_without_mig_changes(tmp_path, capsys, share):
    out = tmp_path / "out"
    assert esg_main(["emulate", "--gpu", "A100-40GB", "--no-mig", "--gpu-share", str(share),
                     "--profiles", str(A100_WHOLE), "--out", str(out), *SMALL]) == 0
    row = summary(out)
    assert int(row["requests"]) > 0 and float(row["slo_hit_rate"]) > 0
    assert int(row["mig_changes"]) == 0 and float(row["cost_mig"]) == 0


def test_emulate_h100_no_mig_with_h100_whole_tables(tmp_path):
    """The issue's command, given tables for the H100's whole kind (here the A100 ones renamed: what the
    command does with them is the point, not their figures)."""
    tables = tmp_path / "h100-whole"
    tables.mkdir()
    for path in A100_WHOLE.glob("*.json"):
        text = path.read_text().replace("A100-40GB:whole", "H100-80GB:whole")
        (tables / path.name).write_text(text)
    out = tmp_path / "out"
    assert esg_main(["emulate", "--gpu", "H100-80GB", "--no-mig", "--profiles", str(tables), "--out", str(out),
                     *SMALL]) == 0
    assert int(summary(out)["mig_changes"]) == 0


@pytest.mark.parametrize("argv, needle", [
    (["--gpu", "H100-80GB", "--no-mig"], "a100-whole"),                    # MIG tables for a whole GPU
    (["--gpu", "A100-40GB", "--gpu-share", "2"], "--no-mig"),
    (["--gpu", "L4"], "--no-mig"),                                          # a model without MIG
    (["--gpu", "none", "--no-mig"], "--no-mig"),
    (["--gpu", "A100-40GB", "--no-mig", "--gpu-share", "0"], "--gpu-share"),
    (["--gpu", "A100-40GB", "--profiles", str(A100_WHOLE)], "A100-40GB:whole"),  # whole tables, MIG nodes
])
def test_emulate_names_what_does_not_fit_a_whole_gpu(tmp_path, capsys, argv, needle):
    assert esg_main(["emulate", *argv, "--out", str(tmp_path / "out"), *SMALL]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Traceback" not in err
    assert not (tmp_path / "out" / "summary.csv").exists()


def test_the_derivation_cli_writes_loadable_tables(tmp_path):
    from esg_files import load_profiles
    from profiles.whole_tables import main

    src = tmp_path / "src"
    shutil.copytree(A100, src)
    assert main([str(src), str(tmp_path / "whole")]) == 0
    loaded = load_profiles(tmp_path / "whole", ["resnet50", "preprocess"])
    assert loaded["resnet50"].gpu_model == "A100-40GB:whole"
    assert all(e.config.gpu is None for e in loaded["preprocess"].entries)
