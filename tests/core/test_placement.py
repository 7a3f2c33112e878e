"""The placement machinery is the same for every policy: warm workers first, whole batches, start-up
against the budget, the scale-out rule and a fallback; only the node order differs, as each original
does. Every policy places through a placer it composes: the baselines the shared one (with their own node
order where their papers give one), ESG its own with locality and its scale-out rule."""

import pytest

from esg import placement
from esg.cluster import ClusterSnapshot, NodeState, Slice, SliceRef
from esg.defaults import StartupCosts
from esg.dispatch import Placement, Wait
from esg.model import App, Config, Job
from esg.policies import PolicyContext, make_policy
from esg.policies.base import Choice
from esg.policies.common import BacklogGate, PackingOrder
from esg.policies.esg_policy import LocalityOrder, WorthStarting
from esg.policies.placer import Placer
from esg.policies.points import NodeOrder, ScaleOutGate
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
    pref = pol.preferred_nodes(APP, q.head, snap)
    return pol.place(APP, q, choice, snap, pref, now, set())


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
    assert isinstance(placed, Placement), placed
    assert placed.config == Config(1, 1, "3g.20gb"), "the fastest configuration that still fits"


@pytest.mark.parametrize("name", POLICIES)
def test_every_policy_waits_for_a_running_worker_rather_than_start_one_past_the_budget(name):
    """Every policy scales out once the running batches would take longer to clear the queue than the
    soonest placement's start-up -- cold start and MIG changes -- (the start-up-against-backlog gate,
    ESG's and the baselines' alike)."""
    pol = make(name, cold_ms=3000.0)
    pol.running[("one", "f")] = 1
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(1), cluster())
    assert isinstance(placed, Wait) and "warm worker" in placed.reason
    # two jobs on one running batch of one (10 ms each): the gate waits 20 ms rather than pay the start-up
    # of a new instance (a 2 s MIG change and a 3 s cold start), still waits for a backlog of 301
    # (3.01 s: more than the cold start alone), and starts one for 501 (5.01 s > 5 s)
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(2), cluster())
    assert isinstance(placed, Wait) and "warm worker" in placed.reason
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(301), cluster())
    assert isinstance(placed, Wait) and "warm worker" in placed.reason
    placed = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(501), cluster())
    assert isinstance(placed, Placement) and placed.fit.create


def test_node_order_is_each_originals():
    snap = cluster([("1g.5gb", 0, True)])  # n0 is fuller than n1
    head = queue(1).head
    for name in ("infless", "fastgshare"):  # bin-packing: fullest node that fits first
        assert make(name).preferred_nodes(APP, head, snap)[0] == "n0"
    for name in ("orion", "aquatope"):  # no placement of their own: the platform's least-loaded order
        assert make(name).preferred_nodes(APP, head, snap) == []
    # ESG_Dispatch: the app's home node for an entry function, the predecessor's node after one
    esg = make("esg")
    home = esg.preferred_nodes(APP, head, snap)
    assert len(home) == 1 and home[0] in snap.nodes
    assert esg.preferred_nodes(APP, head, cluster()) == home, "the home node is stable"
    after = Job("r0/f", "r0", "one", "f", 0.0, 100.0, 0.0, pred_node="n1" if home[0] == "n0" else "n0")
    assert esg.preferred_nodes(APP, after, snap) == [after.pred_node]


def test_every_policy_places_through_the_shared_placer_with_its_own_plugins():
    """The split: every policy binds with the shared :class:`Placer`; what differs is its plugins -- INFless
    and FaST-GShare a bin-packing node order, ESG ESG_Dispatch's locality order, Orion and Aquatope the
    platform's order; every one the same start-up-against-backlog scale-out gate (ESG's is named its own,
    the baselines' the generic one)."""
    policies = {name: make(name) for name in POLICIES}
    placers = {name: p.placer for name, p in policies.items()}
    assert all(isinstance(p, Placer) and type(p).place is Placer.place for p in placers.values())

    def kinds(name: str, point: type) -> list[type]:
        return [type(p) for p in policies[name].plugins if isinstance(p, point)]
    assert kinds("infless", NodeOrder) == kinds("fastgshare", NodeOrder) == [PackingOrder]
    assert kinds("infless", ScaleOutGate) == kinds("fastgshare", ScaleOutGate) == [BacklogGate]
    assert kinds("esg", NodeOrder) == [LocalityOrder] and kinds("esg", ScaleOutGate) == [WorthStarting]
    for name in ("orion", "aquatope"):
        assert not kinds(name, NodeOrder) and kinds(name, ScaleOutGate) == [BacklogGate]
    # and they answer alike: one batch of one running, two jobs waiting (10 ms each), a 3 s cold start --
    # no gate starts a worker; without a gate the placer's own rule would
    lat, startup, one = (lambda c: 10.0), StartupCosts(2000.0, 3000.0), (Config(1, 1, "1g.5gb"),)
    assert not any(placers[name].may_scale_out(1, 2, one, lat, startup) for name in POLICIES)
    assert Placer(policies["esg"].ctx).may_scale_out(1, 2, one, lat, startup)


def test_a_wait_is_typed_and_carries_its_reason():
    """A head that is not placed gets a :class:`Wait` naming why, from the placer and from the policy that
    delegates to it: never a bare string, and never a placement."""
    pol = make("orion")
    snap = cluster([("7g.40gb", 0, True)])  # n0's GPU is taken whole by another function
    snap.nodes["n1"].slices = [Slice(SliceRef("7g.40gb", 0), True)]
    waited = place(pol, Choice((Config(1, 1, "1g.5gb"),)), queue(1), snap)
    assert isinstance(waited, Wait) and not isinstance(waited, Placement)
    assert "fits on any of 2 nodes" in waited.reason
    # the proposal's own reason when it proposes nothing
    held = place(pol, Choice((), reason="filling a batch of 8"), queue(1), cluster())
    assert held == Wait("filling a batch of 8")
    assert pol.placer.place(APP, queue(1), Choice(), cluster(), [], 0.0, set(), 0) == Wait(
        "no configuration meets the remaining budget")
    with pytest.raises(AttributeError):
        held.reason = "changed"  # a verdict, frozen


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
