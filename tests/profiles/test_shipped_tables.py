"""The shipped tables: the CPU tables, one per function of the four apps, measured, and accepted by the
planner; the A100 tables' GPU memory per worker (``gpu_memory_mb``: on every GPU row, on the row's MIG
profile at the row's batch, and at the top level, the largest), as ``profiles/build_a100_tables.py``
derives it."""

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
FULL, WHOLE = "7g.40gb", "A100-40GB:whole"
"""The A100-40GB's full MIG instance, whose rows the whole-GPU tables keep (``profiles/whole_tables.py``)."""
SOURCES_BATCHES = (1, 8, 32)
"""The batches of SOURCES.md's table of row figures."""


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
    """A function with GPU configurations has a positive figure (the build script's: the largest, its 7g.40gb
    figure at batch 32, the whole GPU's too); a function with CPU configurations only has none."""
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
    """Every GPU row has a positive figure, the build script's on the row's MIG profile at the row's batch
    (the whole GPU's: its full instance's, 7g.40gb), non-decreasing in the batch for a given MIG profile and
    vCPUs; CPU rows have none; the table's figure is the largest row's. (The file's rows: reading a table
    leaves out those whose worker does not fit its instance, such as midas at batch 32 on 1g.5gb.)"""
    sources = (A100 / "SOURCES.md").read_text()
    for path in sorted(directory.glob("*.json")):
        table = json.loads(path.read_text())
        function = load_profile(path).function
        rows: dict[tuple[str, int], list[tuple[int, int]]] = {}
        for c in table["configs"]:
            if c["gpu"] is None:
                assert "gpu_memory_mb" not in c, (path.name, c)
                continue
            mb = c["gpu_memory_mb"]
            assert isinstance(mb, int) and not isinstance(mb, bool) and mb > 0, (path.name, c)
            on = FULL if c["gpu"] == WHOLE else c["gpu"]
            assert mb == build.row_gpu_memory_mb(function, on, c["batch"]), (path.name, c)
            rows.setdefault((c["gpu"], c["vcpus"]), []).append((c["batch"], mb))
        if not rows:
            continue
        for key, figures in rows.items():
            figures.sort()
            assert all(a[1] <= b[1] for a, b in zip(figures, figures[1:])), (path.name, key, figures)
        assert table["gpu_memory_mb"] == max(mb for figures in rows.values() for _, mb in figures), path.name
        for gpu in {g for g, _ in rows}:                        # SOURCES.md's table of row figures
            by_batch = dict(rows[(gpu, min(build.GPU_VCPUS))])
            line = " | ".join(str(by_batch[b]) for b in SOURCES_BATCHES)
            name = FULL if gpu == WHOLE else gpu
            assert f"| `{function}` | {name} | {line} |" in sources, (path.name, gpu, line)


def test_the_row_figures_grow_with_the_instances_compute_slices():
    """The fixed part (CUDA context) grows with the instance's SMs: at every batch a function's figure is
    larger on a profile with more compute slices; the 4g fixed part lies between 3g's and 7g's, linearly."""
    order = sorted(build.SLICES, key=build.SLICES.get)
    for f in build.PARAMS:
        for b in build.GPU_BATCHES:
            mb = [build.row_gpu_memory_mb(f, p, b) for p in order]
            assert mb == sorted(mb) and len(set(mb)) == len(mb), (f, b, mb)
    fixed = {g: build.fixed_mib(p) for p, g in build.SLICES.items()}
    assert fixed[4] == pytest.approx(fixed[3] + (fixed[7] - fixed[3]) / 4)
    assert build.profile_80("3g.20gb") == build.profile_80("3g.40gb") == "3g.40gb"


def test_resnet50s_rows_are_the_measurements_on_their_own_profile():
    """Each resnet50 row is MIGProfiler's measurement on its MIG profile (the A100-80GB one with the same g)
    at its batch, rounded up -- where a smaller batch measured more (batch 2 on 2g and 3g, within the
    spread), that one: a worker keeps its peak; 4g, not measured, lies between 3g and 7g."""
    measured = build.REFERENCE_FOOTPRINT_MIB
    assert set(measured) == {"1g.10gb", "2g.20gb", "3g.40gb", "7g.80gb"}
    assert all(set(build.GPU_BATCHES) <= set(m) for m in measured.values())
    prof = load_profile(A100 / "resnet50.json")
    gpu_rows = [e for e in prof.entries if e.config.gpu is not None]
    assert {e.config.gpu for e in gpu_rows} == set(build.SLICES)
    for e in gpu_rows:
        p80, b = build.profile_80(e.config.gpu), e.config.batch
        mb = e.extra["gpu_memory_mb"]
        if p80 in measured:
            assert mb == math.ceil(max(m for bb, m in measured[p80].items() if bb <= b)), e.config
            assert 0 <= mb - measured[p80][b] < 5, e.config              # the measurement at the batch
        else:
            assert math.ceil(measured["3g.40gb"][b]) <= mb <= math.ceil(measured["7g.80gb"][b]), e.config
    assert {p: build.row_gpu_memory_mb("resnet50", p, 1) for p in build.SLICES} == \
        {"1g.5gb": 1448, "2g.10gb": 1514, "3g.20gb": 1577, "4g.20gb": 1634, "7g.40gb": 1806}
    assert {b: build.row_gpu_memory_mb("resnet50", "1g.5gb", b) for b in build.GPU_BATCHES} == \
        {1: 1448, 2: 1449, 4: 1472, 8: 1534, 16: 1650, 32: 1968}
    assert {b: build.row_gpu_memory_mb("resnet50", "7g.40gb", b) for b in build.GPU_BATCHES} == \
        {1: 1806, 2: 1807, 4: 1826, 8: 1889, 16: 2003, 32: 2318}
    assert build.footprint_mib("resnet50", 1, "3g.20gb") == pytest.approx(measured["3g.40gb"][1])


def test_small_batch_workers_fit_a_small_instance():
    """The reason for row figures per profile: midas's table figure (7g, batch 32) fits no 1g.5gb instance,
    its batch-1 figure on 1g.5gb does; three batch-1 workers of each other function share a 1g.5gb, where
    their 7g figures would let two."""
    one_g = 5120                                                       # MiB of a 1g.5gb (esg.mig)
    mb = {b: build.row_gpu_memory_mb("midas", "1g.5gb", b) for b in build.GPU_BATCHES}
    assert mb[1] < one_g < mb[32] < build.gpu_memory_mb("midas") == build.row_gpu_memory_mb("midas", "7g.40gb", 32)
    for f in ("resnet50", "densenet121", "inceptionv3", "deeplabv3"):
        assert one_g // build.row_gpu_memory_mb(f, "1g.5gb", 1) == 3, f
        assert one_g // build.row_gpu_memory_mb(f, "7g.40gb", 1) == 2, f


def test_resnet50s_gpu_memory_is_the_measurement_it_comes_from():
    measured = build.REFERENCE_FOOTPRINT_MIB["7g.80gb"][max(build.GPU_BATCHES)]   # MIGProfiler, 7g, batch 32
    assert load_profile(A100 / "resnet50.json").gpu_memory_mb == math.ceil(measured) == 2318
    assert build.gpu_memory_source("resnet50").startswith("measured:")


def test_the_derived_figures_grow_with_the_models_weights_and_activations():
    mb = {f: build.gpu_memory_mb(f) for f in build.PARAMS}
    assert mb["inceptionv3"] < mb["densenet121"] < mb["resnet50"] < mb["deeplabv3"] < mb["midas"]
    assert build.footprint_mib("resnet50", 1, "7g.40gb") == pytest.approx(build.REFERENCE_FOOTPRINT_MIB["7g.80gb"][1])


def _public_data() -> Path | None:
    return next((p for p in (ROOT.parent / "shared" / "data", ROOT.parents[1] / "shared" / "data")
                 if (p / "parvagpu").is_dir() and (p / "migprofiler").is_dir()), None)


@pytest.mark.skipif(_public_data() is None, reason="the public measurement data is not beside the checkout")
def test_the_build_script_regenerates_the_committed_tables():
    data = _public_data()
    for f, table in build.build(data).items():
        assert (A100 / f"{f}.json").read_text() == json.dumps(table, indent=1) + "\n", f
    assert build.memory_checks(data)
