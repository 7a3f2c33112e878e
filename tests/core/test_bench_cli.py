"""``esg bench search`` runs end to end (tiny settings; speed itself is never asserted)."""

from __future__ import annotations

import json

from esg_cli.main import main


def test_bench_search_json(capsys):
    rc = main(["bench", "search", "--slos", "3", "--brute-slos", "1", "--exact-slos", "2",
               "--repeat", "1", "--json"])
    assert rc == 0
    data = json.loads(capsys.readouterr().out)
    chain, dag = data["chain"], data["dag"]
    assert chain["configs"] == 256 and chain["functions"] == 3 and chain["slos"] == 3
    assert chain["brute_force"] and all(b["optimal"] for b in chain["brute_force"])
    assert dag["functions"] == 7 and all(len(g) <= 3 for g in dag["groups"])
    assert dag["cost_ratio_mean"] is None or dag["cost_ratio_mean"] >= 1 - 1e-9


def test_bench_search_bad_flag(capsys):
    assert main(["bench", "search", "--slos", "1"]) == 2
    assert "--slos" in capsys.readouterr().err
