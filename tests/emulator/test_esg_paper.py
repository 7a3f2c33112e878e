"""`esg-paper` is ESG as published (no added rule) and `esg-without-<rule>` leaves exactly one rule out:
what the comparison tables and the ablation rely on."""

import numpy as np
import pytest

from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.events import Request
from esg.policies import make_policy, policy_names
from esg.policies.base import PolicyContext
from esg.policies.esg_policy import ESG_RULES, RULE_NAMES
from esg.policies.rules.jit_prewarm import JitPrewarm


def _rules_of(policy):
    return {type(p) for p in policy.plugins} & set(ESG_RULES)


def test_esg_paper_has_no_added_rule_and_esg_has_all(apps, profiles):
    ctx = PolicyContext(apps, profiles)
    assert _rules_of(make_policy("esg-paper", ctx)) == set()
    assert _rules_of(make_policy("esg", ctx)) == set(ESG_RULES)
    assert make_policy("esg-paper", ctx).name == "esg-paper"


@pytest.mark.parametrize("left_out", sorted(RULE_NAMES))
def test_each_ablation_leaves_out_exactly_its_rule(apps, profiles, left_out):
    policy = make_policy(f"esg-without-{left_out}", PolicyContext(apps, profiles))
    assert policy.name == f"esg-without-{left_out}"
    assert _rules_of(policy) == set(ESG_RULES) - {RULE_NAMES[left_out]}


def test_every_rule_has_an_ablation_and_every_ablation_is_listed():
    listed = {n for n in policy_names() if n.startswith("esg-without-")}
    assert listed == {f"esg-without-{r}" for r in RULE_NAMES}


def test_esg_paper_never_prewarms_where_esg_does(apps, profiles):
    """JIT pre-warming is one of the added rules: the published ESG starts no worker ahead of a batch."""
    counts = {}
    for name in ("esg", "esg-paper"):
        rng = np.random.default_rng(0)
        app = apps["expanded-image-classification"]
        requests = [Request(f"r{i}", app.name, 200.0 * i) for i in range(60)]
        params = EmulatorParams(warmup_ms=0.0)
        policy = make_policy(name, PolicyContext({app.name: app}, profiles))
        m = Emulation({app.name: app}, profiles, policy, requests, rng, ClusterSpec(nodes=2), params).run().metrics
        counts[name] = m.prewarms
    assert counts["esg-paper"] == 0
    assert counts["esg"] > 0, "the run must give ESG's pre-warming something to do, or the test proves nothing"
    assert JitPrewarm in ESG_RULES
