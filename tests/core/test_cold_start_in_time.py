"""ESG's test of whether a worker started on demand is in time (EsgProposer.cold_start_in_time), which
the spare-instance and pool rules read: a worker started ahead of the jobs saves them something only
when a cold start would not fit in the SLO. Pinned against the path summed by hand, and against the
shipped profiles and apps, where no GPU function's cold start fits (so at the profiled cold starts both
rules run as before)."""

from __future__ import annotations

from pathlib import Path

import pytest

from esg.emulator.levels import SLO_LEVELS, slo_ms
from esg.model import App
from esg.policies import PolicyContext, make_policy
from esg_files import load_app, load_profiles

from .helpers import profile

ROOT = Path(__file__).resolve().parents[2]
CHAIN = App("chain", 100.0, ("a", "b", "c"), (("a", "b"), ("b", "c")))
LATENCY = {"a": 10.0, "b": 20.0, "c": 5.0}
OVERHEAD = 2.5


def shipped() -> tuple[dict[str, App], dict]:
    apps = {a.name: a for a in (load_app(p) for p in sorted((ROOT / "apps").glob("*.json")))}
    return apps, load_profiles(ROOT / "profiles" / "tables" / "a100", sorted({f for a in apps.values() for f in a.functions}))


def proposer(cold: dict[str, float], apps=(CHAIN,)):
    profs = {f: profile(f, [(1, 1, "1g.5gb", LATENCY[f]), (1, 1, None, 3 * LATENCY[f])], cold_start_ms=cold.get(f, 0.0))
             for f in LATENCY}
    ctx = PolicyContext({a.name: a for a in apps}, profs, stage_overhead_ms=OVERHEAD)
    return make_policy("esg", ctx).proposer


@pytest.mark.parametrize("function", ["a", "b", "c"])
def test_a_cold_start_is_in_time_exactly_when_the_fastest_path_around_it_fits_the_slo(function):
    # every function at its fastest, each batch with the per-batch overhead, and the cold start
    path = sum(LATENCY.values()) + OVERHEAD * len(LATENCY)
    room = CHAIN.slo_ms - path
    assert proposer({function: room}).cold_start_in_time(function)
    assert not proposer({function: room + 0.01}).cold_start_in_time(function)


def test_every_app_with_the_function_must_have_room():
    tight = App("tight", 40.0, ("b",), ())
    # in the chain b has 100 - 42.5 = 57.5 ms of room; alone under a 40 ms SLO, 40 - 22.5 = 17.5
    assert proposer({"b": 17.5}, apps=(CHAIN, tight)).cold_start_in_time("b")
    assert not proposer({"b": 30.0}, apps=(CHAIN, tight)).cold_start_in_time("b")
    assert proposer({"b": 30.0}).cold_start_in_time("b")


@pytest.mark.parametrize("scale", [0.1, 1.0, 2.0])
def test_with_the_shipped_profiles_no_gpu_function_cold_start_fits_any_slo(scale):
    """The rules start workers on MIG instances only: at a tenth of the profiled cold starts or more, no
    function that runs on one is in time at any SLO level (the CPU-only ones are at a tenth)."""
    apps, profs = shipped()
    for level in SLO_LEVELS:
        scaled = {n: App(a.name, slo_ms(level, a), a.functions, a.edges) for n, a in apps.items()}
        ctx = PolicyContext(scaled, profs, stage_overhead_ms=OVERHEAD, cold_start_scale=scale)
        prop = make_policy("esg", ctx).proposer
        gpu = {f for a in scaled.values() for f in a.functions if prop.gpu_kinds(f)}
        assert gpu and not any(prop.cold_start_in_time(f) for f in gpu)


def test_with_free_cold_starts_every_shipped_function_is_in_time():
    apps, profs = shipped()
    prop = make_policy("esg", PolicyContext(apps, profs, stage_overhead_ms=OVERHEAD, cold_start_scale=0.0)).proposer
    assert all(prop.cold_start_in_time(f) for a in apps.values() for f in a.functions)
