"""The emulator's data-passing cost is the live agents' rule: same node free, another node one store
read, and every output passed on written to the store with its producer's result."""

import numpy as np
import pytest

from esg.cluster import Fit
from esg.emulator import ClusterSpec, Emulation, EmulatorParams
from esg.events import Dispatch
from esg.model import Config, Job
from esg.policies import make_policy
from esg.policies.base import PolicyContext


def batch(app: str, function: str, node: str, requests: list[str]) -> Dispatch:
    jobs = tuple(Job(f"{r}/{function}", r, app, function, 0.0, 100.0, 0.0) for r in requests)
    return Dispatch(f"b-{function}", app, function, jobs, Config(len(jobs), 1, None), Fit(node))


@pytest.fixture
def emulation(apps, profiles):
    params = EmulatorParams(store_read_ms=0.25, store_read_mb_s=200.0, store_write_ms=0.5, store_write_mb_s=100.0)
    policy = make_policy("esg", PolicyContext(apps=apps, profiles=profiles))
    return Emulation(apps, profiles, policy, [], np.random.default_rng(0), ClusterSpec(nodes=2), params)


def test_successor_reads_nothing_on_its_node_and_one_store_read_elsewhere(emulation, profiles):
    out = profiles["preprocess"].output_bytes
    assert out > 0
    consume = batch("image-classification", "resnet50", "node01", ["r1", "r2"])
    emulation._ran_on[("r1", "preprocess")] = "node01"
    emulation._ran_on[("r2", "preprocess")] = "node01"
    assert emulation._transfer_ms(consume) == 0.0
    emulation._ran_on[("r2", "preprocess")] = "node00"          # one input on another node
    assert emulation._transfer_ms(consume) == pytest.approx(0.25 + out / 200e3)
    emulation._ran_on[("r1", "preprocess")] = "node00"          # both: still one read for the batch
    assert emulation._transfer_ms(consume) == pytest.approx(0.25 + 2 * out / 200e3)
    assert emulation._transfer_ms(batch("image-classification", "preprocess", "node01", ["r1"])) == 0.0


def test_outputs_passed_on_are_written_with_the_result_and_sinks_write_nothing(emulation, profiles):
    out = profiles["preprocess"].output_bytes
    produce = batch("image-classification", "preprocess", "node00", ["r1", "r2", "r3"])
    assert emulation._write_ms(produce) == pytest.approx(0.5 + 3 * out / 100e3)
    assert emulation._write_ms(batch("image-classification", "resnet50", "node00", ["r1"])) == 0.0
