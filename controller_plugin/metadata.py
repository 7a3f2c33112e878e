"""Action metadata from OpenWhisk's REST API, and the ESG annotations read from it (``docs/architecture.md`` §5).

:class:`MetadataClient` GETs ``/api/v1/namespaces/{ns}/actions/[{pkg}/]{name}?code=false`` with Basic
auth as the activation's own caller (the ``user.authkey`` of its ActivationMessage, the identity the
controller entitled to activate it; the configured key only for a caller whose key is not a uuid:key
pair) and caches each answer by (fully qualified name, revision): an activation names the revision it
runs, so a cached entry never goes stale. Reading as the caller gets what OpenWhisk's entitlement gives
the caller: its own actions, and those in packages other namespaces share (bindings resolve to them);
an answer read with one caller's key never serves another's. :func:`plan_for` turns an action into an
:class:`AppPlan`: an app (``esg-slo-ms``, ``esg-dag``), a one-function app, or a plain OpenWhisk action
with the default configuration. Anything wrong becomes an :class:`ActivationError` whose message names
the action, annotation or function, and which the service answers as an error ack.
"""

from __future__ import annotations

import json
import logging
import math
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from urllib.parse import quote

import redis
import requests

from controller_plugin.online import OnlineStore
from esg.defaults import default_profile
from esg.errors import AppError, ProfileError
from esg.mig import DEFAULT_GPU_MODEL
from esg.model import App
from esg.online import learned_profile
from esg.policies.base import FunctionSpec
from esg.profiles import Profile, profile_from_dict
from esg_files import load_profile
from openwhisk_status import (
    DEFAULT_LIMITS,
    STATUS_APPLICATION_ERROR,
    STATUS_DEVELOPER_ERROR,
    STATUS_WHISK_ERROR,
)

log = logging.getLogger("esg.scheduler")


#: The planning latency of a plain action's one configuration: unknown, so a nominal figure.
DEFAULT_LATENCY_MS = 1.0
REST_TIMEOUT_S = 10.0


class ActivationError(Exception):
    """An activation that cannot run: answered with ``status_code`` and ``{"error": message}``."""

    def __init__(self, message: str, status_code: int = STATUS_DEVELOPER_ERROR) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass(frozen=True)
class ActionMeta:
    """What the scheduler needs of an action document."""

    path: str
    """``ns`` or ``ns/pkg``."""
    name: str
    version: str
    kind: str
    limits: Mapping[str, Any]
    annotations: Mapping[str, Any]

    @property
    def fqn(self) -> str:
        return f"{self.path}/{self.name}"

    @property
    def namespace(self) -> str:
        return self.path.split("/", 1)[0]

    @property
    def timeout_ms(self) -> int:
        return int(self.limits.get("timeout", DEFAULT_LIMITS["timeout"]))

    @property
    def memory_mb(self) -> int:
        return int(self.limits.get("memory", DEFAULT_LIMITS["memory"]))

    def has_esg_annotations(self) -> bool:
        return any(k.startswith("esg-") for k in self.annotations)

    @classmethod
    def from_document(cls, doc: Any, path: str, name: str) -> ActionMeta:
        """The fields the scheduler uses; a document of the wrong shape is an :class:`ActivationError`
        naming the field (OpenWhisk never sends one, so it is a whisk error)."""
        where = f"cannot read action {path}/{name}: the OpenWhisk API answered"

        def bad(what: str) -> ActivationError:
            return ActivationError(f"{where} {what}", STATUS_WHISK_ERROR)

        if not isinstance(doc, Mapping):
            raise bad("something other than an action document")
        exec_ = doc.get("exec") or {}
        annotations = doc.get("annotations") or []
        limits = doc.get("limits") or {}
        if not isinstance(exec_, Mapping):
            raise bad("a field 'exec' that is not an object")
        if not isinstance(annotations, list):
            raise bad("a field 'annotations' that is not a list")
        if not isinstance(limits, Mapping):
            raise bad("a field 'limits' that is not an object")
        for key in ("timeout", "memory"):
            value = limits.get(key, DEFAULT_LIMITS[key])
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                shown = value if isinstance(value, int | float | str | None) else type(value).__name__
                raise bad(f"limits.{key} {str(shown)[:40]!r}, not a positive integer")
        return cls(path=str(doc.get("namespace") or path), name=str(doc.get("name") or name),
                   version=str(doc.get("version") or "0.0.1"), kind=str(exec_.get("kind") or "unknown"),
                   limits={**DEFAULT_LIMITS, **limits},
                   annotations={a["key"]: a.get("value") for a in annotations
                                if isinstance(a, dict) and isinstance(a.get("key"), str)})


@dataclass(frozen=True)
class FunctionPlan:
    short: str
    """The name as the app's DAG writes it (keys of a multi-predecessor input)."""
    action: ActionMeta
    profile: Profile
    spec: FunctionSpec
    table: str = ""
    """The name what is learned of it is kept under (:meth:`ProfileStore.learned_name` of its
    ``esg-profile``, default the action's name; empty for a plain action)."""


@dataclass(frozen=True)
class AppPlan:
    """An action as the scheduler runs it: an :class:`App` over fully qualified function names."""

    action: ActionMeta
    app: App
    functions: Mapping[str, FunctionPlan]
    """fqn -> plan."""
    plain: bool = False
    revision: str | None = None

    @property
    def profiles(self) -> dict[str, Profile]:
        return {f: p.profile for f, p in self.functions.items()}

    @property
    def specs(self) -> dict[str, FunctionSpec]:
        return {f: p.spec for f, p in self.functions.items()}


@dataclass
class MetadataClient:
    """OpenWhisk REST reads with Basic auth; the key is never part of an error message."""

    api: str | None
    auth: str | None = field(default=None, repr=False)
    timeout_s: float = REST_TIMEOUT_S
    _cache: dict[tuple[str, str | None, str | None], ActionMeta] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _session: requests.Session | None = field(default=None, repr=False)

    def action(self, fqn: str, revision: str | None = None, *, cache: bool = True,
               auth: str | None = None) -> ActionMeta:
        """The action ``fqn``, read with ``auth`` (``uuid:key``, the caller's) or else the configured key.
        A cached answer serves only the key it was read with: what one caller may read says nothing of
        what another may."""
        key = (fqn, revision, auth)
        if cache:
            with self._lock:
                hit = self._cache.get(key)
            if hit is not None:
                return hit
        meta = self._fetch(fqn, auth)
        if cache:
            with self._lock:
                if len(self._cache) > 10_000:
                    self._cache.clear()
                self._cache[key] = meta
        return meta

    def _fetch(self, fqn: str, auth: str | None = None) -> ActionMeta:
        if not self.api:
            raise ActivationError(f"cannot read action {fqn}: no OpenWhisk API configured "
                                  "(--openwhisk-api / ESG_OPENWHISK_API)", STATUS_WHISK_ERROR)
        path, _, name = fqn.rpartition("/")
        ns, _, pkg = path.partition("/")
        entity = f"{quote(pkg, safe='')}/{quote(name, safe='')}" if pkg else quote(name, safe="")
        url = f"{self.api.rstrip('/')}/api/v1/namespaces/{quote(ns, safe='')}/actions/{entity}?code=false"
        if self._session is None:
            self._session = requests.Session()
        who = auth or self.auth
        caller = "the caller's key" if auth else "the scheduler's key"
        try:
            resp = self._session.get(url, timeout=self.timeout_s,
                                     auth=tuple(who.split(":", 1)) if who and ":" in who else None)
        except requests.RequestException as exc:
            raise ActivationError(f"cannot read action {fqn} from the OpenWhisk API: {type(exc).__name__}",
                                  STATUS_WHISK_ERROR) from None
        if resp.status_code == 404:
            raise ActivationError(f"action {fqn} does not exist (the OpenWhisk API answered 404)",
                                  STATUS_APPLICATION_ERROR)
        if resp.status_code in (401, 403):
            # the caller's key refused: what the caller may not use (its fault, never the invoker's health)
            raise ActivationError(f"cannot read action {fqn}: the OpenWhisk API refused {caller} "
                                  f"(HTTP {resp.status_code})", STATUS_DEVELOPER_ERROR if auth else STATUS_WHISK_ERROR)
        if not resp.ok:
            raise ActivationError(f"cannot read action {fqn}: HTTP {resp.status_code}", STATUS_WHISK_ERROR)
        try:
            doc = json.loads(resp.content, parse_constant=_no_json_constant)  # NaN and Infinity are no JSON
        except (ValueError, RecursionError):
            raise ActivationError(f"cannot read action {fqn}: the OpenWhisk API answered non-JSON",
                                  STATUS_WHISK_ERROR) from None
        return ActionMeta.from_document(doc, path, name)


def _no_json_constant(constant: str) -> Any:
    raise ValueError(f"{constant} is no JSON value")


# -- annotations -------------------------------------------------------------------------------------

class ProfileStore:
    """Profile tables ``<dir>/<name>.json``, read once each; with ``online``, what was learned of each
    table in Redis is laid over it (an imported prior first, else the file).

    What is learned is kept per namespace: the function ``ns/[pkg/]f`` with table ``t`` learns into
    ``ns/t`` (:meth:`learned_name`), so no tenant can read or skew another's measurements by naming its
    table, unless the operator shares learned tables between all namespaces (``shared``). The offline
    tables of ``<dir>`` and priors imported without a namespace are the operator's, for everyone.

    With ``percentile`` (the scheduler's ``--slo-percentile``) a learned table also records each measured
    configuration's sketch at that percentile (:func:`esg.online.learned_profile`)."""

    def __init__(self, directory: Path, online: OnlineStore | None = None, shared: bool = False,
                 percentile: float | None = None) -> None:
        self.directory = Path(directory)
        self.online = online
        self.shared = shared
        self.percentile = percentile
        self._cache: dict[str, Profile] = {}

    def learned_name(self, name: str, fqn: str) -> str:
        """Where what runs of ``fqn`` (table ``name``) teach is kept: ``<its namespace>/<name>``, or
        ``name`` when learned tables are shared."""
        return name if self.shared else f"{fqn.strip('/').split('/', 1)[0]}/{name}"

    def table(self, name: str, fqn: str, spec: FunctionSpec, bound_ms: float, gpu_model: str,
              prior: Profile | None) -> Profile:
        """The table the scheduler plans ``fqn`` with: learned over ``prior``, else ``prior``, else the
        default. Redis failing leaves the offline table (or the default)."""
        if self.online is not None:
            learned = self.learned_name(name, fqn)
            try:
                imported = self.online.prior(learned)
                if imported is None and learned != name:
                    imported = self.online.prior(name)        # one the operator imported for everyone
                stats = self.online.stats(learned)
            except (redis.RedisError, ProfileError, ValueError) as exc:
                log.warning("learned profile %s unavailable (%s); planning %s with %s", name,
                            type(exc).__name__, fqn, "its offline table" if prior else "the default")
            else:
                base = imported if imported is not None else prior
                return learned_profile(fqn, stats, None if base is None else replace(base, function=fqn), spec,
                                       bound_ms, gpu_model, percentile=self.percentile)
        if prior is None:
            return default_profile(fqn, spec, bound_ms, gpu_model)
        return replace(prior, function=fqn)

    def get(self, name: str) -> Profile | None:
        if name in self._cache:
            return self._cache[name]
        path = self.directory / f"{name}.json"
        try:
            if not path.is_file():
                return None
        except (OSError, ValueError):  # a name no file can have (too long, a NUL byte)
            return None
        prof = load_profile(path)
        self._cache[name] = prof
        return prof


def resolve_name(name: str, namespace: str) -> str:
    """A DAG function name as OpenWhisk resolves it: ``/ns/[pkg/]a`` is absolute, else relative to ``namespace``."""
    if name.startswith("/"):
        parts = name.strip("/").split("/")
        if len(parts) not in (2, 3) or not all(parts):
            raise ActivationError(f"annotation esg-dag: {name!r} is not a fully qualified action name "
                                  "('/namespace/[package/]action')")
        return "/".join(parts)
    parts = name.split("/")
    if len(parts) > 2 or not all(parts):
        raise ActivationError(f"annotation esg-dag: bad function name {name!r}")
    return f"{namespace}/{name}"


def _positive_number(value: Any, what: str) -> float:
    if isinstance(value, str):
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ActivationError(f"annotation {what} must be a positive number, got {json.dumps(value)}")
    return float(value)


def parse_dag(value: Any) -> tuple[list[str], list[tuple[str, str]]]:
    """``esg-dag``: a JSON object ``{"functions": [...], "edges": [[a, b], ...]}`` (or that object as a string)."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            raise ActivationError("annotation esg-dag is not JSON") from None
    if not isinstance(value, dict):
        raise ActivationError("annotation esg-dag must be an object {\"functions\": [...], \"edges\": [...]}")
    functions = value.get("functions")
    if not isinstance(functions, list) or not functions or not all(isinstance(f, str) and f for f in functions):
        raise ActivationError("annotation esg-dag: 'functions' must be a non-empty list of action names")
    edges = value.get("edges", [])
    if not isinstance(edges, list):
        raise ActivationError("annotation esg-dag: 'edges' must be a list of [from, to] pairs")
    out: list[tuple[str, str]] = []
    for e in edges:
        if not isinstance(e, list | tuple) or len(e) != 2 or not all(isinstance(x, str) for x in e):
            raise ActivationError(f"annotation esg-dag: edge {json.dumps(e)} is not a [from, to] pair of names")
        out.append((e[0], e[1]))
    return list(functions), out


def function_spec(meta: ActionMeta) -> FunctionSpec:
    ann = meta.annotations
    max_batch = ann.get("esg-max-batch")
    if max_batch is not None:
        if isinstance(max_batch, str) and max_batch.isdecimal():
            max_batch = int(max_batch)
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch <= 0:
            raise ActivationError(f"action {meta.fqn}: annotation esg-max-batch must be a positive integer, "
                                  f"got {json.dumps(max_batch)}")
    gpu = ann.get("esg-gpu", True)
    if isinstance(gpu, str) and gpu.lower() in ("true", "false"):
        gpu = gpu.lower() == "true"
    if not isinstance(gpu, bool):
        raise ActivationError(f"action {meta.fqn}: annotation esg-gpu must be true or false, got {json.dumps(gpu)}")
    return FunctionSpec(max_batch=max_batch, gpu=gpu)


def plain_profile(function: str) -> Profile:
    """A plain action's one configuration: batch 1, 1 vCPU, CPU only."""
    return profile_from_dict({"function": function, "gpu_model": DEFAULT_GPU_MODEL,
                              "configs": [{"batch": 1, "vcpus": 1, "gpu": None,
                                           "latency_ms": DEFAULT_LATENCY_MS}]}, function)


def profile_name(meta: ActionMeta) -> str:
    """The name of the action's table (``esg-profile``, default its name)."""
    explicit = meta.annotations.get("esg-profile")
    if explicit is not None and (not isinstance(explicit, str) or not explicit or "/" in explicit
                                 or "\0" in explicit or len(explicit) > 200):
        raise ActivationError(f"action {meta.fqn}: annotation esg-profile must be a profile name, "
                              f"got {json.dumps(explicit)}")
    return explicit or meta.name


def plan_for(meta: ActionMeta, revision: str | None, fetch, profiles: ProfileStore) -> AppPlan:
    """How an activation of ``meta`` runs. ``fetch(fqn)`` reads another action (a DAG's function)."""
    ann = meta.annotations
    if "esg-dag" in ann and "esg-slo-ms" not in ann:
        raise ActivationError(f"action {meta.fqn}: annotation esg-dag needs esg-slo-ms (the app's SLO)")
    if "esg-slo-ms" in ann:
        slo = _positive_number(ann["esg-slo-ms"], "esg-slo-ms")
        if "esg-dag" in ann:
            names, edges = parse_dag(ann["esg-dag"])
            fqns = {n: resolve_name(n, meta.namespace) for n in names}
            for a, b in edges:
                for end in (a, b):
                    if end not in fqns:
                        raise ActivationError(f"annotation esg-dag: edge [{a!r}, {b!r}] names unknown function {end!r}")
            metas: dict[str, ActionMeta] = {}
            for short, fqn in fqns.items():
                try:
                    metas[short] = fetch(fqn)
                except ActivationError as exc:
                    raise ActivationError(f"annotation esg-dag: function {short!r}: {exc}", exc.status_code) from None
            funcs = _function_plans(metas, profiles)
            try:
                app = App(meta.fqn, slo, tuple(fqns[n] for n in names), tuple((fqns[a], fqns[b]) for a, b in edges))
            except AppError as exc:
                raise ActivationError(f"annotation esg-dag: {exc}") from None
        else:
            funcs = _function_plans({meta.name: meta}, profiles)
            app = App(meta.fqn, slo, (meta.fqn,))
        _check_models(funcs)
        return AppPlan(meta, app, funcs, plain=False, revision=revision)
    # A function action invoked on its own, or a plain OpenWhisk action: SLO = its time limit.
    app = App(meta.fqn, float(meta.timeout_ms), (meta.fqn,))
    if meta.has_esg_annotations():
        funcs = _function_plans({meta.name: meta}, profiles)
    else:
        funcs = {meta.fqn: FunctionPlan(meta.name, meta, plain_profile(meta.fqn), FunctionSpec(max_batch=1, gpu=False))}
    return AppPlan(meta, app, funcs, plain=not meta.has_esg_annotations(), revision=revision)


def _function_plans(metas: Mapping[str, ActionMeta], profiles: ProfileStore) -> dict[str, FunctionPlan]:
    """Each function's plan; an unprofiled one's default table uses the GPU model of the others'."""
    specs = {short: function_spec(m) for short, m in metas.items()}
    names = {short: profile_name(m) for short, m in metas.items()}
    found: dict[str, Profile | None] = {}
    for short, m in metas.items():
        try:
            found[short] = profiles.get(names[short])
        except ProfileError as exc:
            raise ActivationError(f"function {m.fqn}: profile {names[short]!r}: {exc}") from None
    models = sorted({p.gpu_model for p in found.values() if p is not None and any(e.config.gpu for e in p.entries)})
    model = models[0] if models else DEFAULT_GPU_MODEL
    out = {}
    for short, m in metas.items():
        prof = profiles.table(names[short], m.fqn, specs[short], float(m.timeout_ms), model, found[short])
        out[m.fqn] = FunctionPlan(short, m, prof, specs[short], profiles.learned_name(names[short], m.fqn))
    return out


def _check_models(funcs: Mapping[str, FunctionPlan]) -> None:
    models = {p.profile.gpu_model for p in funcs.values() if any(e.config.gpu for e in p.profile.entries)}
    if len(models) > 1:
        raise ActivationError(f"the app's function profiles mix GPU models: {', '.join(sorted(models))}")
