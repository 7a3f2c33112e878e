"""The docker worker backend: container options (OpenWhisk's hardening), image choice, the actions' network, a clear
missing-engine error; and, where an engine exists, the tenant probe in a runtime container."""

from __future__ import annotations

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.docker_workers import (
    NETWORK,
    DockerWorkerFactory,
    container_options,
    docker_client,
    network_options,
    runtime_image,
)
from invoker_agent.runtime_client import UnsupportedKind, WorkerStartError
from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec


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


def _engine():
    try:
        return docker_client()
    except WorkerStartError as e:
        pytest.skip(f"no Docker engine on this machine: {e}")


def test_a_container_worker_finds_nothing_of_the_platform():
    """The probing action in a runtime container (where an engine exists): no capability, no_new_privs, its
    own processes only, no route to a service on the host, its memory limit held, its children gone with it.
    The runtime images run as root inside their container (without a capability); Docker's user namespace
    remapping maps that to an unprivileged host uid (docs/security.md)."""
    import socket

    from tests.tenant_probe import PROBE

    client = _engine()
    factory = DockerWorkerFactory("probe-node", client=client)
    pool = WorkerPool(factory=factory)
    listener = socket.create_server(("0.0.0.0", 0))
    try:
        port = listener.getsockname()[1]
        # the host as the container could address it: the actions' network's gateway, the host's own address
        gateways = [c.get("Gateway") for c in client.networks.get(NETWORK).attrs["IPAM"]["Config"] or []]
        hosts = sorted({h for h in [*gateways, socket.gethostbyname(socket.gethostname())] if h})
        addresses = [f"{h}:{port}" for h in hosts]
        a = ActionCode("/tenant/probe", "1", "python:3.11", PROBE, memory_mb=128)
        key = WorkerKey(a.fqn, "1", "b1", None, "tenant")
        (out,) = pool.run(key, WorkerSpec((0,), memory_mb=128), a,
                          [RunRequest("p", value={"addresses": addresses, "allocate_mb": 256, "spawn": "600"})])
        assert out.status_code == 0, out.result
        seen = out.result
        assert seen["caps"] == "0000000000000000" and seen["nnp"] == "1"
        assert not any("ESG_" in e for e in seen["environs"])
        assert seen["reached"] == dict.fromkeys(addresses, False) and seen["allocated"] == 0
        container = next(iter(pool._workers.values())).entries[0].worker.container
        pool.shutdown()
        assert not client.containers.list(all=True, filters={"id": container.id})
    finally:
        listener.close()
        pool.shutdown()
        factory.cleanup()
