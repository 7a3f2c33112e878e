"""``--runner docker``: workers are OpenWhisk runtime containers, started through the Docker SDK.

Each worker is one container of the action kind's runtime image (``openwhisk/action-python-v3.11`` for
``python:3.11``, the action's own image for ``blackbox``), limited with ``nano_cpus`` and pinned with
``cpuset_cpus`` to its vCPU ids, given its MIG slice with a ``device_requests`` entry naming the MIG UUID
(the NVIDIA container runtime then sets ``NVIDIA_VISIBLE_DEVICES``), and its port 8080 published on
127.0.0.1 only. It speaks the same /init + /run protocol through
:class:`invoker_agent.runtime_client.RuntimeClient`, so :class:`invoker_agent.runner.WorkerPool` drives it
unchanged (``WorkerPool(factory=DockerWorkerFactory())``).

Stock runtime images know nothing of the batch entry point, so batches run one ``/run`` per request on
the warm container. A node without a reachable Docker engine gets a :class:`WorkerStartError` naming it.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from invoker_agent.actions import ActionCode
from invoker_agent.runner import WorkerSpec, check_vcpus
from invoker_agent.runtime_client import RuntimeClient, WorkerStartError
from invoker_agent.whole_gpu import cuda_device

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


def runtime_image(kind: str, image: str | None = None) -> str:
    """The runtime image for an action kind (``blackbox`` actions name their own image)."""
    if kind == "blackbox":
        if not image:
            raise WorkerStartError("a blackbox action must name its image")
        return image
    try:
        return RUNTIME_IMAGES[kind]
    except KeyError:
        raise WorkerStartError(f"no runtime image known for action kind {kind!r} "
                               f"(known: {', '.join(sorted(RUNTIME_IMAGES))})") from None


def container_options(spec: WorkerSpec, image: str, name: str | None = None) -> dict[str, Any]:
    """The keyword arguments of ``client.containers.run`` for a worker (pure: unit-tested)."""
    from docker.types import DeviceRequest

    if not spec.vcpus:
        raise WorkerStartError("a worker needs at least one vCPU")
    opts: dict[str, Any] = {
        "image": image,
        "detach": True,
        "auto_remove": False,
        "nano_cpus": int(len(spec.vcpus) * 1e9),
        "cpuset_cpus": ",".join(str(c) for c in spec.vcpus),
        "mem_limit": f"{spec.memory_mb}m",
        "ports": {f"{RUNTIME_PORT}/tcp": ("127.0.0.1", None)},
        "labels": {"esg.worker": "1", "esg.mig": spec.mig_uuid or ""},
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
                 client=None, start_timeout_s: float = 60.0) -> None:
        self.spec = spec
        self.image = runtime_image(kind, image)
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
            self.container = client.containers.run(**container_options(self.spec, self.image))
            self.container.reload()
            binding = self.container.attrs["NetworkSettings"]["Ports"][f"{RUNTIME_PORT}/tcp"][0]
            port = int(binding["HostPort"])
        except (DockerException, KeyError, IndexError, TypeError) as e:
            self.kill()
            raise WorkerStartError(f"could not start runtime container {self.image}: {e}") from None
        deadline = time.monotonic() + self.start_timeout_s
        while True:                       # the runtime proxy listens a moment after the container starts
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    break
            except OSError:
                if time.monotonic() > deadline or not self.alive():
                    self.kill()
                    raise WorkerStartError(f"runtime container {self.image} never listened on :{RUNTIME_PORT}") \
                        from None
                time.sleep(0.05)
        self.rt = RuntimeClient(f"http://127.0.0.1:{port}")

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
    """``WorkerPool(factory=DockerWorkerFactory())``: one engine client shared by its workers."""

    def __init__(self) -> None:
        self._client = None

    def __call__(self, spec: WorkerSpec, action: ActionCode) -> DockerWorker:
        image = runtime_image(action.kind or "python:3", action.image)
        if self._client is None:
            self._client = docker_client()
        return DockerWorker(spec, action.kind or "python:3", image, client=self._client)
