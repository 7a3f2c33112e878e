"""Readiness checks for the ESG containers: Docker Compose healthchecks and Kubernetes probes run this.

    healthcheck.py scheduler --metrics URL
        ready when the scheduler serves its Prometheus metrics (``esg scheduler --metrics-port``) and says
        it is ready (``esg_scheduler_ready 1``): it leads, or it stands by synced enough to take over within
        seconds. A standby that is behind is not ready, so a rolling update waits for the new scheduler
        to be a warm standby before it stops the old one.
    healthcheck.py agent --controller URL [--name NODE]
        ready when OpenWhisk's controller lists this node's invoker as ``up`` (``GET URL/invokers``): the
        agent heartbeats, the scheduler pings ``health`` for it under the node's name, and the
        controller's health test action came back. ``NODE`` defaults to ``$ESG_AGENT_NAME``.
    healthcheck.py alive --file PATH [--max-age-s S]
        alive when the agent's heartbeat thread renewed PATH (``esg agent --alive-file``) within the last
        S seconds (default 30): a liveness probe that asks no other service, so a controller, Redis or
        Kafka outage does not get healthy agents restarted.

Exit 0 when ready, 1 when not (one line saying why), 2 on bad arguments. Standard library only, so a
probe costs one short Python start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import urllib.error
import urllib.request

TIMEOUT_S = 3.0


class NotReady(Exception):
    pass


def fetch(url: str) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=TIMEOUT_S) as r:
            return r.read()
    except urllib.error.HTTPError as exc:
        raise NotReady(f"{url}: HTTP {exc.code}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise NotReady(f"{url}: {getattr(exc, 'reason', exc)}") from None


def metric(body: str, name: str) -> float | None:
    """The value of the unlabelled sample ``name`` in a Prometheus text exposition (None: absent)."""
    for line in body.splitlines():
        if line.startswith(name + " "):
            try:
                return float(line.split()[1])
            except (IndexError, ValueError):
                return None
    return None


def scheduler_ready(metrics_url: str) -> str:
    body = fetch(metrics_url).decode(errors="replace")
    if "esg_agents_alive" not in body:
        raise NotReady(f"{metrics_url}: no esg_agents_alive metric")
    if metric(body, "esg_scheduler_ready") != 1:
        lag = metric(body, "esg_standby_lag_seconds")
        raise NotReady(f"{metrics_url}: standing by, not synced yet (lag {lag if lag is not None else '?'} s)")
    return "leading" if metric(body, "esg_leader") == 1 else "standing by, synced"


def invoker_states(controller_url: str) -> dict[str, str]:
    """``GET /invokers``: ``{"invoker0/<uniqueName>/<displayedName>": "up" | "unhealthy" | ...}``."""
    url = controller_url.rstrip("/") + "/invokers"
    try:
        states = json.loads(fetch(url))
    except ValueError:
        raise NotReady(f"{url}: not JSON") from None
    if not isinstance(states, dict):
        raise NotReady(f"{url}: expected a JSON object")
    return states


def agent_ready(controller_url: str, node: str) -> str:
    states = invoker_states(controller_url)
    mine = {k: v for k, v in states.items() if k.split("/")[1:2] == [node]}
    if not mine:
        raise NotReady(f"the controller lists no invoker for node {node!r} yet")
    invoker, state = next(iter(mine.items()))
    if state != "up":
        raise NotReady(f"{invoker} is {state}")
    return f"{invoker} is up"


def agent_alive(path: str, max_age_s: float) -> str:
    try:
        age = time.time() - os.stat(path).st_mtime
    except OSError as exc:
        raise NotReady(f"{path}: {exc.strerror or exc}") from None
    if age > max_age_s:
        raise NotReady(f"{path} last renewed {age:.0f} s ago (more than {max_age_s:g} s)")
    return f"heartbeat thread turned {age:.0f} s ago"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="healthcheck.py", description=__doc__.split("\n\n")[0])
    sub = p.add_subparsers(dest="what", required=True)
    s = sub.add_parser("scheduler")
    s.add_argument("--metrics", required=True, metavar="URL")
    a = sub.add_parser("agent")
    a.add_argument("--controller", required=True, metavar="URL")
    a.add_argument("--name", default=os.environ.get("ESG_AGENT_NAME"), metavar="NODE")
    v = sub.add_parser("alive")
    v.add_argument("--file", required=True, metavar="PATH")
    v.add_argument("--max-age-s", type=float, default=30.0, metavar="S")
    args = p.parse_args(argv)
    try:
        if args.what == "scheduler":
            said = scheduler_ready(args.metrics)
        elif args.what == "alive":
            said = agent_alive(args.file, args.max_age_s)
        else:
            if not args.name:
                p.error("no node name: pass --name NODE or set ESG_AGENT_NAME")
            said = agent_ready(args.controller, args.name)
    except NotReady as exc:
        print(f"not ready: {exc}")
        return 1
    print(f"ready: {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
