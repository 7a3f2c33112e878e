"""NodeAgent: the transport-free facade a Kafka main loop drives (fake GPU, real worker subprocesses)."""

from __future__ import annotations

import json

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.node import NodeAgent
from invoker_agent.workers import WorkerKey, WorkerSpec

pytestmark = pytest.mark.timeout(60)


def test_node_agent_layout_run_and_heartbeat(tmp_path):
    agent = NodeAgent.create("node-a", vcpus=2, fake_gpu="H100-80GB", journal=str(tmp_path / "j.json"))
    try:
        reports = agent.apply_layout({0: ["3g.40gb", "3g.40gb"]})
        assert reports[0].status == "success"
        s = reports[0].slices[0]
        a = ActionCode("/guest/f", "1", "python:3.11",
                       "import os\ndef main(a):\n    return {'cvd': os.environ['CUDA_VISIBLE_DEVICES']}\n")
        key = WorkerKey(a.fqn, a.revision, "b1-c1-3g", s.mig_uuid)
        out = agent.run_batch(key, WorkerSpec((0,), s.mig_uuid), a, [RunRequest("x1", value={})])
        assert out[0].ok and out[0].result["cvd"] == s.mig_uuid
        hb = agent.heartbeat()
        json.dumps(hb)
        assert hb["node"] == "node-a" and hb["warm_workers"] == 1 and hb["gpus"][0]["model"] == "H100-80GB"
        assert sorted(x["profile"] for x in hb["gpus"][0]["slices"]) == ["3g.40gb", "3g.40gb"]
        # re-plan: the idle warm worker on a slice that goes is evicted first
        assert agent.apply_layout({0: ["7g.80gb"]})[0].status == "success"
        assert agent.pool.warm_count() == 0
        gone = agent.run_batch(key, WorkerSpec((0,), s.mig_uuid), a, [RunRequest("x2", value={})])
        assert gone[0].status_code == 3 and "does not exist" in gone[0].result["error"]
    finally:
        agent.close()


def test_unknown_runner_and_unknown_fake_gpu_are_clear_errors():
    with pytest.raises(ValueError, match="unknown runner"):
        NodeAgent.create("n", fake_gpu="A30", runner="podman")
    with pytest.raises(ValueError, match="unknown GPU model"):
        NodeAgent.create("n", fake_gpu="T4")


def test_real_nvml_without_a_driver_is_a_clear_error():
    from invoker_agent.mig_backend import MigOperationError
    from invoker_agent.nvml_backend import open_backend
    try:
        backend = open_backend(None)
    except MigOperationError as e:
        assert "--fake-gpu" in str(e) and "NVML" in str(e)
    else:
        backend.close()
        pytest.skip("this machine has a working NVIDIA driver")
