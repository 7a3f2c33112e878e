"""``esg deploy``: deploy the four ESG apps to OpenWhisk: every function action, then one app action per app.

Function actions are the zips of :mod:`actions.package` (self-contained: a generated ``__main__.py``
plus the ``actions`` package). They need numpy, onnx, onnxruntime and pillow in the runtime: pass
``--image`` for a blackbox image built from ``actions/Dockerfile`` (kind ``python:3`` images lack
onnxruntime). App actions run ``actions/app_stub.py`` and carry ``esg-slo-ms`` and ``esg-dag``.

    esg deploy --apihost http://localhost:3233 --auth UUID:KEY --image me/esg-actions:1
    esg deploy --dry-run            # print the requests, send nothing
    esg deploy --print-wsk --zip-dir build/actions   # the wsk commands (and the zips)
"""

from __future__ import annotations

import argparse
import base64
import json
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path

from actions import CPU_ONLY, MODULES
from actions.package import APP_STUB, APPS_DIR, action_zip
from esg.errors import AppError
from esg_cli.checks import api_key, check_file, check_writable_dir, from_env, http_url, positive_int
from esg_cli.errors import CliError
from esg_files import load_app

DEFAULT_MAX_BATCH = 8
MEMORY_MB = {"cpu": 256, "dnn": 512}


@dataclass
class Request:
    name: str
    body: dict
    wsk: str  # the equivalent wsk command


def load_apps(paths: list[Path]) -> list[dict]:
    """The app files, each checked as the scheduler will read it (a cycle, an SLO that is not a positive
    number, a function without an action module are named now, not at the first invoke)."""
    apps = []
    for p in paths:
        try:
            app = load_app(p)
        except AppError as exc:
            raise CliError(str(exc)) from None
        unknown = [fn for fn in app.functions if fn not in MODULES]
        if unknown:
            raise CliError(f"{p}: functions without an action module: {', '.join(unknown)} "
                           f"(known: {', '.join(MODULES)})")
        apps.append(app.to_dict())
    return apps


def annotations(pairs: list[tuple[str, object]]) -> list[dict]:
    return [{"key": k, "value": v} for k, v in pairs]


def wsk_value(v: object) -> str:
    """How `wsk -a key VALUE` must spell v: the CLI parses VALUE as JSON when it can."""
    if isinstance(v, str):
        try:
            json.loads(v)
        except ValueError:
            return v  # not JSON: the CLI keeps it as this string
    return json.dumps(v, separators=(",", ":"))


def wsk_command(name: str, source: str, pairs: list[tuple[str, object]], kind_args: str) -> str:
    parts = [f"wsk action update {shlex.quote(name)} {shlex.quote(source)} {kind_args}".rstrip()]
    for k, v in pairs:
        parts.append(f"-a {k} {shlex.quote(wsk_value(v))}")
    return " ".join(parts)


def function_request(function: str, image: str | None, max_batch: int, zip_dir: Path) -> Request:
    pairs: list[tuple[str, object]] = [("esg-profile", function), ("esg-max-batch", max_batch)]
    if function in CPU_ONLY:
        pairs.append(("esg-gpu", False))
    code = base64.b64encode(action_zip(function)).decode("ascii")
    if image:
        exec_ = {"kind": "blackbox", "image": image, "binary": True, "code": code, "main": "main"}
        kind_args = f"--docker {shlex.quote(image)}"
    else:
        exec_ = {"kind": "python:3", "binary": True, "code": code, "main": "main"}
        kind_args = "--kind python:3"
    memory = MEMORY_MB["cpu" if function in CPU_ONLY else "dnn"]
    body = {"exec": exec_, "annotations": annotations(pairs),
            "limits": {"memory": memory, "timeout": 60000}}
    wsk = wsk_command(function, str(zip_dir / f"{function}.zip"), pairs, f"{kind_args} -m {memory}")
    return Request(function, body, wsk)


def app_request(app: dict) -> Request:
    dag = {"functions": list(app["functions"]), "edges": [list(e) for e in app.get("edges", [])]}
    pairs: list[tuple[str, object]] = [("esg-slo-ms", app["slo_ms"]), ("esg-dag", dag)]
    code = APP_STUB.read_text(encoding="utf-8")
    body = {"exec": {"kind": "python:3", "code": code, "binary": False}, "annotations": annotations(pairs)}
    return Request(app["name"], body, wsk_command(app["name"], "actions/app_stub.py", pairs, "--kind python:3"))


def plan(apps: list[dict], image: str | None, max_batch: int, zip_dir: Path) -> list[Request]:
    functions = list(dict.fromkeys(fn for app in apps for fn in app["functions"]))
    return ([function_request(fn, image, max_batch, zip_dir) for fn in functions]
            + [app_request(app) for app in apps])


def action_url(apihost: str, namespace: str, name: str) -> str:
    host = apihost.rstrip("/")
    if "://" not in host:
        host = "https://" + host
    return f"{host}/api/v1/namespaces/{namespace}/actions/{name}?overwrite=true"


def send(requests_: list[Request], apihost: str, auth: str, namespace: str, insecure: bool) -> int:
    import requests

    uuid, _, key = auth.partition(":")
    failures = 0
    with requests.Session() as s:
        s.auth = (uuid, key)
        s.verify = not insecure
        for r in requests_:
            try:
                resp = s.put(action_url(apihost, namespace, r.name), json=r.body, timeout=60)
            except requests.RequestException as e:
                print(f"{r.name}: cannot reach OpenWhisk at {apihost}: {type(e).__name__}", file=sys.stderr)
                return 1
            if resp.ok:
                print(f"{r.name}: ok (version {resp.json().get('version', '?')})")
            else:
                failures += 1
                print(f"{r.name}: HTTP {resp.status_code}: {resp.text[:300]}", file=sys.stderr)
    return 1 if failures else 0


def register(sub: argparse._SubParsersAction) -> None:
    ap = sub.add_parser("deploy", help="deploy the apps' actions to OpenWhisk",
                        description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("apps", nargs="*", type=Path, help="app files (default: apps/*.json)")
    ap.add_argument("--apihost", type=http_url, help="OpenWhisk API host URL (env ESG_OPENWHISK_API)")
    ap.add_argument("--auth", type=api_key, help="API key UUID:KEY (env ESG_OPENWHISK_AUTH)")
    ap.add_argument("--namespace", default="_", help="namespace (_ is the key's own)")
    ap.add_argument("--image", help="runtime image for the function actions (kind blackbox); "
                                    "without it, kind python:3, which must provide onnxruntime")
    ap.add_argument("--max-batch", type=positive_int, default=DEFAULT_MAX_BATCH, help="esg-max-batch")
    ap.add_argument("--insecure", action="store_true", help="do not verify the API host's TLS certificate")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--dry-run", action="store_true", help="print the requests instead of sending them")
    mode.add_argument("--print-wsk", action="store_true", help="print the equivalent wsk commands")
    ap.add_argument("--zip-dir", type=Path, default=Path("build/actions"),
                    help="where --print-wsk writes the action zips its commands use")
    ap.set_defaults(func=run)


def run(ns: argparse.Namespace) -> int:
    apihost = from_env(ns.apihost, "ESG_OPENWHISK_API", http_url)
    auth = from_env(ns.auth, "ESG_OPENWHISK_AUTH", api_key)
    for path in ns.apps:
        check_file(path, "app file")
    apps = load_apps(ns.apps or sorted(APPS_DIR.glob("*.json")))
    if ns.print_wsk:
        check_writable_dir(ns.zip_dir, "--zip-dir")
    elif not ns.dry_run and (not apihost or not auth):
        raise CliError("give --apihost and --auth (or ESG_OPENWHISK_API and ESG_OPENWHISK_AUTH)")
    reqs = plan(apps, ns.image, ns.max_batch, ns.zip_dir)
    if ns.print_wsk:
        ns.zip_dir.mkdir(parents=True, exist_ok=True)
        for fn in {r.name for r in reqs} & MODULES.keys():
            (ns.zip_dir / f"{fn}.zip").write_bytes(action_zip(fn))
        for r in reqs:
            print(r.wsk)
        return 0
    if ns.dry_run:
        for r in reqs:
            body = json.loads(json.dumps(r.body))
            if "code" in body["exec"]:
                body["exec"]["code"] = f"<{len(body['exec']['code'])} chars>"
            print(f"PUT {action_url(apihost or '$ESG_OPENWHISK_API', ns.namespace, r.name)}")
            print(json.dumps(body, indent=2))
        return 0
    return send(reqs, apihost, auth, ns.namespace, ns.insecure)

