"""Operators see what runs, on a real `esg up --runner twin` cluster (two A100 twin nodes):

* a real Prometheus (Debian's package) scrapes every endpoint `esg up` lists, evaluates the rules of
  deploy/prometheus/ and answers a recording rule through its HTTP API;
* the live cluster page renders in headless Chromium (Debian's package) with each node's MIG layout, its
  warm workers and the SLO hit rate per app, from the same state as `esg status --json`; its screenshot is
  kept (``$ESG_TEST_ARTIFACTS/cluster-page.png`` when that variable names a directory, else in the test's
  temporary directory, whose path the test prints);
* `esg replay` at its default concurrency (128 calls in flight) against the cluster loses no call.
"""

from __future__ import annotations

import csv
import os
import re
import shutil
import subprocess
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

from esg_cli import agreement
from esg_cli.openwhisk_standin import GUEST_KEY
from esg_cli.servers import free_port
from invoker_agent.lifetime import die_with_parent

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "esg-rules.yml"
APP = "image-classification"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage"]


@dataclass(frozen=True)
class Up:
    """A running ``esg up`` and what it printed."""

    api: str
    redis: str
    out: str
    metrics: list[tuple[str, str]]
    """(process, its metrics endpoint), in the order printed."""
    page: str


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    logs = tmp_path_factory.mktemp("observe-cluster")
    # online profiles on, as esg up runs by default (the twin's scheduler learns but does not explore)
    with agreement.twin_cluster(logs, nodes=2, vcpus=16, slo="moderate", online_profiles=True) as c:
        text = (logs / "up.out").read_text()
        yield Up(c.api, c.redis, text,
                 re.findall(r"esg (scheduler|agent \S+)\s+pid \d+\s+\S+\s+metrics (http://\S+)", text),
                 re.search(r"cluster page\s+pid \d+\s+(\S+)", text).group(1))


def invoke(cluster, n: int, app: str = APP) -> list[int]:
    url = f"{cluster.api}/api/v1/namespaces/guest/actions/{app}?blocking=true&result=true"

    def one(i: int) -> int:
        return requests.post(url, json={"seed": i}, auth=tuple(GUEST_KEY.split(":")), timeout=60).status_code

    with ThreadPoolExecutor(4) as pool:
        return list(pool.map(one, range(n)))


def test_esg_up_lists_one_metrics_endpoint_per_process_and_the_wsk_line(cluster):
    assert [who for who, _ in cluster.metrics] == ["scheduler", "agent node0", "agent node1"]
    for _, url in cluster.metrics:
        assert url.startswith("http://127.0.0.1:")
        assert "esg_" in requests.get(url, timeout=5).text
    assert f"wsk property set --apihost {cluster.api} --auth {GUEST_KEY}" in cluster.out


# -- a real Prometheus ----------------------------------------------------------------------------------

def query(base: str, expr: str) -> list[dict]:
    body = requests.get(f"{base}/api/v1/query", params={"query": expr}, timeout=5).json()
    assert body["status"] == "success", body
    return body["data"]["result"]


def wait_for(what, timeout_s: float = 60.0, every_s: float = 0.5):
    deadline = time.monotonic() + timeout_s
    while True:
        got = what()
        if got or time.monotonic() > deadline:
            return got
        time.sleep(every_s)


def test_a_real_prometheus_scrapes_esg_up_and_answers_a_recording_rule(cluster, tmp_path):
    prometheus = shutil.which("prometheus")
    assert prometheus, "prometheus not found: scripts/setup installs Debian's prometheus package"
    targets = {"esg-scheduler": [], "esg-agent": []}
    for who, url in cluster.metrics:
        targets["esg-scheduler" if who == "scheduler" else "esg-agent"].append(url.split("/")[2])
    config = tmp_path / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        f"rule_files: ['{RULES}']\n"
        "scrape_configs:\n" + "".join(
            f"  - job_name: {job}\n    static_configs: [{{targets: {hosts}}}]\n" for job, hosts in targets.items()))
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log = open(tmp_path / "prometheus.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([prometheus, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'data'}",
                             f"--web.listen-address=127.0.0.1:{port}"], stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
    try:
        ready = wait_for(lambda: _ready(base), 30)
        assert ready, (tmp_path / "prometheus.log").read_text()[-2000:]
        app = f"guest/{APP}"
        scheduler_url = dict(cluster.metrics)["scheduler"]
        # two waves of calls, each seen by Prometheus: a rate needs the counters to grow between scrapes
        for wave in (2, 4):
            assert invoke(cluster, wave) == [200] * wave
            counted = _sample(requests.get(scheduler_url, timeout=5).text, "esg_requests_total", app)
            assert counted >= wave
            # what Prometheus holds is what the scheduler counts
            stored = wait_for(lambda n=counted: [r for r in query(base, f'esg_requests_total{{app="{app}"}}')
                                                 if float(r["value"][1]) == n], 30)
            assert stored, (counted, query(base, f'esg_requests_total{{app="{app}"}}'))
        # every endpoint esg up listed is scraped and up
        up = [r for r in query(base, "up") if r["value"][1] == "1"]
        assert len(up) == 3 and {r["metric"]["job"] for r in up} == {"esg-scheduler", "esg-agent"}, up
        # the recording rule, evaluated by Prometheus from the scraped counters
        ratio = wait_for(lambda: [r for r in query(base, "app:esg_slo_hit_ratio:rate5m")
                                  if r["metric"].get("app") == app and r["value"][1] != "NaN"], 30)
        assert ratio, query(base, "app:esg_slo_hit_ratio:rate5m")
        assert 0.0 <= float(ratio[0]["value"][1]) <= 1.0
        # the agents' side: the twin nodes carved MIG instances for the calls
        instances = wait_for(lambda: [r for r in query(base, "sum(esg_mig_instances)") if float(r["value"][1]) > 0])
        assert instances, query(base, "esg_mig_instances")
        rules = requests.get(f"{base}/api/v1/rules", timeout=5).json()["data"]["groups"]
        assert all(r["health"] == "ok" for g in rules for r in g["rules"]), rules
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def _ready(base: str) -> bool:
    try:
        return requests.get(f"{base}/-/ready", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _sample(text: str, name: str, app: str) -> float:
    m = re.search(rf'^{name}{{app="{re.escape(app)}"}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


# -- the live cluster page --------------------------------------------------------------------------------

def chromium(*args: str, profile: Path, timeout_s: float = 90) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium")
    assert exe, "chromium not found: scripts/setup installs Debian's chromium package"
    return subprocess.run([exe, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args], capture_output=True,
                          text=True, timeout=timeout_s, stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())


def artifacts(tmp_path: Path) -> Path:
    where = os.environ.get("ESG_TEST_ARTIFACTS")
    out = Path(where) if where else tmp_path
    out.mkdir(parents=True, exist_ok=True)
    return out


def test_the_cluster_page_renders_in_headless_chromium(cluster, tmp_path):
    assert invoke(cluster, 4) == [200] * 4
    from agent_channel.connect import connect
    from agent_channel.keys import Keys
    from esg_cli import status

    def nodes(state: dict) -> dict:
        return {name: (n["slices"], n["warm_workers"]) for name, n in state["nodes"].items()}

    client = connect(cluster.redis)
    try:
        for attempt in range(5):    # the state read before the page and after it the same: a settled view
            state = status.gather(client, Keys("", "0"), time.time() * 1000)
            dom = chromium("--dump-dom", cluster.page, profile=tmp_path / f"profile-dom{attempt}")
            assert dom.returncode == 0, dom.stderr[-2000:]
            if nodes(status.gather(client, Keys("", "0"), time.time() * 1000)) == nodes(state):
                break
            time.sleep(1)
    finally:
        client.close()
    html = dom.stdout
    # a drawing per node, with the MIG instances esg status reports on it
    for node, n in state["nodes"].items():
        section = re.search(rf'<section class="node" data-node="{node}">(.*?)</section>', html, re.S)
        assert section, node
        drawn = re.findall(r'class="instance (busy|idle)" data-slice="([^"]+)" data-state="\1"', section.group(1))
        assert sorted(s for _, s in drawn) == sorted(s["slice"] for s in n["slices"]), node
        assert "A100-40GB" in section.group(1)
        workers = re.findall(r'<li class="worker">', section.group(1))
        assert len(workers) == len(n["warm_workers"]), node
    assert sum(len(n["slices"]) for n in state["nodes"].values()) > 0
    assert sum(len(n["warm_workers"]) for n in state["nodes"].values()) > 0
    # the SLO hit rate per app over the last minutes, and the AFW queues
    row = re.search(rf'<tr data-app="guest/{APP}"><td>guest/{APP}</td><td class="n rate">([0-9.]+)</td>', html)
    assert row and 0 <= float(row.group(1)) <= 1, html[-3000:]
    assert "AFW queue" in html
    # a picture of it, kept
    shot = artifacts(tmp_path) / "cluster-page.png"
    out = chromium("--window-size=1200,1500", "--hide-scrollbars", f"--screenshot={shot}", cluster.page,
                   profile=tmp_path / "profile-shot")
    assert out.returncode == 0 and shot.stat().st_size > 10_000, out.stderr[-2000:]
    assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    print(f"cluster page screenshot: {shot}")
    # and the same state as JSON
    served = requests.get(cluster.page + "status.json", timeout=5).json()
    assert served["nodes"].keys() == state["nodes"].keys()


# -- esg replay loses no call ------------------------------------------------------------------------------

def test_replay_at_its_default_concurrency_loses_no_call(cluster, tmp_path):
    """A burst well past the REST stand-in's former listen backlog (5) and past the replay's 128 threads."""
    from esg_cli.main import main

    arrivals = tmp_path / "burst.csv"
    apps = ["image-classification", "depth-recognition", "background-elimination", "expanded-image-classification"]
    lines = [f"{i * 0.004:.3f},{apps[i % len(apps)]}" for i in range(600)]
    arrivals.write_text("time_s,app\n" + "\n".join(lines) + "\n")
    out = tmp_path / "replay"
    rc = main(["replay", "--arrivals", str(arrivals), "--api", cluster.api, "--auth", GUEST_KEY, "--redis",
               cluster.redis, "--warmup-s", "1", "--out", str(out), "--slo", "moderate"])
    assert rc == 0
    with open(out / "calls.csv") as fh:
        calls = list(csv.DictReader(fh))
    assert len(calls) == 600
    failed = [c for c in calls if c["ok"] != "True"]
    assert failed == [], failed[:5]
    with open(out / "summary.csv") as fh:
        assert next(csv.DictReader(fh))["failed"] == "0"
    for plot in ("summary.png", "cost_split.png", "latency_cdf.png"):
        assert (out / plot).stat().st_size > 1000, plot
