"""docker-compose.yml and docker-compose.cpu.yml, checked without a Docker engine.

Schema: the Compose specification's JSON schema, vendored in ``deploy/schemas/`` (``deploy/SOURCES.md``),
through ``check-jsonschema`` as a user would run it, and on the merged CPU model. The rest are the
properties a user relies on when typing ``docker compose up -d --wait``: pinned images, healthchecks on
every long-running service, the init service ordered before the controller, the controller on the classic
Kafka path, and one set of names, ports and credentials shared by the services that must agree.
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import jsonschema
import pytest

from tests.deploy.deploy_files import (
    COMPOSE,
    COMPOSE_CPU,
    IMAGE_ROOT,
    ROOT,
    active_services,
    compose_model,
    load_yaml,
    redis_secret,
    service_env,
)

SCHEMA = ROOT / "deploy" / "schemas" / "compose-spec.json"
CHECK_JSONSCHEMA = Path(sys.executable).with_name("check-jsonschema")
SPI = {"CONFIG_whisk_spi_LoadBalancerProvider": "org.apache.openwhisk.core.loadBalancer.ShardingContainerPoolBalancer",
       "CONFIG_whisk_spi_EntitlementSpiProvider": "org.apache.openwhisk.core.entitlement.LocalEntitlementProvider"}
ONE_SHOT = {"couchdb-init", "redis-users"}


@pytest.fixture(scope="module")
def gpu() -> dict:
    return compose_model(COMPOSE)


@pytest.fixture(scope="module")
def cpu() -> dict:
    return compose_model(COMPOSE, COMPOSE_CPU)


def project_version() -> str:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def check_jsonschema(*files: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(CHECK_JSONSCHEMA), "--schemafile", str(SCHEMA), *map(str, files)],
                          capture_output=True, text=True, timeout=120)


def test_both_files_satisfy_the_compose_specification_schema():
    r = check_jsonschema(COMPOSE, COMPOSE_CPU)
    assert r.returncode == 0, r.stdout + r.stderr


def test_the_schema_check_rejects_a_misspelled_key(tmp_path):
    broken = tmp_path / "docker-compose.yml"
    broken.write_text(COMPOSE.read_text().replace("healthcheck:", "healthchek:", 1))
    r = check_jsonschema(broken)
    assert r.returncode == 1 and "healthchek" in r.stdout


def test_the_merged_cpu_model_satisfies_the_schema(cpu):
    # The schema declares draft-07 (its "$schema" lacks the trailing "#" jsonschema looks for).
    jsonschema.Draft7Validator(json.loads(SCHEMA.read_text())).validate(cpu)


def test_every_image_is_pinned_by_tag(gpu, cpu):
    for model in (gpu, cpu):
        for name, s in model["services"].items():
            image = s.get("image", "")
            repo, _, tag = image.rpartition(":")
            assert repo and tag and tag not in {"latest", "nightly"} and "/" not in tag, f"{name}: image {image!r}"


def test_the_project_image_carries_the_project_version(gpu, cpu):
    built = {(s["image"], s["build"]["target"]) for m in (gpu, cpu) for s in m["services"].values() if "build" in s}
    assert built == {(f"esg-openwhisk:{project_version()}", "cpu"), (f"esg-openwhisk:{project_version()}-gpu", "gpu")}
    assert gpu["services"]["agent-gpu0"]["build"]["target"] == "gpu"


def test_every_long_running_service_has_a_healthcheck(gpu, cpu):
    for model in (gpu, cpu):
        for name, s in model["services"].items():
            if name in ONE_SHOT:
                assert s.get("restart") == "no" and "healthcheck" not in s
            else:
                hc = s.get("healthcheck")
                assert hc and hc["test"][0] in {"CMD", "CMD-SHELL"}, f"{name} has no healthcheck"
                assert s.get("restart") == "unless-stopped", name


def test_dependencies_wait_for_health_or_completion(gpu, cpu):
    for model in (gpu, cpu):
        services = model["services"]
        for name, s in services.items():
            for dep, cond in (s.get("depends_on") or {}).items():
                want = "service_completed_successfully" if dep in ONE_SHOT else "service_healthy"
                assert cond == {"condition": want}, f"{name} -> {dep}: {cond}"
                assert dep in services


def test_init_runs_before_the_controller_and_after_couchdb(gpu):
    s = gpu["services"]
    assert s["controller"]["depends_on"]["couchdb-init"] == {"condition": "service_completed_successfully"}
    assert s["couchdb-init"]["depends_on"] == {"db": {"condition": "service_healthy"}}
    assert s["couchdb-init"]["entrypoint"] == ["python", f"{IMAGE_ROOT}/deploy/couchdb/init.py"]


def test_controller_is_on_the_classic_kafka_path(gpu):
    env = service_env(gpu["services"]["controller"])
    for key, value in SPI.items():
        assert env[key] == value
    assert gpu["services"]["controller"]["image"] == "openwhisk/controller:ef725a6"


def test_init_controller_and_couchdb_agree_on_databases_and_credentials(gpu):
    s = gpu["services"]
    db, init, ctl = service_env(s["db"]), service_env(s["couchdb-init"]), service_env(s["controller"])
    assert db["COUCHDB_USER"] == init["COUCHDB_USER"] == ctl["CONFIG_whisk_couchdb_username"]
    assert db["COUCHDB_PASSWORD"] == init["COUCHDB_PASSWORD"] == ctl["CONFIG_whisk_couchdb_password"]
    assert init["COUCHDB_URL"] == f"http://{ctl['CONFIG_whisk_couchdb_host']}:{ctl['CONFIG_whisk_couchdb_port']}"
    prefix = init["DB_PREFIX"]
    assert ctl["CONFIG_whisk_couchdb_databases_WhiskAuth"] == prefix + "subjects"
    assert ctl["CONFIG_whisk_couchdb_databases_WhiskEntity"] == prefix + "whisks"
    assert ctl["CONFIG_whisk_couchdb_databases_WhiskActivation"] == prefix + "activations"


@pytest.mark.parametrize("overrides", [{}, {"OPENWHISK_TOPIC_PREFIX": "ow_", "OPENWHISK_GUEST_AUTH": "u:" + "k" * 64}])
def test_esg_services_match_the_controller(overrides):
    model = compose_model(COMPOSE, COMPOSE_CPU, env=overrides)
    ctl = model["services"]["controller"]
    ctl_env = service_env(ctl)
    controller_id = ctl["command"][-1]
    for name, s in model["services"].items():
        env = service_env(s)
        if not any(k.startswith("ESG_") for k in env) or name == "redis-users":
            continue
        assert env["ESG_TOPIC_PREFIX"] == ctl_env.get("CONFIG_whisk_kafka_topics_prefix", ""), name
        assert env["ESG_CONTROLLER_ID"] == controller_id, name
        assert env["ESG_KAFKA"] == ctl_env["KAFKA_HOSTS"], name
        assert env["ESG_OPENWHISK_API"] == f"http://controller:{ctl_env['PORT']}", name
        assert env["ESG_REDIS_FILE"] == "/run/esg-redis/redis.url" and "ESG_REDIS" not in env, name
    init_env = service_env(model["services"]["couchdb-init"])
    guest = overrides.get("OPENWHISK_GUEST_AUTH")
    assert init_env["OPENWHISK_GUEST_AUTH"] == (guest or "")
    if guest:
        assert service_env(model["services"]["scheduler"])["ESG_OPENWHISK_AUTH"] == guest


def test_scheduler_metrics_port_is_the_one_checked_and_published(gpu):
    s = gpu["services"]["scheduler"]
    port = s["command"][s["command"].index("--metrics-port") + 1]
    assert s["command"][s["command"].index("--metrics-host") + 1] == "0.0.0.0"     # the published port reaches it
    assert s["healthcheck"]["test"][-1] == f"http://127.0.0.1:{port}/metrics"
    assert s["ports"] == [f"127.0.0.1:{port}:{port}"]


def test_the_scheduler_plans_with_the_tables_of_the_hardware_the_actions_run_on(gpu, cpu):
    for model, tables in ((gpu, "a100"), (cpu, "cpu")):
        cmd = model["services"]["scheduler"]["command"]
        path = cmd[cmd.index("--profiles") + 1]
        assert path == f"{IMAGE_ROOT}/profiles/tables/{tables}"
        assert list((ROOT / path.removeprefix(f"{IMAGE_ROOT}/")).glob("*.json"))


def test_agent_healthchecks_ask_the_controller_the_agents_talk_to(gpu, cpu):
    for model in (gpu, cpu):
        for name, s in model["services"].items():
            if name.startswith("agent-"):
                test = s["healthcheck"]["test"]
                assert test[:4] == ["CMD", "python", f"{IMAGE_ROOT}/deploy/healthcheck.py", "agent"]
                assert test[test.index("--controller") + 1] == service_env(s)["ESG_OPENWHISK_API"]
                assert service_env(s)["ESG_AGENT_NAME"], name


def test_the_gpu_agent_can_change_mig_and_the_cpu_variant_replaces_it(gpu, cpu):
    agent = gpu["services"]["agent-gpu0"]
    assert agent["user"] == "0"                                          # the image's own user is not root
    assert not agent.get("privileged") and agent["cap_drop"] == ["ALL"]
    assert set(agent["cap_add"]) == {"SYS_ADMIN", "SETUID", "SETGID", "CHOWN", "KILL", "SYS_NICE"}
    devices = agent["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"driver": "nvidia", "capabilities": ["gpu"], "count": "all"}]
    assert service_env(agent)["NVIDIA_MIG_CONFIG_DEVICES"] == "all"
    assert "--fake-gpu" not in agent["command"]
    running = active_services(cpu)
    assert "agent-gpu0" not in running and "agent-cpu0" in running
    fake = running["agent-cpu0"]
    assert fake["command"][fake["command"].index("--fake-gpu") + 1] == "A100-40GB"
    assert "deploy" not in fake and not fake.get("privileged")
    assert fake["cap_drop"] == ["ALL"] and not fake.get("cap_add")       # no MIG: the image's user, no capability
    gpu_env = {k: v for k, v in service_env(agent).items() if k.startswith("ESG_") and k != "ESG_AGENT_NAME"}
    cpu_env = {k: v for k, v in service_env(fake).items() if k.startswith("ESG_") and k != "ESG_AGENT_NAME"}
    assert gpu_env == cpu_env


def test_default_start_runs_one_gpu_agent_and_every_service(gpu):
    assert set(active_services(gpu)) == {"kafka", "db", "couchdb-init", "redis-users", "redis", "controller",
                                         "scheduler", "scheduler-b", "agent-gpu0"}


def test_ports_are_published_on_loopback_only(gpu, cpu):
    for model in (gpu, cpu):
        for name, s in model["services"].items():
            for p in s.get("ports", []):
                assert p.startswith("127.0.0.1:"), f"{name} publishes {p} on every interface"


def test_the_image_holds_every_package_the_project_installs():
    """``pip install .`` in the image installs what was copied: a package left out imports nowhere."""
    include = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]["include"]
    packages = sorted(d.name for d in ROOT.iterdir() if (d / "__init__.py").is_file()
                      and any(fnmatch.fnmatchcase(d.name, pattern) for pattern in include))
    dockerfile = (ROOT / "Dockerfile").read_text()
    for package in ("esg", "esg_files", "agent_channel"):
        assert package in packages
    for package in packages:
        assert re.search(rf"^COPY {package} \./{package}$", dockerfile, re.M), package


def test_the_image_holds_what_the_compose_file_runs():
    dockerfile = (ROOT / "Dockerfile").read_text()
    assert re.search(rf"^WORKDIR {IMAGE_ROOT}$", dockerfile, re.M)
    assert re.search(r'^ENTRYPOINT \["esg"\]$', dockerfile, re.M)
    for path in ("deploy/healthcheck.py", "deploy/couchdb"):
        assert re.search(rf"^COPY {path} \./{path}$", dockerfile, re.M), path
        assert (ROOT / path).exists()
    cpu_file = load_yaml(COMPOSE_CPU)
    assert set(cpu_file["services"]["agent-gpu0"]) == {"profiles"}
    assert set(cpu_file["services"]["scheduler"]) == {"command"}


def test_redis_requires_the_users_redis_users_makes_and_each_process_mounts_its_own(gpu, cpu):
    """Redis loads the ACL the one-shot redis-users writes (every node of the files has a user there);
    each scheduler and agent mounts only its own role's URL file, read only; none is given a Redis URL or
    password in its environment or command line."""
    for model in (gpu, cpu):
        s = active_services(model)
        users = s["redis-users"]["command"]
        nodes = users[users.index("--nodes") + 1].split(",")
        assert users[users.index("--redis-host") + 1] == "redis:6379"
        redis_cmd = s["redis"]["command"]
        assert redis_cmd[redis_cmd.index("--aclfile") + 1] == "/etc/redis-acl/users.acl"
        assert {"source": "esg-redis-secrets", "target": "/etc/redis-acl", "type": "volume", "read_only": True,
                "volume": {"subpath": "acl"}} in s["redis"]["volumes"]
        assert s["redis"]["depends_on"]["redis-users"] == {"condition": "service_completed_successfully"}
        for name, svc in s.items():
            cmd = svc.get("command") or []
            if cmd[:1] == ["scheduler"]:
                assert redis_secret(svc) == "scheduler", name
            elif cmd[:1] == ["agent"]:
                node = service_env(svc)["ESG_AGENT_NAME"]
                assert node in nodes and redis_secret(svc) == f"agent-{node}", name
            else:
                continue
            assert "ESG_REDIS" not in service_env(svc) and not any("redis://" in str(c) for c in cmd), name


def test_redis_is_durable_and_never_evicts(gpu):
    cmd = gpu["services"]["redis"]["command"]
    assert cmd[cmd.index("--appendonly") + 1] == "yes" and cmd[cmd.index("--appendfsync") + 1] == "everysec"
    assert cmd[cmd.index("--maxmemory-policy") + 1] == "noeviction" and "--maxmemory" in cmd


def test_two_schedulers_run_and_each_serves_its_own_metrics(gpu, cpu):
    for model in (gpu, cpu):
        s = active_services(model)
        scheds = {n: v for n, v in s.items() if (v.get("command") or [])[:1] == ["scheduler"]}
        assert set(scheds) == {"scheduler", "scheduler-b"}
        ports = {v["command"][v["command"].index("--metrics-port") + 1] for v in scheds.values()}
        assert len(ports) == 2
        for v in scheds.values():
            port = v["command"][v["command"].index("--metrics-port") + 1]
            assert v["healthcheck"]["test"][-1] == f"http://127.0.0.1:{port}/metrics"
            assert v["ports"] == [f"127.0.0.1:{port}:{port}"]
        assert scheds["scheduler"]["command"][-1] == scheds["scheduler-b"]["command"][-1]     # the same tables
        names = {service_env(v)["ESG_SCHEDULER_NAME"] for v in scheds.values()}
        assert len(names) == 2
