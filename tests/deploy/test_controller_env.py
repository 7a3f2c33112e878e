"""The compose controller's environment against what the pinned image needs and what openwhisk-deploy-kube
gives the same image.

**What the image requires.** ``openwhisk/controller:ef725a6`` starts with ``/init.sh <instance>``, which
turns every non-empty ``CONFIG_*`` variable into a JVM system property (``transformEnvironment.sh``: ``_``
becomes ``.``, a camelCased part becomes kebab-cased, a PascalCased part stays) and reads the rest of its
settings from plain environment variables (``WhiskConfig``: a property ``a.b.c`` is ``A_B_C``). The
properties it cannot start without are derived from OpenWhisk's source at that commit
(``docs/deployment.md``, "What the controller image requires", says where each is read): the
``WhiskConfig`` properties the controller's ``requiredProperties`` list with no default, and the paths
it loads with ``loadConfigOrThrow`` that neither ``application.conf`` nor ``reference.conf`` of the
common and controller modules sets. :data:`REQUIRED` lists them.

**What the chart gives.** The chart's controller template is rendered by Helm's own engine
(``helm-python-sdk``, offline) from the chart files kept in ``deploy/kubernetes/upstream/`` with
``deploy/kubernetes/openwhisk-values.yaml`` as the user passes it, its ``configMapKeyRef``/``secretKeyRef``
resolved against the ConfigMaps and Secret it renders. Both environments are compared as the image sees
them (properties, after the start script's transformation), and any property only one of them sets is
named unless :data:`CHART_ONLY` or :data:`COMPOSE_ONLY` says why.
"""

from __future__ import annotations

import base64
import re
import shlex

import pytest
import yaml

from tests.deploy.deploy_files import COMPOSE, ROOT, compose_model, load_yaml, service_env

CHART = ROOT / "deploy" / "kubernetes" / "upstream"
OVERLAY = ROOT / "deploy" / "kubernetes" / "openwhisk-values.yaml"
RELEASE, NAMESPACE = "owdev", "openwhisk"

#: What the image cannot start without (property as the image reads it -> where OpenWhisk reads it, ef725a6).
REQUIRED = {
    "KAFKA_HOSTS": "WhiskConfig kafka.hosts: ShardingContainerPoolBalancer.requiredProperties",
    "RUNTIMES_MANIFEST": "WhiskConfig runtimes.manifest: ExecManifest.requiredProperties",
    "LIMITS_ACTIONS_INVOKES_PERMINUTE": "WhiskConfig: EntitlementProvider.requiredProperties",
    "LIMITS_ACTIONS_INVOKES_CONCURRENT": "WhiskConfig: EntitlementProvider.requiredProperties",
    "LIMITS_TRIGGERS_FIRES_PERMINUTE": "WhiskConfig: EntitlementProvider.requiredProperties",
    "LIMITS_ACTIONS_SEQUENCE_MAXLENGTH": "WhiskConfig: WhiskActionsApi.requiredProperties",
    "whisk.info.date": "RestAPIs.scala: loadConfigOrThrow[WhiskInformation](whisk.info), no default",
    "whisk.info.build-no": "RestAPIs.scala: loadConfigOrThrow[WhiskInformation](whisk.info), no default",
    **{f"whisk.couchdb.{k}": "CouchDbStoreProvider.scala: loadConfigOrThrow[CouchDbConfig](whisk.couchdb), no default"
       for k in ("provider", "protocol", "host", "port", "username", "password")},
    **{f"whisk.couchdb.databases.{k}": "CouchDbConfig.databaseFor: one database per entity type"
       for k in ("WhiskAuth", "WhiskEntity", "WhiskActivation")},
}

#: Properties the chart sets and the compose file does not, and why.
CHART_ONLY = {
    "POD_IP": "the pod's address, which the chart only uses to name its akka seed node",
    "akka.cluster.seed-nodes.0": "the chart makes its controller a one-member akka cluster; with no seed node "
                                 "ShardingContainerPoolBalancer runs without a cluster (one controller: the "
                                 "compose file's)",
    "CONTROLLER_INSTANCES": "read by nothing in the controller at ef725a6 (only the standalone server's config)",
}
#: Properties the compose file sets and the chart does not, and why.
COMPOSE_ONLY: dict[str, str] = {}
#: Properties whose values must be the same in both.
SAME_VALUE = ("whisk.info.date", "whisk.info.build-no", "whisk.spi.LoadBalancerProvider",
              "whisk.spi.EntitlementSpiProvider", "whisk.couchdb.provider", "whisk.couchdb.protocol",
              "whisk.couchdb.port", "whisk.loadbalancer.blackbox-fraction", "whisk.loadbalancer.timeout-factor",
              "whisk.time-limit.max", "whisk.memory.max", "whisk.activation.payload.max", "logback.log.level", "TZ")
#: Variables the start script reads to build the JVM's options (their -D settings are compared instead).
OPTIONS = ("JAVA_OPTS", "CONTROLLER_OPTS")


def property_name(variable: str) -> str:
    """``CONFIG_whisk_info_buildNo`` -> ``whisk.info.build-no``, as ``transformEnvironment.sh`` does."""
    parts = variable.removeprefix("CONFIG_").split("_")
    return ".".join(p if p[:1].isupper() else re.sub(r"([a-z0-9])([A-Z])", lambda m: f"{m[1]}-{m[2].lower()}", p)
                    for p in parts)


def properties(env: dict[str, str]) -> dict[str, str]:
    """What the image reads from ``env``: the JVM properties of non-empty ``CONFIG_*`` variables and of the
    ``-D`` options, and every other variable as it is."""
    out: dict[str, str] = {}
    for name, value in env.items():
        if name.startswith("CONFIG_"):
            if value:                                 # the start script skips an empty one
                out[property_name(name)] = value
        elif name in OPTIONS:
            for word in shlex.split(value):
                if word.startswith("-D") and "=" in word:
                    key, _, val = word[2:].partition("=")
                    out[key] = val
        else:
            out[name] = value
    return out


def missing_required(props: dict[str, str]) -> list[str]:
    return sorted(k for k in REQUIRED if not props.get(k))


def differences(compose: dict[str, str], chart: dict[str, str]) -> list[str]:
    """One line per property only one side sets and no entry explains."""
    out = [f"{k}: set by the chart only" for k in sorted(set(chart) - set(compose) - set(CHART_ONLY))]
    out += [f"{k}: set by the compose file only" for k in sorted(set(compose) - set(chart) - set(COMPOSE_ONLY))]
    return out


def render_chart() -> dict[str, dict]:
    """The chart's rendered documents by (kind, name), for release owdev in namespace openwhisk."""
    helm = pytest.importorskip("helm_python", reason="helm-python-sdk (the dev extra) renders the chart")
    rendered = helm.Chart.load(str(CHART)).render(load_yaml(OVERLAY), name=RELEASE, namespace=NAMESPACE,
                                                  is_install=True)
    docs = {}
    for text in rendered.values():
        for d in yaml.safe_load_all(text):
            if d:
                docs[(d["kind"], d["metadata"]["name"])] = d
    return docs


@pytest.fixture(scope="module")
def chart() -> dict[str, dict]:
    return render_chart()


def chart_controller(docs: dict[str, dict]) -> tuple[dict, dict[str, str]]:
    """The chart's controller container and its environment with every reference resolved."""
    sts = docs[("StatefulSet", f"{RELEASE}-controller")]
    c = next(c for c in sts["spec"]["template"]["spec"]["containers"] if c["name"] == "controller")
    env: dict[str, str] = {}
    for item in c["env"]:
        if "value" in item:
            env[item["name"]] = str(item["value"])
            continue
        ref = item["valueFrom"]
        if "configMapKeyRef" in ref:
            r = ref["configMapKeyRef"]
            env[item["name"]] = str(docs[("ConfigMap", r["name"])]["data"][r["key"]])
        elif "secretKeyRef" in ref:
            r = ref["secretKeyRef"]
            env[item["name"]] = base64.b64decode(docs[("Secret", r["name"])]["data"][r["key"]]).decode()
        elif "fieldRef" in ref:
            env[item["name"]] = f"<{ref['fieldRef']['fieldPath']}>"
        else:
            raise AssertionError(f"{item['name']}: unresolved {ref}")
    return c, env


def compose_controller() -> tuple[dict, dict[str, str]]:
    s = compose_model(COMPOSE)["services"]["controller"]
    return s, service_env(s)


def test_property_names_follow_the_start_script():
    assert property_name("CONFIG_whisk_info_buildNo") == "whisk.info.build-no"
    assert property_name("CONFIG_whisk_spi_LoadBalancerProvider") == "whisk.spi.LoadBalancerProvider"
    assert property_name("CONFIG_whisk_couchdb_databases_WhiskAuth") == "whisk.couchdb.databases.WhiskAuth"
    assert property_name("CONFIG_whisk_loadbalancer_invokerBusyThreshold") == "whisk.loadbalancer.invoker-busy-threshold"
    got = properties({"CONFIG_a_bC": "1", "CONFIG_empty": "", "CONTROLLER_OPTS": "-Dx.y=2 -Xmx1g", "PORT": "8"})
    assert got == {"a.b-c": "1", "x.y": "2", "PORT": "8"}


def test_the_compose_controller_sets_every_property_the_image_requires():
    _, env = compose_controller()
    assert missing_required(properties(env)) == []


def test_the_chart_sets_every_property_the_image_requires(chart):
    _, env = chart_controller(chart)
    assert missing_required(properties(env)) == []


def test_the_compose_and_chart_environments_differ_only_where_explained(chart):
    _, compose_env = compose_controller()
    _, chart_env = chart_controller(chart)
    compose, rendered = properties(compose_env), properties(chart_env)
    assert differences(compose, rendered) == []
    for key in SAME_VALUE:
        assert compose[key] == rendered[key], key
    for key, why in {**CHART_ONLY, **COMPOSE_ONLY}.items():   # an explanation of nothing is stale
        assert (key in rendered) != (key in compose), f"{key}: {why}"


def test_a_missing_required_property_is_named(chart):
    """What the check says when the compose file lacks whisk.info (the failure deploy-kube's #235 reports)."""
    _, env = compose_controller()
    broken = {k: v for k, v in env.items() if k != "CONFIG_whisk_info_date"}
    assert missing_required(properties(broken)) == ["whisk.info.date"]
    _, chart_env = chart_controller(chart)
    assert differences(properties(broken), properties(chart_env)) == ["whisk.info.date: set by the chart only"]


def test_both_start_the_image_the_same_way(chart):
    c, _ = chart_controller(chart)
    s, _ = compose_controller()
    assert c["image"] == s["image"] == "openwhisk/controller:ef725a6"
    assert s["command"] == ["/init.sh", "0"]                  # instance 0: the scheduler answers completed0
    assert c["command"][-1].startswith("/init.sh ")           # the StatefulSet ordinal: 0 with one replica
