"""Reading the deployment files as Docker Compose and Kubernetes read them, for the offline checks.

* Compose: YAML (anchors and ``<<`` merge keys resolved by the YAML loader), ``${VAR}`` /
  ``${VAR:-default}`` / ``${VAR-default}`` / ``$$`` interpolation, several files merged in order
  (mappings merged key by key, any other value replaced), services filtered by active profiles.
* Kubernetes: every document of every manifest; a container's environment resolved from its
  ``env`` and ``envFrom`` (ConfigMap and Secret ``data``/``stringData``, ``fieldRef``).
"""

from __future__ import annotations

import importlib.util
import math
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
COMPOSE = ROOT / "docker-compose.yml"
COMPOSE_CPU = ROOT / "docker-compose.cpu.yml"
K8S_DIR = ROOT / "deploy" / "kubernetes" / "esg"
K8S_MANIFESTS = sorted(K8S_DIR.glob("*.yaml"))
VALUES_OVERLAY = ROOT / "deploy" / "kubernetes" / "openwhisk-values.yaml"

#: The image the Dockerfile's WORKDIR puts the project in.
IMAGE_ROOT = "/opt/esg"

_VAR = re.compile(r"\$(?:\$|\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?-)(?P<default>[^}]*))?\})")


def couchdb_init() -> ModuleType:
    """``deploy/couchdb/init.py``, which runs as a script in the image, loaded as a module."""
    if "couchdb_init" not in sys.modules:
        spec = importlib.util.spec_from_file_location("couchdb_init", ROOT / "deploy" / "couchdb" / "init.py")
        module = sys.modules["couchdb_init"] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    return sys.modules["couchdb_init"]


def load_yaml(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def interpolate(value: Any, env: dict[str, str]) -> Any:
    """Compose's variable interpolation, for the forms these files use; anything else is an error."""
    if isinstance(value, dict):
        return {k: interpolate(v, env) for k, v in value.items()}
    if isinstance(value, list):
        return [interpolate(v, env) for v in value]
    if not isinstance(value, str):
        return value

    def one(m: re.Match) -> str:
        if m.group(0) == "$$":
            return "$"
        name, op, default = m.group("name"), m.group("op"), m.group("default")
        got = env.get(name)
        if op == ":-":
            return got if got else default
        if op == "-":
            return got if got is not None else default
        return got or ""

    out = _VAR.sub(one, value)
    if re.search(r"\$\{", out):
        raise ValueError(f"unsupported interpolation in {value!r}")
    return out


def merge(base: Any, override: Any) -> Any:
    if isinstance(base, dict) and isinstance(override, dict):
        out = dict(base)
        for k, v in override.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    return override


def compose_model(*files: Path, env: dict[str, str] | None = None) -> dict[str, Any]:
    """The merged, interpolated model of ``files`` (the first one's defaults when ``env`` is empty)."""
    model: dict[str, Any] = {}
    for f in files:
        model = merge(model, load_yaml(f))
    return interpolate(model, env or {})


def active_services(model: dict[str, Any], profiles: tuple[str, ...] = ()) -> dict[str, dict[str, Any]]:
    return {name: s for name, s in model["services"].items()
            if not s.get("profiles") or set(s["profiles"]) & set(profiles)}


def service_env(service: dict[str, Any]) -> dict[str, str]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        env = dict(item.split("=", 1) for item in env)
    return {k: "" if v is None else str(v) for k, v in env.items()}


def redis_secret(service: dict[str, Any]) -> str | None:
    """The role directory (``esg redis-users``) of the Redis secrets volume a compose service mounts at
    /run/esg-redis (None: it mounts none)."""
    for v in service.get("volumes", []):
        if isinstance(v, dict) and v.get("target") == "/run/esg-redis":
            assert v["source"] == "esg-redis-secrets" and v["read_only"] is True
            return v["volume"]["subpath"]
    return None


# -- Kubernetes -------------------------------------------------------------------------------------------
def k8s_documents() -> list[dict[str, Any]]:
    docs = []
    for path in K8S_MANIFESTS:
        docs += [d for d in yaml.safe_load_all(path.read_text()) if d]
    return docs


def k8s_object(kind: str, name: str) -> dict[str, Any]:
    for d in k8s_documents():
        if d["kind"] == kind and d["metadata"]["name"] == name:
            return d
    raise KeyError(f"no {kind}/{name} in {K8S_DIR}")


def pod_container(workload: dict[str, Any], name: str) -> dict[str, Any]:
    for c in workload["spec"]["template"]["spec"]["containers"]:
        if c["name"] == name:
            return c
    raise KeyError(f"no container {name} in {workload['kind']}/{workload['metadata']['name']}")


def container_env(container: dict[str, Any], node_name: str, pod_name: str = "pod-0") -> dict[str, str]:
    """The environment Kubernetes gives ``container`` on a node called ``node_name``, in a pod ``pod_name``."""
    env: dict[str, str] = {}
    for source in container.get("envFrom", []):
        if "configMapRef" in source:
            env.update(k8s_object("ConfigMap", source["configMapRef"]["name"]).get("data", {}))
        if "secretRef" in source:
            env.update(k8s_object("Secret", source["secretRef"]["name"]).get("stringData", {}))
    for item in container.get("env", []):
        if "value" in item:
            env[item["name"]] = item["value"]
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "spec.nodeName":
            env[item["name"]] = node_name
        elif item["valueFrom"].get("fieldRef", {}).get("fieldPath") == "metadata.name":
            env[item["name"]] = pod_name
        elif "resourceFieldRef" in item["valueFrom"]:
            env[item["name"]] = resource_field(container, item["valueFrom"]["resourceFieldRef"])
        else:
            raise ValueError(f"env {item['name']}: unsupported valueFrom {item['valueFrom']}")
    return {k: str(v) for k, v in env.items()}


_QUANTITY = re.compile(r"^(?P<n>[0-9.]+)(?P<unit>m|k|M|G|T|Ki|Mi|Gi|Ti)?$")
_UNITS = {None: 1, "m": 0.001, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
          "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


def quantity(text: str) -> float:
    """A Kubernetes resource quantity (``"500m"``, ``"8"``, ``"32Gi"``) as a number."""
    m = _QUANTITY.match(str(text))
    if not m:
        raise ValueError(f"not a resource quantity: {text!r}")
    return float(m.group("n")) * _UNITS[m.group("unit")]


def resource_field(container: dict[str, Any], ref: dict[str, Any]) -> str:
    """The downward API's value of ``resourceFieldRef``: the container's request or limit divided by the
    divisor, rounded up to an integer (as the kubelet does)."""
    kind, _, resource = ref["resource"].partition(".")
    value = quantity(container["resources"][kind][resource])
    return str(math.ceil(value / quantity(ref.get("divisor", "1"))))
