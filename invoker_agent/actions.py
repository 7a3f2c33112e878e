"""Action code fetched through OpenWhisk's REST API, cached by (fully qualified name, revision).

``GET {api}/api/v1/namespaces/{ns}/actions/[{pkg}/]{name}?code=true`` with Basic auth from ``uuid:key``.
The key never appears in logs, reprs or error messages.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote

import requests


class ActionFetchError(RuntimeError):
    """The action could not be read from OpenWhisk (the message names it, never the key)."""


class ActionNotFound(ActionFetchError):
    pass


class ActionForbidden(ActionFetchError):
    """The caller's own key may not read the action: the caller's error, not the invoker's."""


@dataclass(frozen=True)
class ActionCode:
    """What a worker needs to /init an action: OpenWhisk's ``exec`` plus identity and limits."""

    fqn: str                       # "/guest/resize" or "/guest/pkg/resize"
    revision: str                  # OpenWhisk's semantic version ("0.0.2") or a document revision
    kind: str                      # "python:3.11", "blackbox", ...
    code: str                      # source text, or base64 zip when binary
    main: str = "main"
    binary: bool = False
    image: str | None = None       # for blackbox actions
    timeout_ms: int = 60000
    memory_mb: int = 256
    parameters: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)
    annotations: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def namespace(self) -> str:
        return self.fqn.strip("/").split("/")[0]

    @property
    def name(self) -> str:
        return self.fqn.strip("/").split("/", 1)[1]


def parse_fqn(fqn: str, default_namespace: str = "_") -> tuple[str, str]:
    """("/ns/pkg/name" | "ns/name" | "name") -> (namespace, "pkg/name" or "name")."""
    parts = fqn.strip("/").split("/")
    if fqn.startswith("/") and len(parts) >= 2:
        return parts[0], "/".join(parts[1:])
    if len(parts) == 3:
        return parts[0], "/".join(parts[1:])
    if len(parts) == 2 and not fqn.startswith("/"):
        return default_namespace, "/".join(parts)    # "pkg/name" in the default namespace
    return default_namespace, parts[-1]


class ActionFetcher:
    """Reads actions from OpenWhisk's REST API, as the activation's caller when ``get`` is given its key
    (else with the agent's own); ``get`` is cached by (fqn, revision): every caller whose activation
    reached the agent was entitled to it."""

    def __init__(self, api_url: str, auth: str, timeout_s: float = 10.0,
                 session: requests.Session | None = None) -> None:
        if ":" not in auth:
            raise ValueError("OpenWhisk auth must be 'uuid:key'")
        user, key = auth.split(":", 1)
        self.api_url = api_url.rstrip("/")
        self._auth = (user, key)
        self.timeout_s = timeout_s
        self.session = session or requests.Session()
        self._cache: dict[tuple[str, str], ActionCode] = {}
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ActionFetcher({self.api_url!r}, auth='{self._auth[0]}:***')"

    def get(self, fqn: str, revision: str | None = None, auth: str | None = None) -> ActionCode:
        """The action ``fqn``; with a ``revision`` a cached copy of that revision is used if present."""
        if revision is not None:
            with self._lock:
                hit = self._cache.get((fqn, revision))
            if hit is not None:
                return hit
        ns, name = parse_fqn(fqn)
        url = f"{self.api_url}/api/v1/namespaces/{quote(ns)}/actions/{quote(name)}"
        try:
            who = tuple(auth.split(":", 1)) if auth and ":" in auth else self._auth
            r = self.session.get(url, params={"code": "true"}, auth=who, timeout=self.timeout_s)
        except requests.RequestException as e:
            raise ActionFetchError(f"cannot reach OpenWhisk at {self.api_url} to read action {fqn}: "
                                   f"{type(e).__name__}") from None
        if r.status_code == 404:
            raise ActionNotFound(f"action {fqn} not found in OpenWhisk ({self.api_url})")
        if r.status_code in (401, 403):
            error = ActionForbidden if who is not self._auth else ActionFetchError
            raise error(f"OpenWhisk refused the {'caller' if who is not self._auth else 'agent'}'s credentials "
                        f"for reading action {fqn} (HTTP {r.status_code})")
        if r.status_code != 200:
            raise ActionFetchError(f"reading action {fqn} from OpenWhisk failed: HTTP {r.status_code}")
        try:
            action = self._parse(fqn, r.json())
        except (ValueError, KeyError, TypeError) as e:
            raise ActionFetchError(f"OpenWhisk returned a malformed action {fqn}: {e}") from None
        with self._lock:
            self._cache[(action.fqn, action.revision)] = action
            if action.fqn != fqn:
                self._cache[(fqn, action.revision)] = action
        return action

    @staticmethod
    def _parse(fqn: str, doc: dict) -> ActionCode:
        exec_ = doc["exec"]
        if exec_.get("kind") == "sequence":
            raise ActionFetchError(f"action {fqn} is a sequence: its components run one by one")
        ns = doc.get("namespace") or parse_fqn(fqn)[0]
        full = f"/{ns}/{doc['name']}"
        limits = doc.get("limits") or {}
        return ActionCode(
            fqn=full, revision=str(doc.get("version", "")), kind=str(exec_.get("kind", "")),
            code=exec_.get("code") or "", main=exec_.get("main") or "main",
            binary=bool(exec_.get("binary", False)), image=exec_.get("image"),
            timeout_ms=int(limits.get("timeout", 60000)), memory_mb=int(limits.get("memory", 256)),
            parameters={p["key"]: p.get("value") for p in doc.get("parameters") or []},
            annotations={a["key"]: a.get("value") for a in doc.get("annotations") or []})
