"""The docker runner without an engine: container options (OpenWhisk's hardening), image choice, the actions'
network, a clear missing-engine error."""

from __future__ import annotations

import pytest

from invoker_agent.docker_runner import (
    NETWORK,
    DockerWorkerFactory,
    container_options,
    docker_client,
    network_options,
    runtime_image,
)
from invoker_agent.runner import WorkerSpec
from invoker_agent.runtime_client import UnsupportedKind, WorkerStartError


def test_container_is_limited_pinned_and_given_exactly_its_mig_device():
    opts = container_options(WorkerSpec((2, 3), "MIG-1234", memory_mb=512), "openwhisk/action-python-v3.11",
                             node="gpu0")
    assert opts["nano_cpus"] == 2_000_000_000 and opts["cpuset_cpus"] == "2,3" and opts["mem_limit"] == "512m"
    (req,) = opts["device_requests"]
    assert req["DeviceIDs"] == ["MIG-1234"] and req["Capabilities"] == [["gpu"]] and req["Driver"] == "nvidia"
    cpu = container_options(WorkerSpec((0,)), "img")
    assert "device_requests" not in cpu and cpu["environment"]["CUDA_VISIBLE_DEVICES"] == ""


def test_container_is_hardened_as_openwhisk_hardens_its_action_containers():
    """InvokerReactive: --cap-drop NET_RAW NET_ADMIN (here every capability), --pids-limit 1024, --ulimit
    nofile=1024:1024; DockerContainer.create: --memory = --memory-swap (no swap); its own network."""
    opts = container_options(WorkerSpec((0,), memory_mb=256), "img", node="gpu0")
    assert opts["cap_drop"] == ["ALL"] and opts["security_opt"] == ["no-new-privileges"]
    assert opts["pids_limit"] == 1024
    (nofile,) = opts["ulimits"]
    assert (nofile["Name"], nofile["Soft"], nofile["Hard"]) == ("nofile", 1024, 1024)
    assert opts["mem_limit"] == opts["memswap_limit"] == "256m"
    assert opts["network"] == NETWORK and "ports" not in opts           # reached on its network, not the host's
    assert opts["labels"]["esg.worker"] == "1" and opts["labels"]["esg.node"] == "gpu0"
    assert not any("ESG_" in k or "REDIS" in k for k in opts["environment"])
    net = network_options()
    assert net["internal"] is True and net["options"]["com.docker.network.bridge.enable_icc"] == "false"


def test_runtime_images():
    assert runtime_image("python:3.11") == "openwhisk/action-python-v3.11"
    assert runtime_image("blackbox", "me/gpu-action:1") == "me/gpu-action:1"
    with pytest.raises(UnsupportedKind, match="cobol"):       # the developer's error, naming the kind
        runtime_image("cobol:1")


def test_missing_engine_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no-docker.sock")
    with pytest.raises(WorkerStartError, match="no Docker engine reachable"):
        docker_client()
    with pytest.raises(WorkerStartError, match="no Docker engine reachable"):
        DockerWorkerFactory("node0")                      # the agent's start names it, before any activation
