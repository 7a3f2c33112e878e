"""The shipped CPU tables: one per function of the four apps, measured, and accepted by the planner."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from esg_files import load_app, load_profiles

ROOT = Path(__file__).resolve().parents[2]
CPU = ROOT / "profiles" / "tables" / "cpu"
APPS = sorted((ROOT / "apps").glob("*.json"))


@pytest.mark.parametrize("app", APPS, ids=lambda p: p.stem)
def test_every_app_function_has_a_measured_cpu_table(app):
    profiles = load_profiles(CPU, load_app(app).functions)
    for name, prof in profiles.items():
        assert prof.extra["measured"]["runner"] == "process", name
        assert {c.gpu for c in prof.configs} == {None}, name
        assert {c.batch for c in prof.configs} >= {1, 8} and {c.vcpus for c in prof.configs} >= {1, 2}, name
        assert prof.cold_start_ms > 0 and prof.output_bytes > 0, name
        assert (CPU / "SOURCES.md").read_text().count(f"`{name}`") >= 1, name


def test_plan_accepts_the_cpu_tables(esg):
    r = esg("plan", "--app", ROOT / "apps" / "image-classification.json", "--profiles", CPU,
            "--slo-ms", "500", "--json")
    assert r.code == 0, r.err
    assert json.loads(r.out)["feasible"]
