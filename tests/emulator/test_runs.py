"""Golden scenario, determinism and invariants checked at every step of real runs."""

import filecmp
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import esg.scheduler
import esg_build
from esg import mig
from esg.cluster import ClusterSnapshot
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.workload import generate
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg_cli.main import main

GOLDEN = Path(__file__).parent / "golden" / "summary.csv"
ARGS = ["emulate", "--policies", "esg,infless,fastgshare,orion,aquatope", "--slo", "moderate",
        "--load", "light", "--nodes", "2", "--duration-s", "8", "--warmup-s", "0", "--seed", "7",
        "--cold-start-scale", "0", "--mig-reconfig-ms", "0", "--hop-ms", "0", "--no-prewarm", "--no-plots",
        "--jobs", "1"]
"""The golden file is the run without pre-warming (every worker kept the platform's 10 minutes): the
pre-warming policies (esg.prewarm) change ESG's and Orion's rows, and must leave this one as it was."""


def test_golden_summary(tmp_path):
    assert main(ARGS + ["--out", str(tmp_path)]) == 0
    assert (tmp_path / "summary.csv").read_text() == GOLDEN.read_text()


COMPILED_HERE = esg.scheduler.__file__.endswith((".so", ".pyd"))
"""Whether this process runs the compiled core (scripts/setup builds it where a C compiler is; without
it, every other test here runs the pure core)."""


@pytest.mark.skipif(not COMPILED_HERE, reason="the core is not compiled here (pure Python: the other tests cover it)")
@pytest.mark.parametrize("prewarm", [False, True], ids=["golden", "prewarm"])
def test_compiled_and_pure_core_write_the_same_files(tmp_path, prewarm):
    """The compiled core (this process) and the pure one (a fresh interpreter with ESG_PURE=1, which
    imports esg's modules from their sources) write byte-identical files, on the golden scenario and
    with pre-warming on."""
    args = ARGS if not prewarm else [a for a in ARGS if a != "--no-prewarm"]
    compiled, pure = tmp_path / "compiled", tmp_path / "pure"
    assert main(args + ["--out", str(compiled)]) == 0
    code = ("import sys, esg.scheduler; from esg_cli.main import main; "
            "print(esg.scheduler.__file__); sys.exit(main(sys.argv[1:]))")
    env = {**os.environ, esg_build.PURE_ENV: "1", "PYTHONPATH": str(Path(esg_build.ROOT))}
    run = subprocess.run([sys.executable, "-c", code, *args, "--out", str(pure)], env=env, cwd=esg_build.ROOT,
                         capture_output=True, text=True, timeout=240)
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.splitlines()[0].endswith("scheduler.py"), "the pure run imported the compiled core"
    names = sorted(p.name for p in compiled.iterdir())
    assert names == sorted(p.name for p in pure.iterdir()) and "summary.csv" in names
    for name in names:
        assert (compiled / name).read_bytes() == (pure / name).read_bytes(), f"{name} differs"
    if not prewarm:
        assert (compiled / "summary.csv").read_text() == GOLDEN.read_text()


def test_same_seed_same_file_whatever_jobs(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    main(ARGS + ["--out", str(a)])
    main(ARGS[:-2] + ["--jobs", "2", "--out", str(b)])
    assert filecmp.cmp(a / "summary.csv", b / "summary.csv", shallow=False)


@pytest.mark.parametrize("policy", ["esg", "infless", "fastgshare", "orion", "aquatope"])
def test_invariants_hold_at_every_step(policy, apps, profiles):
    cluster = ClusterSpec(nodes=2, vcpus=16)
    rng = np.random.default_rng(3)
    requests = generate(list(apps), 40.0, 6.0, rng)
    seen = {"steps": 0}

    def check(now, nodes, scheduler):
        seen["steps"] += 1
        for n in nodes.values():
            assert 0 <= n.vcpus_free <= n.vcpus_total, "vCPU capacity exceeded"
            layout = [(r.profile, r.start) for r in n.slices]
            assert mig.place(n.gpu_model, [], layout) is not None, f"invalid MIG layout {layout}"
            assert mig.free_compute_slices(n.gpu_model, layout) >= 0

    params = EmulatorParams(warmup_ms=0.0)
    em = Emulation(apps, profiles, make_policy(policy, PolicyContext(apps, profiles)), requests, rng,
                   cluster, params, invariant_hook=check)
    res = em.run()
    m = res.metrics
    assert seen["steps"] > 0
    assert m.requests == len(requests)
    # every request either completes or is counted as a miss
    assert m.completed + m.failed + res.unfinished == m.requests
    assert m.hits + m.missed == m.requests
    assert m.hits <= m.completed


def _facts(state):
    """What the scheduler can learn from a node's state (order of slices and zero counts aside)."""
    return (state.vcpus_free, sorted((s.ref, s.busy) for s in state.slices),
            {k: v for k, v in state.idle_workers.items() if v > 0})


@pytest.mark.parametrize("policy", ["esg", "infless", "fastgshare", "orion", "aquatope"])
def test_kept_snapshot_matches_a_fresh_one_at_every_step(policy, apps, profiles):
    """The emulator keeps one snapshot and updates it in place; at every step it must tell the
    scheduler exactly what a snapshot built from scratch would (short keep-alive and cheap MIG changes,
    so expiries and destroyed instances happen often)."""
    cluster = ClusterSpec(nodes=3, vcpus=16)
    rng = np.random.default_rng(5)
    requests = generate(list(apps), 60.0, 6.0, rng)
    params = EmulatorParams(warmup_ms=0.0, keep_alive_ms=150.0, mig_reconfig_ms=20.0, cold_start_scale=0.2)
    functions = sorted({f for a in apps.values() for f in a.functions})
    checked = {"steps": 0}
    em = None

    def check(now, nodes, scheduler):
        kept = em.view(now)
        fresh = ClusterSnapshot({n: m.fresh_state(now) for n, m in nodes.items()}, tracks_workers=True)
        for name in nodes:
            assert _facts(kept.nodes[name]) == _facts(fresh.nodes[name]), f"{name} at {now}"
        for gpu in (True, False):
            assert kept.by_capacity(gpu) == fresh.by_capacity(gpu)
        for f in functions:
            assert set(kept.nodes_with_warm(f)) == set(fresh.nodes_with_warm(f)), f
            assert kept.idle_totals(f) == fresh.idle_totals(f), f
        for name in nodes:
            for config in {e.config for p in profiles.values() for e in p.entries}:
                assert kept.fit(name, config) == fresh.fit(name, config)
        checked["steps"] += 1

    em = Emulation(apps, profiles, make_policy(policy, PolicyContext(apps, profiles)), requests, rng,
                   cluster, params, invariant_hook=check)
    em.run()
    assert checked["steps"] > 100


@pytest.mark.parametrize("policy", ["esg", "orion"])
def test_fits_nowhere_cache_holds_at_every_step(policy, apps, profiles):
    """What the run's snapshot remembers as fitting on no node fits on none when computed afresh."""
    import copy

    rng = np.random.default_rng(5)
    requests = generate(list(apps), 120.0, 4.0, rng)
    checked = {"configs": 0}
    em: Emulation

    def check(now, nodes, scheduler):
        snap = em._snapshot
        fresh = ClusterSnapshot({n: copy.deepcopy(s) for n, s in snap.nodes.items()}, tracks_workers=True)
        for config in snap.nowhere:
            checked["configs"] += 1
            assert all(fresh.fit(n, config) is None for n in fresh.nodes), (now, config)

    em = Emulation(apps, profiles, make_policy(policy, PolicyContext(apps, profiles)), requests, rng,
                   ClusterSpec(nodes=2, vcpus=16), EmulatorParams(warmup_ms=0.0), invariant_hook=check)
    em.run()
    assert checked["configs"] > 0


def test_summary_counts_each_cells_prewarms(tmp_path):
    """summary.csv has each cell's pre-warms: the emulation's own count, 0 with pre-warming off."""
    import csv

    on = [a for a in ARGS if a != "--no-prewarm"]
    on[on.index("--policies") + 1] = "esg"
    assert main(on + ["--out", str(tmp_path / "on")]) == 0
    (row,) = csv.DictReader(open(tmp_path / "on" / "summary.csv"))
    assert int(row["prewarms"]) > 0
    off = list(ARGS)
    off[off.index("--policies") + 1] = "esg"
    assert main(off + ["--out", str(tmp_path / "off")]) == 0
    (row,) = csv.DictReader(open(tmp_path / "off" / "summary.csv"))
    assert row["prewarms"] == "0"
