"""The live cluster page: what ``esg status`` prints, as a small read-only web page.

``GET /`` is an HTML page (it reloads itself every :data:`REFRESH_S` seconds) drawing, per node, its
GPU's MIG layout -- each instance where it sits on the GPU's memory slices, busy or idle -- with its
warm workers, then the AFW queues with why the waiting ones wait, and each app's SLO hit rate minute by
minute over the last minutes. ``GET /status.json`` is the same state as ``esg status --json``. Both
are read from the scheduler's Redis at each request (:func:`esg_cli.status.gather`): the page shows
what the scheduler believes, nothing of its own. It serves on loopback by default and answers only
``GET``; no script runs in it.
"""

from __future__ import annotations

import html
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from esg_cli import status

REFRESH_S = 2
#: Width of a GPU drawing, and of one memory slice of it, in pixels.
GPU_WIDTH = 560
ROW = 34


def _esc(value: Any) -> str:
    return html.escape(str(value), quote=True)


def _memory_slices(gpu: str | None) -> tuple[int, dict[str, int]]:
    """The GPU's memory slices and each MIG profile's width in them (a model the tables lack: 8, and
    every instance as wide as it is said to be where the profile is known, else the whole GPU)."""
    from esg.errors import MigError
    from esg.mig import geometry
    try:
        geo = geometry(gpu or "")
    except (MigError, KeyError, ValueError):
        return 8, {}
    return geo.memory_slices, {name: p.memory_slices for name, p in geo.profiles.items()}


def mig_svg(node: dict[str, Any]) -> str:
    """One node's GPU as a bar of memory slices with each MIG instance drawn where it sits."""
    total, widths = _memory_slices(node.get("gpu"))
    unit = GPU_WIDTH / total
    parts = [f'<svg class="gpu" width="{GPU_WIDTH + 2}" height="{ROW + 2}" role="img" '
             f'aria-label="MIG layout of {_esc(node.get("gpu") or "no GPU")}">',
             f'<rect x="1" y="1" width="{GPU_WIDTH}" height="{ROW}" class="free"/>']
    for i in range(1, total):
        parts.append(f'<line x1="{1 + i * unit:.1f}" y1="1" x2="{1 + i * unit:.1f}" y2="{ROW + 1}" class="grid"/>')
    for s in node.get("slices", ()):
        profile, _, start_text = str(s["slice"]).partition("@")
        try:
            start = int(start_text)
        except ValueError:
            start = 0
        width = widths.get(profile, total - start)
        state = "busy" if s["busy"] else "idle"
        x, w = 1 + start * unit, max(1.0, width * unit - 2)
        parts.append(f'<g class="instance {state}" data-slice="{_esc(s["slice"])}" data-state="{state}">'
                     f'<title>{_esc(s["slice"])} {state}</title>'
                     f'<rect x="{x + 1:.1f}" y="3" width="{w:.1f}" height="{ROW - 4}" rx="3"/>'
                     f'<text x="{x + w / 2 + 1:.1f}" y="{ROW / 2 + 5:.0f}">{_esc(profile)}</text></g>')
    parts.append("</svg>")
    return "".join(parts)


def _node(name: str, n: dict[str, Any]) -> str:
    silent = f" · SILENT {n['age_s']:g} s" if n["age_s"] > status.SILENT_S else ""
    head = (f'<h2>{_esc(name)} <small>{_esc(n["gpu"] or "CPU only")} · vCPUs {n["vcpus_free"]}/{n["vcpus_total"]} '
            f'free · {n["running"]} batch(es) running{" · draining" if n["draining"] else ""}{silent}</small></h2>')
    drawing = mig_svg(n) if n["gpu"] else "<p>no GPU</p>"
    warm = n.get("warm_workers", ())
    items = "".join(f'<li class="worker">{_esc(w["function"])} <code>{_esc(w["config"])}</code></li>'
                    for w in warm) or "<li>none</li>"
    idle = sum(w["count"] for w in n["idle_workers"])
    last = n.get("last_batch")
    last_html = (f'<p class="last">last batch: {_esc(last["function"])} b{last["batch"]}/{last["vcpus"]}c/'
                 f'{_esc(last["slice"] or "CPU")}: {_esc(last["why"])}</p>') if last else ""
    return (f'<section class="node" data-node="{_esc(name)}">{head}{drawing}'
            f'<h3>warm workers: {len(warm)} kinds (function, configuration), {idle} worker(s) idle now</h3>'
            f'<ul class="workers">{items}</ul>{last_html}</section>')


def _queues(state: dict[str, Any]) -> str:
    if state["scheduler_age_s"] is None:
        return "<p>the scheduler has published no status</p>"
    rows = "".join(f'<tr data-queue="{_esc(q)}"><td>{_esc(q)}</td><td class="n">{n}</td>'
                   f'<td>{_esc(state["waiting"].get(q, ""))}</td></tr>'
                   for q, n in sorted(state["queues"].items()))
    return (f'<table class="queues"><tr><th>AFW queue (app/function)</th><th>waiting</th><th>why</th></tr>{rows}'
            f'</table>' if rows else "<p>all AFW queues empty</p>")


def _slo(state: dict[str, Any]) -> str:
    slo = state.get("slo") or {}
    if not slo:
        return f"<p>no request answered in the last {status.SLO_MINUTES} minutes</p>"
    heads = "".join(f"<th>{k}-{k + 1} min ago</th>" for k in range(status.SLO_MINUTES - 1, -1, -1))
    rows = []
    for app, row in slo.items():
        calls, hits = sum(row["calls"]), sum(row["hits"])
        cells = "".join("<td class='n'>-</td>" if c == 0 else
                        f"<td class='n' style='background:hsl({120 * h / c:.0f},70%,85%)'>{h / c:.2f}</td>"
                        for c, h in zip(row["calls"], row["hits"]))
        rows.append(f'<tr data-app="{_esc(app)}"><td>{_esc(app)}</td><td class="n rate">{hits / calls:.3f}</td>'
                    f'<td class="n">{calls}</td>{cells}</tr>')
    return (f'<table class="slo"><tr><th>app</th><th>hit rate</th><th>requests</th>{heads}</tr>{"".join(rows)}'
            "</table>")


STYLE = """
body{font-family:sans-serif;margin:1.2em;color:#222}h1{font-size:1.3em}h2{font-size:1.05em;margin:.2em 0}
h2 small{font-weight:normal;color:#555}h3{font-size:.9em;margin:.4em 0 .1em}
section.node{border:1px solid #ccc;border-radius:6px;padding:.6em;margin:.6em 0}
ul{margin:.2em 0;padding-left:1.2em;font-size:.85em}ul.workers{columns:3}
svg.gpu .free{fill:#f4f4f4;stroke:#888}svg.gpu .grid{stroke:#ddd}
svg.gpu .instance rect{stroke:#333}svg.gpu .busy rect{fill:#e4572e}svg.gpu .idle rect{fill:#7fb3d5}
svg.gpu text{font-size:12px;text-anchor:middle;fill:#111}
table{border-collapse:collapse;font-size:.9em}td,th{border:1px solid #ccc;padding:.2em .5em}td.n{text-align:right}
.legend span{display:inline-block;width:1em;height:1em;vertical-align:middle;margin:0 .3em 0 1em}
"""


def render(state: dict[str, Any], now_s: float | None = None) -> str:
    """The page for ``state`` (:func:`esg_cli.status.gather`'s)."""
    when = time.strftime("%H:%M:%S", time.localtime(now_s))
    nodes = "".join(_node(name, n) for name, n in state["nodes"].items()) or \
        "<p>no heartbeats: no agent has reported to this Redis</p>"
    return (f'<!doctype html><html><head><meta charset="utf-8"><title>esg cluster</title>'
            f'<meta http-equiv="refresh" content="{REFRESH_S}"><style>{STYLE}</style></head><body>'
            f'<h1>esg cluster <small>at {when}</small></h1>'
            f'<p class="legend">MIG instances:<span style="background:#e4572e"></span>busy'
            f'<span style="background:#7fb3d5"></span>idle<span style="background:#f4f4f4;border:1px solid #888">'
            f'</span>free memory slices</p>{nodes}'
            f'<h2>AFW queues</h2>{_queues(state)}'
            f'<h2>SLO hit rate per app, last {status.SLO_MINUTES} minutes</h2>{_slo(state)}</body></html>')


class ClusterPage:
    """The page served from a daemon thread on ``host:port`` (0: a free port), read from ``client``
    (a Redis client) under ``keys``; ``url`` is its address. A context manager."""

    def __init__(self, client: Any, keys: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        page = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's name
                return

            def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
                path = self.path.split("?")[0]
                if path not in ("/", "/status.json"):
                    return self._send(404, "text/plain", b"not found")
                try:
                    state = page.state()
                except Exception as exc:  # noqa: BLE001 - Redis gone: say so, keep serving
                    return self._send(503, "text/plain", f"cannot read the scheduler's state: {exc}".encode())
                if path == "/":
                    return self._send(200, "text/html; charset=utf-8", render(state).encode())
                self._send(200, "application/json", json.dumps(state, sort_keys=True).encode())

            def _send(self, code: int, kind: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(body)))
                self.send_header("Cache-Control", "no-store")
                self.end_headers()
                self.wfile.write(body)

        self.client, self.keys = client, keys
        self.server = ThreadingHTTPServer((host, port), Handler)
        self.server.daemon_threads = True
        self.url = f"http://{host}:{self.server.server_address[1]}/"
        self._thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="cluster-page", daemon=True)
        self._thread.start()

    def state(self) -> dict[str, Any]:
        return status.gather(self.client, self.keys, time.time() * 1000)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> ClusterPage:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
