"""The REST stand-in takes the concurrency `esg replay` sends (128 calls at once by default): every
connection is accepted, none reset.

Its listen backlog was Python's default of 5; a burst of new connections beyond it overflowed the accept
queue, and the kernel answered some with a reset (`esg replay` recorded "ConnectionResetError(104,
'Connection reset by peer')" for them, after about a second).
"""

from __future__ import annotations

import threading
import time
import uuid

import requests

from esg_cli.openwhisk_standin import GUEST_KEY, OpenWhiskStandIn
from esg_cli.replay import Call, call

CALLS = 256
CONCURRENCY = 128      # esg replay's default --concurrency


def test_a_burst_of_concurrent_blocking_calls_on_fresh_connections_is_all_answered():
    start = threading.Barrier(CONCURRENCY)

    def invoker(inv):
        time.sleep(0.2)          # the activation runs a while: the server's threads stay busy
        start = int(time.time() * 1000)
        return {"namespace": "guest", "name": "hello", "subject": "guest", "activationId": uuid.uuid4().hex,
                "start": start, "end": start + 1, "duration": 1, "response": {"statusCode": 0, "result": {}},
                "logs": [], "version": "0.0.1", "publish": False,
                "annotations": [{"key": "path", "value": "guest/hello"}, {"key": "kind", "value": "python:3"}]}

    calls = [Call("hello", 0.0) for _ in range(CALLS)]
    with OpenWhiskStandIn(invoker=invoker) as api:
        api.put_action("guest/hello", {"exec": {"kind": "python:3", "code": "def main(a): return a"}})
        base = f"{api.url}/api/v1/namespaces/guest/actions/"

        def client(mine: list[Call]) -> None:
            start.wait()
            for c in mine:
                with requests.Session() as s:       # a fresh connection per call, all threads at once
                    s.auth = tuple(GUEST_KEY.split(":", 1))
                    call(s, base, c, 30.0)

        threads = [threading.Thread(target=client, args=(calls[i::CONCURRENCY],)) for i in range(CONCURRENCY)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    failed = [(c.http_status, c.error) for c in calls if not c.ok]
    assert failed == [], failed[:5]
