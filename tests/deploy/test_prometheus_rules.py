"""The Prometheus rules in deploy/prometheus/, checked and unit-tested by Debian's promtool itself (scripts/setup
installs the prometheus package): every alert has series that fire it and series that do not
(esg-rules.test.yml)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import yaml

RULES = Path(__file__).resolve().parents[2] / "deploy" / "prometheus"
ALERTS = ("EsgSloHitRateLow", "EsgInvokerNodeLost", "EsgMetricsTargetDown", "EsgQueueGrowing",
          "EsgReconfigurationStorm", "EsgSchedulerStepSlow")


def promtool() -> str:
    path = shutil.which("promtool")
    assert path, "promtool not found: scripts/setup installs Debian's prometheus package, which provides it"
    return path


def test_promtool_checks_the_rules():
    out = subprocess.run([promtool(), "check", "rules", "esg-rules.yml"], cwd=RULES, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_promtool_unit_tests_pass():
    out = subprocess.run([promtool(), "test", "rules", "esg-rules.test.yml"], cwd=RULES, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "SUCCESS" in out.stdout


def test_every_alert_is_tested_firing_and_not_firing():
    rules = yaml.safe_load((RULES / "esg-rules.yml").read_text())
    alerts = {r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r}
    assert alerts == set(ALERTS)
    tests = yaml.safe_load((RULES / "esg-rules.test.yml").read_text())["tests"]
    fired, quiet = set(), set()
    for t in tests:
        for case in t.get("alert_rule_test", ()):
            (fired if case["exp_alerts"] else quiet).add(case["alertname"])
            # a firing case must leave some series of its group out (the ones that do not fire)
            if case["exp_alerts"]:
                assert len(case["exp_alerts"]) < len(t["input_series"]), case["alertname"]
    assert fired == alerts and quiet == alerts


def test_a_broken_threshold_fails_the_unit_tests(tmp_path):
    """The unit tests can fail: with the SLO alert's threshold moved they do."""
    for f in ("esg-rules.yml", "esg-rules.test.yml"):
        shutil.copy(RULES / f, tmp_path / f)
    rules = tmp_path / "esg-rules.yml"
    rules.write_text(re.sub(r"< 0\.95", "< 0.4", rules.read_text()))
    out = subprocess.run([promtool(), "test", "rules", "esg-rules.test.yml"], cwd=tmp_path, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode != 0 and "EsgSloHitRateLow" in out.stdout + out.stderr
