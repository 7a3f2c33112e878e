"""How OpenWhisk's REST API shows entities to users, for the REST stand-in: pure functions over JSON.

* An activation record as stored (the ``response`` holds ``statusCode``, as invokers write it) is shown
  *extended* (``WhiskActivation.toExtendedJson``): ``response`` gets ``status`` and ``success`` instead
  of ``statusCode``; a record whose ``end`` is 0 (a trigger's) has no ``end`` and no ``duration``.
* List calls show *summaries*, what the entity views of OpenWhisk's ``whisks`` design document emit: an
  action's ``exec`` is only ``{"binary": ...}``; a package has ``binding`` (``false`` or the bound
  package); a trigger has no parameters, limits or rules; rules are listed whole (the controller reads
  them with their documents), without their status.
* A blocking invoke's HTTP status follows the activation's status code: 200 success, 502 application or
  action developer error, 500 whisk internal error (``Actions.doInvoke``).
* List options (``RestApiCommons``, ``Activations.list``): ``limit`` an integer 0-200 (absent: 30; 0: the
  maximum, 200), ``skip`` an integer >= 0, ``count=true`` answers ``{"<collection>": n}`` (n = how many
  there are, less ``skip``); activations also take ``since``/``upto`` (epoch ms, bounds of ``start``,
  both included), ``name`` (``action`` or ``package/action``) and ``docs=true`` (whole records; not with
  ``count``). A bad value is 400 with Pekko's ``The query parameter '<p>' was malformed:`` and
  OpenWhisk's message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from openwhisk_status import (
    STATUS_APPLICATION_ERROR,
    STATUS_DEVELOPER_ERROR,
    STATUS_SUCCESS,
    STATUS_WHISK_ERROR,
)

STATUS_TEXT = {STATUS_SUCCESS: "success", STATUS_APPLICATION_ERROR: "application error",
               STATUS_DEVELOPER_ERROR: "action developer error", STATUS_WHISK_ERROR: "whisk internal error"}
HTTP_STATUS = {STATUS_SUCCESS: 200, STATUS_APPLICATION_ERROR: 502, STATUS_DEVELOPER_ERROR: 502,
               STATUS_WHISK_ERROR: 500}
DEFAULT_LIMIT = 30
MAX_LIMIT = 200
_ACTIVATION_ID = re.compile(r"[0-9a-f]{32}")
_SEGMENT = re.compile(r"\A([\w]|[\w][\w@ .&-]{0,254}[\w@.&-])\Z")


def valid_activation_id(text: str) -> bool:
    return bool(_ACTIVATION_ID.fullmatch(text))


def status_code(record: dict[str, Any]) -> int:
    code = (record.get("response") or {}).get("statusCode", STATUS_WHISK_ERROR)
    return code if code in STATUS_TEXT else STATUS_WHISK_ERROR


def extended_response(response: dict[str, Any]) -> dict[str, Any]:
    """``ActivationResponse.toExtendedJson``: ``statusCode`` becomes ``status`` and ``success``."""
    code = response.get("statusCode", STATUS_WHISK_ERROR)
    out = {k: v for k, v in response.items() if k != "statusCode"}
    out.update(status=STATUS_TEXT.get(code, STATUS_TEXT[STATUS_WHISK_ERROR]), success=code == STATUS_SUCCESS)
    return out


def extended(record: dict[str, Any]) -> dict[str, Any]:
    """``WhiskActivation.toExtendedJson``: the record as users see it."""
    out = dict(record)
    out["response"] = extended_response(record.get("response") or {})
    if out.get("end", 0) == 0:
        out.pop("end", None)
        out.pop("duration", None)
    elif "start" in out:
        out.setdefault("duration", out["end"] - out["start"])
    return out


def action_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """An action as ``GET .../actions`` lists it (the ``actions`` view)."""
    out = {k: doc[k] for k in ("namespace", "name", "version", "publish", "annotations", "limits", "updated")
           if k in doc}
    out["exec"] = {"binary": bool((doc.get("exec") or {}).get("binary", False))}
    return out


def package_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """A package as ``GET .../packages`` lists it (the ``packages`` view)."""
    out = {k: doc[k] for k in ("namespace", "name", "version", "publish", "annotations", "updated")}
    out["binding"] = dict(doc["binding"]) if doc.get("binding") else False
    return out


def trigger_summary(doc: dict[str, Any]) -> dict[str, Any]:
    return {k: doc[k] for k in ("namespace", "name", "version", "publish", "annotations", "updated")}


def public(doc: dict[str, Any]) -> dict[str, Any]:
    """A stored entity without the store's own fields (``_rev``)."""
    return {k: v for k, v in doc.items() if not k.startswith("_")}


@dataclass(frozen=True)
class ListOptions:
    skip: int = 0
    limit: int = DEFAULT_LIMIT
    count: bool = False
    docs: bool = False
    name: str | None = None
    since: int | None = None
    upto: int | None = None


def _bad(param: str, message: str) -> str:
    return f"The query parameter '{param}' was malformed:\n{message}"


def _flag(query: dict[str, list[str]], param: str) -> bool | str:
    raw = query.get(param, ["false"])[0]
    if raw.lower() in ("true", "false"):
        return raw.lower() == "true"
    return _bad(param, f"'{raw}' is not a valid Boolean value")


def list_options(query: dict[str, list[str]], collection: str) -> ListOptions | str:
    """The list options of a call on ``collection``, or the 400 message naming the bad one."""
    raw_limit = query.get("limit", [str(DEFAULT_LIMIT)])[0]
    raw_skip = query.get("skip", ["0"])[0]
    try:
        limit = int(raw_limit)
    except ValueError:
        return _bad("limit", f"The value '{raw_limit}' is not an integer for {collection}.")
    if not 0 <= limit <= MAX_LIMIT:
        return _bad("limit", f"The value '{limit}' is not in the range of 0 to {MAX_LIMIT} for {collection}.")
    try:
        skip = int(raw_skip)
    except ValueError:
        return _bad("skip", f"The value '{raw_skip}' is not an integer for {collection}.")
    if skip < 0:
        return _bad("skip", f"The value '{skip}' is not greater than or equal to 0 for {collection}.")
    count = _flag(query, "count")
    if isinstance(count, str):
        return count
    opts = ListOptions(skip, limit or MAX_LIMIT, count)
    if collection != "activations":
        return opts
    docs = _flag(query, "docs")
    if isinstance(docs, str):
        return docs
    name = query.get("name", [""])[0].strip().strip("/") or None
    if name is not None and (len(name.split("/")) > 2 or not all(_SEGMENT.match(s) for s in name.split("/"))):
        return _bad("name", f"Parameter may be a 'simple' name or 'package-name/simple' name: {name}")
    bounds = []
    for param in ("since", "upto"):
        raw = query.get(param, [None])[0]
        try:
            bounds.append(None if raw is None else int(raw))
        except ValueError:
            return _bad(param, f"Parameter is not a valid value for epoch seconds: {raw}")
    return ListOptions(skip, limit or MAX_LIMIT, count, docs, name, bounds[0], bounds[1])
