"""``--runner docker``: workers are OpenWhisk runtime containers, started through the Docker SDK.

Each worker is one container of the action kind's runtime image (``openwhisk/action-python-v3.11`` for
``python:3.11``, the action's own image for ``blackbox``), limited with ``nano_cpus`` and pinned with
``cpuset_cpus`` to its vCPU ids, given its MIG slice with a ``device_requests`` entry naming the MIG UUID
(the NVIDIA container runtime then sets ``NVIDIA_VISIBLE_DEVICES``). It speaks the same /init + /run
protocol through :class:`invoker_agent.runtime_client.RuntimeClient`, so
:class:`invoker_agent.workers.WorkerPool` drives it unchanged (``WorkerPool(factory=DockerWorkerFactory(node))``).

**Hardening**, as OpenWhisk's invoker starts its action containers (``InvokerReactive``,
``DockerContainer.create``) and beyond it where it costs a runtime nothing (:func:`container_options`):
every capability dropped (OpenWhisk drops ``NET_RAW`` and ``NET_ADMIN``) and ``no-new-privileges``; a
pids limit of 1024 and ``nofile`` 1024:1024; the action's memory limit with no swap (``--memory`` =
``--memory-swap``); and a network of its own, :data:`NETWORK` (created by the agent if missing, as an
*internal* bridge with inter-container traffic off): no route out, none to another action's container,
none to Redis, Kafka or CouchDB. The agent reaches each container's runtime at its address on that
network, so it runs on the host (or with the host's network). Containers are named and labelled by node;
those a previous agent of the node left are removed when the factory starts and when it closes, as
OpenWhisk's invoker removes its ``wsk{N}_`` containers.

Stock runtime images know nothing of the batch entry point, so batches run one ``/run`` per request on
the warm container. A node without a reachable Docker engine gets a :class:`WorkerStartError` naming it;
an action kind with no runtime image is the developer's error naming the kind.
"""

from __future__ import annotations

import socket
import time
import uuid
from typing import Any

from invoker_agent.actions import ActionCode
from invoker_agent.runtime_client import RuntimeClient, UnsupportedKind, WorkerStartError
from invoker_agent.whole_gpu import cuda_device
from invoker_agent.workers import WorkerSpec, check_vcpus

RUNTIME_IMAGES = {
    "python:3": "openwhisk/action-python-v3.11",
    "python:3.9": "openwhisk/action-python-v3.9",
    "python:3.10": "openwhisk/action-python-v3.10",
    "python:3.11": "openwhisk/action-python-v3.11",
    "python:3.12": "openwhisk/action-python-v3.12",
    "nodejs:18": "openwhisk/action-nodejs-v18",
    "nodejs:20": "openwhisk/action-nodejs-v20",
}
RUNTIME_PORT = 8080
#: The network action containers join: internal (no route out), no traffic between containers.
NETWORK = "esg-actions"
#: OpenWhisk's limits for action containers (``InvokerReactive``).
PIDS_LIMIT = 1024
NOFILE = 1024
LABEL = "esg.worker"
NODE_LABEL = "esg.node"


def runtime_image(kind: str, image: str | None = None) -> str:
    """The runtime image for an action kind (``blackbox`` actions name their own image)."""
    if kind == "blackbox":
        if not image:
            raise UnsupportedKind("a blackbox action must name its image")
        return image
    try:
        return RUNTIME_IMAGES[kind]
    except KeyError:
        raise UnsupportedKind(f"action kind {kind!r} is not supported by this invoker: --runner docker has "
                              f"runtime images for {', '.join(sorted(RUNTIME_IMAGES))} and blackbox") from None


def container_options(spec: WorkerSpec, image: str, name: str | None = None, network: str = NETWORK,
                      node: str = "") -> dict[str, Any]:
    """The keyword arguments of ``client.containers.run`` for a worker (pure: unit-tested)."""
    from docker.types import DeviceRequest, Ulimit

    if not spec.vcpus:
        raise WorkerStartError("a worker needs at least one vCPU")
    opts: dict[str, Any] = {
        "image": image,
        "detach": True,
        "auto_remove": False,
        "nano_cpus": int(len(spec.vcpus) * 1e9),
        "cpuset_cpus": ",".join(str(c) for c in spec.vcpus),
        "mem_limit": f"{spec.memory_mb}m",
        "memswap_limit": f"{spec.memory_mb}m",          # no swap beyond the memory limit
        "cap_drop": ["ALL"],
        "security_opt": ["no-new-privileges"],
        "pids_limit": PIDS_LIMIT,
        "ulimits": [Ulimit(name="nofile", soft=NOFILE, hard=NOFILE)],
        "network": network,
        "labels": {LABEL: "1", NODE_LABEL: node, "esg.mig": spec.mig_uuid or ""},
        "environment": {"OMP_NUM_THREADS": str(len(spec.vcpus))},
    }
    if spec.mig_uuid:
        opts["device_requests"] = [DeviceRequest(driver="nvidia", device_ids=[cuda_device(spec.mig_uuid)],
                                                 capabilities=[["gpu"]])]
    else:
        opts["environment"]["CUDA_VISIBLE_DEVICES"] = ""
    if name:
        opts["name"] = name
    return opts


def network_options(name: str = NETWORK) -> dict[str, Any]:
    """The keyword arguments of ``client.networks.create`` for the actions' network (pure)."""
    return {"name": name, "driver": "bridge", "internal": True, "labels": {LABEL: "1"},
            "options": {"com.docker.network.bridge.enable_icc": "false"}}


def docker_client():
    """A Docker SDK client, or a clear :class:`WorkerStartError` when no engine answers."""
    try:
        import docker
        from docker.errors import DockerException
    except ImportError as e:
        raise WorkerStartError("--runner docker needs the 'docker' Python package") from e
    try:
        client = docker.from_env(timeout=10)
        client.ping()
        return client
    except DockerException as e:
        raise WorkerStartError(f"--runner docker: no Docker engine reachable ({e.__class__.__name__}: "
                               f"{str(e).splitlines()[0][:200]}); start dockerd or use --runner process") from None


class DockerWorker:
    """One OpenWhisk runtime container."""

    def __init__(self, spec: WorkerSpec, kind: str = "python:3.11", image: str | None = None,
                 client=None, start_timeout_s: float = 60.0, network: str = NETWORK, node: str = "",
                 name: str | None = None) -> None:
        self.spec = spec
        self.image = runtime_image(kind, image)
        self.network = network
        self.node = node
        self.name = name
        self._client = client
        self.start_timeout_s = start_timeout_s
        self.container = None
        self.rt: RuntimeClient | None = None
        self.init_ms: float | None = None
        self.batch_capable = False

    def start(self) -> None:
        check_vcpus(self.spec.vcpus)
        client = self._client or docker_client()
        from docker.errors import DockerException
        try:
            self.container = client.containers.run(**container_options(self.spec, self.image, self.name,
                                                                       self.network, self.node))
            self.container.reload()
            host = self.container.attrs["NetworkSettings"]["Networks"][self.network]["IPAddress"]
        except (DockerException, KeyError, IndexError, TypeError) as e:
            self.kill()
            raise WorkerStartError(f"could not start runtime container {self.image}: {e}") from None
        deadline = time.monotonic() + self.start_timeout_s
        while True:                       # the runtime proxy listens a moment after the container starts
            try:
                with socket.create_connection((host, RUNTIME_PORT), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or not self.alive():
                    self.kill()
                    raise WorkerStartError(f"runtime container {self.image} never listened on {host}:{RUNTIME_PORT}") \
                        from None
                time.sleep(0.05)
        self.rt = RuntimeClient(f"http://{host}:{RUNTIME_PORT}")

    def init(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        return self.rt.post("/init", payload, timeout_s)

    def run(self, payload: dict[str, Any], timeout_s: float) -> tuple[int, Any]:
        return self.rt.post("/run", payload, timeout_s)

    @property
    def last_body(self) -> bytes:
        return self.rt.last_body if self.rt is not None else b""

    def alive(self) -> bool:
        if self.container is None:
            return False
        try:
            self.container.reload()
            return self.container.status == "running"
        except Exception:  # noqa: BLE001 - a vanished container or engine is "not alive"
            return False

    def exit_detail(self) -> str:
        try:
            self.container.reload()
            return f"container {self.container.status}, exit code {self.container.attrs['State']['ExitCode']}"
        except Exception:  # noqa: BLE001
            return "container gone"

    def pin(self, vcpus: tuple[int, ...]) -> None:
        if self.container is not None and vcpus != self.spec.vcpus:
            check_vcpus(vcpus)
            self.container.update(cpuset_cpus=",".join(map(str, vcpus)), nano_cpus=int(len(vcpus) * 1e9))
            self.spec = WorkerSpec(vcpus, self.spec.mig_uuid, self.spec.memory_mb)

    def kill(self) -> None:
        if self.rt is not None:
            self.rt.close()
        if self.container is not None:
            try:
                self.container.remove(force=True)
            except Exception:  # noqa: BLE001 - already gone
                pass
            self.container = None


class DockerWorkerFactory:
    """``WorkerPool(factory=DockerWorkerFactory(node))``: one engine client shared by the node's workers.
    Starting it checks the engine, makes the actions' network if missing, and removes the node's
    containers a previous agent left; :meth:`cleanup` removes them again when the agent stops."""

    def __init__(self, node: str = "", network: str = NETWORK, client=None) -> None:
        self.node = node
        self.network = network
        self._client = client or docker_client()
        self._count = 0
        ensure_network(self._client, network)
        self.cleanup()

    def __call__(self, spec: WorkerSpec, action: ActionCode) -> DockerWorker:
        kind = action.kind or "python:3"
        image = runtime_image(kind, action.image)
        self._count += 1
        name = f"esg_{self.node}_{self._count}_{uuid.uuid4().hex[:8]}" if self.node else None
        return DockerWorker(spec, kind, image, client=self._client, network=self.network, node=self.node,
                            name=name)

    def cleanup(self) -> int:
        """Remove every container of this node's workers (running or not); how many went."""
        from docker.errors import DockerException
        try:
            leftovers = self._client.containers.list(all=True, filters={"label": [f"{LABEL}=1",
                                                                                  f"{NODE_LABEL}={self.node}"]})
        except DockerException:
            return 0
        for c in leftovers:
            try:
                c.remove(force=True)
            except DockerException:
                pass
        return len(leftovers)


def ensure_network(client, name: str = NETWORK) -> None:
    """The actions' network, created (:func:`network_options`) when the engine has none of that name."""
    from docker.errors import DockerException, NotFound
    try:
        client.networks.get(name)
    except NotFound:
        try:
            client.networks.create(**network_options(name))
        except DockerException as e:
            raise WorkerStartError(f"--runner docker: cannot create the actions' network {name}: {e}") from None
    except DockerException as e:
        raise WorkerStartError(f"--runner docker: cannot read the actions' network {name}: {e}") from None
