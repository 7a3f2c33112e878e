"""deploy/kubernetes/, checked without a cluster.

The manifests against the Kubernetes API schemas of one pinned version (``kubernetes-validate``, whose
wheel carries the schemas, strict: unknown fields are errors); the openwhisk-deploy-kube overlay against
the chart's own default values and ``values.schema.json`` (vendored, ``deploy/SOURCES.md``): every key it
sets must exist in the chart, or Helm would ignore it silently. The rest are the properties the README
promises: the agent only on labelled MIG nodes, with the capabilities MIG management and the worker
sandbox need and no more (not privileged), no device-plugin GPUs; one scheduler at a
time; addresses that are the ones the chart creates.
"""

from __future__ import annotations

import copy
import json
import tomllib

import jsonschema
import kubernetes_validate
import pytest
import yaml

from tests.deploy.deploy_files import (
    IMAGE_ROOT,
    K8S_MANIFESTS,
    ROOT,
    VALUES_OVERLAY,
    container_env,
    k8s_documents,
    k8s_object,
    load_yaml,
    merge,
    pod_container,
)

#: The Kubernetes release the manifests are validated for.
KUBERNETES_VERSION = "1.32.0"
UPSTREAM = ROOT / "deploy" / "kubernetes" / "upstream"
#: The release name and namespace the manifests' addresses assume (openwhisk-deploy-kube's example).
RELEASE, NAMESPACE = "owdev", "openwhisk"
MIG_NODE_LABEL = ("esg-openwhisk/mig-agent", "true")
SPI = ("-Dwhisk.spi.LoadBalancerProvider=org.apache.openwhisk.core.loadBalancer.ShardingContainerPoolBalancer",
       "-Dwhisk.spi.EntitlementSpiProvider=org.apache.openwhisk.core.entitlement.LocalEntitlementProvider")


@pytest.fixture(scope="module")
def chart_defaults() -> dict:
    return load_yaml(UPSTREAM / "values.yaml")


@pytest.fixture(scope="module")
def overlay() -> dict:
    return load_yaml(VALUES_OVERLAY)


def config() -> dict[str, str]:
    return k8s_object("ConfigMap", "esg-config")["data"]


@pytest.mark.parametrize("path", K8S_MANIFESTS, ids=lambda p: p.name)
def test_manifests_are_valid_for_the_pinned_kubernetes_version(path):
    for doc in yaml.safe_load_all(path.read_text()):
        kubernetes_validate.validate(doc, KUBERNETES_VERSION, strict=True)


def test_the_validator_rejects_an_unknown_field():
    agent = copy.deepcopy(k8s_object("DaemonSet", "esg-agent"))
    agent["spec"]["template"]["spec"]["nodeSelecter"] = agent["spec"]["template"]["spec"].pop("nodeSelector")
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(agent, KUBERNETES_VERSION, strict=True)


def test_every_container_image_is_pinned_and_ours_carries_the_project_version():
    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for doc in k8s_documents():
        for c in doc.get("spec", {}).get("template", {}).get("spec", {}).get("containers", []):
            repo, _, tag = c["image"].rpartition(":")
            assert repo and tag and tag != "latest" and "/" not in tag, c["image"]
            if repo == "esg-openwhisk":
                assert tag == (f"{version}-gpu" if doc["kind"] == "DaemonSet" else version), c["image"]


def test_the_agent_runs_unprivileged_with_the_capabilities_mig_and_the_sandbox_need_on_labelled_mig_nodes_only():
    agent = k8s_object("DaemonSet", "esg-agent")
    pod = agent["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == dict([MIG_NODE_LABEL])
    assert pod["runtimeClassName"] == "nvidia"
    c = pod_container(agent, "agent")
    ctx = c["securityContext"]
    assert ctx["runAsUser"] == 0                                             # the image's own user is not root
    assert ctx["privileged"] is False and ctx["capabilities"]["drop"] == ["ALL"]
    assert set(ctx["capabilities"]["add"]) == {"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "KILL", "SYS_NICE"}
    assert ctx["procMount"] == "Unmasked"
    env = container_env(c, "node-a")
    assert env["NVIDIA_VISIBLE_DEVICES"] == env["NVIDIA_MIG_CONFIG_DEVICES"] == "all"
    assert env["ESG_AGENT_NAME"] == "node-a"
    # No GPU from the device plugin: the agent owns every GPU of the node and carves it itself.
    for section in ("requests", "limits"):
        assert not any(k.startswith("nvidia.com/") for k in c.get("resources", {}).get(section, {}))
    assert "--fake-gpu" not in c["args"]


def test_the_mig_journal_survives_the_pod_on_its_node():
    agent = k8s_object("DaemonSet", "esg-agent")
    c = pod_container(agent, "agent")
    journal = c["args"][c["args"].index("--journal") + 1]
    mount = next(m for m in c["volumeMounts"] if journal.startswith(m["mountPath"] + "/"))
    volume = next(v for v in agent["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"


def test_the_agent_probe_asks_the_controller_the_agent_talks_to():
    c = pod_container(k8s_object("DaemonSet", "esg-agent"), "agent")
    probe = c["readinessProbe"]["exec"]["command"]
    assert probe[:4] == ["python", f"{IMAGE_ROOT}/deploy/healthcheck.py", "agent", "--controller"]
    assert probe[4] == config()["ESG_OPENWHISK_API"]


def test_a_leader_and_a_standby_rolled_one_at_a_time_and_their_probe_on_the_metrics_port():
    dep = k8s_object("Deployment", "esg-scheduler")
    assert dep["spec"]["replicas"] == 2
    assert dep["spec"]["strategy"] == {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}}
    labels = dep["spec"]["selector"]["matchLabels"]
    pdb = k8s_object("PodDisruptionBudget", "esg-scheduler")
    assert pdb["spec"] == {"minAvailable": 1, "selector": {"matchLabels": labels}}
    term = dep["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"][
        "preferredDuringSchedulingIgnoredDuringExecution"][0]["podAffinityTerm"]
    assert term["labelSelector"]["matchLabels"] == labels and term["topologyKey"] == "kubernetes.io/hostname"
    c = pod_container(dep, "scheduler")
    assert container_env(c, "node-a", pod_name="esg-scheduler-x1")["ESG_SCHEDULER_NAME"] == "esg-scheduler-x1"
    port = c["args"][c["args"].index("--metrics-port") + 1]
    assert c["args"][c["args"].index("--metrics-host") + 1] == "0.0.0.0"          # the kubelet's probe reaches it
    assert [p["containerPort"] for p in c["ports"]] == [int(port)]
    assert c["readinessProbe"]["exec"]["command"][-1] == f"http://127.0.0.1:{port}/metrics"
    assert k8s_object("Service", "esg-scheduler")["spec"]["ports"][0]["port"] == int(port)


def test_the_scheduler_plans_with_the_gpu_tables_the_image_holds():
    c = pod_container(k8s_object("Deployment", "esg-scheduler"), "scheduler")
    path = c["args"][c["args"].index("--profiles") + 1]
    assert path == f"{IMAGE_ROOT}/profiles/tables/a100"
    assert list((ROOT / path.removeprefix(f"{IMAGE_ROOT}/")).glob("*.json"))


def mounted_at(workload: dict, container: str, path: str) -> dict:
    """The volume ``container`` of ``workload`` mounts (read only) at ``path``."""
    c = pod_container(workload, container)
    mount = next(m for m in c["volumeMounts"] if m["mountPath"] == path)
    assert mount.get("readOnly") is True, (container, path)
    return next(v for v in workload["spec"]["template"]["spec"]["volumes"] if v["name"] == mount["name"])


def test_redis_requires_acl_users_and_each_process_reads_its_own_credentials_from_a_file():
    """No Redis URL or password in the ConfigMap: the schedulers mount their user's Secret, each agent its
    node's own file, at the path ESG_REDIS_FILE names; Redis loads the ACL Secret, is durable, never evicts."""
    assert "ESG_REDIS" not in config() and config()["ESG_REDIS_FILE"] == "/run/esg-redis/redis.url"
    sched = mounted_at(k8s_object("Deployment", "esg-scheduler"), "scheduler", "/run/esg-redis")
    assert sched["secret"]["secretName"] == "esg-redis-scheduler"
    agent = mounted_at(k8s_object("DaemonSet", "esg-agent"), "agent", "/run/esg-redis")
    assert agent["hostPath"] == {"path": "/etc/esg-openwhisk/redis", "type": "Directory"}
    redis = k8s_object("StatefulSet", "esg-redis")
    assert redis["spec"]["replicas"] == 1
    args = pod_container(redis, "redis")["args"]
    acl = args[args.index("--aclfile") + 1]
    volume = mounted_at(redis, "redis", acl.rsplit("/", 1)[0])
    assert volume["secret"]["secretName"] == "esg-redis-acl"
    assert args[args.index("--appendonly") + 1] == "yes" and args[args.index("--maxmemory-policy") + 1] == "noeviction"


def test_openwhisk_addresses_are_the_ones_the_chart_creates(chart_defaults):
    domain = chart_defaults["k8s"]["domain"]
    kafka = f"{RELEASE}-kafka-0.{RELEASE}-kafka.{NAMESPACE}.svc.{domain}:{chart_defaults['kafka']['port']}"
    controller = f"http://{RELEASE}-controller.{NAMESPACE}.svc.{domain}:{chart_defaults['controller']['port']}"
    assert config()["ESG_KAFKA"] == kafka
    assert config()["ESG_OPENWHISK_API"] == controller


def key_paths(values: dict, prefix: tuple = ()) -> list[tuple]:
    out = []
    for k, v in values.items():
        out += key_paths(v, (*prefix, k)) if isinstance(v, dict) else [(*prefix, k)]
    return out


def test_every_overlay_key_exists_in_the_chart(overlay, chart_defaults):
    for path in key_paths(overlay):
        node = chart_defaults
        for part in path:
            assert isinstance(node, dict) and part in node, f"{'.'.join(path)} is not a value of the chart"
            node = node[part]


def test_merged_values_satisfy_the_chart_schema(overlay, chart_defaults):
    schema = json.loads((UPSTREAM / "values.schema.json").read_text())
    jsonschema.Draft7Validator(schema).validate(merge(chart_defaults, overlay))


def test_overlay_puts_the_controller_on_the_classic_path_without_invokers(overlay):
    assert overlay["scheduler"]["enabled"] is False
    assert all(flag in overlay["controller"]["options"].split() for flag in SPI)
    factory = overlay["invoker"]["containerFactory"]
    assert factory["impl"] == "kubernetes" and factory["kubernetes"]["replicaCount"] == 0


def test_overlay_and_esg_agree_on_topic_prefix_and_controller(overlay):
    assert overlay["whisk"]["kafka"]["topics"]["prefix"] == config()["ESG_TOPIC_PREFIX"]
    # One controller, StatefulSet ordinal 0, acks on completed0.
    assert overlay["controller"]["replicaCount"] == 1 and config()["ESG_CONTROLLER_ID"] == "0"
