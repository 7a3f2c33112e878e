"""How OpenWhisk's REST API shows entities to users, for the REST stand-in: pure functions over JSON.

* An activation record as stored (the ``response`` holds ``statusCode``, as invokers write it) is shown
  *extended* (``WhiskActivation.toExtendedJson``): ``response`` gets ``status`` and ``success`` instead
  of ``statusCode``.
* List calls show *summaries* (the database views): an action's ``exec`` is only ``{"binary": ...}``;
  an activation has no response, logs or result, only its ``statusCode``.
* A blocking invoke's HTTP status follows the activation's status code: 200 success, 502 application or
  action developer error, 500 whisk internal error (``Actions.doInvoke``).
* ``limit`` and ``skip`` of list calls: integers, ``limit`` 0-200 (absent: 30; 0: no limit, as the
  activation store reads it), ``skip`` >= 0; otherwise a 400 with OpenWhisk's message.
"""

from __future__ import annotations

import re
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
    if "start" in out and "end" in out:
        out.setdefault("duration", out["end"] - out["start"])
    return out


def activation_summary(record: dict[str, Any]) -> dict[str, Any]:
    """An activation as ``GET .../activations`` lists it without ``docs=true``."""
    out = {k: record[k] for k in ("namespace", "name", "version", "publish", "annotations", "activationId",
                                  "start", "end", "duration", "cause") if k in record}
    out["statusCode"] = status_code(record)
    return out


def action_summary(doc: dict[str, Any]) -> dict[str, Any]:
    """An action as ``GET .../actions`` lists it."""
    out = {k: doc[k] for k in ("namespace", "name", "version", "publish", "annotations", "limits", "updated")
           if k in doc}
    out["exec"] = {"binary": bool((doc.get("exec") or {}).get("binary", False))}
    return out


def page(query: dict[str, list[str]], collection: str) -> tuple[int, int | None] | str:
    """``(skip, limit)`` of a list call (limit None: all), or OpenWhisk's 400 message naming the bad value."""
    raw_limit = query.get("limit", [str(DEFAULT_LIMIT)])[0]
    raw_skip = query.get("skip", ["0"])[0]
    try:
        limit = int(raw_limit)
    except ValueError:
        return f"The value '{raw_limit}' is not an integer for {collection}."
    try:
        skip = int(raw_skip)
    except ValueError:
        return f"The value '{raw_skip}' is not an integer for {collection}."
    if not 0 <= limit <= MAX_LIMIT:
        return f"The value '{limit}' is not in the range of 0 to {MAX_LIMIT} for {collection}."
    if skip < 0:
        return f"The value '{skip}' is not greater than or equal to 0 for {collection}."
    return skip, limit or None
