"""The shipped tables: the CPU tables, one per function of the four apps, measured, and accepted by the
planner; the A100 tables' GPU memory per worker (``gpu_memory_mb``: on every GPU row, at the row's batch,
and at the top level, the largest), as ``profiles/build_a100_tables.py`` derives it."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from esg_files import load_app, load_profile, load_profiles
from profiles import build_a100_tables as build

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "profiles" / "tables" / "cpu"
A100 = ROOT / "profiles" / "tables" / "a100"
GPU_TABLES = [A100, ROOT / "profiles" / "tables" / "a100-whole"]
APPS = sorted((ROOT / "apps").glob("*.json"))


@pytest.mark.parametrize("app", APPS, ids=lambda p: p.stem)
def test_every_app_function_has_a_measured_cpu_table(app):
    profiles = load_profiles(CPU, load_app(app).functions)
    for name, prof in profiles.items():
        assert prof.extra["measured"]["runner"] == "process", name
        assert {c.gpu for c in prof.configs} == {None}, name
        assert {c.batch for c in prof.configs} >= {1, 8} and {c.vcpus for c in prof.configs} >= {1, 2}, name
        assert prof.cold_start_ms > 0 and prof.output_bytes > 0, name
        assert prof.gpu_memory_mb == 0, name                # measured without a GPU: no figure
        assert (CPU / "SOURCES.md").read_text().count(f"`{name}`") >= 1, name


def test_plan_accepts_the_cpu_tables(esg):
    r = esg("plan", "--app", ROOT / "apps" / "image-classification.json", "--profiles", CPU,
            "--slo-ms", "500", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["feasible"]


@pytest.mark.parametrize("directory", GPU_TABLES, ids=lambda p: p.name)
def test_every_gpu_function_has_its_workers_gpu_memory(directory):
    """A function with GPU configurations has a positive figure (the build script's, for the same model on
    every MIG profile and on the whole GPU); a function with CPU configurations only has none."""
    sources = (A100 / "SOURCES.md").read_text()
    gpu_functions = set()
    for path in sorted(directory.glob("*.json")):
        prof = load_profile(path)
        if any(c.gpu is not None for c in prof.configs):
            gpu_functions.add(prof.function)
            assert prof.gpu_memory_mb > 0, path.name
            assert prof.gpu_memory_mb == build.gpu_memory_mb(prof.function), path.name
            assert f"| `{prof.function}` |" in sources and f"| {prof.gpu_memory_mb} |" in sources, path.name
        else:
            assert "gpu_memory_mb" not in json.loads(path.read_text()), path.name
    assert gpu_functions == {"resnet50", "densenet121", "inceptionv3", "deeplabv3", "midas"}


@pytest.mark.parametrize("directory", GPU_TABLES, ids=lambda p: p.name)
def test_every_gpu_row_has_its_workers_gpu_memory_at_its_batch(directory):
    """Every GPU row has a positive figure, the build script's at the row's batch, non-decreasing in the
    batch for a given MIG profile and vCPUs; CPU rows have none; the table's figure is the largest row's."""
    sources = (A100 / "SOURCES.md").read_text()
    for path in sorted(directory.glob("*.json")):
        prof = load_profile(path)
        rows: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for e in prof.entries:
            if e.config.gpu is None:
                assert "gpu_memory_mb" not in e.extra, (path.name, e.config)
                continue
            mb = e.extra["gpu_memory_mb"]
            assert isinstance(mb, int) and not isinstance(mb, bool) and mb > 0, (path.name, e.config)
            assert mb == build.row_gpu_memory_mb(prof.function, e.config.batch), (path.name, e.config)
            rows.setdefault((e.config.gpu, e.config.vcpus), []).append((e.config.batch, mb))
        if not rows:
            continue
        for key, figures in rows.items():
            figures.sort()
            assert all(a[1] <= b[1] for a, b in zip(figures, figures[1:])), (path.name, key, figures)
        assert prof.gpu_memory_mb == max(mb for figures in rows.values() for _, mb in figures), path.name
        by_batch = dict(next(iter(rows.values())))
        line = " | ".join(str(by_batch[b]) for b in build.GPU_BATCHES)
        assert f"| {line} |" in sources, (path.name, line)           # SOURCES.md's table of row figures


def test_resnet50s_rows_are_the_measurements_they_come_from():
    assert set(build.GPU_BATCHES) <= set(build.REFERENCE_FOOTPRINT_MIB)   # MIGProfiler, 7g.80gb, each batch
    prof = load_profile(A100 / "resnet50.json")
    gpu_rows = [e for e in prof.entries if e.config.gpu is not None]
    assert gpu_rows
    for e in gpu_rows:
        assert e.extra["gpu_memory_mb"] == math.ceil(build.REFERENCE_FOOTPRINT_MIB[e.config.batch]), e.config
    assert {b: build.row_gpu_memory_mb("resnet50", b) for b in build.GPU_BATCHES} == \
        {1: 1806, 2: 1807, 4: 1826, 8: 1889, 16: 2003, 32: 2318}


def test_a_small_batch_midas_worker_fits_a_small_instance():
    """The reason for row figures: midas's table figure (batch 32) fits no 1g.5gb instance, its batch-1
    figure does."""
    mb = {b: build.row_gpu_memory_mb("midas", b) for b in build.GPU_BATCHES}
    assert mb[1] < 5120 < mb[32] == build.gpu_memory_mb("midas")


def test_resnet50s_gpu_memory_is_the_measurement_it_comes_from():
    measured = build.REFERENCE_FOOTPRINT_MIB[max(build.GPU_BATCHES)]       # MIGProfiler, 7g.80gb, batch 32
    assert load_profile(A100 / "resnet50.json").gpu_memory_mb == math.ceil(measured) == 2318
    assert build.gpu_memory_source("resnet50").startswith("measured:")


def test_the_derived_figures_grow_with_the_models_weights_and_activations():
    mb = {f: build.gpu_memory_mb(f) for f in build.PARAMS}
    assert mb["inceptionv3"] < mb["densenet121"] < mb["resnet50"] < mb["deeplabv3"] < mb["midas"]
    assert build.footprint_mib("resnet50", 1) == pytest.approx(build.REFERENCE_FOOTPRINT_MIB[1])


def _public_data() -> Path | None:
    return next((p for p in (ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data")
                 if (p / "parvagpu").is_dir() and (p / "migprofiler").is_dir()), None)


@pytest.mark.skipif(_public_data() is None, reason="the public measurement data is not beside the checkout")
def test_the_build_script_regenerates_the_committed_tables():
    data = _public_data()
    for f, table in build.build(data).items():
        assert (A100 / f"{f}.json").read_text() == json.dumps(table, indent=1) + "\n", f
    assert build.memory_checks(data)
