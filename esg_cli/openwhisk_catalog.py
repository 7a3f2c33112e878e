"""The ``whisk.system/utils`` package of OpenWhisk's catalog, which a deployment installs after the
controller (``openwhisk-catalog``'s ``packages/utils``) and which clients and examples call by its fully
qualified names (``/whisk.system/utils/echo`` in a sequence, ``/whisk.system/utils/sort``).

The catalog's actions are Node.js; here each is the same function in Python (the embedded cluster's
runner runs Python): the same arguments and results, ``kind: python:3``. ``hosturl`` is left out (it
builds URLs from the controller's public host).
"""

from __future__ import annotations

from typing import Any

PACKAGE = "whisk.system/utils"

ACTIONS: dict[str, str] = {
    "echo": "def main(args):\n    return args or {}\n",
    "cat": ("def main(args):\n"
            "    lines = args.get('lines') or []\n"
            "    return {'lines': lines, 'payload': '\\n'.join(str(x) for x in lines)}\n"),
    "sort": ("def main(args):\n"
             "    lines = sorted(args.get('lines') or [], key=str)\n"
             "    return {'lines': lines, 'length': len(lines)}\n"),
    "head": ("def main(args):\n"
             "    lines = args.get('lines') or []\n"
             "    num = args.get('num') or 1\n"
             "    return {'lines': lines[:num], 'num': num}\n"),
    "split": ("import re\n\n\n"
              "def main(args):\n"
              "    payload = str(args.get('payload', ''))\n"
              "    separator = args.get('separator')\n"
              "    lines = payload.split(separator) if separator else re.split(r'\\r?\\n', payload)\n"
              "    return {'lines': lines, 'payload': args.get('payload')}\n"),
    "date": ("import datetime\n\n\n"
             "def main(args):\n"
             "    now = datetime.datetime.now(datetime.timezone.utc)\n"
             "    return {'date': now.strftime('%Y-%m-%dT%H:%M:%S.') + f'{now.microsecond // 1000:03d}Z'}\n"),
    "smash": ("def main(args):\n"
              "    parent = args.pop('$fieldName', None)\n"
              "    if not isinstance(parent, str):\n"
              "        return {'error': \"Expected an argument '$fieldName' of type 'string'.\"}\n"
              "    return {parent: args}\n"),
    "namespace": ("import os\n\n\n"
                  "def main(args):\n"
                  "    return {'namespace': os.environ.get('__OW_NAMESPACE')}\n"),
}


def install(standin: Any) -> list[str]:
    """Put the shared package and its actions into ``standin`` (an ``OpenWhiskStandIn``); their names."""
    standin.put_package(PACKAGE, publish=True)
    for name, code in ACTIONS.items():
        standin.put_action(f"{PACKAGE}/{name}", {"exec": {"kind": "python:3", "code": code}})
    return [f"/{PACKAGE}/{name}" for name in ACTIONS]
