"""Live against emulated, on the same arrivals: the pieces of ``benchmarks/bench_live_vs_emulated.py`` and
of its short version in the test suite.

1. :func:`write_arrivals` -- the workload generator writes an arrivals file;
2. :func:`twin_cluster` -- ``esg up --runner twin --serve --no-online-profiles`` (a 2-node A100 twin cluster
   by default, SLOs at the same level, planning with the same fixed tables as the emulator);
3. ``esg replay --arrivals FILE`` against it (:func:`replay`), and the live path's overhead per batch
   measured from the scheduler's decision log (:func:`live_hops_ms`, written by :func:`write_live_hops`);
4. :func:`emulate_seeds` -- the emulator runs ESG on the same file (what ``esg emulate --arrivals FILE
   --hop-samples HOPS`` writes) with those overheads, over a few seeds (its own spread), recording each
   measured dispatch's configuration;
5. :func:`compare` -- hit rates, cost, the share of dispatches whose configuration (function, batch,
   vCPUs, MIG profile) match, and of those whose placement (the MIG instance's position too) does.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import json
import math
import re
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from esg.defaults import HOP_MS
from esg.emulator.workload import generate
from esg_cli import emulate as emulate_cli
from esg_cli.openwhisk_standin import GUEST_KEY
from esg_files import load_profile, write_hop_samples
from invoker_agent.lifetime import die_with_parent
from invoker_agent.twin import twin_output

ROOT = Path(__file__).resolve().parent.parent

ConfigKey = tuple[str, int, int, str | None]


AGREEMENT_RATE_RPS = 8.4
"""Requests per second of the agreement run: what the 2-node cluster's light level was before the load
levels counted every compute slice, and a rate a 2-core machine drives through the live path."""


@dataclass
class Emulated:
    summary: dict[str, Any]
    per_app: list[dict[str, Any]]
    dispatches: list[ConfigKey]


TABLES = ROOT / "profiles" / "tables" / "a100"
"""The tables a twin cluster of ``esg up --fake-gpu A100-40GB`` runs with."""


def emulate_args(out: Path, arrivals: Path, nodes: int, vcpus: int, slo: str, load: str, duration_s: float,
                 warmup_s: float, seed: int, hop_ms: float, hop_log_sd: float = 0.0,
                 profiles: Path | None = None) -> argparse.Namespace:
    """The namespace ``esg emulate`` would parse for this run (one ESG cell), with the twin's tables
    (:func:`twin_profiles`, written under ``out``) unless ``profiles`` names others."""
    profiles = profiles if profiles is not None else twin_profiles(TABLES, Path(out) / "twin-profiles")
    parser = argparse.ArgumentParser()
    sub = parser.add_subparsers()
    emulate_cli.register(sub)
    return parser.parse_args(["emulate", "--policies", "esg", "--slo", slo, "--load", load, "--nodes", str(nodes),
                              "--vcpus", str(vcpus), "--duration-s", f"{duration_s:g}", "--warmup-s",
                              f"{warmup_s:g}", "--seed", str(seed), "--hop-ms", f"{hop_ms:g}", "--hop-log-sd", f"{hop_log_sd:g}",
                              # planned with what the live scheduler plans with by default (esg up passes none)
                              "--stage-overhead-ms", f"{HOP_MS:g}",
                              "--profiles", str(profiles), "--out", str(out),
                              "--no-plots", "--jobs", "1", "--write-arrivals", str(arrivals)])


def twin_profiles(tables: Path, out: Path) -> Path:
    """The profile tables ``tables`` as the twin cluster runs them, in ``out``: each function's
    ``output_bytes`` the size of what a twin worker answers (:func:`invoker_agent.twin.twin_output`), not
    the real model's output. The live hops measured on a twin cluster include its (small) data passing;
    with the profiled sizes the emulator would charge reads and writes of up to 600 KB on top of them
    that the twin never made (about 2 points of hit rate on the agreement run)."""
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted(Path(tables).glob("*.json")):
        prof = load_profile(path)
        size = max(len(json.dumps(twin_output(prof.function, e.config, 0), separators=(",", ":")).encode())
                   for e in prof.entries)
        (out / path.name).write_text(json.dumps(dict(prof.to_dict(), output_bytes=size), indent=1) + "\n")
    return out


def write_live_hops(decisions: list[dict[str, Any]], path: Path) -> Path:
    """The live run's hops (:func:`live_hops_ms`) as a hop-samples file for ``esg emulate --hop-samples``:
    the emulator then charges each batch one of the overheads the live path measured, not a log-normal
    fitted to them (whose lower tail is too long and whose body too short, docs/live-vs-emulated.md)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    hops = [max(0.0, h) for h in live_hops_ms(decisions)]   # the log's whole milliseconds can put one below 0
    if not hops:
        raise RuntimeError("the live run measured no hop (no warm batch placed at once)")
    write_hop_samples(path, hops, "ms, the live path's overhead per batch (esg_cli.agreement.live_hops_ms)")
    return path


def write_arrivals(args: argparse.Namespace, rate_rps: float | None = None) -> Path:
    """Write the arrivals of ``args``'s load level (or of a fixed mean rate) to ``args.write_arrivals``.

    The load levels scale with every GPU compute slice of the emulated cluster; a live twin cluster on a
    small machine is driven through a real scheduler, whose own CPU bounds the rate it can take, so the
    agreement run uses :data:`AGREEMENT_RATE_RPS` unless told otherwise."""
    emulate_cli.check_args(args)
    base = {a.name: a for a in emulate_cli._check_apps(args.apps)}
    if rate_rps is None:
        requests = emulate_cli.workload(args, args.load, base)[0]
    else:
        requests = generate(sorted(base), rate_rps, args.duration_s, np.random.default_rng([args.seed, 0]))
    emulate_cli.write_arrivals(args.write_arrivals, requests)
    return Path(args.write_arrivals)


def emulate(args: argparse.Namespace, rate_rps: float | None = None, write: bool = True) -> Emulated:
    """ESG on the arrivals file ``args.write_arrivals`` (written first unless ``write`` is false), as
    ``esg emulate --arrivals`` runs it, recording the configuration of every dispatch with a measured
    request."""
    if write:
        write_arrivals(args, rate_rps)
    replay_args = argparse.Namespace(**{**vars(args), "arrivals": args.write_arrivals, "write_arrivals": None})
    seen: list[ConfigKey] = []

    class Recording(emulate_cli.Emulation):
        def _start(self, d, now, decision_ms):
            if any(j.request_id in self._measured for j in d.jobs):
                seen.append(_key(d.function, d.config.batch, d.config.vcpus,
                                 None if d.fit.slice is None else f"{d.fit.slice.profile}@{d.fit.slice.start}"))
            super()._start(d, now, decision_ms)

    real = emulate_cli.Emulation
    emulate_cli.Emulation = Recording
    try:
        row, per_app, _ = emulate_cli.run_cell(replay_args, ("esg", args.slo, Path(args.write_arrivals).stem), None)
    finally:
        emulate_cli.Emulation = real
    return Emulated(row, per_app, seen)


def emulate_seeds(args: argparse.Namespace, seeds: int) -> list[Emulated]:
    """:func:`emulate` on the arrivals already written, once per seed ``args.seed .. args.seed + seeds - 1``
    (the execution-time noise and hop draws differ): the emulator's own spread on these arrivals."""
    return [emulate(argparse.Namespace(**{**vars(args), "seed": args.seed + k}), write=False) for k in range(seeds)]


def mean_emulated(runs: list[Emulated]) -> Emulated:
    """The runs' summary and per-app hit rates averaged (the first run's dispatches), with the spread of
    hit rate and cost (``slo_hit_rate_sd``, ``cost_sd``)."""
    first = runs[0]
    summary = dict(first.summary)
    for k in ("slo_hit_rate", "cost", "cost_idle", "cold_starts", "mig_changes"):
        xs = [float(r.summary[k]) for r in runs]
        summary[k] = statistics.fmean(xs)
        summary[f"{k}_sd"] = statistics.pstdev(xs)
    per_app = []
    for row in first.per_app:
        rows = [p for r in runs for p in r.per_app if p["app"] == row["app"]]
        per_app.append(dict(row, slo_hit_rate=statistics.fmean(float(p["slo_hit_rate"]) for p in rows)))
    return Emulated(summary, per_app, first.dispatches)


def _key(function: str, batch: int, vcpus: int, slice_: str | None) -> ConfigKey:
    return (function.rsplit("/", 1)[-1], int(batch), int(vcpus), slice_)


def _config(key: ConfigKey) -> ConfigKey:
    """A dispatch's configuration (function, batch, vCPUs, MIG profile) without its instance's position:
    which of seven 1g instances a function's pool sits on follows the order start-up created them in."""
    return key[:3] + (None if key[3] is None else key[3].split("@", 1)[0],)


@dataclass
class Cluster:
    api: str
    redis: str
    process: subprocess.Popen


@contextmanager
def twin_cluster(logs: Path, nodes: int = 2, vcpus: int = 16, slo: str = "moderate",
                 timeout_s: float = 180.0, online_profiles: bool = False) -> Iterator[Cluster]:
    """``esg up --runner twin --serve`` until the block ends (then SIGTERM: it stops what it started); its
    scheduler plans with the fixed tables (``--no-online-profiles``) unless ``online_profiles``."""
    logs.mkdir(parents=True, exist_ok=True)
    out = open(logs / "up.out", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "esg_cli.main", "up", "--runner", "twin", "--nodes", str(nodes),
                             "--vcpus", str(vcpus), "--fake-gpu", "A100-40GB", "--slo", slo, "--requests", "0",
                             "--serve", "--logs", str(logs)] + ([] if online_profiles else ["--no-online-profiles"]),
                            cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, preexec_fn=die_with_parent())
    try:
        deadline = time.monotonic() + timeout_s
        text = ""
        while "serving;" not in text:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"esg up did not come up:\n{(logs / 'up.out').read_text()}")
            time.sleep(0.5)
            text = (logs / "up.out").read_text()
        api = re.search(r"OpenWhisk REST stand-in\s+pid \d+\s+(\S+)", text).group(1)
        redis_url = (logs / "redis" / "observer" / "redis.url").read_text().strip()   # esg up's read-only user
        yield Cluster(api, redis_url, proc)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        out.close()


def replay(cluster: Cluster, arrivals: Path, out: Path, warmup_s: float) -> dict[str, Any]:
    """``esg replay`` of ``arrivals`` against the cluster: what it wrote (:func:`read_live`), with the whole
    run's start-up counts read from the scheduler's decision log (``startup``)."""
    from esg_cli.main import main
    rc = main(["replay", "--arrivals", str(arrivals), "--api", cluster.api, "--auth", GUEST_KEY, "--redis",
               cluster.redis, "--warmup-s", f"{warmup_s:g}", "--out", str(out)])
    if rc != 0:
        raise RuntimeError(f"esg replay exited {rc}")
    startup = live_startup(cluster.redis)
    (out / "startup.json").write_text(json.dumps(dataclasses.asdict(startup)) + "\n")
    return dict(read_live(out), startup=startup)


@dataclass(frozen=True)
class StartUp:
    """What a whole run (warm-up included) started: workers (for a batch or ahead of one) and MIG
    instances created or destroyed."""

    workers: float
    mig_changes: float


def live_startup(redis_url: str) -> StartUp:
    """The whole live run's :class:`StartUp`, from the scheduler's decision log: batches that started their
    worker cold, pre-warms that started one, and the MIG instances the agents changed for either."""
    from agent_channel.connect import connect
    from controller_plugin.decisions import read_decisions
    client = connect(redis_url)
    try:
        log = [e for key in client.scan_iter("esg:*:decisions") for e in read_decisions(client, key)]
    finally:
        client.close()
    started = [e for e in log if (e.get("type") == "batch" and e.get("cold"))
               or (e.get("type") == "prewarm" and e.get("outcome") == "started")]
    changed = sum(int(e.get("reconfigured") or 0) for e in log if e.get("type") in ("batch", "prewarm"))
    return StartUp(len(started), changed)


def emulated_startup(args: argparse.Namespace, seeds: int) -> StartUp:
    """The same counts for the emulator's runs of ``args`` (mean over the seeds): each run again with no
    warm-up, so that every batch and pre-warm is counted (the decisions are the same; only what is
    measured changes)."""
    runs = emulate_seeds(argparse.Namespace(**{**vars(args), "warmup_s": 0.0}), seeds)
    return StartUp(statistics.fmean(float(r.summary["cold_starts"]) + float(r.summary["prewarms"]) for r in runs),
                   statistics.fmean(float(r.summary["mig_changes"]) for r in runs))


def read_live(out: Path) -> dict[str, Any]:
    with open(out / "summary.csv") as fh:
        summary = next(csv.DictReader(fh))
    with open(out / "per_app.csv") as fh:
        per_app = list(csv.DictReader(fh))
    with open(out / "decisions.csv") as fh:
        decisions = list(csv.DictReader(fh))
    return {"summary": summary, "per_app": per_app, "decisions": decisions}


def config_match(live: list[ConfigKey], emulated: list[ConfigKey]) -> float:
    """The share of dispatches whose key the other run chose as often: the multiset intersection over the
    larger of the two counts."""
    a, b = Counter(live), Counter(emulated)
    n = max(sum(a.values()), sum(b.values()))
    return sum((a & b).values()) / n if n else 1.0


def live_hops_ms(decisions: list[dict[str, Any]]) -> list[float]:
    """The live path's overhead per batch, as the emulator's ``hop_ms`` charges it: from the moment the
    scheduler could decide the batch (its request accepted, its predecessors answered: ``ready_ms``) to
    its answer in the scheduler, less the agent's run; over warm batches with no MIG change that the
    step which queued them placed at once (queueing is the emulator's to model, not a hop)."""
    return [float(d["done_ms"]) - float(d["ready_ms"]) - float(d["run_ms"]) for d in decisions
            if d.get("cold") in ("False", False) and str(d.get("reconfigured")) == "0" and d.get("run_ms")
            and d.get("ready_ms") not in (None, "") and _at_once(d)]


def live_hop_ms(decisions: list[dict[str, Any]]) -> float:
    """The median of :func:`live_hops_ms` (NaN: no such batch): the emulator's ``hop_ms``."""
    hops = live_hops_ms(decisions)
    return statistics.median(hops) if hops else float("nan")


def live_hop_log_sd(decisions: list[dict[str, Any]]) -> float:
    """The spread of :func:`live_hops_ms` as a log-normal's (the emulator's ``hop_log_sd``), read from the
    10th and 90th percentiles (robust to the few batches a core's wait made very long): ln(p90/p10) /
    (2 x 1.2816)."""
    hops = sorted(h for h in live_hops_ms(decisions) if h > 0)
    if len(hops) < 10:
        return 0.0
    p10, p90 = np.percentile(hops, 10), np.percentile(hops, 90)
    return float(math.log(p90 / p10) / (2 * 1.2816))


def _at_once(d: dict[str, Any]) -> bool:
    """Placed by the step that queued its last job (a log without the steps' times: assumed)."""
    if d.get("decided_ms") in (None, "") or d.get("enqueued_ms") in (None, ""):
        return True
    return float(d["decided_ms"]) <= float(d["enqueued_ms"])


def sent_hop_ms(decisions: list[dict[str, Any]]) -> float:
    """The batch's own way only: sent to answered, less the agent's run (median, same batches)."""
    hops = [float(d["done_ms"]) - float(d["sent_ms"]) - float(d["run_ms"]) for d in decisions
            if d.get("cold") in ("False", False) and str(d.get("reconfigured")) == "0" and d.get("run_ms")]
    return statistics.median(hops) if hops else float("nan")


def compare(emulated: Emulated, live: dict[str, Any]) -> dict[str, Any]:
    es, ls = emulated.summary, live["summary"]
    live_keys = [_key(d["function"], d["batch"], d["vcpus"], d["slice"] or None) for d in live["decisions"]]
    e_cost, l_cost = float(es["cost"]), float(ls["cost"])
    return {
        "requests": int(es["requests"]),
        "emulated_hit_rate": float(es["slo_hit_rate"]), "live_hit_rate": float(ls["slo_hit_rate"]),
        "emulated_hit_rate_sd": float(es.get("slo_hit_rate_sd", 0.0)),
        "emulated_cost_sd": float(es.get("cost_sd", 0.0)),
        "emulated_cost_idle": float(es["cost_idle"]), "live_cost_idle": float(ls["cost_idle"]),
        "live_e2e_hit_rate": float(ls["e2e_slo_hit_rate"]),
        "hit_rate_diff_points": 100 * (float(ls["slo_hit_rate"]) - float(es["slo_hit_rate"])),
        "emulated_cost": e_cost, "live_cost": l_cost,
        "cost_diff_rel": (l_cost - e_cost) / e_cost if e_cost else float("nan"),
        "emulated_dispatches": len(emulated.dispatches), "live_dispatches": len(live_keys),
        "config_match": config_match([_config(k) for k in live_keys], [_config(k) for k in emulated.dispatches]),
        "placement_match": config_match(live_keys, emulated.dispatches),
        "emulated_cold_starts": int(es["cold_starts"]), "live_cold_starts": int(ls["cold_starts"]),
        "emulated_mig_changes": int(es["mig_changes"]), "live_mig_changes": int(ls["mig_changes"]),
        "per_app": {r["app"]: {"emulated": float(e["slo_hit_rate"]), "live": float(r["slo_hit_rate"])}
                    for r in live["per_app"] for e in emulated.per_app if e["app"] == r["app"]},
    }


def write_report(result: dict[str, Any], out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "agreement.json").write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")


def plot(result: dict[str, Any], path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    apps = sorted(result["per_app"])
    x = np.arange(len(apps) + 1)
    emu = [result["per_app"][a]["emulated"] for a in apps] + [result["emulated_hit_rate"]]
    live = [result["per_app"][a]["live"] for a in apps] + [result["live_hit_rate"]]
    fig, ax = plt.subplots(figsize=(8, 3.5))
    ax.bar(x - 0.2, emu, 0.4, label="emulated")
    ax.bar(x + 0.2, live, 0.4, label="live (twin cluster)")
    ax.set_xticks(x, [a.replace("-", "-\n", 1) for a in apps] + ["all"], fontsize=7)
    ax.set_ylabel("SLO hit rate")
    ax.set_ylim(0, 1)
    ax.set_title(f"ESG live vs emulated, same arrivals; cost live/emulated "
                 f"{1 + result['cost_diff_rel']:.2f}, configurations matching {result['config_match']:.0%}",
                 fontsize=8)
    ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)

