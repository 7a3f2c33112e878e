"""``esg up``: the embedded local cluster -- everything real except OpenWhisk's JVM.

It starts a Kafka-protocol broker (Tansu), ``redis-server`` and ``pouchdb-server`` (CouchDB's API: the
activation store, with OpenWhisk's databases and views as its ``initdb`` makes them) on free loopback
ports, the OpenWhisk REST stand-in (OpenWhisk's REST API; invokes routed to the controller driver as
their callers), deploys the apps in
``apps/`` with ``esg deploy``'s requests (function actions with ``esg-`` annotations, one app
action per app), runs ``esg scheduler`` and ``--nodes`` x ``esg agent --fake-gpu MODEL`` as processes,
and plays the controller on Kafka. With ``--requests N`` it calls every app N times (blocking, one call every
``--interval-ms``) and prints what came back; with ``--serve`` it keeps running and prints how to call it with ``curl``.
If a server it started exits (the broker, Redis, the activation store), or a scheduler or agent keeps
exiting after restarts, it says which and stops everything, never serving without it.

Redis runs with ACL users and passwords generated for this run (``esg redis-users``): the schedulers
(``--schedulers N``: one leads, the others stand by) and each agent log in as their own user, each handed
its URL in a file of mode 0600 (``ESG_REDIS_FILE``), never on a command line; the URLs are in the logs
directory's ``redis/``. A scheduler or agent that exits while the cluster runs is restarted and reported
(:mod:`esg_cli.supervise`).

On a machine without a GPU the agents carve *fake* MIG slices and run every action on the CPU, so the
scheduler plans with CPU profile tables by default (``profiles/tables/cpu``), and each app's SLO is
``--slo-factor`` x its fastest path under those tables (an SLO a CPU can meet).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from esg.emulator.levels import SLO_LEVELS
from esg.mig import DEFAULT_GPU_MODEL, MAX_GPU_SHARE, unshared, whole_model
from esg.model import App
from esg.planner import Planner
from esg_cli import checks
from esg_cli.errors import CliError
from esg_files import load_app, load_profiles
from invoker_agent import scratch
from invoker_agent.lifetime import die_with_parent

ROOT = Path(__file__).resolve().parent.parent
NAMESPACE = "guest"
#: OpenWhisk's activations database with its default prefix (``whisk_local_``).
ACTIVATIONS_DB = "whisk_local_activations"
STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("up", help="run the embedded local cluster (broker, Redis, scheduler, agents)",
                       description=__doc__.split("\n\n")[0] + "\n\nEvery process it starts is listed, stopped "
                                   "on exit, Ctrl-C, SIGTERM or SIGHUP, and dies with it even on kill -9.")
    p.add_argument("--nodes", type=checks.positive_int, default=2, help="invoker agents to start")
    p.add_argument("--schedulers", type=checks.positive_int, default=1,
                   help="schedulers to start: one leads, the others stand by to take over (default 1)")
    p.add_argument("--vcpus", type=checks.positive_int, default=None,
                   help="vCPUs each agent advertises (default: the CPUs here)")
    p.add_argument("--fake-gpu", type=checks.gpu_model, default=DEFAULT_GPU_MODEL, metavar="MODEL",
                   help="GPU model of the agents' fake NVML backend")
    p.add_argument("--no-mig", action="store_true",
                   help="the agents offer their GPU whole, as one slice kind '<MODEL>:whole' (the fake GPU's MIG "
                        "mode off; with --real-gpu, a GPU with MIG mode on is refused, never changed)")
    p.add_argument("--gpu-share", type=checks.positive_int, default=1, metavar="N",
                   help="batches a whole GPU runs at once, time-sliced without isolation (default 1; needs --no-mig)")
    p.add_argument("--real-gpu", action="store_true",
                   help="the agent uses this machine's GPU through real NVML instead of the fake (one node: "
                        "--nodes 1); its actions run on the GPU when onnxruntime-gpu is installed")
    p.add_argument("--apps", type=Path, default=ROOT / "apps", help="directory of app files (default apps/)")
    p.add_argument("--profiles", type=Path, default=None,
                   help="profile tables the scheduler plans with (default profiles/tables/cpu, the measured CPU "
                        "tables; with --runner twin profiles/tables/a100)")
    p.add_argument("--runner", choices=("process", "twin"), default="process",
                   help="how the agents run actions: process (the real code, on this CPU) or twin (run nothing: "
                        "wait each batch's profiled latency under --profiles, the emulator's timing model)")
    p.add_argument("--slo-factor", type=checks.positive_float, default=None,
                   help="each app's SLO = this x its fastest path under --profiles (default 3)")
    p.add_argument("--slo", choices=tuple(SLO_LEVELS), default=None,
                   help="instead: each app's SLO = its file's slo_ms x the level (0.8, 1.0, 1.2), as esg emulate "
                        "--slo sets them (for replaying the emulator's workloads on a twin cluster)")
    p.add_argument("--no-online-profiles", action="store_true",
                   help="the scheduler plans with the --profiles tables only, learning and exploring nothing (as "
                        "esg emulate without --profiles-online)")
    p.add_argument("--admission-control", action="store_true",
                   help="the scheduler rejects at once, with an application error, an activation whose app cannot "
                        "meet what is left of its SLO even at its fastest (esg scheduler --admission-control)")
    p.add_argument("--slo-percentile", type=checks.percentile, default=None, metavar="P",
                   help="the scheduler plans every run time at its P-th percentile, 50 < P < 100 (esg scheduler "
                        "--slo-percentile)")
    p.add_argument("--no-prewarm", action="store_true",
                   help="the scheduler's policy starts no worker ahead of a batch and every worker keeps the "
                        "agents' TTL (as esg emulate --no-prewarm)")
    p.add_argument("--requests", type=checks.non_negative_int, default=3,
                   help="blocking calls per app before stopping")
    p.add_argument("--no-warmup", action="store_true",
                   help="measure the first calls too (by default the same calls run once, unmeasured, to warm workers)")
    p.add_argument("--interval-ms", type=checks.non_negative_float, default=250.0,
                   help="time between two calls, all apps in turn (0 sends them all at once)")
    p.add_argument("--serve", action="store_true", help="keep running after the calls until Ctrl-C")
    p.add_argument("--port", type=checks.port_or_zero, default=0,
                   help="port of the OpenWhisk REST stand-in (0: a free one)")
    p.add_argument("--page-port", type=checks.port_or_zero, default=0,
                   help="port of the live cluster page, on 127.0.0.1 (0: a free one)")
    p.add_argument("--timeout-s", type=checks.positive_float, default=120.0, help="how long to wait for each call")
    p.add_argument("--logs", type=Path, default=None,
                   help="directory for the processes' logs, kept (default: a temporary one, removed at exit "
                        "unless a call failed)")
    p.set_defaults(func=run)


@dataclass(frozen=True)
class Deployed:
    app: App
    slo_ms: float


def check_args(args: argparse.Namespace) -> list[Deployed]:
    """Every flag and file, checked before anything starts; the apps with their SLOs."""
    checks.check_dir(args.apps, "--apps")
    if args.profiles is None:
        args.profiles = ROOT / "profiles" / "tables" / ("a100" if args.runner == "twin" else "cpu")
    checks.check_dir(args.profiles, "--profiles")
    if args.slo is not None and args.slo_factor is not None:
        raise CliError("--slo and --slo-factor both set each app's SLO: pass one of them")
    apps = _apps(args.apps, args.profiles, args.slo_factor or 3.0, args.slo)
    if args.gpu_share != 1 and not args.no_mig:
        raise CliError("--gpu-share shares a whole GPU: it needs --no-mig")
    if args.gpu_share > MAX_GPU_SHARE:
        raise CliError(f"--gpu-share must be 1 to {MAX_GPU_SHARE}, got {args.gpu_share}")
    if args.real_gpu and args.nodes != 1:
        raise CliError("--real-gpu gives this machine's GPU to one agent: pass --nodes 1")
    if args.real_gpu and args.runner == "twin":
        raise CliError("--real-gpu runs the actions on the GPU; a twin runs nothing: drop one of them")
    if args.runner == "twin":
        gpu = whole_model(args.fake_gpu, args.gpu_share) if args.no_mig else args.fake_gpu
        _check_twin_profiles(args.apps, args.profiles, gpu)
    checks.check_port_free(args.port, "--port")
    checks.check_port_free(args.page_port, "--page-port")
    if args.port and args.port == args.page_port:
        raise CliError(f"--port and --page-port are both {args.port}: give them different ports")
    if args.logs is not None:
        checks.check_writable_dir(args.logs, "--logs")
    return apps


class _Stop(KeyboardInterrupt):
    """SIGTERM or SIGHUP: unwind like Ctrl-C, so every process started is stopped on the way out."""


def _on_stop_signal(signum, _frame) -> None:
    for sig in STOP_SIGNALS:  # a second signal must not interrupt the clean-up
        signal.signal(sig, signal.SIG_IGN)
    raise _Stop(signal.Signals(signum).name)


def run(args: argparse.Namespace) -> int:
    apps = check_args(args)
    previous = {sig: signal.signal(sig, _on_stop_signal) for sig in STOP_SIGNALS}
    keep_logs = args.logs is not None
    logs = args.logs or scratch.make("up-")
    ok = False
    try:
        logs.mkdir(parents=True, exist_ok=True)
        print(f"logs: {logs}" + ("" if keep_logs else " (removed at exit unless a call fails; --logs DIR keeps them)"))
        with ExitStack() as stack:
            cluster = _start(stack, args, apps, logs)
            ok = True
            if args.requests:
                if not args.no_warmup:
                    _warm_up(cluster, apps, args.requests, args.timeout_s)
                ok = _call_apps(cluster, apps, args.requests, args.interval_ms / 1000, args.timeout_s)
            if args.serve and not cluster.stopped():
                ok = _serve(cluster) and ok
            else:
                ok = _still_running(cluster) and ok
        return 0 if ok else 1
    except _Stop as stop:
        print(f"esg up: {stop}: everything it started is stopped", file=sys.stderr)
        return 128 + signal.Signals[str(stop)].value
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        if not keep_logs:
            if ok:
                shutil.rmtree(logs, ignore_errors=True)
            else:
                (logs / scratch.OWNER_FILE).unlink(missing_ok=True)   # kept for reading: never swept
                print(f"logs kept in {logs}", file=sys.stderr)


def _apps(directory: Path, profiles_dir: Path, factor: float, level: str | None = None) -> list[Deployed]:
    files = sorted(directory.glob("*.json"))
    if not files:
        raise CliError(f"{directory}: no app files (*.json)")
    out = []
    for f in files:
        app = load_app(f)
        profiles = load_profiles(profiles_dir, app.functions)
        if level is not None:
            out.append(Deployed(app, round(app.slo_ms * SLO_LEVELS[level], 3)))
            continue
        fastest = Planner(app, profiles).fastest_latency()
        out.append(Deployed(app, round(factor * fastest, 1)))
    return out


def _check_twin_profiles(apps_dir: Path, profiles_dir: Path, gpu: str) -> None:
    """A twin times batches by the profiles of the GPU it pretends to have: they must be that GPU's."""
    for f in sorted(apps_dir.glob("*.json")):
        for prof in load_profiles(profiles_dir, load_app(f).functions).values():
            if prof.gpu_model != unshared(gpu):
                raise CliError(f"--profiles {profiles_dir}: profile {prof.function!r} is for {prof.gpu_model}, "
                               f"but the twin agents pretend to be {unshared(gpu)} (--fake-gpu, --no-mig)")


@dataclass
class Cluster:
    kafka: str
    api: str
    driver: Any
    procs: dict[str, subprocess.Popen]
    servers: dict[str, Any] = field(default_factory=dict)
    """The servers it started (``esg_cli.servers.Server``), by what they are."""
    redis: str = ""
    """The scheduler's Redis (its decision log says where each batch ran)."""
    metrics: dict[str, str] = field(default_factory=dict)
    """Per process started (``scheduler``, ``node0``...), its Prometheus endpoint."""
    page: str = ""
    """The live cluster page's address."""
    supervisor: Any = None
    """Restarts a scheduler or agent that exits (``esg_cli.supervise``)."""

    def stopped(self) -> list[str]:
        """What has exited for good, each with its status (and a server's last log lines): a server, or a
        scheduler or agent its supervisor gave up restarting."""
        if self.supervisor is not None:
            out = [self.supervisor.failed] if self.supervisor.failed else []
        else:
            out = [f"{name} exited with status {p.poll()}" for name, p in self.procs.items() if p.poll() is not None]
        for what, server in self.servers.items():
            if not server.running():
                tail = server.log_tail(5)
                out.append(f"{what} exited with status {server.process.returncode}" + (f":\n{tail}" if tail else ""))
        return out


def _redis_users(logs: Path, nodes: list[str], port: int):
    """This run's Redis users, their URL files under ``logs/redis`` (0700) and the ACL text for the server."""
    from esg_cli import redis_users

    creds = logs / "redis"
    users = redis_users.write(creds, "", nodes, f"127.0.0.1:{port}")
    return creds, users, (creds / redis_users.ACL_FILE).read_text()


def _start(stack: ExitStack, args: argparse.Namespace, apps: list[Deployed], logs: Path) -> Cluster:
    from agent_channel import acl
    from agent_channel.connect import connect
    from agent_channel.keys import Keys
    from esg_cli import deploy, openwhisk_catalog, openwhisk_db
    from esg_cli.cluster_page import ClusterPage
    from esg_cli.controller_driver import ControllerDriver
    from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
    from esg_cli.servers import free_port, start_broker, start_couchdb, start_redis
    from esg_cli.supervise import Child, Supervisor

    broker = stack.enter_context(start_broker())
    nodes = [f"node{i}" for i in range(args.nodes)]
    port = free_port()
    creds, users, acl_text = _redis_users(logs, nodes, port)
    admin = next(u for u in users if u.name == acl.ADMIN)
    rserver = stack.enter_context(start_redis(port=port, acl=acl_text, admin=(admin.name, admin.password),
                                              maxmemory_mb=1024))
    couch = stack.enter_context(start_couchdb())
    store = openwhisk_db.initialise(couch.url)      # OpenWhisk's databases and views, as initdb makes them
    try:
        standin = stack.enter_context(OpenWhiskStandIn(activation_store=store, port=args.port))
    except OSError as exc:  # the port was taken after the check
        raise CliError(f"--port {args.port}: {exc.strerror or exc}") from None
    requests_ = deploy.plan([dict(d.app.to_dict(), slo_ms=d.slo_ms) for d in apps], image=None, max_batch=8,
                            zip_dir=logs)
    for r in requests_:
        standin.put_action(f"{NAMESPACE}/{r.name}", r.body)
    openwhisk_catalog.install(standin)               # whisk.system/utils, as a deployment's catalog has it
    print(f"deployed {len(requests_)} actions: " + ", ".join(f"{d.app.name} (SLO {d.slo_ms:g} ms)" for d in apps))

    env = dict(os.environ, ESG_KAFKA=broker.address, ESG_OPENWHISK_API=standin.url,
               ESG_OPENWHISK_AUTH=GUEST_KEY, ESG_ACTIVATION_STORE=store, PYTHONPATH=str(ROOT))
    env.pop("ESG_REDIS", None)      # each child logs in as its own Redis user, from its own file
    procs: dict[str, subprocess.Popen] = {}
    children: dict[str, Child] = {}
    stack.callback(_stop_all, procs)

    def start(name: str, cmd: list[str], child_env: dict[str, str]) -> None:
        children[name] = Child(cmd, child_env, logs / f"{name}.log", _spawn(cmd, child_env, logs / f"{name}.log"))
        procs[name] = children[name].proc
    schedulers = ["scheduler" if k == 0 else f"scheduler-{k}" for k in range(getattr(args, "schedulers", 1))]
    metrics = {name: free_port() for name in schedulers + [f"node{i}" for i in range(args.nodes)]}
    scheduler = ["scheduler", "--profiles", str(args.profiles)]
    if getattr(args, "no_online_profiles", False):
        scheduler.append("--no-online-profiles")
    elif args.runner == "twin":
        # a twin times only the configurations its tables hold: one explored beyond them fails its call
        # ("twin: profile ... has no configuration ..."), so the scheduler learns but does not explore
        scheduler += ["--explore-fraction", "0"]
    if getattr(args, "admission_control", False):
        scheduler.append("--admission-control")
    if getattr(args, "no_prewarm", False):
        scheduler.append("--no-prewarm")
    if getattr(args, "slo_percentile", None) is not None:
        scheduler += ["--slo-percentile", f"{args.slo_percentile:g}"]
    for name in schedulers:
        start(name, [*scheduler, "--metrics-port", str(metrics[name])],
              dict(env, ESG_REDIS_FILE=str(creds / "scheduler" / "redis.url"), ESG_SCHEDULER_NAME=name))
    for i in range(args.nodes):
        cmd = ["agent", "--name", f"node{i}", "--journal", str(logs / f"node{i}.journal"),
               "--metrics-port", str(metrics[f"node{i}"])]
        cmd += [] if getattr(args, "real_gpu", False) else ["--fake-gpu", args.fake_gpu]
        if getattr(args, "no_mig", False):
            cmd += ["--no-mig", "--gpu-share", str(args.gpu_share)]
        if args.vcpus:
            cmd += ["--vcpus", str(args.vcpus)]
        if args.runner == "twin":
            # a twin's batches only wait: as many at once as the node has vCPUs (each batch holds one or
            # more), so the node's vCPUs and slices bound them, as in the emulator
            cmd += ["--runner", "twin", "--profiles", str(args.profiles), "--seed", str(i),
                    "--max-batches", str(args.vcpus or len(os.sched_getaffinity(0)))]
        start(f"node{i}", cmd, dict(env, ESG_REDIS_FILE=str(creds / f"agent-node{i}" / "redis.url")))
    supervisor = Supervisor(children, procs, _spawn)
    supervisor.start()
    stack.callback(supervisor.stop)     # before the children are stopped (callbacks run last first)

    driver = stack.enter_context(ControllerDriver(broker.address, catalog=standin.store.lookup,
                                                  activation_store=store))
    standin.invoker = driver.invocation
    try:
        driver.wait_healthy(args.nodes, timeout=90)
    except Exception as exc:
        dead = [f"{n} (exit {p.poll()}, see {logs / (n + '.log')})" for n, p in procs.items() if p.poll() is not None]
        raise CliError(f"the cluster did not come up: {exc}" + (f"; stopped: {', '.join(dead)}" if dead else "")) from None
    print(f"{args.nodes} invoker agent(s) healthy")
    observer = (creds / "observer" / "redis.url").read_text().strip()      # read only: what the page shows
    client = connect(observer)
    stack.callback(client.close)
    try:
        page = stack.enter_context(ClusterPage(client, Keys("", "0"), port=args.page_port))
    except OSError as exc:  # the port was taken after the check
        raise CliError(f"--page-port {args.page_port}: {exc.strerror or exc}") from None
    endpoints = {n: f"http://127.0.0.1:{port}/metrics" for n, port in metrics.items()}
    _print_started(broker, rserver, couch, standin.url, procs, logs, endpoints, page.url)
    return Cluster(broker.address, standin.url, driver, procs,
                   {"Kafka-protocol broker (Tansu)": broker, "redis-server": rserver,
                    "pouchdb-server (the activation store)": couch}, observer, endpoints, page.url, supervisor)


def _print_started(broker, rserver, couch, api: str, procs: dict[str, subprocess.Popen], logs: Path,
                   metrics: dict[str, str], page: str) -> None:
    """What this command started, so a user knows what runs (and can check that nothing outlives it),
    where each process serves its metrics, and how to point OpenWhisk's CLI at it."""
    from esg_cli.openwhisk_standin import GUEST_KEY

    rows = [("Kafka-protocol broker (Tansu)", broker.process.pid, broker.address),
            ("redis-server", rserver.process.pid, f"redis://{rserver.host}:{rserver.port}/0 (ACL users; their URLs "
                                                  f"in {logs / 'redis'})"),
            ("pouchdb-server (activations)", couch.process.pid, f"http://{couch.address}/{ACTIVATIONS_DB}"),
            ("OpenWhisk REST stand-in", os.getpid(), f"{api} (a thread of this process)"),
            ("cluster page", os.getpid(), f"{page} (a thread of this process)")]
    rows += [(f"esg {n if n.startswith('scheduler') else 'agent ' + n}", p.pid,
              f"{logs / (n + '.log')}  metrics {metrics[n]}") for n, p in procs.items()]
    print("started (stopped on exit, Ctrl-C, SIGTERM or SIGHUP; each dies with this process, even on kill -9; "
          "action workers die with their agent):")
    for what, pid, where in rows:
        print(f"  {what:<30} pid {pid:<8} {where}")
    print(f"OpenWhisk CLI: wsk property set --apihost {api} --auth {GUEST_KEY}  (OpenWhisk's public guest key)")


def _spawn(cmd: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    out = open(log, "ab")  # noqa: SIM115 - closed with the process in _stop_all
    # Its own session: a Ctrl-C in the terminal reaches only this process, which stops the children in
    # order (_stop_all); the parent-death signal stops them if this process is killed outright.
    return subprocess.Popen([sys.executable, "-m", "esg_cli.main", *cmd], env=env, stdout=out,
                            stderr=subprocess.STDOUT, cwd=ROOT, stdin=subprocess.DEVNULL,
                            start_new_session=True, preexec_fn=die_with_parent())


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
    late = sum(_wait(cluster, aid, timeout) is None for aid in ids)
    print(f"warm-up: {n} call(s) per app, {time.monotonic() - t0:.1f} s (cold starts)"
          + (f"; {late} not answered within --timeout-s {timeout:g}" if late else ""))


def _wait(cluster: Cluster, aid: str, timeout: float) -> dict[str, Any] | None:
    """The activation record, or None when it was not answered within ``timeout``."""
    from esg_cli.controller_driver import DriverError

    try:
        return cluster.driver.wait(aid, timeout)
    except DriverError:
        return None


def _call_apps(cluster: Cluster, apps: list[Deployed], n: int, interval_s: float, timeout: float) -> bool:
    """Call every app ``n`` times, one call every ``interval_s`` (apps in turn), then print one line per
    app and one example result. A call not answered within ``timeout`` counts as failed."""
    ids: dict[str, list[str]] = {d.app.name: [] for d in apps}
    since_ms = int(time.time() * 1000)
    for i in range(n):
        for d in apps:
            ids[d.app.name].append(cluster.driver.publish(f"{NAMESPACE}/{d.app.name}", {"seed": i}))
            cluster.driver.flush()
            time.sleep(interval_s)
    all_ok = True
    example = None
    print(f"\n{'app':<32} {'ok':>5} {'SLO ms':>8} {'hit':>5} {'p50 ms':>8} {'max ms':>8} {'p99 ms':>8}")
    for d in apps:
        waited = [(aid, _wait(cluster, aid, timeout)) for aid in ids[d.app.name]]
        records = [r for _, r in waited if r is not None]
        ok = [r for r in records if r["response"]["statusCode"] == 0]
        lat = [r["duration"] for r in records]
        hits = sum(1 for r in ok if r["duration"] <= d.slo_ms)
        all_ok &= len(ok) == len(waited)
        p50 = f"{statistics.median(lat):>8.0f}" if lat else f"{'-':>8}"
        top = f"{max(lat):>8.0f}" if lat else f"{'-':>8}"
        p99 = f"{percentile(lat, 99):>8.0f}" if lat else f"{'-':>8}"
        print(f"{d.app.name:<32} {len(ok):>2}/{len(waited):<2} {d.slo_ms:>8g} {hits:>5} {p50} {top} {p99}")
        for aid, r in waited:
            if r is None:
                print(f"    {aid}: no answer within --timeout-s {timeout:g}")
            elif r["response"]["statusCode"] != 0:
                print(f"    {aid}: status {r['response']['statusCode']}: "
                      f"{json.dumps(brief(r['response'].get('result')))}")
        if ok:
            example = (d.app.name, ok[0]["response"].get("result"))
    if example is not None:
        print(f"\nexample result ({example[0]}): {json.dumps(brief(example[1]))}")
    if cluster.redis:
        _print_placements(cluster.redis, since_ms)
    return all_ok


def percentile(values: list[float], q: float) -> float:
    """The ``q``-th percentile of ``values``, linearly interpolated (numpy's default)."""
    import numpy as np

    return float(np.percentile(values, q))


def ran_on(decisions: list[dict[str, Any]]) -> dict[str, dict[str, int]]:
    """Per function, its answered batches by where they ran: the GPU slice kind, or ``CPU``."""
    out: dict[str, dict[str, int]] = {}
    for d in decisions:
        if d.get("type") == "batch":
            where = d.get("gpu") or "CPU"
            counts = out.setdefault(d["function"], {})
            counts[where] = counts.get(where, 0) + 1
    return out


def _print_placements(redis_url: str, since_ms: int) -> None:
    """Where each function's measured batches ran, from the scheduler's decision log."""
    import redis

    from controller_plugin.decisions import decisions_key, read_decisions

    time.sleep(0.5)                 # the log is written in the scheduler's turn after the acks
    client = redis.Redis.from_url(redis_url)
    try:
        placed = ran_on(read_decisions(client, decisions_key("0"), since_ms))
    except redis.RedisError as exc:
        print(f"\nwhere each function ran: cannot read the decision log ({exc})")
        return
    finally:
        client.close()
    print("\nwhere each function ran (the measured calls' batches, from the scheduler's decision log):")
    for function, counts in sorted(placed.items()):
        print(f"  {function:<30} " + ", ".join(f"{where} {n}" for where, n in sorted(counts.items())))


def brief(value: Any, text: int = 48, items: int = 5) -> Any:
    """``value`` shortened for a terminal, still whole JSON: long strings keep their start and say how
    long they were, long lists their first items and how many there were."""
    if isinstance(value, str) and len(value) > text:
        return f"{value[:text]}... ({len(value)} chars)"
    if isinstance(value, list):
        head = [brief(v, text, items) for v in value[:items]]
        return head + [f"... ({len(value)} items)"] if len(value) > items else head
    if isinstance(value, dict):
        return {k: brief(v, text, items) for k, v in value.items()}
    return value


def _still_running(cluster: Cluster) -> bool:
    """Whether everything started still runs; if not, say what stopped (and stop serving)."""
    stopped = cluster.stopped()
    for line in stopped:
        print(f"esg up: {line}", file=sys.stderr)
    if stopped:
        print("esg up: stopping everything: the cluster cannot serve without it", file=sys.stderr)
    return not stopped


def _serve(cluster: Cluster) -> bool:
    """Serve until Ctrl-C (the caller stops everything on the way out); False when a process or server
    it started exited for good meanwhile: it says which and stops, rather than serving without it."""
    from esg_cli.openwhisk_standin import GUEST_KEY

    print(f"\nserving; call an app with:\n  curl -u {GUEST_KEY} -X POST "
          f"'{cluster.api}/api/v1/namespaces/{NAMESPACE}/actions/image-classification?blocking=true&result=true' "
          "-H 'Content-Type: application/json' -d '{\"seed\": 1}'\nor: wsk action invoke image-classification "
          "-p seed 1 --blocking --result  (after the wsk property set line above)\n(OpenWhisk's public guest key; "
          f"Ctrl-C stops everything)\nwatch it: {cluster.page} (the live cluster page)")
    try:
        while _still_running(cluster):
            time.sleep(0.5)
        return False
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: the caller stops everything on the way out
        print("\nstopping")
        raise
