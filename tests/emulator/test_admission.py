"""Admission control in the emulator: rejected requests are counted apart, never as SLO hits."""

from __future__ import annotations

import dataclasses

import numpy as np

from esg.admission import fastest_path_ms
from esg.emulator.config import ClusterSpec, EmulatorParams
from esg.emulator.runner import Emulation
from esg.events import Request
from esg.policies import PolicyContext, make_policy


def test_the_emulator_reports_rejected_requests_separately_and_never_as_hits(apps, profiles):
    # every app at an SLO of 90 % of its fastest path: nothing can meet it, everything is rejected
    tight = {n: dataclasses.replace(a, slo_ms=0.9 * fastest_path_ms(a, profiles, lambda f, c: True, 0.0))
             for n, a in apps.items()}
    requests = [Request(f"r{i}", name, 10.0 * i) for i, name in enumerate(sorted(tight) * 3)]

    def run(admission: bool):
        pol = make_policy("esg", PolicyContext(tight, profiles))
        params = EmulatorParams(warmup_ms=0.0, hop_ms=0.0, cold_start_scale=0.0, mig_reconfig_ms=0.0)
        return Emulation(tight, profiles, pol, requests, np.random.default_rng(0), ClusterSpec(nodes=1), params,
                         admission_control=admission).run().summary

    on, off = run(True), run(False)
    assert (on["requests"], on["rejected"], on["rejected_rate"], on["slo_hit_rate"], on["batches"]) == (
        len(requests), len(requests), 1.0, 0.0, 0)
    assert off["rejected"] == 0 and off["completed"] == len(requests) and off["slo_hit_rate"] == 0.0


def test_a_live_run_counts_the_requests_its_scheduler_rejected_apart():
    from esg_cli.replay import Call, measure

    calls = [Call("a", 1.0, 1000.0, 1001.0, "r1", ok=False), Call("a", 2.0, 2000.0, 2015.0, "r2", ok=True)]
    log = [{"type": "request", "id": "r1", "app": "a", "arrival_ms": 1000.0, "finished_ms": 1000.5, "slo_ms": 20.0,
            "ok": False, "rejected": True},
           {"type": "request", "id": "r2", "app": "a", "arrival_ms": 2000.0, "finished_ms": 2012.0, "slo_ms": 20.0,
            "ok": True}]
    summary, _, _ = measure(calls, {"a": 20.0}, log, 0.0, 0.0, "esg", "moderate", "light")
    assert (summary["requests"], summary["rejected"], summary["rejected_rate"], summary["slo_hit_rate"]) == (
        2, 1, 0.5, 0.5)
