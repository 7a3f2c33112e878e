"""``esg up``: the embedded local cluster -- everything real except OpenWhisk's JVM and CouchDB.

It starts a Kafka-protocol broker (Tansu) and ``redis-server`` on free loopback ports, the OpenWhisk REST
stand-in (actions, activation records, and invokes routed to the controller driver), deploys the apps in
``apps/`` with ``actions/deploy.py``'s requests (function actions with ``esg-`` annotations, one app
action per app), runs ``esg scheduler`` and ``--nodes`` x ``esg agent --fake-gpu MODEL`` as processes,
and plays the controller on Kafka. With ``--requests N`` it calls every app N times (blocking, one call every
``--interval-ms``) and prints what came back; with ``--serve`` it keeps running and prints how to call it with ``curl``.

On a machine without a GPU the agents carve *fake* MIG slices and run every action on the CPU, so the
scheduler plans with CPU profile tables by default (``profiles/tables/cpu``), and each app's SLO is
``--slo-factor`` x its fastest path under those tables (an SLO a CPU can meet).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from esg.model import App, load_app
from esg.planner import Planner
from esg.profiles import load_profiles
from esg_cli.errors import CliError

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "guest"


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="run the embedded local cluster (broker, Redis, scheduler, agents)",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=2, help="invoker agents to start (default 2)")
    p.add_argument("--vcpus", type=int, default=None, help="vCPUs each agent advertises (default: the CPUs here)")
    p.add_argument("--fake-gpu", default="A100-40GB", metavar="MODEL",
                   help="GPU model of the agents' fake NVML backend (default A100-40GB)")
    p.add_argument("--apps", type=Path, default=ROOT / "apps", help="directory of app files (default apps/)")
    p.add_argument("--profiles", type=Path, default=ROOT / "profiles" / "tables" / "cpu",
                   help="profile tables the scheduler plans with (default the measured CPU tables)")
    p.add_argument("--slo-factor", type=float, default=3.0,
                   help="each app's SLO = this x its fastest path under --profiles (default 3)")
    p.add_argument("--requests", type=int, default=3, help="blocking calls per app before stopping (default 3)")
    p.add_argument("--no-warmup", action="store_true",
                   help="measure the first calls too (by default the same calls run once, unmeasured, to warm workers)")
    p.add_argument("--interval-ms", type=float, default=250.0,
                   help="time between two calls, all apps in turn (default 250; 0 sends them all at once)")
    p.add_argument("--serve", action="store_true", help="keep running after the calls until Ctrl-C")
    p.add_argument("--port", type=int, default=0, help="port of the OpenWhisk REST stand-in (default: free)")
    p.add_argument("--timeout-s", type=float, default=120.0, help="how long to wait for each call (default 120)")
    p.add_argument("--logs", type=Path, default=None, help="directory for the processes' logs (default: a temp dir)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Deployed:
    app: App
    slo_ms: float


def run(args: argparse.Namespace) -> int:
    if args.nodes < 1:
        raise CliError(f"--nodes must be at least 1, got {args.nodes}")
    if args.requests < 0:
        raise CliError(f"--requests must be non-negative, got {args.requests}")
    if args.interval_ms < 0:
        raise CliError(f"--interval-ms must be non-negative, got {args.interval_ms}")
    if args.slo_factor <= 0:
        raise CliError(f"--slo-factor must be positive, got {args.slo_factor}")
    from esg import mig
    mig.geometry(args.fake_gpu)  # an unknown model is named here, before anything starts
    apps = _apps(args.apps, args.profiles, args.slo_factor)
    logs = args.logs or Path(tempfile.mkdtemp(prefix="esg-up-"))
    logs.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        cluster = _start(stack, args, apps, logs)
        ok = True
        if args.requests:
            if not args.no_warmup:
                _warm_up(cluster, apps, args.requests, args.timeout_s)
            ok = _call_apps(cluster, apps, args.requests, args.interval_ms / 1000, args.timeout_s)
        if args.serve:
            _serve(cluster)
        print(f"logs: {logs}")
        return 0 if ok else 1


def _apps(directory: Path, profiles_dir: Path, factor: float) -> list[Deployed]:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CliError(f"{directory}: no app files (*.json)")
    out = []
    for f in files:
        app = load_app(f)
        profiles = load_profiles(profiles_dir, app.functions)
        fastest = Planner(app, profiles).fastest_latency()
        out.append(Deployed(app, round(factor * fastest, 1)))
    return out


@dataclass
class Cluster:
    kafka: str
    api: str
    driver: Any
    procs: dict[str, subprocess.Popen]


def _start(stack: ExitStack, args: argparse.Namespace, apps: list[Deployed], logs: Path) -> Cluster:
    import redis

    from actions import deploy
    from esg_cli.controller_driver import ControllerDriver
    from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
    from esg_cli.servers import start_broker, start_redis

    broker = stack.enter_context(start_broker())
    rserver = stack.enter_context(start_redis())
    rclient = redis.Redis.from_url(rserver.url)
    stack.callback(rclient.close)
    standin = stack.enter_context(OpenWhiskStandIn(redis_client=rclient, port=args.port))
    requests_ = deploy.plan([dict(d.app.to_dict(), slo_ms=d.slo_ms) for d in apps], image=None, max_batch=8,
                            zip_dir=logs)
    for r in requests_:
        standin.put_action(f"{NAMESPACE}/{r.name}", r.body)
    print(f"broker {broker.address}, redis {rserver.url}, OpenWhisk API {standin.url}")
    print(f"deployed {len(requests_)} actions: " + ", ".join(f"{d.app.name} (SLO {d.slo_ms:g} ms)" for d in apps))

    env = dict(os.environ, ESG_KAFKA=broker.address, ESG_REDIS=rserver.url, ESG_OPENWHISK_API=standin.url,
               ESG_OPENWHISK_AUTH=GUEST_KEY, PYTHONPATH=str(ROOT))
    procs: dict[str, subprocess.Popen] = {}
    stack.callback(_stop_all, procs)
    procs["scheduler"] = _spawn(["scheduler", "--profiles", str(args.profiles)], env, logs / "scheduler.log")
    for i in range(args.nodes):
        cmd = ["agent", "--name", f"node{i}", "--fake-gpu", args.fake_gpu, "--journal", str(logs / f"node{i}.journal")]
        if args.vcpus:
            cmd += ["--vcpus", str(args.vcpus)]
        procs[f"node{i}"] = _spawn(cmd, env, logs / f"node{i}.log")

    driver = stack.enter_context(ControllerDriver(
        broker.address, catalog=standin.store.lookup,
        record_reader=lambda aid: _record(rclient, aid)))
    standin.invoker = lambda fqn, params, blocking, timeout: driver.invoke(
        fqn, params, blocking=blocking, timeout=timeout)
    try:
        driver.wait_healthy(args.nodes, timeout=90)
    except Exception as exc:
        dead = [f"{n} (exit {p.poll()}, see {logs / (n + '.log')})" for n, p in procs.items() if p.poll() is not None]
        raise CliError(f"the cluster did not come up: {exc}" + (f"; stopped: {', '.join(dead)}" if dead else "")) from None
    print(f"{args.nodes} invoker agent(s) healthy")
    return Cluster(broker.address, standin.url, driver, procs)


def _record(rclient: Any, aid: str) -> dict[str, Any] | None:
    from controller_plugin.ledger import activation_record_key

    raw = rclient.get(activation_record_key(aid))
    return None if raw is None else json.loads(raw)


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process in _stop_all
    return subprocess.Popen([sys.executable, "-m", "esg_cli.main", *cmd], env=env, stdout=out,
                            stderr=subprocess.STDOUT, cwd=ROOT)


def _stop_all(procs: dict[str, subprocess.Popen]) -> None:
    for p in procs.values():
        if p.poll() is None:
            p.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 20
    for p in procs.values():
        try:
            p.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
        if p.stdout:
            p.stdout.close()


def _warm_up(cluster: Cluster, apps: list[Deployed], n: int, timeout: float) -> None:
    """The same calls once, unmeasured, so the workers they need start and build their models first."""
    t0 = time.monotonic()
    ids = [cluster.driver.publish(f"{NAMESPACE}/{d.app.name}", {"seed": i}) for d in apps for i in range(n)]
    cluster.driver.flush()
    for aid in ids:
        cluster.driver.wait(aid, timeout)
    print(f"warm-up: {n} call(s) per app, {time.monotonic() - t0:.1f} s (cold starts)")


def _call_apps(cluster: Cluster, apps: list[Deployed], n: int, interval_s: float, timeout: float) -> bool:
    """Call every app ``n`` times, one call every ``interval_s`` (apps in turn), then print one line per
    app and one example result."""
    ids: dict[str, list[str]] = {d.app.name: [] for d in apps}
    for i in range(n):
        for d in apps:
            ids[d.app.name].append(cluster.driver.publish(f"{NAMESPACE}/{d.app.name}", {"seed": i}))
            cluster.driver.flush()
            time.sleep(interval_s)
    all_ok = True
    print(f"\n{'app':<32} {'ok':>5} {'SLO ms':>8} {'hit':>5} {'p50 ms':>8} {'max ms':>8}")
    for d in apps:
        records = [cluster.driver.wait(aid, timeout) for aid in ids[d.app.name]]
        ok = [r for r in records if r["response"]["statusCode"] == 0]
        lat = [r["duration"] for r in records]
        hits = sum(1 for r in ok if r["duration"] <= d.slo_ms)
        all_ok &= len(ok) == len(records)
        print(f"{d.app.name:<32} {len(ok):>2}/{len(records):<2} {d.slo_ms:>8g} {hits:>5} "
              f"{statistics.median(lat):>8.0f} {max(lat):>8.0f}")
        for r in records:
            if r["response"]["statusCode"] != 0:
                print(f"    {r['activationId']}: status {r['response']['statusCode']}: "
                      f"{json.dumps(r['response'].get('result'))[:200]}")
    example = records[0]["response"].get("result")
    print(f"\nexample result ({apps[-1].app.name}): {json.dumps(example)[:300]}")
    return all_ok


def _serve(cluster: Cluster) -> None:
    from esg_cli.openwhisk_standin import GUEST_KEY

    print(f"\nserving; call an app with:\n  curl -u {GUEST_KEY} -X POST "
          f"'{cluster.api}/api/v1/namespaces/{NAMESPACE}/actions/image-classification?blocking=true&result=true' "
          "-H 'Content-Type: application/json' -d '{\"seed\": 1}'\n(OpenWhisk's public guest key; "
          "Ctrl-C stops everything)")
    try:
        while all(p.poll() is None for p in cluster.procs.values()):
            time.sleep(0.5)
        dead = [n for n, p in cluster.procs.items() if p.poll() is not None]
        print(f"stopped: {', '.join(dead)} exited", file=sys.stderr)
    except KeyboardInterrupt:
        print("\nstopping")
