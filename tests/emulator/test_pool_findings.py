"""ESG keeps what it works out from each function's workers -- its pool (``PoolSizing.thin_pools``) and
the kinds of instance it is warm on (``EsgProposer.warm_kinds``) -- while they have not moved
(``ClusterIndex.idle_generation``, ``InFlight.moves``): at every step of a run whose workers start,
finish, expire and are killed often, the index's generation moves whenever a function's
idle workers do, and what is kept is what is worked out afresh."""

from __future__ import annotations

import numpy as np

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.emulator.workload import generate
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.policies.rules.pool_sizing import PoolSizing

# short keep-alive and cheap MIG changes: workers expire and instances are destroyed often
PARAMS = EmulatorParams(warmup_ms=0.0, keep_alive_ms=150.0, mig_reconfig_ms=20.0, cold_start_scale=0.2)


def _idle(snapshot, function: str) -> dict:
    """``function``'s idle workers per (node, instance) on the snapshot's node states (which
    ``tests/emulator/test_runs.py`` checks against states built from scratch)."""
    return {(name, ref): n for name, state in snapshot.nodes.items()
            for (f, ref), n in state.idle_workers.items() if f == function and n > 0}


def _emulation(apps, profiles, hook, rate: float = 60.0, seconds: float = 8.0) -> Emulation:
    rng = np.random.default_rng(7)
    requests = generate(list(apps), rate, seconds, rng)
    return Emulation(apps, profiles, make_policy("esg", PolicyContext(apps, profiles)), requests, rng,
                     ClusterSpec(nodes=3, vcpus=16), PARAMS, invariant_hook=hook)


def test_a_functions_idle_counter_moves_whenever_its_idle_workers_do(apps, profiles):
    functions = sorted({f for a in apps.values() for f in a.functions})
    last: dict[str, tuple] = {}
    seen = {"kept": 0, "moved": 0}
    em: Emulation

    def check(now, nodes, scheduler):
        snapshot = em.view(now)
        for f in functions:
            counters = snapshot.index.idle_generation(f)
            idle = _idle(snapshot, f)
            before = last.get(f)
            if before is not None and before[0] == counters:
                assert idle == before[1], f"{f}'s idle workers moved at {now} with its counters still"
                seen["kept"] += 1
            elif before is not None and idle != before[1]:
                seen["moved"] += 1
            last[f] = (counters, idle)

    em = _emulation(apps, profiles, check)
    em.run()
    assert seen["kept"] > 100 and seen["moved"] > 100, seen


def test_what_is_kept_is_what_is_worked_out_afresh_at_every_step(apps, profiles):
    functions = sorted({f for a in apps.values() for f in a.functions})
    checked = {"steps": 0, "thin": 0}
    em: Emulation

    def check(now, nodes, scheduler):
        proposer, pools = scheduler.policy.proposer, scheduler.policy.rule(PoolSizing)
        snapshot = em.view(now)
        per_profile = pools.instances(snapshot)
        load = dict.fromkeys(pools._served, 1.0)
        kept_state = (pools._pools, pools._pools_instances, proposer._warm)
        kept = pools.thin_pools(snapshot, set(), load, per_profile)
        kept_kinds = {f: proposer.warm_kinds(f, snapshot) for f in functions}
        pools._pools, pools._pools_instances, proposer._warm = {}, {}, {}
        fresh = pools.thin_pools(snapshot, set(), load, per_profile)
        fresh_kinds = {f: proposer.warm_kinds(f, snapshot) for f in functions}
        pools._pools, pools._pools_instances, proposer._warm = kept_state  # the run goes on with what it kept
        assert kept == fresh, f"pools at {now}"
        assert kept_kinds == fresh_kinds, f"warm kinds at {now}"
        checked["steps"] += 1
        checked["thin"] += bool(fresh)

    em = _emulation(apps, profiles, check)
    em.run()
    assert checked["steps"] > 100 and checked["thin"] > 10, checked


def test_the_kept_instance_sum_is_the_clusters_at_every_step(apps, profiles):
    """ESG's sum of the nodes' MIG instances per profile (``PoolSizing.instances``), kept while the
    index's ``instances_generation`` stays, equals a count of the node states' instances at every step of
    a run that creates and destroys instances often."""
    checked = {"kept": 0, "moved": 0}
    last = {"epoch": -1, "sum": None}
    em: Emulation

    def check(now, nodes, scheduler):
        snapshot = em.view(now)
        fresh: dict[str, int] = {}
        for state in snapshot.nodes.values():
            for s in state.slices:
                fresh[s.ref.profile] = fresh.get(s.ref.profile, 0) + 1
        assert scheduler.policy.rule(PoolSizing).instances(snapshot) == fresh, f"instances at {now}"
        if snapshot.index.instances_generation == last["epoch"]:
            checked["kept"] += 1
        elif last["sum"] is not None and fresh != last["sum"]:
            checked["moved"] += 1
        last["epoch"], last["sum"] = snapshot.index.instances_generation, fresh

    em = _emulation(apps, profiles, check)
    em.run()
    assert checked["kept"] > 100 and checked["moved"] > 3, checked
