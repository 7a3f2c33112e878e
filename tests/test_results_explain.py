"""Results that explain themselves: esg replay's failure reasons and SLO check, esg emulate's warm-up
warning, esg status's layout, esg --version, and hints that name only options that exist."""

from __future__ import annotations

import json
import math
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

from esg_cli import status
from esg_cli.errors import CliError
from esg_cli.main import build_parser, main
from esg_cli.replay import Call, call, check_slos, failure_reasons, measure
from esg_cli.warmup import StartUp, advice, settle_s

ROOT = Path(__file__).resolve().parents[1]


# -- esg replay ---------------------------------------------------------------------------------------

class _Api(BaseHTTPRequestHandler):
    """Answers each invoke as OpenWhisk does for the outcome its action name asks for."""

    def log_message(self, *args):
        return

    def do_POST(self):  # noqa: N802
        name = self.path.split("/")[-1].split("?")[0]
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if name == "ok":
            code, body = 200, {"activationId": "a1", "response": {"status": "success", "success": True,
                                                                  "result": {}}}
        elif name == "crash":
            code, body = 502, {"activationId": "a2", "response": {"status": "developer error", "success": False,
                                                                  "result": {"error": "model exploded"}}}
        elif name == "slow":
            code, body = 202, {"activationId": "a3"}
        else:
            code, body = 503, {"error": "No invokers available.", "code": "x"}
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


@pytest.fixture()
def api():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Api)
    t = threading.Thread(target=server.serve_forever, daemon=True)
    t.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api/v1/namespaces/guest/actions/"
    server.shutdown()
    server.server_close()
    t.join()


def test_each_failed_call_keeps_its_http_status_and_reason(api):
    from esg_cli.servers import free_port
    calls = {name: Call(name, 0.0) for name in ("ok", "crash", "slow", "down")}
    with requests.Session() as s:
        for c in calls.values():
            call(s, api, c, 5.0)
        refused = Call("ok", 0.0)
        call(s, f"http://127.0.0.1:{free_port()}/api/v1/namespaces/guest/actions/", refused, 5.0)
    assert calls["ok"].ok and calls["ok"].error is None and calls["ok"].http_status == 200
    assert (calls["crash"].http_status, calls["crash"].activation_id) == (502, "a2")
    assert calls["crash"].error == "activation developer error: model exploded"
    assert calls["slow"].http_status == 202 and "blocking wait" in calls["slow"].error
    assert calls["down"].http_status == 503 and calls["down"].error == "No invokers available."
    assert refused.http_status is None and refused.error.startswith("ConnectionError")
    reasons = dict(failure_reasons([*calls.values(), refused]))
    assert reasons["HTTP 502: activation developer error: model exploded"] == 1 and len(reasons) == 4


def test_summary_counts_the_measured_failed_calls():
    calls = [Call("app", 0.0, 0.0, 50.0, "a1", True), Call("app", 10.0, 10_000.0, 10_050.0, "a2", False, 502, "x"),
             Call("app", 11.0, 11_000.0, 11_050.0, "a3", True), Call("app", 0.5, 500.0, 600.0, None, False, None, "y")]
    summary, per_app, _ = measure(calls, {"app": 1000.0}, [], 1.0, 0.0, "esg", "live", "x")
    assert summary["failed"] == 1 and per_app[0]["failed"] == 1     # the one before the warm-up is not measured


def test_a_cluster_slo_other_than_the_level_reported_is_refused():
    from esg_files import load_app
    file_ms = load_app(ROOT / "apps" / "image-classification.json").slo_ms
    check_slos({"image-classification": round(file_ms * 1.2, 3)}, "relaxed", str(ROOT / "apps"))  # as esg up --slo sets it
    with pytest.raises(CliError, match=r"image-classification.*151.4 ms.*esg up --slo moderate"):
        check_slos({"image-classification": 151.4}, "moderate", str(ROOT / "apps"))   # esg up's --slo-factor
    with pytest.raises(CliError, match="no app file"):
        check_slos({"unknown-app": 100.0}, "strict", str(ROOT / "apps"))


def test_replay_refuses_an_unknown_slo_level(capsys):
    assert main(["replay", "--arrivals", "x.csv", "--out", "o", "--slo", "tight"]) == 2
    assert "--slo" in capsys.readouterr().err


# -- esg emulate's warm-up warning ----------------------------------------------------------------------

def test_settling_time_matches_the_fluid_model_in_closed_form():
    start = StartUp(cold_s=3.5, instances=7, reconfig_s=2.0)
    # light (30 %): the backlog of the cold start (0.3 x 3.5) drains during the ramp, at
    # 1.05 + 0.3 s - s^2 / 28 = 0
    s = (8.4 + math.sqrt(8.4 ** 2 + 4 * 29.4)) / 2
    assert settle_s(0.3, start) == pytest.approx(3.5 + s, abs=0.05)
    # heavy (90 %): backlog 0.9 x 3.5 + (0.9 x 14 - 14 / 2) = 8.75 capacity-seconds, drained at 10 %
    assert settle_s(0.9, start) == pytest.approx(3.5 + 14 + 87.5, abs=0.1)
    assert settle_s(1.0, start) == math.inf
    loads = [settle_s(x / 10, start) for x in range(1, 10)]
    assert loads == sorted(loads)


def test_the_warning_says_how_long_to_warm_up():
    start = StartUp(cold_s=3.5, instances=7, reconfig_s=2.0)
    assert advice("light", 0.3, start, 30.0) is None
    line = advice("normal", 0.6, start, 10.0)
    need = math.ceil(settle_s(0.6, start))
    assert line is not None and f"--warmup-s {need} or more" in line and "7 x 2 s" in line


def test_esg_emulate_warns_when_the_window_is_too_short(tmp_path, capsys):
    rc = main(["emulate", "--policies", "esg", "--slo", "moderate", "--load", "light", "--duration-s", "12",
               "--warmup-s", "2", "--nodes", "1", "--out", str(tmp_path), "--no-plots"])
    assert rc == 0
    err = capsys.readouterr().err
    assert re.search(r"warning: --warmup-s 2 is shorter than the \d+ s load light", err), err


# -- esg status, --version, hints -------------------------------------------------------------------------

def test_status_lays_idle_warm_workers_out_one_per_line():
    node = {"age_s": 0.5, "gpu": "A100-40GB", "draining": False, "vcpus_free": 10, "vcpus_total": 16,
            "slices": [{"slice": "1g.5gb@0", "busy": True}], "running": 1, "last_batch": None,
            "warm_workers": [],
            "idle_workers": [{"function": f"guest/f{i}", "vcpus": 1, "count": 2, "slice": "1g.5gb@0"}
                             for i in range(30)]}
    text = status.render({"nodes": {"node0": node}, "queues": {}, "waiting": {}, "scheduler_age_s": 0.3,
                          "slo": {"guest/app": {"calls": [0, 0, 0, 4, 2], "hits": [0, 0, 0, 3, 2]}}})
    lines = text.splitlines()
    assert max(len(x) for x in lines) < 120
    assert sum(1 for x in lines if x.startswith("    guest/f")) == 30
    assert "  guest/app: 0.833 of 6 (- - - 0.75 1.00)" in lines


def test_esg_version(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert re.fullmatch(r"esg \d+\.\d+\.\d+\n", capsys.readouterr().out)


def test_hints_name_only_options_their_command_has():
    """Every ``esg COMMAND --flag`` a message or help text of the project names is a flag of that command."""
    import argparse
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices
    named = 0
    for path in sorted(ROOT.glob("*/*.py")):
        if path.parts[-2] not in ("esg_cli", "invoker_agent", "controller_plugin", "agent_channel", "profiles"):
            continue
        for command, word, flag in re.findall(r"esg ([a-z]+) (?:([a-z]+) )?[^'\"\n]*?(--[a-z][a-z0-9-]*)",
                                              path.read_text()):
            if f"{command}-{word}" in subs:            # esg profile export: the profile-export parser
                command = f"{command}-{word}"
            if command not in subs:
                continue
            named += 1
            parser = subs[command]
            nested = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
            if nested and word in nested[0].choices:   # esg mig layouts --gpu ...
                parser = nested[0].choices[word]
            flags = {o for a in parser._actions for o in a.option_strings}
            assert flag in flags, f"{path.name} names esg {command} {word} {flag}, which does not exist"
    assert named > 10


def test_a_whole_gpu_settles_without_a_mig_ramp(tmp_path, capsys):
    rc = main(["emulate", "--policies", "esg", "--slo", "moderate", "--load", "light", "--duration-s", "6",
               "--warmup-s", "1", "--nodes", "1", "--no-mig", "--profiles", str(ROOT / "profiles/tables/a100-whole"),
               "--out", str(tmp_path), "--no-plots"])
    assert rc == 0
    err = capsys.readouterr().err
    assert "warning: --warmup-s 1 is shorter" in err and "MIG instances" not in err, err
