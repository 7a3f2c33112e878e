"""The Grafana dashboard in deploy/grafana/: in the JSON form Grafana imports, and every query names metrics
the scheduler and the agents export (or the recording rules of deploy/prometheus/ record), with labels
those metrics carry."""

from __future__ import annotations

import json
import re
from pathlib import Path

import yaml

from controller_plugin.metrics import Metrics
from invoker_agent.metrics import AgentMetrics

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
DASHBOARD = DEPLOY / "grafana" / "esg-dashboard.json"
#: The series Prometheus itself adds for every target.
BUILTIN = {"up": {"job", "instance"}}
PROMQL_WORDS = {"sum", "by", "rate", "irate", "increase", "histogram_quantile", "avg", "max", "min", "count",
                "without", "on", "ignoring", "and", "or", "unless", "deriv", "le", "bool", "offset"}


def exported() -> dict[str, set[str]]:
    """Every series the two registries expose, with its labels: each metric given one child, then collected
    (a histogram's ``_bucket`` series carry ``le``)."""
    from prometheus_client.metrics import MetricWrapperBase

    from agent_channel.metrics import FastCounter, FastHistogram

    out: dict[str, set[str]] = dict(BUILTIN)
    for owner in (Metrics(), AgentMetrics("n", "A100-40GB")):
        for metric in vars(owner).values():
            if isinstance(metric, MetricWrapperBase) and metric._labelnames:
                metric.labels(*("x" for _ in metric._labelnames))
            elif isinstance(metric, FastCounter | FastHistogram) and metric.labelnames:
                metric.labels(*("x" for _ in metric.labelnames))
        for family in owner.registry.collect():
            for sample in family.samples:
                out.setdefault(sample.name, set()).update(sample.labels)
    return out


def recorded() -> dict[str, set[str]]:
    """Each recording rule's series and the labels its ``by (...)`` keeps."""
    rules = yaml.safe_load((DEPLOY / "prometheus" / "esg-rules.yml").read_text())
    out = {}
    for g in rules["groups"]:
        for r in g["rules"]:
            if "record" in r:
                by = re.findall(r"by \(([^)]*)\)", r["expr"])
                out[r["record"]] = {x.strip() for x in by[0].split(",")} - {"le"} if by else set()
    return out


def queries() -> list[tuple[str, str]]:
    dash = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dash["panels"] if p["type"] != "row" for t in p["targets"]]


def test_the_dashboard_is_in_grafanas_import_format():
    dash = json.loads(DASHBOARD.read_text())
    assert dash["uid"] and dash["title"] and isinstance(dash["schemaVersion"], int)
    assert dash["__inputs"][0]["pluginId"] == "prometheus"
    ids = [p["id"] for p in dash["panels"]]
    assert len(ids) == len(set(ids))
    for p in dash["panels"]:
        assert set(p["gridPos"]) == {"h", "w", "x", "y"} and p["gridPos"]["x"] + p["gridPos"]["w"] <= 24
        if p["type"] != "row":
            assert p["datasource"]["uid"] == "${DS_PROMETHEUS}" and p["targets"], p["title"]
            assert len({t["refId"] for t in p["targets"]}) == len(p["targets"])
    titles = " ".join(p["title"] for p in dash["panels"]).lower()
    for what in ("slo hit rate per app", "latency", "mig instances per node", "cold starts", "mig creations"):
        assert what in titles, what


def problems(path: Path) -> list[str]:
    """What is wrong with the dashboard's queries: metrics nobody exports or records, labels none of a
    query's metrics carries."""
    series = exported() | recorded()
    dash = json.loads(path.read_text())
    out = []
    for p in dash["panels"]:
        for t in p.get("targets", ()):
            text = re.sub(r'"[^"]*"', '""', t["expr"])          # label values are not names
            text = re.sub(r"\[[^\]]*\]", "", text)              # nor range selectors
            names = [n for n in re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*", text)
                     if n not in PROMQL_WORDS and not n.startswith("__")]
            metrics = [n for n in names if n in series or n.startswith("esg") or ":" in n]
            if not metrics:
                out.append(f"{p['title']}: no metric in {t['expr']}")
            out += [f"{p['title']}: {n} is neither exported nor recorded" for n in metrics if n not in series]
            known = set().union(*(series.get(n, set()) for n in metrics))
            out += [f"{p['title']}: label {x} is on none of {metrics}" for x in set(names) - set(metrics) - known]
    return out


def test_every_query_names_exported_metrics_and_their_labels():
    assert problems(DASHBOARD) == []


def test_the_check_catches_a_metric_or_label_that_does_not_exist(tmp_path):
    dash = json.loads(DASHBOARD.read_text())
    target = next(p for p in dash["panels"] if p["type"] != "row")["targets"][0]
    target["expr"] = "sum by (app) (rate(esg_no_such_thing_total[5m])) / sum by (colour) (esg_requests_total)"
    broken = tmp_path / "d.json"
    broken.write_text(json.dumps(dash))
    found = problems(broken)
    assert any("esg_no_such_thing_total" in p for p in found) and any("colour" in p for p in found), found
