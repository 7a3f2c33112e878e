"""``esg profile import`` / ``export`` against a real Redis: offline tables are the prior, what was
measured refines them, and ``esg plan`` reads what export writes."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
import redis

from controller_plugin.online import OnlineStore
from esg.model import Config
from esg.online import MIN_SAMPLES, Observation
from esg_cli.main import main as esg_main
from esg_files import load_profile, load_profiles

ROOT = Path(__file__).resolve().parents[2]
CPU_TABLES = ROOT / "profiles" / "tables" / "cpu"
APP = ROOT / "apps" / "image-classification.json"


@pytest.fixture
def store(redis_url):
    prefix = f"t{uuid.uuid4().hex[:8]}"
    client = redis.Redis.from_url(redis_url)
    yield prefix, OnlineStore(client, prefix)
    for key in client.scan_iter(f"esg:{prefix}:*"):
        client.delete(key)
    client.close()


def test_import_then_export_refines_the_prior_and_plan_reads_it(redis_url, store, tmp_path, capsys):
    prefix, online = store
    assert esg_main(["profile", "import", "--redis", redis_url, "--topic-prefix", prefix, str(CPU_TABLES)]) == 0
    prior = load_profile(CPU_TABLES / "resnet50.json")
    c = prior.configs[0]
    online.record([(Observation("resnet50", c, 2.5 * prior.latency(c)), prior.latency(c))
                   for _ in range(MIN_SAMPLES)])
    new = Config(3, 1, None)
    online.record([(Observation("newfn", new, 42.0), None) for _ in range(MIN_SAMPLES)])
    online.record([(Observation("never", new, 1.0, cold=True, init_ms=100.0), None)])
    out = tmp_path / "learned"
    assert esg_main(["profile", "export", "--redis", redis_url, "--topic-prefix", prefix, "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert "nothing measured yet for never" in err
    names = sorted(p.stem for p in out.glob("*.json"))
    assert names == sorted([p.stem for p in CPU_TABLES.glob("*.json")] + ["newfn"])
    learned = load_profile(out / "resnet50.json")
    assert learned.latency(c) == pytest.approx(2.5 * prior.latency(c), rel=0.01)
    assert learned.extra["source"] == "online"
    for other in prior.configs[1:]:
        assert learned.latency(other) == prior.latency(other)
    unchanged = load_profile(out / "vote.json")
    assert {e.config: e.latency_ms for e in unchanged.entries} == \
        {e.config: e.latency_ms for e in load_profile(CPU_TABLES / "vote.json").entries}
    fresh = load_profile(out / "newfn.json")
    assert fresh.configs == (new,) and fresh.latency(new) == pytest.approx(42.0, rel=0.01)
    assert json.loads((out / "newfn.json").read_text())["configs"][0]["samples"] == MIN_SAMPLES
    load_profiles(out, ["preprocess", "resnet50"])
    assert esg_main(["plan", "--app", str(APP), "--profiles", str(out), "--slo-ms", "500", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)


def test_import_checks_every_table_before_writing_any(redis_url, store, tmp_path, capsys):
    prefix, online = store
    d = tmp_path / "tables"
    d.mkdir()
    (d / "a.json").write_text((CPU_TABLES / "vote.json").read_text())
    (d / "b.json").write_text('{"function": "b"}')
    assert esg_main(["profile", "import", "--redis", redis_url, "--topic-prefix", prefix, str(d)]) == 2
    assert "b.json" in capsys.readouterr().err
    assert online.tables() == []
