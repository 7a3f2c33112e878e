"""The process worker backend's sandbox, seen from inside a worker: what an action can see, reach, write and keep.

Each test runs a real worker (bubblewrap, its seccomp filter, its limits) through the pool and asks the
action what it finds; what the sandbox must hide is planted by the test itself (a secret in this process's
environment, a listening port on the host's loopback, a file of another worker's).
"""

from __future__ import annotations

import os
import socket
import time

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.sandbox import UID_BASE, gpu_device_paths, tree
from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec
from tests.leaks import alive
from tests.tenant_probe import PROBE

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not os.path.exists("/proc/self/ns/user"), reason="needs Linux namespaces")]

CPU = (sorted(os.sched_getaffinity(0))[0],)

def probe(pool: WorkerPool, args: dict, namespace: str = "tenant-a", memory_mb: int = 256, name: str = "probe",
          rev: str = "1", key: str | None = None) -> dict:
    a = ActionCode(f"/{namespace}/{name}", rev, "python:3", PROBE, memory_mb=memory_mb)
    out = pool.run(WorkerKey(a.fqn, a.revision, "cpu", None, namespace), WorkerSpec(CPU, memory_mb=memory_mb), a,
                   [RunRequest("act-probe", "tx", args, namespace=namespace, api_key=key)])
    assert out[0].status_code == 0, out[0].result
    return out[0].result


@pytest.fixture
def pool():
    p = WorkerPool(idle_ttl_s=60)
    yield p
    p.shutdown()


def test_a_worker_has_its_own_uid_no_capabilities_a_filter_and_sees_only_itself(pool, monkeypatch):
    monkeypatch.setenv("ESG_OPENWHISK_AUTH", "agent-uuid:agent-secret-never-seen")   # the agent's environment
    seen = probe(pool, {})
    assert seen["uid"] == seen["euid"] and seen["uid"] not in (0, os.getuid())
    assert seen["caps"] == "0000000000000000" and seen["nnp"] == "1" and seen["seccomp"] == "2"
    # its own PID namespace: the sandbox's init and its runtime, nothing of the host's
    assert seen["pids"] == [1, 2], seen["cmdlines"]
    assert not any("agent-secret" in e for e in seen["environs"] + seen["cmdlines"])
    assert seen["interfaces"] == ["lo"]             # a network namespace with only its own loopback
    assert seen["cpus"] == list(CPU) and seen["widened"] is False


def test_two_workers_get_different_uids_and_no_route_to_the_hosts_services(pool):
    listener = socket.create_server(("127.0.0.1", 0))            # a platform service on the host's loopback
    try:
        port = listener.getsockname()[1]
        a = probe(pool, {"ports": [port]}, namespace="tenant-a")
        b = probe(pool, {"ports": [port]}, namespace="tenant-b")
    finally:
        listener.close()
    if os.geteuid() == 0:
        assert a["uid"] != b["uid"] and a["uid"] >= UID_BASE and b["uid"] >= UID_BASE
    assert a["reached"] == {str(port): False} and b["reached"] == {str(port): False}


def test_no_platform_path_is_writable_nor_another_workers_directory_readable(pool, tmp_path):
    platform = tmp_path / "platform"
    platform.mkdir()
    platform.chmod(0o777)                                         # even a directory open to everyone
    journal = platform / "mig-journal"
    journal.write_text("{}")
    journal.chmod(0o644)
    # a first worker, whose directory a second one tries to read
    probe(pool, {}, namespace="tenant-a")
    first = next(iter(pool._workers.values())).entries[0].worker
    seen = probe(pool, {"paths": ["/", "/usr", "/etc", "/proc/sys", str(platform), str(first.dir), "/tmp",
                                  "/run/esg"],
                        "files": [str(journal), str(first.log_path), "/etc/shadow"]}, namespace="tenant-b")
    assert seen["writable"] == {"/": False, "/usr": False, "/etc": False, "/proc/sys": False,
                                str(platform): False, str(first.dir): False, "/tmp": True, "/run/esg": True}
    assert seen["readable"] == {str(journal): False, str(first.log_path): False, "/etc/shadow": False}


def test_the_memory_limit_holds(pool):
    assert probe(pool, {"allocate_mb": 64}, memory_mb=256)["allocated"] == 64
    assert probe(pool, {"allocate_mb": 400}, memory_mb=256, name="probe2")["allocated"] == 0


def test_what_an_action_starts_dies_with_its_worker(pool):
    marker = str(3000 + os.getpid() % 1000)
    probe(pool, {"spawn": marker})
    worker = next(iter(pool._workers.values())).entries[0].worker
    deadline = time.monotonic() + 10        # (its exec may still be finishing when the action answers)
    while not any(_cmdline(p) == ["sleep", marker] for p in tree(worker.proc.pid)):
        assert time.monotonic() < deadline, "the action's own child did not start"
        time.sleep(0.02)
    family = tree(worker.proc.pid)
    worker.kill()                       # as a time limit or an eviction does
    deadline = time.monotonic() + 10
    while any(alive(p) for p in family) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in family)


def test_a_mig_worker_gets_its_own_instance_and_never_the_config_capability():
    minors = ("config 1\nmonitor 2\ngpu0/gi1/access 12\ngpu0/gi1/ci0/access 13\n"
              "gpu0/gi2/access 21\ngpu0/gi2/ci0/access 22\ngpu1/gi1/access 31\n")
    assert gpu_device_paths(0, 1, 0, minors) == [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap12", "/dev/nvidia-caps/nvidia-cap13"]
    assert gpu_device_paths(1, None, None, minors)[-1] == "/dev/nvidia1"      # a whole GPU: no MIG capability
    assert gpu_device_paths(None) == []


def _cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode() for a in f.read().split(b"\0") if a]
    except OSError:
        return []
