"""``esg status``: what the scheduler believes, read from its Redis.

Per node (its last heartbeat): GPU and MIG layout with each instance busy or idle, vCPUs free, idle warm
workers by function, vCPUs and slice (one a line), the batches running, and the last batch the scheduler dispatched
there (configuration, slice, whether it took a warm worker or paid a cold start or MIG change). Then the
scheduler's AFW queues with their lengths and, for each queue the last step left waiting, why
(``esg:{scope}:status``, refreshed about once a second by the scheduler); the schedulers: which one
leads, with its epoch and lease, and how far behind each standby is; then each app's SLO hit rate
minute by minute over the last :data:`SLO_MINUTES` minutes (the decision log). ``--json`` prints the
same as one JSON object; ``esg up`` serves it as a web page (:mod:`esg_cli.cluster_page`).
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

from esg.mig import is_whole
from esg_cli import checks
from esg_cli.errors import CliError

#: A node whose last heartbeat is older than this is shown as silent.
SILENT_S = 10.0
#: The SLO hit rate per app is shown over this many recent minutes, minute by minute.
SLO_MINUTES = 5
#: The most request entries of the decision log read for it (the newest).
SLO_ENTRIES = 50_000


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("status", help="show what the scheduler believes: nodes, MIG layouts, warm workers, queues",
                       description=__doc__.split("\n\n")[0])
    p.add_argument("--redis", type=checks.redis_url, metavar="URL", help="the scheduler's Redis (env ESG_REDIS)")
    p.add_argument("--topic-prefix", type=checks.topic_prefix, metavar="P", help="(env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", type=checks.controller_id, metavar="C", help="(env ESG_CONTROLLER_ID)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    env = checks.from_env
    args.redis = checks.from_env(args.redis, "ESG_REDIS", checks.redis_url)
    args.topic_prefix = env(args.topic_prefix, "ESG_TOPIC_PREFIX", checks.topic_prefix, "")
    args.controller_id = env(args.controller_id, "ESG_CONTROLLER_ID", checks.controller_id, "0")
    if not args.redis:
        raise CliError("no Redis given: pass --redis URL or set ESG_REDIS")
    import redis

    from agent_channel.connect import ChannelError, connect
    from agent_channel.keys import Keys
    try:
        client = connect(args.redis)
    except ChannelError as exc:
        raise CliError(str(exc)) from None
    try:
        state = gather(client, Keys(args.topic_prefix, args.controller_id), time.time() * 1000)
    except redis.RedisError as exc:
        raise CliError(f"--redis: reading the scheduler's state failed: {type(exc).__name__}") from None
    finally:
        client.close()
    print(json.dumps(state, indent=1, sort_keys=True) if args.json else render(state))
    return 0


def node_names(client, keys) -> list[str]:
    """The nodes known to this deployment: those with an invoker id, and those announced on the hello stream."""
    from agent_channel.keys import FIELD

    names = {(k.decode() if isinstance(k, bytes) else k) for k in client.hkeys(f"esg:{keys.prefix}:invokers")}
    names |= {f.get(FIELD, b"").decode(errors="replace") for _id, f in client.xrange(keys.hello)}
    return sorted(n for n in names if n)


def gather(client, keys, now_ms: float) -> dict[str, Any]:
    from agent_channel import protocol
    from agent_channel.keys import FIELD
    from controller_plugin.decisions import decisions_key, status_key

    nodes: dict[str, Any] = {}
    for name in node_names(client, keys):
        newest = client.xrevrange(keys.heartbeats(name), count=1)
        try:
            hb = protocol.decode(newest[0][1][FIELD]) if newest else None
        except (KeyError, protocol.ProtocolError):
            continue
        if not isinstance(hb, protocol.Heartbeat) or hb.node != name:
            continue
        nodes[hb.node] = {
            "age_s": round((now_ms - hb.sent_ms) / 1000, 1), "gpu": hb.gpu_model, "draining": hb.draining,
            "vcpus_free": hb.vcpus_free, "vcpus_total": hb.vcpus_total,
            "slices": [{"slice": f"{s.ref.profile}@{s.ref.start}", "busy": s.busy} for s in hb.slices],
            "idle_workers": [{"function": w.function, "vcpus": w.vcpus, "count": w.count,
                              "slice": None if w.slice is None else f"{w.slice.profile}@{w.slice.start}"}
                             for w in hb.idle],
            "warm_workers": _warm(hb.warm),
            "running": len(hb.running), "last_batch": None}
    for _id, fields in client.xrevrange(decisions_key(keys.scope), count=2000):
        try:
            e = json.loads(fields[FIELD])
        except (KeyError, ValueError):
            continue
        node = nodes.get(e.get("node")) if e.get("type") == "batch" else None
        if node is not None and node["last_batch"] is None:
            node["last_batch"] = {k: e.get(k) for k in ("function", "batch", "vcpus", "slice", "warm", "cold",
                                                        "reconfigured", "done_ms")}
            node["last_batch"]["why"] = _why(e)
    raw = client.get(status_key(keys.scope))
    sched = json.loads(raw) if raw else {}
    return {"nodes": dict(sorted(nodes.items())), "queues": sched.get("queues", {}),
            "waiting": sched.get("waiting", {}), "scheduler_age_s":
            round((now_ms - sched["t_ms"]) / 1000, 1) if "t_ms" in sched else None,
            "schedulers": schedulers(client, keys, now_ms),
            "slo": slo_by_minute(client, decisions_key(keys.scope), now_ms)}


def schedulers(client, keys, now_ms: float) -> dict[str, Any]:
    """The lease (leader, epoch, ms left) and every scheduler that said what it is in the last 10 s."""
    from controller_plugin.lease import epoch_of, holder_of, leader_key
    from controller_plugin.service import STATUS_STALE_S, schedulers_key

    token, ttl = client.get(leader_key(keys.scope)), client.pttl(leader_key(keys.scope))
    out: list[dict[str, Any]] = []
    for holder, raw in sorted(client.hgetall(schedulers_key(keys.scope)).items()):
        try:
            st = json.loads(raw)
        except ValueError:
            continue
        if now_ms - int(st.get("t_ms", 0)) > STATUS_STALE_S * 1000:
            continue
        out.append({"holder": holder.decode() if isinstance(holder, bytes) else holder, "name": st.get("name"),
                    "role": st.get("role"), "lag_ms": st.get("lag_ms"), "synced": bool(st.get("synced"))})
    return {"leader": holder_of(token), "epoch": epoch_of(token), "lease_ms_left": max(0, int(ttl)) if token else 0,
            "members": out}


def _warm(warm) -> list[dict[str, str]]:
    """A heartbeat's warm workers as the (function, configuration) kinds it holds (it does not count them)."""
    return [{"function": f, "config": c.label()} for f, c in warm]


def slo_by_minute(client, key: str, now_ms: float, minutes: int = SLO_MINUTES) -> dict[str, Any]:
    """Per app, the requests the scheduler answered in each of the last ``minutes`` minutes (oldest first)
    and how many met their SLO (the decision log's ``request`` entries; a rejected one is a miss)."""
    from agent_channel.keys import FIELD

    since = int(now_ms) - minutes * 60_000
    out: dict[str, Any] = {}
    for _id, fields in client.xrevrange(key, "+", f"{since}-0", count=SLO_ENTRIES):
        try:
            e = json.loads(fields[FIELD])
            if e.get("type") != "request":
                continue
            finished, app = float(e["finished_ms"]), str(e["app"])
            hit = bool(e.get("ok")) and finished - float(e["arrival_ms"]) <= float(e["slo_ms"])
        except (KeyError, ValueError, TypeError):
            continue
        i = minutes - 1 - int((now_ms - finished) // 60_000)
        if not 0 <= i < minutes:
            continue
        row = out.setdefault(app, {"calls": [0] * minutes, "hits": [0] * minutes})
        row["calls"][i] += 1
        row["hits"][i] += hit
    return dict(sorted(out.items()))


def _why(e: dict[str, Any]) -> str:
    """How the placement was chosen, in ESG_Dispatch's terms."""
    if e.get("warm") and not e.get("create"):
        why = "an idle warm worker on an existing slice (pass 1)"
    elif e.get("create") or e.get("destroy"):
        why = f"MIG change planned ({int(e.get('create', False)) + int(e.get('destroy') or 0)} instance(s))"
    else:
        why = "no warm worker: a new one on an existing slice or CPU"
    if e.get("cold") and e.get("warm"):
        why += "; the worker was gone: started cold"
    if e.get("reconfigured") and not (e.get("create") or e.get("destroy")):
        why += "; the slice was gone: carved"
    return why


def render(state: dict[str, Any]) -> str:
    lines = []
    if not state["nodes"]:
        lines.append("no heartbeats: no agent has reported to this Redis")
    for name, n in state["nodes"].items():
        silent = f", SILENT {n['age_s']:g} s" if n["age_s"] > SILENT_S else ""
        lines.append(f"{name}: {n['gpu'] or 'CPU only'}, vCPUs {n['vcpus_free']}/{n['vcpus_total']} free, "
                     f"{n['running']} batch(es) running{', draining' if n['draining'] else ''}{silent}")
        layout = ", ".join(f"{s['slice']} {'busy' if s['busy'] else 'idle'}" for s in n["slices"]) or "none"
        lines.append(f"  {'whole GPU, no MIG' if is_whole(n['gpu']) else 'MIG'}: {layout}")
        lines.append(f"  idle warm workers:{'' if n['idle_workers'] else ' none'}")
        lines += [f"    {w['function']} x{w['count']} ({w['vcpus']}c, {w['slice'] or 'CPU'})"
                  for w in n["idle_workers"]]
        b = n["last_batch"]
        if b:
            lines.append(f"  last batch: {b['function']} b{b['batch']}/{b['vcpus']}c/{b['slice'] or 'CPU'}: {b['why']}")
    sc = state.get("schedulers") or {}
    if sc.get("leader"):
        lines.append(f"leader: {sc['leader']}, epoch {sc['epoch']} (lease {sc['lease_ms_left']} ms left)")
    else:
        lines.append("leader: none (no scheduler holds the lease)")
    for m in sc.get("members", []):
        if m["role"] == "standby":
            lag = "not reading yet" if m["lag_ms"] is None else f"{m['lag_ms']} ms behind"
            lines.append(f"  standby {m['name']} ({m['holder']}): {lag}, {'synced' if m['synced'] else 'NOT synced'}")
    if state["scheduler_age_s"] is None:
        lines.append("scheduler: no status published")
    else:
        lines.append(f"scheduler (status {state['scheduler_age_s']:g} s old): AFW queues")
        for q, n in sorted(state["queues"].items()):
            why = state["waiting"].get(q)
            lines.append(f"  {q}: {n} waiting" + (f" -- {why}" if why else ""))
        if not state["queues"]:
            lines.append("  all empty")
    slo = state.get("slo") or {}
    lines.append(f"SLO hit rate, last {SLO_MINUTES} minutes (oldest first):" + ("" if slo else " no requests"))
    for app, row in slo.items():
        calls, hits = sum(row["calls"]), sum(row["hits"])
        by_minute = " ".join("-" if c == 0 else f"{h / c:.2f}" for c, h in zip(row["calls"], row["hits"]))
        lines.append(f"  {app}: {hits / calls:.3f} of {calls} ({by_minute})")
    return "\n".join(lines)
