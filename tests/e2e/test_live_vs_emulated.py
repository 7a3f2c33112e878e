"""Live ESG on a twin cluster against the emulator, on the same arrivals (a short version of
``benchmarks/bench_live_vs_emulated.py``; its 60 s figures are in docs/live-vs-emulated.md).

Both sides plan with the same fixed tables (the twin cluster's scheduler runs ``--no-online-profiles``,
as ``esg emulate`` does without ``--profiles-online``), and the emulator charges each batch the live
path's overhead measured on this very run (the scheduler's decision log: from the moment a batch could
be decided to its answer, less its run). Fifteen seconds of arrivals, five unmeasured, are 92 measured
requests, mostly the cluster's start-up (MIG instances created, workers started cold), so the
tolerances are those of such a run:

* hit rate within 8 points (one request is 1.1 points; the emulator's own spread over seeds on these
  arrivals is 1-3 points; the five runs recorded differed by -5.4 to -1.8 points);
* cost within a factor 2 either way: which cold starts and MIG changes (a 7-slice instance held
  through its 2 s creation and 3 s cold start) fall after the five unmeasured seconds decides most of
  it, and the emulator's seeds alone spread 4-20 % (the runs recorded differed by -43 % to +7 %) --
  still far from an accounting error (a unit; the idle instances forgotten: 8x);
* at least half the configurations the same (the runs recorded: 71-81 %), every call answered.

The 60 s run holds the 3-point / 10 % target (docs/live-vs-emulated.md).
"""

from __future__ import annotations

import math

import pytest

from esg_cli import agreement

pytestmark = [pytest.mark.integration, pytest.mark.timeout(420)]


def test_live_esg_on_a_twin_cluster_agrees_with_the_emulator(tmp_path):
    args = agreement.emulate_args(tmp_path / "emulated", tmp_path / "arrivals.csv", 2, 16, "moderate", "light",
                                  15.0, 5.0, 0, 0.0)
    arrivals = agreement.write_arrivals(args, agreement.AGREEMENT_RATE_RPS)
    with agreement.twin_cluster(tmp_path / "logs") as cluster:
        live = agreement.replay(cluster, arrivals, tmp_path / "live", 5.0)
    hop = agreement.live_hop_ms(live["decisions"])
    assert not math.isnan(hop) and 0 < hop < 100, hop
    args.hop_ms, args.hop_log_sd = hop, agreement.live_hop_log_sd(live["decisions"])
    emulated = agreement.mean_emulated(agreement.emulate_seeds(args, 3))
    result = agreement.compare(emulated, live)
    assert int(live["summary"]["completed"]) == result["requests"] > 0, result
    assert result["config_match"] >= 0.5, result
    assert abs(result["hit_rate_diff_points"]) <= 8, result
    assert 0.5 <= 1 + result["cost_diff_rel"] <= 2.0, result
