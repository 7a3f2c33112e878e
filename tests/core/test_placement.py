"""The placement machinery is the same for every policy: warm workers first, whole batches, start-up
against the budget, the scale-out rule and a fallback; only the node order differs, as each original
does."""

import pytest

from esg import placement
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.model import App, Config, Job
from esg.policies import PolicyContext, make_policy
from esg.policies.base import Choice
from esg.queues import AfwQueue

from .helpers import profile

APP = App("one", 100.0, ("f",), ())
ROWS = [(1, 1, "1g.5gb", 10.0), (8, 1, "1g.5gb", 30.0), (1, 1, "3g.20gb", 6.0), (1, 2, "7g.40gb", 3.0)]
POLICIES = ["esg", "infless", "fastgshare", "orion", "aquatope"]


def make(name: str, cold_ms: float = 0.0):
    prof = profile("f", ROWS, cold_start_ms=cold_ms)
    return make_policy(name, PolicyContext({"one": APP}, {"f": prof}, mig_reconfig_ms=2000.0))


def queue(n: int, deadline: float = 100.0) -> AfwQueue:
    q = AfwQueue(("one", "f"))
    for i in range(n):
        q.push(Job(f"r{i}/f", f"r{i}", "one", "f", 0.0, deadline, 0.0))
    return q


def cluster(n0_slices=(), idle=None) -> ClusterSnapshot:
    n0 = NodeState("n0", 16, 16, "A100-40GB", [Slice(SliceRef(p, s), b) for p, s, b in n0_slices],
                   idle_workers=dict(idle or {}))
    n1 = NodeState("n1", 16, 16, "A100-40GB")
    return ClusterSnapshot({"n0": n0, "n1": n1}, tracks_workers=True)


def place(pol, choice, q, snap, now=0.0):
    pref = pol.node_preference(APP, "f", snap)
    return pol.place(APP, q, choice, snap, ["n1"] if pref is None else pref, now, set())


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_routes_to_an_idle_warm_worker_first(name):
    pol = make(name, cold_ms=3000.0)
    snap = cluster([("3g.20gb", 4, False)], {("f", SliceRef("3g.20gb", 4)): 1})
    choice = Choice((Config(1, 1, "1g.5gb"), Config(1, 1, "3g.20gb")))
    placed = place(pol, choice, queue(1), snap)
    assert placed.config == Config(1, 1, "3g.20gb") and placed.fit.node == "n0"
    assert placed.fit.warm_worker == ("f", SliceRef("3g.20gb", 4)) and not placed.fit.reconfigures


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_runs_a_batch_capped_at_the_queue_length(name):
    pol = make(name)
    placed = place(pol, Choice((Config(8, 1, "1g.5gb"),)), queue(3), cluster())
    assert placed.config == Config(1, 1, "1g.5gb"), "one job must not run (and pay) as a batch of 8"


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_falls_back_when_its_configuration_fits_nowhere(name):
    pol = make(name)
    snap = cluster([("1g.5gb", 0, True)])
    snap.nodes["n1"].slices = [Slice(SliceRef("1g.5gb", 0), True)]
    placed = place(pol, Choice((Config(1, 2, "7g.40gb"),)), queue(1), snap)
    assert not isinstance(placed, str), placed
    assert placed.config == Config(1, 1, "3g.20gb"), "the fastest configuration that still fits"


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_waits_for_a_running_worker_rather_than_start_one_past_the_budget(name):
    """The baselines scale out once more jobs wait than the running batches take next; ESG once the
    running batches would take longer than a cold start to clear the queue (its own rule)."""
    pol = make(name, cold_ms=3000.0)
    pol.running[("one", "f")] = 1
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(1), cluster())
    assert isinstance(placed, str) and "warm worker" in placed
    # two jobs on one running batch of one (10 ms each): the baselines start another worker; ESG waits
    # 20 ms rather than pay a 3 s cold start, and starts one for a backlog of 301 (3.01 s > 3 s)
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(2), cluster())
    if name == "esg":
        assert isinstance(placed, str) and "warm worker" in placed
        placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(301), cluster())
    assert not isinstance(placed, str) and placed.fit.create


def test_node_order_is_each_originals():
    snap = cluster([("1g.5gb", 0, True)])  # n0 is fuller than n1
    for name in ("infless", "fastgshare"):  # bin-packing: fullest node that fits first
        assert make(name).node_preference(APP, "f", snap)[0] == "n0"
    for name in ("orion", "aquatope"):  # no placement of their own: the platform's least-loaded order
        assert make(name).node_preference(APP, "f", snap) == []
    assert make("esg").node_preference(APP, "f", snap) is None  # ESG_Dispatch's home/predecessor order


def test_cap_batches_keeps_order_and_resources():
    prof = profile("f", ROWS)
    got = placement.cap_batches([Config(8, 1, "1g.5gb"), Config(1, 1, "1g.5gb"), Config(1, 1, "3g.20gb")], 2, prof)
    assert got == (Config(1, 1, "1g.5gb"), Config(1, 1, "3g.20gb"))
    assert placement.cap_batches([Config(8, 1, "1g.5gb")], 8, prof) == (Config(8, 1, "1g.5gb"),)


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_counts_its_running_batches(name):
    """The scale-out rule needs the batches in flight: a policy's own hooks must not lose the count."""
    from esg.cluster import Fit
    from esg.events import Dispatch
    pol = make(name)
    job = queue(1).head
    d = Dispatch("b0", "one", "f", (job,), Config(1, 1, "1g.5gb"), Fit("n0"))
    pol.on_dispatch(d)
    assert pol.running[("one", "f")] == 1
    pol.on_done(d)
    assert pol.running[("one", "f")] == 0


def test_fallback_is_the_fastest_allowed_configurations_by_brute_force():
    """The per-function fastest-first list, cut at the queue length, gives the first
    ``FALLBACK_OPTIONS`` of what sorting the profile's filtered entries gives (the definition), for many
    queue lengths, exclusions and specs."""
    import random
    from pathlib import Path

    from esg_files import load_profiles

    rng = random.Random(1)
    profiles = load_profiles(Path(__file__).resolve().parents[2] / "profiles" / "tables" / "a100",
                             ["resnet50", "deeplabv3", "preprocess"])
    for prof in profiles.values():
        configs = [e.config for e in prof.entries]
        for _ in range(200):
            max_batch = rng.choice([None, 1, 2, 4, 8])
            gpu = rng.random() < 0.7

            def allowed(c, max_batch=max_batch, gpu=gpu):
                return (max_batch is None or c.batch <= max_batch) and (gpu or c.gpu is None)

            queued = rng.randint(0, 12)
            exclude = set(rng.sample(configs, rng.randint(0, 6)))
            want = []
            for e in sorted(prof.entries, key=lambda e: (e.latency_ms, e.config.batch, e.config.vcpus,
                                                         e.config.gpu or "", e.config)):
                c = e.config
                if c.batch <= max(queued, 1) and allowed(c) and c not in exclude and c not in want:
                    want.append(c)
            got = placement.fallback(placement.fastest_first(prof, allowed), queued, exclude)
            assert list(got) == want[:placement.FALLBACK_OPTIONS]
