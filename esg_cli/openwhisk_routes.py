"""The routes of OpenWhisk's REST API (``/api/v1/namespaces/...``), for the REST stand-in: who may do
what (``Entitlement.scala`` with ``ActionCollection``/``PackageCollection``) and what each call does
and answers (``Actions.scala``, ``Packages.scala``, ``Triggers.scala``, ``Rules.scala``,
``Namespaces.scala``, ``Activations.scala``). HTTP itself is ``esg_cli.openwhisk_standin``'s.

Entitlement: a caller has every right in its own namespace. In another namespace it may list that
namespace's shared packages, read a shared package (``publish: true``, not a binding), and read or
invoke an action in one; anything else is 403 ``The supplied authentication is not authorized to access
'<ns>/<entity>'.`` A package binding resolves to the bound package: reading or invoking
``ns/binding/action`` is reading or invoking the bound package's action with the package's, then the
binding's, then the action's parameters.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from controller_plugin.activation_store import ActivationStore, StoreError
from esg_cli import openwhisk_activations as records
from esg_cli import openwhisk_views as views
from esg_cli.openwhisk_controller import Controller, NoInvoker
from esg_cli.openwhisk_entities import (
    ACTIONS,
    MALFORMED,
    NOT_FOUND,
    PACKAGES,
    RULES,
    SEQUENCE_LIMIT,
    TRIGGERS,
    ApiError,
    EntityStore,
    Identity,
    fqn_of,
    make_action,
    make_package,
    make_rule,
    make_trigger,
    malformed,
    merge_parameters,
    split_fqn,
    valid_name,
)

BLOCKING_WAIT_S = 60.0
"""OpenWhisk's ``max-wait-for-blocking-activation``."""
INTERNAL = "There was an internal server error."
UNAVAILABLE = "The server is currently unavailable (because it is overloaded or down for maintenance)."
ENTITY_OPS = {ACTIONS: ("PUT", "GET", "DELETE", "POST"), PACKAGES: ("PUT", "GET", "DELETE"),
              TRIGGERS: ("PUT", "GET", "DELETE", "POST"), RULES: ("PUT", "GET", "DELETE", "POST"),
              "activations": ("GET",)}
RIGHTS = {"GET": "READ", "PUT": "PUT", "DELETE": "DELETE", "POST": "ACTIVATE"}


@dataclass
class Reply:
    """An answer: JSON ``body`` (``text`` for a plain-text one, None for none) and extra headers."""

    status: int
    body: Any = None
    headers: dict[str, str] = field(default_factory=dict)
    text: bool = False


@dataclass(frozen=True)
class Call:
    """One authenticated call on a collection of namespace ``ns`` (``_`` resolved)."""

    caller: Identity
    method: str
    ns: str
    collection: str
    segments: tuple[str, ...]
    """The path after the collection; ``("pkg", "")`` for ``actions/pkg/``."""
    query: dict[str, list[str]]
    body: bytes
    headers: dict[str, str]
    received_ms: int

    def json(self, objects_only: bool = True) -> Any:
        """The body as JSON (empty: None); 400 if it is not JSON, or not an object when ``objects_only``."""
        if not self.body.strip():
            return None
        try:
            value = json.loads(self.body)
        except (ValueError, RecursionError):
            raise malformed("the request body is not valid JSON") from None
        if objects_only and not isinstance(value, dict):
            raise malformed("JSON object expected")
        return value

    def flag(self, name: str, default: bool = False) -> bool:
        raw = self.query.get(name, [str(default).lower()])[0].lower()
        if raw not in ("true", "false"):
            raise ApiError(400, f"The query parameter '{name}' was malformed:\n'{raw}' is not a valid Boolean value")
        return raw == "true"


def forbidden(what: str) -> ApiError:
    return ApiError(403, f"The supplied authentication is not authorized to access '{what}'.")


class Routes:
    def __init__(self, store: EntityStore, controller: Controller,
                 activation_store: Callable[[], str | None]) -> None:
        self.store = store
        self.controller = controller
        self.activation_store = activation_store

    def dispatch(self, call: Call) -> Reply:
        segs = call.segments
        if segs == ("",) or call.collection == "activations" and len(segs) == 2 and segs[1] == "":
            segs = segs[:-1]                       # a trailing slash, as pathEndOrSingleSlash takes it
        if not segs:
            if call.method != "GET":
                raise ApiError(405, "HTTP method not allowed, supported methods: GET")
            return self._list(call)
        if call.method not in ENTITY_OPS[call.collection]:
            raise ApiError(405, "HTTP method not allowed, supported methods: " + ", ".join(ENTITY_OPS[call.collection]))
        if call.collection == "activations":
            return self._activation(call, segs)
        if call.collection == ACTIONS and len(segs) == 2 and segs[1] == "":
            if call.method != "GET":
                raise ApiError(405, "HTTP method not allowed, supported methods: GET")
            return self._package_actions(call, segs[0])
        if len(segs) > (2 if call.collection == ACTIONS else 1):
            raise ApiError(404, "The requested resource could not be found.")
        for s in segs:
            if not valid_name(s):
                raise ApiError(400, "The name of the entity contains illegal characters.")
        handler = {ACTIONS: self._action, PACKAGES: self._package, TRIGGERS: self._trigger, RULES: self._rule}
        return handler[call.collection](call, segs)

    # -- entitlement -----------------------------------------------------------------------------------
    def package_readable(self, caller: str, ns: str, name: str, owner_missing: str = NOT_FOUND) -> bool:
        """``PackageCollection.checkPackageReadPermission``: a missing package is 404 to its owner (with
        ``owner_missing``) and unreadable to anyone else; a binding is readable by its owner when the
        package it binds is."""
        found = self.store.find(f"{ns}/{name}")
        owner = caller == ns
        if found is None:
            if owner:
                raise ApiError(404, owner_missing)
            return False
        kind, doc = found
        if kind != PACKAGES:
            if owner:
                raise ApiError(409, "Resource by this name exists but is not in this collection.")
            return False
        if not doc["binding"]:
            return owner or bool(doc["publish"])
        if not owner:
            return False
        b = doc["binding"]
        if f"{b['namespace']}/{b['name']}" == f"{ns}/{name}":
            raise ApiError(422, f"Package binding '{ns}/{name}' contains a circular reference.")
        return self.package_readable(caller, b["namespace"], b["name"])

    def resolve_action(self, caller: Identity, ns: str, segs: tuple[str, ...], right: str
                       ) -> tuple[str, dict[str, Any], str | None]:
        """``(fqn, document with merged parameters, binding)`` of the action ``ns/segs`` for ``right``."""
        if len(segs) == 1:
            if caller.namespace != ns:
                raise forbidden(f"{ns}/{segs[0]}")
            fqn = f"{ns}/{segs[0]}"
            return fqn, self.store.get(ACTIONS, fqn) if right in ("READ", "ACTIVATE") else {}, None
        pkg, name = segs
        if right in ("READ", "ACTIVATE"):
            if not self.package_readable(caller.namespace, ns, pkg):
                raise forbidden(f"{ns}/{pkg}")
        elif caller.namespace != ns:
            raise forbidden(f"{ns}/{pkg}/{name}")
        package = self.store.get(PACKAGES, f"{ns}/{pkg}")
        binding = None
        params = package["parameters"]
        if package["binding"]:
            if right not in ("READ", "ACTIVATE"):
                raise ApiError(400, "Operation not permitted on package binding.")
            binding = f"{ns}/{pkg}"
            b = package["binding"]
            bound = self.store.get(PACKAGES, f"{b['namespace']}/{b['name']}")
            params = merge_parameters(bound["parameters"], params)
            ns, pkg = b["namespace"], b["name"]
        fqn = f"{ns}/{pkg}/{name}"
        if right not in ("READ", "ACTIVATE"):
            return fqn, {}, None
        doc = self.store.get(ACTIONS, fqn)
        doc["parameters"] = merge_parameters(params, doc["parameters"])
        return fqn, doc, binding

    def resolve_component(self, caller: Identity, fqn: str) -> tuple[str, dict[str, Any], str | None] | None:
        """A sequence component, or None when it (or its package) does not exist."""
        ns, *segs = fqn.split("/")
        try:
            return self.resolve_action(caller, ns, tuple(segs), "ACTIVATE")
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    def _own(self, call: Call, what: str) -> None:
        if call.caller.namespace != call.ns:
            raise forbidden(what)

    # -- lists -----------------------------------------------------------------------------------------
    def _list(self, call: Call) -> Reply:
        opts = views.list_options(call.query, call.collection)
        if isinstance(opts, str):
            raise ApiError(400, opts)
        if call.collection == "activations":
            self._own(call, call.ns)
            if opts.count and opts.docs:
                raise ApiError(400, "The parameter 'docs' is not permitted with 'count'.")
            return Reply(200, self._with_store(
                lambda s: records.count_activations(s, call.ns, opts) if opts.count
                else records.list_activations(s, call.ns, opts)))
        if call.collection == PACKAGES:
            docs = self.store.listed(PACKAGES, call.ns)
            if call.caller.namespace != call.ns:
                docs = [d for d in docs if d["publish"] and not d["binding"]]
            shown = [views.package_summary(d) for d in docs]
        else:
            self._own(call, call.ns)
            docs = self.store.listed(call.collection, call.ns)
            shown = {ACTIONS: lambda: [views.action_summary(d) for d in docs],
                     TRIGGERS: lambda: [views.trigger_summary(d) for d in docs],
                     RULES: lambda: [_rule_doc(d) for d in docs]}[call.collection]()
        if opts.count:
            return Reply(200, {call.collection: max(0, len(shown) - opts.skip)})
        return Reply(200, shown[opts.skip:opts.skip + opts.limit])

    def _package_actions(self, call: Call, pkg: str) -> Reply:
        """``GET .../actions/pkg/``: the package's actions (a binding's: the bound package's)."""
        if not self.package_readable(call.caller.namespace, call.ns, pkg):
            raise forbidden(f"{call.ns}/{pkg}")
        package = self.store.get(PACKAGES, f"{call.ns}/{pkg}")
        b = package["binding"]
        path = f"{b['namespace']}/{b['name']}" if b else f"{call.ns}/{pkg}"
        opts = views.list_options(call.query, ACTIONS)
        if isinstance(opts, str):
            raise ApiError(400, opts)
        docs = [views.action_summary(d) for d in self.store.listed(ACTIONS, path, with_root=False)]
        if opts.count:
            return Reply(200, {ACTIONS: max(0, len(docs) - opts.skip)})
        return Reply(200, docs[opts.skip:opts.skip + opts.limit])

    # -- actions ---------------------------------------------------------------------------------------
    def _action(self, call: Call, segs: tuple[str, ...]) -> Reply:
        right = RIGHTS[call.method]
        fqn, doc, binding = self.resolve_action(call.caller, call.ns, segs, right)
        if call.method == "GET":
            shown = views.public(doc)
            if not call.flag("code", True):
                shown["exec"] = {k: v for k, v in doc["exec"].items() if k != "code"}
            return Reply(200, shown)
        if call.method == "DELETE":
            return Reply(200, views.public(self.store.delete(ACTIONS, fqn)))
        if call.method == "PUT":
            return self._put_action(call, fqn)
        return self.invoke(call, fqn, doc, binding)

    def _put_action(self, call: Call, fqn: str) -> Reply:
        body = call.json() or {}
        ns_path, _, name = fqn.rpartition("/")
        if ns_path != call.ns:
            self.store.get(PACKAGES, ns_path)          # the package must exist (a binding was refused above)
        exec_ = body.get("exec") if isinstance(body.get("exec"), dict) else None
        if exec_ is not None and str(exec_.get("kind", "")).strip().lower() == "sequence":
            self._check_sequence(call, fqn, exec_)
        overwrite = call.flag("overwrite")
        doc = self.store.write(ACTIONS, fqn, overwrite,
                               lambda old: make_action(ns_path, name, body, old, call.caller.namespace))
        return Reply(200, views.public(doc))

    def _check_sequence(self, call: Call, fqn: str, exec_: dict[str, Any]) -> None:
        """``checkSequenceActionLimits``: components exist and may be read, no cycle, at most the limit."""
        components = exec_.get("components")
        if not isinstance(components, list):
            return                                      # the body's own check names it
        if not components:
            raise ApiError(400, "No component specified for the sequence.")
        if len(components) > SEQUENCE_LIMIT:
            raise ApiError(400, "Too many actions in the sequence.")
        names = [split_fqn(c, call.caller.namespace, "components") for c in components]
        denied = []
        for c in names:
            ns, *segs = c.split("/")
            if len(segs) == 2 and not self.package_readable(call.caller.namespace, ns, segs[0], NOT_FOUND) \
                    or len(segs) == 1 and ns != call.caller.namespace:
                denied.append(c)
        if denied:
            raise forbidden(", ".join(sorted(denied)))
        count = self._atomic(call.caller, fqn, names, set())
        if count > SEQUENCE_LIMIT:
            raise ApiError(400, "Too many actions in the sequence.")

    def _atomic(self, caller: Identity, seq: str, components: list[str], seen: set[str]) -> int:
        total = 0
        for c in components:
            if c == seq:
                raise ApiError(400, "Sequence may not refer to itself.")
            try:
                resolved = self.resolve_component(caller, c)
            except ApiError:
                resolved = None
            if resolved is None:
                raise ApiError(400, "Sequence component does not exist.")
            cfqn, cdoc, _ = resolved
            if cfqn == seq:
                raise ApiError(400, "Sequence may not refer to itself.")
            if cdoc["exec"]["kind"] == "sequence":
                if cfqn in seen:
                    continue
                inner = [x.strip("/") for x in cdoc["exec"]["components"]]
                total += self._atomic(caller, seq, inner, seen | {cfqn})
            else:
                total += 1
        return total

    def invoke(self, call: Call, fqn: str, doc: dict[str, Any], binding: str | None) -> Reply:
        """``Actions.activate``/``doInvoke``."""
        payload = call.json()
        blocking, result = call.flag("blocking"), call.flag("result")
        wait_s = BLOCKING_WAIT_S
        if "timeout" in call.query:
            raw = call.query["timeout"][0]
            if not raw.isdigit() or not 0 < int(raw) <= BLOCKING_WAIT_S * 1000:
                raise ApiError(400, "The query parameter 'timeout' was malformed:\n"
                                    f"Timeout must be number of milliseconds up to {int(BLOCKING_WAIT_S * 1000)}.")
            wait_s = int(raw) / 1000
        if isinstance(payload, dict) and _final_keys(doc) & set(payload):
            raise ApiError(400, "Request defines parameters that are not allowed (e.g., reserved properties).")
        if doc["exec"]["kind"] == "sequence":
            denied = [c.strip("/") for c in doc["exec"]["components"] if not self._may_activate(call.caller, c)]
            if denied:
                raise forbidden(", ".join(sorted(denied)))
        try:
            answer = self.controller.invoke(call.caller, fqn, doc, payload, blocking, wait_s, binding,
                                            call.received_ms)
        except NoInvoker:
            raise ApiError(503, UNAVAILABLE) from None
        if isinstance(answer, str):
            return Reply(202, {"activationId": answer}, {"x-openwhisk-activation-id": answer})
        code = views.status_code(answer)
        value = (answer.get("response") or {}).get("result")
        if isinstance(value, list):
            body: Any = value
        else:
            body = (value if value is not None else {}) if result else views.extended(answer)
        return Reply(views.HTTP_STATUS[code], body, {"x-openwhisk-activation-id": str(answer.get("activationId"))})

    def _may_activate(self, caller: Identity, component: str) -> bool:
        ns, *segs = component.strip("/").split("/")
        if len(segs) == 1:
            return ns == caller.namespace
        try:
            return self.package_readable(caller.namespace, ns, segs[0])
        except ApiError:
            return True                                 # missing: the sequence's own answer says so

    def post_rule_action(self, call: Call, action: str, args: dict[str, Any]) -> tuple[int, Any]:
        """What ``POST .../actions/<action>`` with ``args`` answers the caller (a rule fired)."""
        ns, *segs = action.split("/")
        sub = Call(call.caller, "POST", ns, ACTIONS, tuple(segs), {}, json.dumps(args).encode(),
                   call.headers, call.received_ms)
        try:
            fqn, doc, binding = self.resolve_action(call.caller, ns, tuple(segs), "ACTIVATE")
            reply = self.invoke(sub, fqn, doc, binding)
        except ApiError as exc:
            return exc.status, {"error": exc.message}
        return reply.status, reply.body

    # -- packages --------------------------------------------------------------------------------------
    def _package(self, call: Call, segs: tuple[str, ...]) -> Reply:
        (name,) = segs
        fqn = f"{call.ns}/{name}"
        if call.method == "GET":
            if not self.package_readable(call.caller.namespace, call.ns, name,
                                         f"The requested resource '{fqn}' does not exist."):
                raise forbidden(fqn)
            return Reply(200, self._package_view(self.store.get(PACKAGES, fqn)))
        self._own(call, fqn)
        if call.method == "DELETE":
            return self._delete_package(call, fqn)
        body = call.json() or {}
        binding = body.get("binding")
        if isinstance(binding, dict) and binding:
            bns = binding.get("namespace")
            bns = call.caller.namespace if bns in ("_", "", None) else str(bns).strip("/")
            bname = str(binding.get("name"))
            try:
                readable = self.package_readable(call.caller.namespace, bns, bname)
            except ApiError as exc:
                if exc.status == 404:
                    raise ApiError(400, "Binding references a package that does not exist.") from None
                if exc.status == 409:
                    raise ApiError(409, "Cannot bind to a resource that is not a package.") from None
                raise
            if not readable:
                raise forbidden(f"{bns}/{bname}")
        doc = self.store.write(PACKAGES, fqn, call.flag("overwrite"), lambda old: make_package(
            call.ns, name, body, old, call.caller.namespace, self.store.find))
        return Reply(200, views.public(doc))

    def _package_view(self, pkg: dict[str, Any]) -> dict[str, Any]:
        """``mergePackageWithBinding``: the package (a binding: with the bound package's parameters under
        its own) with its actions and feeds."""
        shown = views.public(pkg)
        source = pkg
        if pkg["binding"]:
            b = pkg["binding"]
            source = self.store.get(PACKAGES, f"{b['namespace']}/{b['name']}")
            shown["parameters"] = merge_parameters(source["parameters"], pkg["parameters"])
        actions = [{"name": d["name"], "version": d["version"], "annotations": d["annotations"]}
                   for d in self.store.listed(ACTIONS, f"{source['namespace']}/{source['name']}", with_root=False)]
        is_feed = [any(a["key"] == "feed" for a in d["annotations"]) for d in actions]
        shown["actions"] = [a for a, feed in zip(actions, is_feed) if not feed]
        shown["feeds"] = [a for a, feed in zip(actions, is_feed) if feed]
        return shown

    def _delete_package(self, call: Call, fqn: str) -> Reply:
        pkg = self.store.get(PACKAGES, fqn)
        if not pkg["binding"]:
            inside = self.store.listed(ACTIONS, fqn, with_root=False)
            if inside and not call.flag("force"):
                n = len(inside)
                raise ApiError(409, f"Package not empty (contains {n} {'entity' if n == 1 else 'entities'}). "
                                    "Set force param or delete package contents.")
            for doc in inside:
                self.store.delete(ACTIONS, f"{fqn}/{doc['name']}")
        return Reply(200, views.public(self.store.delete(PACKAGES, fqn)))

    # -- triggers --------------------------------------------------------------------------------------
    def _trigger(self, call: Call, segs: tuple[str, ...]) -> Reply:
        (name,) = segs
        fqn = f"{call.ns}/{name}"
        self._own(call, fqn)
        if call.method == "GET":
            return Reply(200, views.public(self.store.get(TRIGGERS, fqn)))
        if call.method == "DELETE":
            return Reply(200, views.public(self.store.delete(TRIGGERS, fqn)))
        if call.method == "PUT":
            body = call.json() or {}
            doc = self.store.write(TRIGGERS, fqn, call.flag("overwrite"),
                                   lambda old: make_trigger(call.ns, name, body, old))
            return Reply(200, views.public(doc))
        payload = call.json()
        trigger = self.store.get(TRIGGERS, fqn)
        headers = {k: v for k, v in call.headers.items()
                   if k not in ("content-type", "content-length", "transfer-encoding", "timeout-access")}
        aid = self.controller.fire(call.caller, trigger, payload, headers,
                                   lambda action, args: self.post_rule_action(call, action, args))
        if aid is None:
            return Reply(204)
        return Reply(202, {"activationId": aid}, {"x-openwhisk-activation-id": aid})

    # -- rules -----------------------------------------------------------------------------------------
    def _rule(self, call: Call, segs: tuple[str, ...]) -> Reply:
        (name,) = segs
        fqn = f"{call.ns}/{name}"
        self._own(call, fqn)
        if call.method == "GET":
            rule = self.store.get(RULES, fqn)
            return Reply(200, _rule_doc(rule, self._status(rule, fqn)))
        if call.method == "DELETE":
            rule = self.store.delete(RULES, fqn)
            self.store.replace(fqn_of(rule["trigger"]), lambda t: _unlink(t, fqn))
            return Reply(200, _rule_doc(rule, "inactive"))
        if call.method == "POST":
            return self._rule_status(call, fqn)
        body = call.json() or {}
        overwrite = call.flag("overwrite")
        with self.store.lock:
            old = self.store.find(fqn)
            status = self._status(old[1], fqn) if old is not None and old[0] == RULES else "active"
            doc = self.store.write(RULES, fqn, overwrite, lambda prev: self._make_rule(call, name, body, prev))
            if old is not None and old[0] == RULES and old[1]["trigger"] != doc["trigger"]:
                self.store.replace(fqn_of(old[1]["trigger"]), lambda t: _unlink(t, fqn))
            self.store.replace(fqn_of(doc["trigger"]), lambda t: _link(t, fqn, doc["action"], status))
        return Reply(200, _rule_doc(doc, status))

    def _make_rule(self, call: Call, name: str, body: dict[str, Any], old: dict[str, Any] | None) -> dict[str, Any]:
        doc = make_rule(call.ns, name, body, old, call.caller.namespace)
        trigger, action = fqn_of(doc["trigger"]), fqn_of(doc["action"])
        tns, *_ = trigger.split("/")
        ans, *asegs = action.split("/")
        denied = ([trigger] if tns != call.caller.namespace else []) + (
            [action] if not (ans == call.caller.namespace or len(asegs) == 2 and self._readable(call, ans, asegs[0]))
            else [])
        if denied:
            raise forbidden(", ".join(sorted(denied)))
        found = self.store.find(trigger)
        if found is None or found[0] != TRIGGERS:
            raise ApiError(400, f"trigger /{trigger} does not exist")
        try:
            self.resolve_action(call.caller, ans, tuple(asegs), "READ")
        except ApiError:
            raise ApiError(400, f"action /{action} does not exist") from None
        return doc

    def _readable(self, call: Call, ns: str, pkg: str) -> bool:
        try:
            return self.package_readable(call.caller.namespace, ns, pkg)
        except ApiError:
            return False

    def _status(self, rule: dict[str, Any], fqn: str) -> str:
        found = self.store.find(fqn_of(rule["trigger"]))
        link = (found[1].get("rules") or {}).get(fqn) if found is not None and found[0] == TRIGGERS else None
        return link["status"] if link else "inactive"

    def _rule_status(self, call: Call, fqn: str) -> Reply:
        body = call.json()
        status = body.get("status") if isinstance(body, dict) else None
        if status not in ("active", "inactive"):
            raise malformed(f"'{status}' is not a recognized rule state, must be one of ['active', 'inactive']"
                            if isinstance(status, str) else "'status' must be a string")
        with self.store.lock:
            rule = self.store.get(RULES, fqn)
            if self._status(rule, fqn) != status:
                trigger = fqn_of(rule["trigger"])
                found = self.store.find(trigger)
                if found is None or found[0] != TRIGGERS:
                    raise ApiError(404, "Only rules with existing triggers can be activated")
                self.store.replace(trigger, lambda t: _link(t, fqn, rule["action"], status))
        return Reply(200, "OK", text=True)

    # -- activations -----------------------------------------------------------------------------------
    def _activation(self, call: Call, segs: tuple[str, ...]) -> Reply:
        self._own(call, call.ns)
        aid = segs[0]
        if not views.valid_activation_id(aid):
            raise ApiError(400, "The activation id is not valid.")
        part = segs[1] if len(segs) > 1 else ""
        if len(segs) > 2 or part not in ("", "result", "logs"):
            raise ApiError(404, "The requested resource could not be found.")
        record = self._with_store(lambda s: records.fetch(s, call.ns, aid))
        if record is None:
            raise ApiError(404, NOT_FOUND)
        if part == "result":
            return Reply(200, views.extended_response(record.get("response") or {}))
        if part == "logs":
            return Reply(200, {"logs": list(record.get("logs") or [])})
        return Reply(200, views.extended(record))

    def _with_store(self, read: Callable[[ActivationStore], Any]) -> Any:
        url = self.activation_store()
        if url is None:
            raise ApiError(500, INTERNAL)
        store = ActivationStore(url)
        try:
            return read(store)
        except StoreError:
            raise ApiError(500, INTERNAL) from None
        finally:
            store.close()


def _final_keys(doc: dict[str, Any]) -> set[str]:
    """``immutableParameters``: with the annotation ``final: true``, parameters with a value are fixed."""
    final = any(a["key"] == "final" and a["value"] is True for a in doc.get("annotations") or [])
    return {p["key"] for p in doc.get("parameters") or [] if p.get("value") is not None} if final else set()


def _rule_doc(rule: dict[str, Any], status: str | None = None) -> dict[str, Any]:
    """A rule as OpenWhisk shows it (``WhiskRuleResponse`` with ``status``; in lists without)."""
    out = views.public(rule)
    if status is not None:
        out["status"] = status
    return out


def _link(trigger: dict[str, Any], rule: str, action: dict[str, str], status: str) -> None:
    trigger["rules"] = {**(trigger.get("rules") or {}), rule: {"action": dict(action), "status": status}}


def _unlink(trigger: dict[str, Any], rule: str) -> None:
    if trigger.get("rules") is not None:
        trigger["rules"] = {k: v for k, v in trigger["rules"].items() if k != rule}


__all__ = ["MALFORMED", "Call", "Reply", "Routes"]
