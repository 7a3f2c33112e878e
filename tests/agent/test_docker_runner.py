"""The docker runner without an engine: container options, image choice, a clear missing-engine error."""

from __future__ import annotations

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.docker_runner import DockerWorkerFactory, container_options, docker_client, runtime_image
from invoker_agent.runner import WorkerKey, WorkerPool, WorkerSpec
from invoker_agent.runtime_client import WorkerStartError


def test_container_is_limited_pinned_and_given_exactly_its_mig_device():
    opts = container_options(WorkerSpec((2, 3), "MIG-1234", memory_mb=512), "openwhisk/action-python-v3.11")
    assert opts["nano_cpus"] == 2_000_000_000 and opts["cpuset_cpus"] == "2,3" and opts["mem_limit"] == "512m"
    assert opts["ports"] == {"8080/tcp": ("127.0.0.1", None)}           # loopback only
    (req,) = opts["device_requests"]
    assert req["DeviceIDs"] == ["MIG-1234"] and req["Capabilities"] == [["gpu"]] and req["Driver"] == "nvidia"
    cpu = container_options(WorkerSpec((0,)), "img")
    assert "device_requests" not in cpu and cpu["environment"]["CUDA_VISIBLE_DEVICES"] == ""


def test_runtime_images():
    assert runtime_image("python:3.11") == "openwhisk/action-python-v3.11"
    assert runtime_image("blackbox", "me/gpu-action:1") == "me/gpu-action:1"
    with pytest.raises(WorkerStartError, match="cobol"):
        runtime_image("cobol:1")


def test_missing_engine_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(WorkerStartError, match="no Docker engine reachable"):
        docker_client()
    pool = WorkerPool(factory=DockerWorkerFactory())
    a = ActionCode("/guest/a", "1", "python:3.11", "def main(a):\n    return {}\n")
    out = pool.run(WorkerKey(a.fqn, "1", "b1", None), WorkerSpec((0,)), a, [RunRequest("x", value={})])
    assert out[0].status_code == 3 and "no Docker engine reachable" in out[0].result["error"]


def test_process_runner_refuses_non_python_kinds_clearly():
    pool = WorkerPool()
    a = ActionCode("/guest/js", "1", "nodejs:20", "function main(){return {}}")
    out = pool.run(WorkerKey(a.fqn, "1", "b1", None), WorkerSpec((0,)), a, [RunRequest("x", value={})])
    assert out[0].status_code == 3 and "--runner docker" in out[0].result["error"]
