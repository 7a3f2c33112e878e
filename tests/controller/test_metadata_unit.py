"""Annotation parsing and secret redaction, without servers."""

from __future__ import annotations

import pytest

from controller_plugin.metadata import ActionMeta, ActivationError, ProfileStore, plan_for, resolve_name
from controller_plugin.settings import SchedulerSettings, redact_url


def meta(name: str, annotations: dict | None = None, ns: str = "guest") -> ActionMeta:
    return ActionMeta(ns, name, "0.0.1", "python:3", {"timeout": 5000, "memory": 256}, annotations or {})


def test_names_resolve_like_openwhisk():
    assert resolve_name("pre", "guest") == "guest/pre"
    assert resolve_name("pkg/pre", "guest") == "guest/pkg/pre"
    assert resolve_name("/other/pre", "guest") == "other/pre"
    with pytest.raises(ActivationError, match="esg-dag"):
        resolve_name("/lonely", "guest")


def test_plain_action_gets_default_one_config_plan(tmp_path):
    plan = plan_for(meta("hello"), "1-x", lambda f: None, ProfileStore(tmp_path))
    assert plan.plain and plan.app.name == "guest/hello" and plan.app.slo_ms == 5000
    (entry,) = plan.profiles["guest/hello"].entries
    assert (entry.config.batch, entry.config.vcpus, entry.config.gpu) == (1, 1, None)


def test_two_namespaces_never_collide(tmp_path):
    (tmp_path / "f.json").write_text('{"function":"f","gpu_model":"A100-40GB","configs":'
                                     '[{"batch":1,"vcpus":1,"gpu":null,"latency_ms":3}]}')
    plans = [plan_for(meta("app", {"esg-slo-ms": 100, "esg-dag": {"functions": ["f"], "edges": []}}, ns),
                      None, lambda fqn, ns=ns: meta("f", {}, ns), ProfileStore(tmp_path)) for ns in ("a", "b")]
    assert [p.app.functions for p in plans] == [("a/f",), ("b/f",)]
    assert set(plans[0].profiles) == {"a/f"} and plans[0].profiles["a/f"].function == "a/f"


@pytest.mark.parametrize("ann, needle", [
    ({"esg-slo-ms": 0}, "esg-slo-ms"),
    ({"esg-slo-ms": True}, "esg-slo-ms"),
    ({"esg-slo-ms": 10, "esg-dag": {"functions": []}}, "functions"),
    ({"esg-slo-ms": 10, "esg-dag": {"functions": ["a"], "edges": [["a"]]}}, "edge"),
    ({"esg-slo-ms": 10, "esg-gpu": "maybe"}, "esg-gpu"),
])
def test_bad_annotations_are_named(tmp_path, ann, needle):
    (tmp_path / "x.json").write_text('{"function":"x","gpu_model":"A100-40GB","configs":'
                                     '[{"batch":1,"vcpus":1,"gpu":null,"latency_ms":3}]}')
    with pytest.raises(ActivationError, match=needle):
        plan_for(meta("x", ann), None, lambda f: meta("a"), ProfileStore(tmp_path))


def test_secrets_are_redacted():
    assert redact_url("redis://:s3cret@host:6379/0") == "redis://:***@host:6379/0"
    assert redact_url("redis://user:s3cret@host/1") == "redis://user:***@host/1"
    assert redact_url("redis://host:6379/0") == "redis://host:6379/0"
    s = SchedulerSettings(kafka="k:1", redis_url="redis://:pw@h:1/0", openwhisk_auth="uuid:topsecret")
    text = s.describe() + repr(s)
    assert "topsecret" not in text and ":pw@" not in text
