"""Golden scenario, determinism and invariants checked at every step of real runs."""

import filecmp
from pathlib import Path

import numpy as np
import pytest

from esg import mig
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.workload import generate
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg_cli.main import main

GOLDEN = Path(__file__).parent / "golden" / "summary.csv"
ARGS = ["emulate", "--policies", "esg,infless,fastgshare,orion,aquatope", "--slo", "moderate",
        "--load", "light", "--nodes", "2", "--duration-s", "8", "--warmup-s", "0", "--seed", "7",
        "--cold-start-scale", "0", "--mig-reconfig-ms", "0", "--no-plots", "--jobs", "1"]


def test_golden_summary(tmp_path):
    assert main(ARGS + ["--out", str(tmp_path)]) == 0
    assert (tmp_path / "summary.csv").read_text() == GOLDEN.read_text()


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
