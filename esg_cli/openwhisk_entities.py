"""OpenWhisk's entities -- actions, packages, triggers and rules -- as its controller keeps them, for the
REST stand-in: the documents, how a ``PUT`` body becomes one (create) or changes one (update), and the
store that holds them under their document ids.

What OpenWhisk does, and so what this does (``Actions.scala``, ``Packages.scala``, ``Triggers.scala``,
``Rules.scala``, ``ApiUtils.putEntity``, the entity classes in ``core/entity``):

* Every entity has one document id, ``namespace/[package/]name``, in one store: a name used by an action
  cannot be used by a trigger in the same namespace (409 ``Resource by this name exists but is not in
  this collection.``).
* A create (no ``overwrite=true``) of a name that exists is 409 ``resource already exists``; an update of
  a name that does not exist is a create. A create starts at version ``0.0.1`` unless the body gives one;
  an update bumps the patch number unless the body gives one.
* An update merges, field by field, what the body gives into the stored entity and keeps the rest
  (``WhiskActionsApi.updateWhiskAction``: exec, parameters, limits -- each limit on its own --,
  annotations added to the stored ones; packages, triggers and rules replace annotations and parameters
  when given). A sequence keeps its ``_actions`` parameter.
* On an action's create, ``provide-api-key: false`` is added if absent; on every write, ``exec: <kind>``.
* A trigger's document lists its rules and their status (``active``/``inactive``): a rule's status lives
  in its trigger, as in OpenWhisk.

Names follow ``EntityName``: 1-256 characters, letters, digits, ``_``, and inside also ``@ . & -`` and
spaces. Bodies are read as spray-json reads them: unknown fields are ignored, a field of the wrong type
is 400 ``The request content was malformed:`` and the reason.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openwhisk_status import DEFAULT_LIMITS

ACTIONS, PACKAGES, TRIGGERS, RULES = "actions", "packages", "triggers", "rules"
COLLECTIONS = (ACTIONS, PACKAGES, TRIGGERS, RULES)
ENTITY_NAME = re.compile(r"\A([\w]|[\w][\w@ .&-]{0,254}[\w@.&-])\Z")
#: ``whisk.actionSequenceLimit``: components of one sequence, nested ones counted.
SEQUENCE_LIMIT = 50
#: ``X:default`` kinds, as OpenWhisk's runtime manifest (``ansible/files/runtimes.json``) resolves them.
DEFAULT_KINDS = {"nodejs": "nodejs:20", "python": "python:3.10", "swift": "swift:5.3", "java": "java:8",
                 "php": "php:8.1", "ruby": "ruby:2.5", "go": "go:1.20", "dotnet": "dotnet:3.1",
                 "rust": "rust:1.34"}
#: The system's limits (``application.conf``: time-limit, memory, log-limit, concurrency-limit).
LIMIT_RANGES = {"timeout": (100, 300_000, "milliseconds"), "memory": (128, 512, "MB"), "logs": (0, 10, "MB"),
                "concurrency": (1, 1, "")}
_BASE64 = re.compile(r"\A([A-Za-z0-9+/]{4})*([A-Za-z0-9+/]{4}|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{2}==)\Z")

NOT_FOUND = "The requested resource does not exist."
CONFORMANCE = "Resource by this name exists but is not in this collection."
EXISTS = "resource already exists"
MALFORMED = "The request content was malformed:\n"


class ApiError(Exception):
    """An answer other than success: ``status`` and OpenWhisk's message (sent as ``{"error", "code"}``)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


def malformed(reason: str) -> ApiError:
    return ApiError(400, MALFORMED + reason)


@dataclass(frozen=True)
class Identity:
    """Who calls (``Identity.scala``): the subject, its namespace and the key it authenticated with."""

    subject: str
    namespace: str
    uuid: str
    key: str = field(repr=False)

    @property
    def api_key(self) -> str:
        return f"{self.uuid}:{self.key}"

    def to_json(self) -> dict[str, Any]:
        """The ``user`` of an ActivationMessage."""
        return {"subject": self.subject, "namespace": {"name": self.namespace, "uuid": self.uuid},
                "authkey": {"api_key": self.api_key}, "rights": ["READ", "PUT", "DELETE", "ACTIVATE"],
                "limits": {}}


def identities(keys: dict[str, str]) -> dict[str, Identity]:
    """The auth table: ``{"uuid:key": namespace}`` -> an Identity per key (the subject is the namespace's
    name, as OpenWhisk's ``initdb`` writes its identities)."""
    out = {}
    for api_key, namespace in keys.items():
        uuid, _, key = api_key.partition(":")
        out[api_key] = Identity(namespace, namespace, uuid, key)
    return out


def valid_name(name: str) -> bool:
    return bool(ENTITY_NAME.match(name))


def split_fqn(value: Any, default_ns: str, what: str) -> str:
    """A fully qualified name as OpenWhisk reads it (``FullyQualifiedEntityName``: ``/ns/name``,
    ``/ns/pkg/name`` or ``{"path", "name"}``), ``_`` resolved to ``default_ns``; returned as
    ``ns/[pkg/]name``."""
    if isinstance(value, dict) and isinstance(value.get("path"), str) and isinstance(value.get("name"), str):
        parts = value["path"].strip("/").split("/") + [value["name"]]
    elif isinstance(value, str):
        parts = value.strip().strip("/").split("/")
    else:
        raise malformed(f"'{what}' must be a fully qualified name")
    if len(parts) not in (2, 3) or not all(valid_name(p) for p in parts):
        raise malformed(f"'{what}': the fully qualified name of the entity must contain at least the "
                        "namespace and the name of the entity.")
    if parts[0] == "_":
        parts[0] = default_ns
    return "/".join(parts)


def fqn_json(fqn: str) -> dict[str, str]:
    """``ns/[pkg/]name`` as OpenWhisk writes a FullyQualifiedEntityName: ``{"path", "name"}``."""
    path, _, name = fqn.rpartition("/")
    return {"path": path, "name": name}


def bump(version: str) -> str:
    """``SemVer.upPatch``."""
    major, minor, patch = (int(p) for p in version.split("."))
    return f"{major}.{minor}.{patch + 1}"


def is_binary_code(code: str) -> bool:
    """``Exec.isBinaryCode``: the code is base64 (a zip, a jar): stored and run as binary."""
    t = code.strip()
    return len(t) > 0 and len(t) % 4 == 0 and bool(_BASE64.match(t))


# -- what a PUT body may hold -------------------------------------------------------------------------


def _typed(body: dict[str, Any], key: str, kind: type | tuple[type, ...], what: str) -> Any:
    value = body.get(key)
    if value is not None and (not isinstance(value, kind) or isinstance(value, bool) and kind is not bool):
        raise malformed(f"'{key}' must be {what}")
    return value


def _parameters(body: dict[str, Any], key: str) -> list[dict[str, Any]] | None:
    """``parameters``/``annotations``: ``[{"key", "value"}]`` (a later key replaces an earlier one)."""
    value = _typed(body, key, list, "an array of key/value pairs")
    if value is None:
        return None
    out: dict[str, dict[str, Any]] = {}
    for p in value:
        if not isinstance(p, dict) or not isinstance(p.get("key"), str) or "value" not in p:
            raise malformed(f"'{key}' must be an array of key/value pairs")
        out[p["key"]] = {k: v for k, v in p.items() if k in ("key", "value", "init", "encryption")}
    return list(out.values())


def merge_parameters(base: list[dict[str, Any]], over: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``Parameters ++``: ``over``'s keys replace ``base``'s, order kept."""
    keys = {p["key"] for p in over}
    return [p for p in base if p["key"] not in keys] + list(over)


def _version(body: dict[str, Any]) -> str | None:
    v = _typed(body, "version", str, "a semantic version")
    if v is not None and not re.fullmatch(r"\d+\.\d+\.\d+", v):
        raise malformed(f"bad semantic version {v}")
    return v


def _limits(body: dict[str, Any]) -> dict[str, int] | None:
    value = _typed(body, "limits", dict, "an object")
    if value is None:
        return None
    out = {}
    for key, (low, high, unit) in LIMIT_RANGES.items():
        v = value.get(key)
        if v is None:
            continue
        if isinstance(v, bool) or not isinstance(v, int | float) or int(v) != v:
            raise malformed(f"{key} limit must be whole number")
        v = int(v)
        shown = f"{key} {v}{(' ' + unit) if unit else ''}"
        if v > high:
            raise ApiError(400, f"{shown} exceeds allowed threshold of {high}{(' ' + unit) if unit else ''}")
        if v < low:
            raise ApiError(400, f"{shown} below allowed threshold of {low}{(' ' + unit) if unit else ''}")
        out[key] = v
    return out


def _exec(body: dict[str, Any], caller_ns: str) -> dict[str, Any] | None:
    """``Exec.serdes.read``: the kind decides the fields; ``X:default`` is resolved."""
    value = _typed(body, "exec", dict, "an object")
    if value is None:
        return None
    kind = value.get("kind")
    if not isinstance(kind, str) or not kind.strip():
        raise malformed("'kind' must be a string defined in 'exec'")
    kind = kind.strip().lower()
    main = value.get("main")
    if main is not None and not isinstance(main, str):
        raise malformed(f"if defined, 'main' be a string in 'exec' for '{kind}' actions")
    if kind == "sequence":
        components = value.get("components")
        if components is None:
            raise malformed("'components' must be defined for sequence kind")
        if not isinstance(components, list):
            raise malformed("'components' must be an array")
        return {"kind": "sequence",
                "components": ["/" + split_fqn(c, caller_ns, "components") for c in components]}
    if kind == "blackbox":
        image = value.get("image")
        if not isinstance(image, str) or not image.strip():
            raise malformed("'image' must be a string defined in 'exec' for 'blackbox' actions")
        out: dict[str, Any] = {"kind": kind, "image": image, "binary": False}
        code = value.get("code")
        if isinstance(code, str) and code.strip():
            out.update(code=code, binary=is_binary_code(code))
    else:
        family, _, version = kind.partition(":")
        if version == "default":
            if family not in DEFAULT_KINDS:
                runtimes = ", ".join(sorted(DEFAULT_KINDS.values()))
                raise malformed(f"The specified runtime '{kind}' is not supported by this platform. "
                                f"Valid values are: {runtimes}.")
            kind = DEFAULT_KINDS[family]
        elif not family or not version:
            raise malformed(f"The specified runtime '{kind}' is not supported by this platform.")
        code = value.get("code")
        if not isinstance(code, str):
            raise malformed(f"'code' must be a string or attachment object defined in 'exec' for '{kind}' actions")
        out = {"kind": kind, "code": code, "binary": is_binary_code(code)}
    if main is not None:
        out["main"] = main
    return out


# -- documents ----------------------------------------------------------------------------------------


def _revision(doc: dict[str, Any], old: dict[str, Any] | None) -> str:
    n = int(old["_rev"].split("-")[0]) + 1 if old else 1
    clean = {k: v for k, v in doc.items() if not k.startswith("_")}
    return f"{n}-{hashlib.md5(json.dumps(clean, sort_keys=True).encode()).hexdigest()}"


def _base(ns_path: str, name: str, body: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    publish = _typed(body, "publish", bool, "a boolean")
    version = _version(body)
    return {"namespace": ns_path, "name": name,
            "version": version or (bump(old["version"]) if old else "0.0.1"),
            "publish": publish if publish is not None else (old["publish"] if old else False)}


def make_action(ns_path: str, name: str, body: dict[str, Any], old: dict[str, Any] | None,
                caller_ns: str) -> dict[str, Any]:
    """The action document a PUT of ``body`` writes (``old``: the stored one, for an update)."""
    exec_ = _exec(body, caller_ns)
    params = _parameters(body, "parameters")
    limits = _limits(body)
    annotations = _parameters(body, "annotations")
    del_annotations = _typed(body, "delAnnotations", list, "an array of strings")
    if old is None:
        if exec_ is None:
            raise ApiError(400, "exec undefined")
        annotations = list(annotations or [])
        if not any(a["key"] == "provide-api-key" for a in annotations):
            annotations.append({"key": "provide-api-key", "value": False})
    else:
        kept = [a for a in old["annotations"] if a["key"] not in set(del_annotations or [])]
        annotations = merge_parameters(kept, annotations or [])
    final_exec = exec_ or old["exec"]
    if final_exec["kind"] == "sequence":
        if exec_ is None:
            params = old["parameters"]                  # a sequence keeps its _actions
        else:
            params = [{"key": "_actions", "value": list(final_exec["components"])}]
    elif params is None:
        params = [] if old is None or old["exec"]["kind"] == "sequence" else old["parameters"]
    doc = _base(ns_path, name, body, old)
    doc.update(exec=final_exec, parameters=params,
               limits={**(old["limits"] if old else DEFAULT_LIMITS), **(limits or {})},
               annotations=merge_parameters(annotations, [{"key": "exec", "value": final_exec["kind"]}]),
               updated=int(time.time() * 1000))
    return doc


def make_package(ns: str, name: str, body: dict[str, Any], old: dict[str, Any] | None, caller_ns: str,
                 find: Callable[[str], tuple[str, dict[str, Any]] | None]) -> dict[str, Any]:
    """``WhiskPackagesApi.create``/``update``: a package, or a binding to ``{"namespace", "name"}``."""
    if name == "default":
        raise ApiError(400, "Package name 'default' is reserved.")
    binding = _typed(body, "binding", dict, "an object")
    if binding:
        bns, bname = binding.get("namespace"), binding.get("name")
        if not isinstance(bns, str) or not isinstance(bname, str) or not valid_name(bname):
            raise malformed("'binding' must name a package: {\"namespace\", \"name\"}")
        binding = {"namespace": caller_ns if bns in ("_", "") else bns.strip("/"), "name": bname}
        if old is not None and not old["binding"]:
            raise ApiError(409, "Resource is a package and cannot be converted into a binding.")
        target = find(f"{binding['namespace']}/{binding['name']}")
        if target is None:
            raise ApiError(400, "Binding references a package that does not exist.")
        if target[0] != PACKAGES:
            raise ApiError(409, "Cannot bind to a resource that is not a package.")
        if target[1]["binding"]:
            raise ApiError(400, "Cannot bind to another package binding.")
    binding = binding or (old["binding"] if old else {})
    params = _parameters(body, "parameters")
    annotations = _parameters(body, "annotations")
    base = annotations if annotations is not None else (old["annotations"] if old else [])
    base = [a for a in base if a["key"] != "binding"]
    doc = _base(ns, name, body, old)
    doc.update(binding=binding, parameters=params if params is not None else (old["parameters"] if old else []),
               annotations=base + ([{"key": "binding", "value": dict(binding)}] if binding else []),
               updated=int(time.time() * 1000))
    return doc


def make_trigger(ns: str, name: str, body: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
    """``WhiskTriggersApi.create``/``update``; the rules stay (a rule is linked by its own PUT)."""
    params = _parameters(body, "parameters")
    annotations = _parameters(body, "annotations")
    limits = _typed(body, "limits", dict, "an object")
    for a in annotations or []:
        if a["key"] == "feed" and not (isinstance(a["value"], str) and len(a["value"].strip("/").split("/")) >= 2):
            raise ApiError(400, "Feed name is not valid")
    doc = _base(ns, name, body, old)
    doc.update(parameters=params if params is not None else (old["parameters"] if old else []),
               limits=limits if limits is not None else (old["limits"] if old else {}),
               annotations=annotations if annotations is not None else (old["annotations"] if old else []),
               updated=int(time.time() * 1000))
    if old is not None and "rules" in old:
        doc["rules"] = old["rules"]
    return doc


def make_rule(ns: str, name: str, body: dict[str, Any], old: dict[str, Any] | None, caller_ns: str
              ) -> dict[str, Any]:
    """``WhiskRulesApi.create``/``update`` without the links (the caller checks that the trigger and the
    action exist and links the rule into its trigger)."""
    trigger = body.get("trigger")
    action = body.get("action")
    trigger = split_fqn(trigger, caller_ns, "trigger") if trigger is not None else None
    action = split_fqn(action, caller_ns, "action") if action is not None else None
    if old is None and (trigger is None or action is None):
        raise ApiError(400, "rule requires a valid trigger and a valid action")
    annotations = _parameters(body, "annotations")
    doc = _base(ns, name, body, old)
    doc.update(trigger=fqn_json(trigger) if trigger else old["trigger"],
               action=fqn_json(action) if action else old["action"],
               annotations=annotations if annotations is not None else (old["annotations"] if old else []),
               updated=int(time.time() * 1000))
    return doc


def fqn_of(ref: dict[str, str]) -> str:
    return f"{ref['path']}/{ref['name']}"


# -- the store ----------------------------------------------------------------------------------------


@dataclass
class EntityStore:
    """Every entity by document id (``ns/[pkg/]name``) with its collection; thread-safe.

    Writes go through :meth:`write`, which holds the lock while the caller computes the new document
    from the stored one, so two updates never both start from the same revision.
    """

    docs: dict[str, tuple[str, dict[str, Any]]] = field(default_factory=dict)
    lock: threading.RLock = field(default_factory=threading.RLock)

    def find(self, docid: str) -> tuple[str, dict[str, Any]] | None:
        with self.lock:
            got = self.docs.get(docid)
            return None if got is None else (got[0], dict(got[1]))

    def get(self, collection: str, docid: str) -> dict[str, Any]:
        """The stored document; 404 if there is none, 409 if the id belongs to another collection."""
        got = self.find(docid)
        if got is None:
            raise ApiError(404, NOT_FOUND)
        if got[0] != collection:
            raise ApiError(409, CONFORMANCE)
        return got[1]

    def lookup(self, fqn: str) -> dict[str, Any] | None:
        """The stored action (with ``_rev``) of ``ns/[pkg/]name``, or None: the controller driver's catalog."""
        got = self.find(fqn.strip("/"))
        return got[1] if got is not None and got[0] == ACTIONS else None

    def write(self, collection: str, docid: str, overwrite: bool,
              build: Callable[[dict[str, Any] | None], dict[str, Any]]) -> dict[str, Any]:
        """Create or update ``docid`` with ``build(old)`` (``ApiUtils.putEntity``); the new document."""
        with self.lock:
            got = self.docs.get(docid)
            if got is not None and got[0] != collection:
                raise ApiError(409, CONFORMANCE)
            old = got[1] if got is not None else None
            if old is not None and not overwrite:
                raise ApiError(409, EXISTS)
            doc = build(old)
            doc["_rev"] = _revision(doc, old)
            self.docs[docid] = (collection, doc)
            return dict(doc)

    def replace(self, docid: str, change: Callable[[dict[str, Any]], None]) -> None:
        """Change a stored document in place under the lock (a trigger's rule links); absent: nothing."""
        with self.lock:
            got = self.docs.get(docid)
            if got is not None:
                doc = dict(got[1])
                change(doc)
                doc["_rev"] = _revision(doc, got[1])
                self.docs[docid] = (got[0], doc)

    def delete(self, collection: str, docid: str) -> dict[str, Any]:
        with self.lock:
            doc = self.get(collection, docid)
            del self.docs[docid]
            return doc

    def listed(self, collection: str, namespace: str, with_root: bool = True) -> list[dict[str, Any]]:
        """The collection's documents under ``namespace`` (``ns`` or ``ns/pkg``), newest first, as the
        entity views emit them (key ``[namespace, updated]``, read descending: equal times by document id,
        descending): an entity in a package is also listed under its root namespace (actions, triggers,
        rules), a package only under its own."""
        with self.lock:
            docs = [(d["updated"], docid, dict(d)) for docid, (c, d) in self.docs.items() if c == collection and (
                d["namespace"] == namespace
                or with_root and collection != PACKAGES and d["namespace"].split("/")[0] == namespace)]
        return [d for _, _, d in sorted(docs, key=lambda t: (t[0], t[1]), reverse=True)]
