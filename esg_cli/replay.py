"""``esg replay``: send an arrivals file's requests to a running cluster and measure it as the emulator does.

Any cluster with OpenWhisk's REST API: ``esg up --serve``, or a real OpenWhisk with the ESG scheduler.
Each line of ``--arrivals`` (``time_s,app``) becomes a blocking ``POST .../actions/{app}?blocking=true``
sent at its time (from a pool of ``--concurrency`` client threads); each app's SLO is its action's
``esg-slo-ms`` annotation. Writes ``summary.csv`` and ``per_app.csv`` with ``esg emulate``'s columns,
where a request's latency runs from the moment the scheduler accepted it to its answer (the scheduler's
decision log, read from ``--redis``), and adds the end-to-end figures the client saw (``e2e_*``: POST to
response, the controller's hops included). Cost (execution from dispatch to answer, the start-up of the
pre-warms that started a worker from sent to ready -- one that found a worker warm there, failed, or was
dropped charges none, as the emulator charges a start only where one runs --, and MIG instances kept idle
for warm workers within the measured window -- each for its own keep-alive -- as the emulator charges
them), cold starts, pre-warms (those that started a worker), MIG changes and batch sizes
come from the decision log too (without ``--redis`` they are empty and the latency is the client's). Requests arriving
before ``--warmup-s`` are sent but not measured, as in the emulator; ``decisions.csv`` lists the
measured batches' configurations.
"""

from __future__ import annotations

import argparse
import csv
import math
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

from esg.arrivals import span_s
from esg.cost import Prices
from esg.defaults import KEEP_ALIVE_MS
from esg.emulator.levels import SLO_LEVELS
from esg.emulator.metrics import Metrics
from esg.emulator.nodes import kept_idle_ms
from esg.errors import EsgError
from esg.events import RequestOutcome
from esg.mig import DEFAULT_GPU_MODEL, compute_slices
from esg.model import Config
from esg_cli import checks
from esg_cli.emulate import ADMISSION_COLUMNS, PER_APP_COLUMNS, SUMMARY_COLUMNS, write_csv
from esg_cli.errors import CliError
from esg_files import read_arrivals

ROOT = Path(__file__).resolve().parent.parent

E2E_COLUMNS = ["e2e_slo_hit_rate", "e2e_p50_ms", "e2e_p99_ms"]
FAILURE_COLUMNS = ["failed"]
"""Measured calls that did not come back as a successful activation (their reasons: ``calls.csv``)."""
CALL_COLUMNS = ["app", "at_s", "sent_ms", "answered_ms", "activation_id", "ok", "http_status", "error"]
#: ``--slo``: an SLO level of ``esg emulate`` (checked against the cluster's SLOs), or ``live`` (not checked).
SLO_CHOICES = ("live", *SLO_LEVELS)
DECISION_COLUMNS = ["batch_id", "app", "function", "node", "batch", "vcpus", "gpu", "slice", "warm", "cold",
                    "reconfigured", "run_ms", "ready_ms", "enqueued_ms", "decided_ms", "sent_ms", "done_ms"]


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="send an arrivals file to a running cluster; write esg emulate's CSVs",
                       description=__doc__.split("\n\n")[0] + " Each flag without a value falls back to its "
                                   "environment variable.")
    p.add_argument("--arrivals", required=True, metavar="FILE", help="CSV time_s,app (esg emulate --write-arrivals)")
    p.add_argument("--api", type=checks.http_url, metavar="URL", help="OpenWhisk REST API (env ESG_OPENWHISK_API)")
    p.add_argument("--auth", type=checks.api_key, metavar="UUID:KEY",
                   help="OpenWhisk credentials (env ESG_OPENWHISK_AUTH; never printed)")
    p.add_argument("--namespace", default="guest", help="namespace of the app actions (default guest)")
    p.add_argument("--redis", type=checks.redis_url, metavar="URL",
                   help="the scheduler's Redis, for its decision log (env ESG_REDIS; without it, only the "
                        "client's end-to-end figures)")
    p.add_argument("--topic-prefix", type=checks.topic_prefix, metavar="P", help="(env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", type=checks.controller_id, metavar="C", help="(env ESG_CONTROLLER_ID)")
    p.add_argument("--out", required=True, help="output directory (created if missing)")
    p.add_argument("--warmup-s", type=checks.non_negative_float, default=30.0,
                   help="requests arriving earlier are sent but not measured")
    p.add_argument("--timeout-s", type=checks.positive_float, default=120.0, help="how long one call may take")
    p.add_argument("--concurrency", type=checks.positive_int, default=128, help="calls in flight at most")
    p.add_argument("--policy", default="esg", help="the policy column of the CSVs (the scheduler's policy)")
    p.add_argument("--slo", default="live", choices=SLO_CHOICES,
                   help="the slo column of the CSVs: an SLO level, checked against the cluster's SLOs (each app's "
                        "esg-slo-ms must be its --apps file's slo_ms x the level, as esg up --slo sets them), or "
                        "live (the cluster's SLOs, whatever they are)")
    p.add_argument("--apps", type=Path, default=ROOT / "apps", metavar="DIR",
                   help="the app files an SLO level is checked against (default apps/)")
    p.add_argument("--no-plots", action="store_true", help="write no plots")
    p.set_defaults(func=run)


@dataclass
class Call:
    app: str
    at_s: float
    sent_ms: float = math.nan
    answered_ms: float = math.nan
    activation_id: str | None = None
    ok: bool = False
    http_status: int | None = None
    """The HTTP status of the answer (None: no answer: the error says why)."""
    error: str | None = None
    """Why a call that is not ``ok`` failed: the client's exception, or the API's or the action's error."""


def check_args(args: argparse.Namespace):
    env = checks.from_env
    args.api = env(args.api, "ESG_OPENWHISK_API", checks.http_url)
    args.auth = env(args.auth, "ESG_OPENWHISK_AUTH", checks.api_key)
    args.redis = checks.from_env(args.redis, "ESG_REDIS", checks.redis_url)
    args.topic_prefix = env(args.topic_prefix, "ESG_TOPIC_PREFIX", checks.topic_prefix, "")
    args.controller_id = env(args.controller_id, "ESG_CONTROLLER_ID", checks.controller_id, "0")
    if not args.api:
        raise CliError("no OpenWhisk API: pass --api URL or set ESG_OPENWHISK_API")
    if not args.auth:
        raise CliError("no OpenWhisk credentials: pass --auth UUID:KEY or set ESG_OPENWHISK_AUTH")
    try:
        requests = read_arrivals(args.arrivals)
    except EsgError as exc:
        raise CliError(f"--arrivals {exc}") from None
    if args.warmup_s >= span_s(requests):
        raise CliError(f"--warmup-s {args.warmup_s:g} is not shorter than the arrivals ({span_s(requests):g} s): "
                       "no request would be measured")
    if args.slo != "live":
        checks.check_dir(args.apps, "--apps")
    checks.check_writable_dir(args.out, "--out")
    return requests


def check_slos(slos: dict[str, float], level: str, apps_dir: str) -> None:
    """With an SLO level (not ``live``): every app's SLO on the cluster is its app file's ``slo_ms`` times
    the level, as ``esg up --slo`` and ``esg emulate --slo`` set it; otherwise the figures would be reported
    under an SLO the cluster did not plan with -- refused, naming the first app that differs."""
    from esg_files import load_app

    files = {}
    for path in sorted(Path(apps_dir).glob("*.json")):
        try:
            app = load_app(path)
        except EsgError as exc:
            raise CliError(f"--apps {exc}") from None
        files[app.name] = (app, path)
    for name, cluster_ms in sorted(slos.items()):
        if name not in files:
            raise CliError(f"--slo {level}: app {name!r} has no app file in --apps {apps_dir} to check its SLO "
                           f"against (pass --apps DIR, or --slo live)")
        app, path = files[name]
        want = round(app.slo_ms * SLO_LEVELS[level], 3)
        if abs(cluster_ms - want) > 1e-3 * max(1.0, want):
            raise CliError(f"--slo {level}: app {name!r} runs on the cluster with an SLO of {cluster_ms:g} ms, but "
                           f"{level} is {SLO_LEVELS[level]:g} x the {app.slo_ms:g} ms of {path} = {want:g} ms: start "
                           f"the cluster with the same SLOs (esg up --slo {level}) or report it as --slo live")


def run(args: argparse.Namespace) -> int:
    import requests as http

    arrivals = check_args(args)
    session = http.Session()
    session.auth = tuple(args.auth.split(":", 1))
    slos = {app: _slo(session, args, app) for app in sorted({r.app for r in arrivals})}
    if args.slo != "live":
        check_slos(slos, args.slo, args.apps)
    rclient = _redis(args) if args.redis else None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    start_ms = time.time() * 1000
    calls = _send(session, args, [Call(r.app, r.arrival_ms / 1000) for r in arrivals])
    log: list[dict[str, Any]] = []
    if rclient is not None:
        from controller_plugin.decisions import decisions_key, read_decisions
        time.sleep(0.5)     # the scheduler writes its last entries in its next turn
        log = read_decisions(rclient, decisions_key(f"{args.topic_prefix}{args.controller_id}"), int(start_ms))
        rclient.close()
    summary, per_app, batches = measure(calls, slos, log, args.warmup_s, start_ms,
                                        args.policy, args.slo, Path(args.arrivals).stem)
    # requests the scheduler's admission control rejected: reported apart, as esg emulate does with the flag
    admission = ADMISSION_COLUMNS if summary.get("rejected") else []
    write_csv(out / "summary.csv", SUMMARY_COLUMNS + E2E_COLUMNS + FAILURE_COLUMNS + admission, [summary])
    write_csv(out / "per_app.csv", PER_APP_COLUMNS + E2E_COLUMNS + FAILURE_COLUMNS, per_app)
    _write_dicts(out / "decisions.csv", DECISION_COLUMNS, batches)
    _write_dicts(out / "calls.csv", CALL_COLUMNS, [vars(c) for c in calls])
    if not args.no_plots:
        _plot(summary, calls, slos, log, args.warmup_s, out)
    answered = sum(1 for c in calls if c.ok)
    print(f"{len(calls)} calls, {answered} answered ok; measured {summary['requests']}: hit rate "
          f"{summary['slo_hit_rate']:.3f} (scheduler accept to answer), {summary['e2e_slo_hit_rate']:.3f} "
          f"(end to end); written to {out}")
    failures = failure_reasons(calls)
    if failures:
        print(f"{len(calls) - answered} call(s) failed (each one's reason: {out / 'calls.csv'}):")
        for reason, n in failures:
            print(f"  {n:>6} x {reason}")
    return 0


def _write_dicts(path: Path, columns: list[str], rows: list[dict[str, Any]]) -> None:
    with open(path, "w", newline="") as fh:
        w = csv.DictWriter(fh, columns, extrasaction="ignore", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)


def failure_reasons(calls: list[Call]) -> list[tuple[str, int]]:
    """The failed calls' reasons, most frequent first (an activation's own error text is cut to its start,
    so that calls failing alike count together)."""
    counts: dict[str, int] = {}
    for c in calls:
        if not c.ok:
            status = "no answer" if c.http_status is None else f"HTTP {c.http_status}"
            reason = f"{status}: {(c.error or 'unknown')[:120]}"
            counts[reason] = counts.get(reason, 0) + 1
    return sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))


def _plot(summary: dict[str, Any], calls: list[Call], slos: dict[str, float], log: list[dict[str, Any]],
          warmup_s: float, out: Path) -> None:
    """``esg emulate``'s plots of this one cell: hit rate, the cost split and the latency CDFs (the
    scheduler's latencies when its log is read, else the client's)."""
    import numpy as np

    from esg_cli.emulate_plots import plot_cdf, plot_cost_split, plot_summary

    sched, e2e, _ = measured(calls, slos, log, warmup_s)
    metrics = sched if log else e2e
    cell = {"cell": (summary["policy"], summary["slo"], summary["load"]), "slo": slos,
            "latencies": {app: np.array(st.latencies_ms) for app, st in metrics.per_app.items()}}
    plot_summary([summary], out / "summary.png")
    if log:
        plot_cost_split([summary], out / "cost_split.png")
    plot_cdf([cell], out / "latency_cdf.png")


def _redis(args):
    from agent_channel.connect import ChannelError, connect
    try:
        return connect(args.redis)
    except ChannelError as exc:
        raise CliError(str(exc)) from None


def _slo(session, args, app: str) -> float:
    import requests as http
    url = f"{args.api.rstrip('/')}/api/v1/namespaces/{quote(args.namespace)}/actions/{quote(app)}?code=false"
    try:
        resp = session.get(url, timeout=10)
    except http.RequestException as exc:
        raise CliError(f"--api {args.api}: cannot read action {app}: {type(exc).__name__}") from None
    if resp.status_code != 200:
        raise CliError(f"--arrivals: app {app!r}: the OpenWhisk API answered HTTP {resp.status_code} for its action")
    try:
        ann = {a["key"]: a["value"] for a in resp.json().get("annotations", [])}
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CliError(f"--api {args.api}: action {app} is not an action document") from None
    slo = ann.get("esg-slo-ms")
    if isinstance(slo, bool) or not isinstance(slo, int | float) or slo <= 0:
        raise CliError(f"--arrivals: app {app!r} has no positive esg-slo-ms annotation (not an ESG app)")
    return float(slo)


def _send(session, args, calls: list[Call]) -> list[Call]:
    """Each call at its time, blocking, from a pool of threads; returns when every call is answered."""
    import requests as http
    base = f"{args.api.rstrip('/')}/api/v1/namespaces/{quote(args.namespace)}/actions/"
    local = threading.local()

    from tqdm import tqdm

    progress = tqdm(total=len(calls), desc="replay", unit="call", mininterval=1.0)
    failed = 0
    lock = threading.Lock()

    def one(c: Call) -> None:
        nonlocal failed
        s = getattr(local, "session", None)
        if s is None:
            s = local.session = http.Session()
            s.auth = session.auth
        try:
            call(s, base, c, args.timeout_s)
        finally:
            with lock:
                failed += not c.ok
                progress.set_postfix(failed=failed, refresh=False)
                progress.update()

    t0 = time.monotonic()
    try:
        with ThreadPoolExecutor(args.concurrency) as pool:
            for c in calls:
                delay = t0 + c.at_s - time.monotonic()
                if delay > 0:
                    time.sleep(delay)
                pool.submit(one, c)
    finally:
        progress.close()
    return calls


def call(session, base: str, c: Call, timeout_s: float) -> None:
    """One blocking call: ``c`` gets its times, activation id, HTTP status and whether it succeeded (an
    activation record whose ``response.success`` is true, OpenWhisk's form of status code 0), else why
    not."""
    import requests as http

    c.sent_ms = time.time() * 1000
    try:
        resp = session.post(base + quote(c.app) + "?blocking=true", json={"seed": int(c.at_s * 1000)},
                            timeout=timeout_s)
    except http.RequestException as exc:
        c.answered_ms = time.time() * 1000
        c.error = f"{type(exc).__name__}: {exc}"[:500]
        return
    c.answered_ms = time.time() * 1000
    c.http_status = resp.status_code
    try:
        body = resp.json() if resp.content else {}
    except ValueError:
        c.error = f"the answer is not JSON: {resp.text[:200]!r}"
        return
    if not isinstance(body, dict):
        c.error = f"the answer is not an object: {str(body)[:200]}"
        return
    c.activation_id = body.get("activationId") if isinstance(body.get("activationId"), str) else None
    response = body.get("response")
    c.ok = resp.status_code == 200 and isinstance(response, dict) and response.get("success") is True
    if c.ok:
        return
    if resp.status_code == 202:
        c.error = "accepted, not answered within the controller's blocking wait (the activation id only)"
    elif isinstance(response, dict):
        result = response.get("result")
        error = result.get("error") if isinstance(result, dict) else None
        c.error = f"activation {response.get('status', 'failed')}: {error if error is not None else result}"[:500]
    else:
        c.error = str(body.get("error") or body)[:500]


def measured(calls: list[Call], slos: dict[str, float], log: list[dict[str, Any]], warmup_s: float
             ) -> tuple[Metrics, Metrics, set[str]]:
    """The measured calls (arriving at or after ``warmup_s``) as the emulator counts them: by the
    scheduler's log (accept to answer) where it has them, and by the client (end to end); and their
    activation ids."""
    requests = {e["id"]: e for e in log if e.get("type") == "request"}
    kept = [c for c in calls if c.at_s >= warmup_s]
    sched, e2e = Metrics(), Metrics()
    for c in kept:
        sched.arrived(c.app)
        e2e.arrived(c.app)
        e2e.outcome(RequestOutcome(c.activation_id or "", c.app, c.sent_ms, c.answered_ms, slos[c.app], c.ok))
        r = requests.get(c.activation_id or "")
        if r is not None:
            sched.outcome(RequestOutcome(r["id"], c.app, r["arrival_ms"], r["finished_ms"], slos[c.app],
                                         bool(r["ok"]) and c.ok, rejected=bool(r.get("rejected"))))
    return sched, e2e, {c.activation_id for c in kept if c.activation_id}


def measure(calls: list[Call], slos: dict[str, float], log: list[dict[str, Any]], warmup_s: float,
            start_ms: float, policy: str, slo: str, load: str) -> tuple[dict, list[dict], list[dict]]:
    """The emulator's metrics of the measured calls (arriving at or after ``warmup_s``): latency from the
    scheduler's log when it has the request, and the client's end-to-end figures beside them."""
    sched, e2e, ids = measured(calls, slos, log, warmup_s)
    ready = ready_ms(log)
    batches = [dict(e, ready_ms=ready.get(e.get("batch_id"))) for e in log
               if e.get("type") == "batch" and any(j in ids for j in e.get("jobs", ()))]
    prices = Prices()
    if calls and log:
        window = (start_ms + warmup_s * 1000, start_ms + max(c.at_s for c in calls) * 1000)
        for (profile, gpu_model), ms in idle_instance_ms(log, *window).items():
            sched.cost_idle += prices.slice_rate(gpu_model) * compute_slices(gpu_model, profile) * ms
        for p in log:
            if p.get("type") == "prewarm" and window[0] <= float(p["sent_ms"]) <= window[1]:
                _charge_prewarm(sched, prices, p)
    for b in batches:
        sched.batches += 1
        sched.jobs += len(b["jobs"])
        sched.cold_starts += bool(b.get("cold"))
        sched.reconfigured_instances += int(b.get("reconfigured") or 0)
        config = Config(b["batch"], b["vcpus"], b["gpu"])
        # the decision log has each batch's time held, not its start-up apart: all of it counts as execution
        sched.cost_exec += prices.rate(b.get("gpu_model") or DEFAULT_GPU_MODEL, config) * (b["done_ms"] - b["sent_ms"])
    duration_s = max(c.at_s for c in calls) if calls else 0.0
    unknown = {k: math.nan for k in ("cost", "cost_exec", "cost_idle", "cost_cold", "cost_mig")}
    s = sched.summary() if log else {**e2e.summary(), **unknown, "cold_starts": 0, "mig_changes": 0,
                                      "prewarms": 0, "mean_batch": 0.0}
    es = e2e.summary()
    failed: dict[str, int] = {}
    for c in calls:
        if c.at_s >= warmup_s and not c.ok:
            failed[c.app] = failed.get(c.app, 0) + 1
    summary = {"policy": policy, "slo": slo, "load": load, "rate_rps": len(calls) / duration_s if duration_s else 0.0,
               **s, "cost_norm_esg": 1.0 if policy == "esg" else math.nan, "sched_overhead_ms": math.nan,
               "e2e_slo_hit_rate": es["slo_hit_rate"], "e2e_p50_ms": es["p50_ms"], "e2e_p99_ms": es["p99_ms"],
               "failed": sum(failed.values())}
    per_app = []
    for app in sorted(slos):
        st, et = (sched if log else e2e).per_app.get(app), e2e.per_app.get(app)
        if st is None or et is None:
            continue
        per_app.append({"policy": policy, "slo": slo, "load": load, "app": app, "requests": st.requests,
                        "slo_hit_rate": st.hits / st.requests if st.requests else 0.0,
                        "p50_ms": _pct(st.latencies_ms, 50), "p99_ms": _pct(st.latencies_ms, 99),
                        "e2e_slo_hit_rate": et.hits / et.requests if et.requests else 0.0,
                        "e2e_p50_ms": _pct(et.latencies_ms, 50), "e2e_p99_ms": _pct(et.latencies_ms, 99),
                        "failed": failed.get(app, 0)})
    return summary, per_app, batches


def prewarm_started(p: dict[str, Any]) -> bool:
    """Whether a pre-warm of the decision log started a worker: its agent said so (``outcome``), or --
    an agent that does not say -- it is taken to have."""
    return p.get("outcome") in (None, "started")


def _charge_prewarm(m: Metrics, prices: Prices, p: dict[str, Any]) -> None:
    """A pre-warm's start-up, as the emulator charges one: only where a worker was started. Its whole
    time held, hop to ready, is its start-up: the cold-start column (the log does not split a MIG
    instance's creation from it). One that found an idle worker there (its keep-alive extended), failed,
    expired or was dropped started nothing: it charges no start-up, only the MIG changes its agent made."""
    reconfigured = p.get("reconfigured")
    m.reconfigured_instances += int(bool(p.get("create"))) if reconfigured is None else int(reconfigured)
    if not prewarm_started(p):
        return
    m.prewarms += 1
    config = Config(1, p["vcpus"], p["gpu"])
    m.cost_cold += (prices.rate(p.get("gpu_model") or DEFAULT_GPU_MODEL, config)
                    * (float(p["done_ms"]) - float(p["sent_ms"])))


def ready_ms(log: list[dict[str, Any]]) -> dict[str, float]:
    """Per batch of the decision log, when the scheduler could first have decided it: the latest of its
    requests' accepts and of the results of their batches answered before it was sent (its
    predecessors'). Sent to answered counts only the batch's own way; ready to answered, less its run,
    is the whole overhead the live path puts on the batch -- the emulator's ``hop_ms``."""
    accepted = {e["id"]: float(e["arrival_ms"]) for e in log if e.get("type") == "request"}
    done: dict[str, list[float]] = {}
    for e in log:
        if e.get("type") == "batch":
            for j in e.get("jobs", ()):
                done.setdefault(j, []).append(float(e["done_ms"]))
    out = {}
    for e in log:
        if e.get("type") != "batch":
            continue
        sent = float(e["sent_ms"])
        times = [max([accepted[j]] + [t for t in done.get(j, ()) if t <= sent]) for j in e.get("jobs", ())
                 if j in accepted]
        if times:
            out[e["batch_id"]] = max(times)
    return out


def idle_instance_ms(log: list[dict[str, Any]], lo_ms: float, hi_ms: float,
                     keep_alive_ms: float = KEEP_ALIVE_MS) -> dict[tuple[str, str], float]:
    """Per (MIG profile, GPU model), the time within [``lo_ms``, ``hi_ms``] that MIG instances were kept
    for idle warm workers, from the decision log, by the emulator's rule (``kept_idle_ms``): a batch's
    worker (or a pre-warmed one, from when it was ready) waits idle on its instance until a batch of its
    function takes it there (the one that would stay longest), its instance is destroyed, a batch stops
    it for its own worker's GPU memory (``evicted``: those whose keep-alive ends first), or its own
    keep-alive runs out (the batch's or pre-warm's ``keep_alive_ms``, else ``keep_alive_ms``); the
    instance's own batches are execution, a pre-warm's start-up is its start-up. A pre-warm that found
    a worker idle there extends that worker's keep-alive from when it was sent (nothing started: the
    instance stays idle); one that started nothing else is left out."""
    events = []
    for e in log:
        if e.get("type") == "batch" and e.get("slice"):
            events.append((float(e["sent_ms"]), 1, e))
            events.append((float(e["done_ms"]), 0, e))
        elif e.get("type") == "prewarm" and e.get("slice") and e.get("ready"):
            if prewarm_started(e):
                events.append((float(e["done_ms"]), 0, e))
            elif e.get("outcome") == "warm":
                events.append((float(e["sent_ms"]), 0, e))
    events.sort(key=lambda x: (x[0], x[1]))
    idle: dict[tuple[str, str], list[tuple[float, float]]] = {}
    busy: dict[tuple[str, str], list[tuple[float, float]]] = {}
    pools: dict[tuple[str, str, str], list[tuple[float, float]]] = {}
    """Idle workers by (node, function, instance): (since, keep-alive) each."""
    model: dict[tuple[str, str], str] = {}
    now = max(events[-1][0], hi_ms) if events else hi_ms   # idle workers left at the end: to the window's end

    def ended(instance: tuple[str, str], worker: tuple[float, float], at: float) -> None:
        since, keep = worker
        idle.setdefault(instance, []).append((since, min(at, since + keep)))

    for t, starting, e in events:
        node, ref = e["node"], e["slice"]
        instance = (node, ref)
        model[instance] = e.get("gpu_model") or DEFAULT_GPU_MODEL
        if starting:
            for victim in e.get("destroyed") or ():
                for key in [k for k in pools if k[0] == node and k[2] == victim]:
                    for worker in pools.pop(key):
                        ended((node, victim), worker, t)
            for function, n in e.get("evicted") or ():   # stopped for this batch's worker's GPU memory
                stopped = pools.get((node, function, ref))
                if stopped:
                    live = sorted((w for w in stopped if w[0] + w[1] >= t), key=lambda w: w[0] + w[1])[:int(n)]
                    for worker in live:   # those whose keep-alive ends first, as the agent and the emulator
                        stopped.remove(worker)
                        ended(instance, worker, t)
            pool = pools.get((node, e["function"], ref))
            if pool:
                live = [w for w in pool if w[0] + w[1] >= t]
                if live:
                    taken = max(live, key=lambda w: w[0] + w[1])
                    pool.remove(taken)
                    ended(instance, taken, t)
        else:
            if e.get("type") == "batch" or prewarm_started(e):
                busy.setdefault(instance, []).append((float(e["sent_ms"]), t))   # a pre-warm's start-up too
            keep = e.get("keep_alive_ms")
            pools.setdefault((node, e["function"], ref), []).append((t, keep_alive_ms if keep is None else float(keep)))
    for (node, _, ref), workers in pools.items():
        for worker in workers:
            ended((node, ref), worker, now)
    out: dict[tuple[str, str], float] = {}
    for instance, spans in idle.items():
        kept = kept_idle_ms(spans, busy.get(instance, []), lo_ms, hi_ms)
        if kept > 0:
            key = (instance[1].split("@")[0], model[instance])
            out[key] = out.get(key, 0.0) + kept
    return out


def _pct(xs: list[float], q: float) -> float:
    import numpy as np
    return float(np.percentile(np.array(xs), q)) if xs else math.nan
