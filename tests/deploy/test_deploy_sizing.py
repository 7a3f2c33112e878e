"""What the deployments promise beyond starting: the agent pod's real size and lifetime, the scheduler
pod's scrape annotations, the images' pinned installs and users, and credentials kept out of URLs.

* The DaemonSet's agent advertises its container's limits (the downward API), runs at a priority class
  of its own, is kept alive by a probe that asks no other service, and gets as long to stop as a drain
  can take -- so does Compose (``stop_grace_period``), and ``init: true`` reaps its action workers.
* The scheduler pod carries the annotations openwhisk-deploy-kube's Prometheus keeps (its scrape job's
  relabel rules, read from the chart's own file).
* Each image target installs its exact lock (``deploy/requirements/<target>.txt``), which satisfies
  ``pyproject.toml``; the GPU one has onnxruntime-gpu with CUDA and cuDNN, the CPU one the CPU package.
"""

from __future__ import annotations

import re
import tomllib

import pytest
import yaml
from packaging.requirements import Requirement

from tests.deploy.deploy_files import (
    COMPOSE,
    COMPOSE_CPU,
    IMAGE_ROOT,
    ROOT,
    active_services,
    compose_model,
    container_env,
    k8s_documents,
    k8s_object,
    pod_container,
    quantity,
    service_env,
)

#: A batch runs at most its action's time limit: OpenWhisk's whisk.time-limit.max (5 min by default).
MAX_ACTION_S = 300
DOCKERFILE = (ROOT / "Dockerfile").read_text()
PROMETHEUS = ROOT / "deploy" / "kubernetes" / "upstream" / "configMapFiles" / "prometheus" / "prometheus.yaml"


def agent():
    ds = k8s_object("DaemonSet", "esg-agent")
    return ds, pod_container(ds, "agent")


def test_the_agent_advertises_its_container_limits():
    _, c = agent()
    limits = c["resources"]["limits"]
    assert c["resources"]["requests"] == limits                # Guaranteed: what it advertises is held for it
    env = container_env(c, "node-a")
    assert int(env["ESG_AGENT_VCPUS"]) == quantity(limits["cpu"])
    assert int(env["ESG_AGENT_MEMORY_MB"]) == quantity(limits["memory"]) / 2**20


def test_the_agent_runs_at_its_own_priority_class():
    ds, _ = agent()
    name = ds["spec"]["template"]["spec"]["priorityClassName"]
    pc = next(d for d in k8s_documents() if d["kind"] == "PriorityClass" and d["metadata"]["name"] == name)
    assert 0 < pc["value"] < 1_000_000_000 and not pc["globalDefault"]      # below the system classes


def test_the_liveness_probe_asks_no_other_service():
    _, c = agent()
    probe = c["livenessProbe"]["exec"]["command"]
    assert probe[:3] == ["python", f"{IMAGE_ROOT}/deploy/healthcheck.py", "alive"]
    assert probe[probe.index("--file") + 1] == c["args"][c["args"].index("--alive-file") + 1]
    assert not any(word.startswith(("http", "redis")) for word in probe)
    max_age = float(probe[probe.index("--max-age-s") + 1])
    assert max_age >= 10 * 1.0                                 # ten heartbeats of the default period


def grace_s(text: str) -> float:
    m = re.fullmatch(r"(\d+)(s|m)", text)
    assert m, text
    return int(m[1]) * (60 if m[2] == "m" else 1)


def test_agents_get_as_long_to_stop_as_a_drain_takes():
    ds, _ = agent()
    assert ds["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] >= MAX_ACTION_S + 30
    for model in (compose_model(COMPOSE), compose_model(COMPOSE, COMPOSE_CPU)):
        for name, s in active_services(model).items():
            if name.startswith("agent-"):
                assert grace_s(s["stop_grace_period"]) >= MAX_ACTION_S + 30, name
                assert s["init"] is True, name               # its action workers are its children


def test_the_scheduler_pod_carries_what_the_charts_prometheus_scrapes():
    job = next(j for j in yaml.safe_load(PROMETHEUS.read_text())["scrape_configs"] if j["job_name"] == "kubernetes-pods")
    dep = k8s_object("Deployment", "esg-scheduler")
    annotations = dep["spec"]["template"]["metadata"]["annotations"]
    # Kubernetes service discovery names an annotation __meta_kubernetes_pod_annotation_<name, . and / as _>
    meta = {"__meta_kubernetes_pod_annotation_" + re.sub(r"[^a-zA-Z0-9_]", "_", k): v for k, v in annotations.items()}
    rules = {r["source_labels"][-1]: r for r in job["relabel_configs"] if "source_labels" in r}
    keep = next(r for r in job["relabel_configs"] if r.get("action") == "keep")
    assert re.fullmatch(str(keep["regex"]).lower(), meta[keep["source_labels"][0]])
    port_rule = rules["__meta_kubernetes_pod_annotation_prometheus_io_port"]
    address = f"10.0.0.1:1234;{meta['__meta_kubernetes_pod_annotation_prometheus_io_port']}"
    assert re.fullmatch(port_rule["regex"], address)
    c = pod_container(dep, "scheduler")
    metrics = c["args"][c["args"].index("--metrics-port") + 1]
    assert meta["__meta_kubernetes_pod_annotation_prometheus_io_port"] == metrics
    assert meta["__meta_kubernetes_pod_annotation_prometheus_io_path"] == "/metrics"


# -- images -------------------------------------------------------------------------------------------------
def canonical(name: str) -> str:
    """A distribution's name as PEP 503 compares them."""
    return re.sub(r"[-_.]+", "-", name).lower()


def lock(target: str) -> dict[str, str]:
    pins = {}
    for line in (ROOT / "deploy" / "requirements" / f"{target}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, sep, version = line.partition("==")
            assert sep and re.fullmatch(r"[A-Za-z0-9._-]+", name) and re.fullmatch(r"[0-9][0-9A-Za-z.+!-]*", version), line
            pins[canonical(name)] = version
    return pins


def stage(target: str) -> str:
    m = re.search(rf"^FROM base AS {target}\n(.*?)(?=^FROM |\Z)", DOCKERFILE, re.M | re.S)
    assert m, f"no {target} target in the Dockerfile"
    return m[1]


@pytest.mark.parametrize("target, extra", [("cpu", "actions"), ("gpu", "gpu")])
def test_each_image_installs_its_exact_lock_which_satisfies_the_project(target, extra):
    body = stage(target)
    assert f"COPY deploy/requirements/{target}.txt" in body
    assert "--no-deps -r /tmp/requirements.txt" in body and "--no-build-isolation ." in body
    assert re.search(r"^USER esg$", body, re.M)             # installed as root, run as esg
    assert re.search(r'^ENTRYPOINT \["esg"\]$', DOCKERFILE, re.M) and "ENTRYPOINT" not in body
    pins = lock(target)
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = project["dependencies"] + project["optional-dependencies"][extra]
    for text in wanted:
        req = Requirement(text)
        name = canonical(req.name)
        assert name in pins, f"{target}: {name} is not in the lock"
        assert req.specifier.contains(pins[name], prereleases=True), f"{target}: {name}=={pins[name]} vs {req}"
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["build-system"]["requires"]
    for text in build:
        assert canonical(Requirement(text).name) in pins, f"{target}: build requirement {text}"


def test_the_gpu_image_has_cuda_and_cudnn_and_the_cpu_image_does_not():
    gpu, cpu = lock("gpu"), lock("cpu")
    assert "onnxruntime-gpu" in gpu and "onnxruntime" not in gpu
    assert {"nvidia-cuda-runtime-cu12", "nvidia-cudnn-cu12", "nvidia-cublas-cu12"} <= set(gpu)
    assert "onnxruntime" in cpu and not any(n.startswith(("onnxruntime-gpu", "nvidia-cud")) for n in cpu)
    assert gpu["onnxruntime-gpu"].split(".")[:2] <= ["1", "26"]          # the CUDA 12 line (driver R525+)


def test_the_build_context_leaves_out_what_a_checkout_carries():
    ignored = (ROOT / ".dockerignore").read_text().splitlines()
    for pattern in (".venv*", ".node", "**/*.so", "**/__pycache__", "**/.git"):
        assert pattern in ignored, pattern


def test_compose_builds_each_target_where_it_is_used():
    model = compose_model(COMPOSE, COMPOSE_CPU)
    for name, s in model["services"].items():
        if "build" in s:
            want = "gpu" if name == "agent-gpu0" else "cpu"
            assert s["build"] == {"context": ".", "target": want}, name


# -- credentials --------------------------------------------------------------------------------------------
def test_no_credential_is_spliced_into_a_url():
    for model in (compose_model(COMPOSE), compose_model(COMPOSE, COMPOSE_CPU)):
        for name, s in model["services"].items():
            for key, value in service_env(s).items():
                assert not re.search(r"://[^/@\s]+:[^/@\s]*@", value), f"{name} {key}"
    for doc in k8s_documents():
        for key, value in (doc.get("stringData") or {}).items():
            assert not re.search(r"://[^/@\s]+:[^/@\s]*@", str(value)), key


@pytest.mark.parametrize("password", ["some_passw0rd", "p@ss:w/rd%?#", "ümlaut pass"])
def test_the_scheduler_encodes_the_store_credentials_into_its_url(monkeypatch, password):
    import argparse

    from controller_plugin.activation_store import parse_url
    from esg_cli.scheduler import activation_store

    env = service_env(compose_model(COMPOSE, env={"COUCHDB_PASSWORD": password})["services"]["scheduler"])
    for key in ("ESG_ACTIVATION_STORE", "ESG_ACTIVATION_STORE_USER", "ESG_ACTIVATION_STORE_PASSWORD"):
        monkeypatch.setenv(key, env[key])
    url = parse_url(activation_store(argparse.Namespace(activation_store=None)))
    assert (url.user, url.password, url.database) == ("whisk_admin", password, "local_activations")


def test_store_credentials_given_twice_or_half_are_refused(monkeypatch, tmp_path):
    import argparse

    from esg_cli.errors import CliError
    from esg_cli.scheduler import activation_store

    ns = argparse.Namespace(activation_store=None)
    monkeypatch.setenv("ESG_ACTIVATION_STORE", "http://u:p@db:5984/acts")
    monkeypatch.setenv("ESG_ACTIVATION_STORE_USER", "admin")
    with pytest.raises(CliError, match="again"):
        activation_store(ns)
    monkeypatch.setenv("ESG_ACTIVATION_STORE", "http://db:5984/acts")
    monkeypatch.delenv("ESG_ACTIVATION_STORE_USER")
    monkeypatch.setenv("ESG_ACTIVATION_STORE_PASSWORD", "x")
    with pytest.raises(CliError, match="ESG_ACTIVATION_STORE_USER"):
        activation_store(ns)
    secret = tmp_path / "pw"
    secret.write_text("from file\n")
    monkeypatch.setenv("ESG_ACTIVATION_STORE_USER", "admin")
    monkeypatch.delenv("ESG_ACTIVATION_STORE_PASSWORD")
    monkeypatch.setenv("ESG_ACTIVATION_STORE_PASSWORD_FILE", str(secret))
    assert activation_store(ns) == "http://admin:from%20file@db:5984/acts"
