"""The kinds the process worker backend runs: Node.js actions through its own runtime, OpenWhisk's ``__OW_*`` values
as the caller's, and a kind it has no runtime for answered as the developer's error naming the kind."""

from __future__ import annotations

import base64
import io
import os
import re
import shutil
import zipfile

import pytest

from agent_channel.protocol import RunRequest
from invoker_agent.actions import ActionCode
from invoker_agent.workers import WorkerKey, WorkerPool, WorkerSpec
from openwhisk_status import STATUS_APPLICATION_ERROR, STATUS_DEVELOPER_ERROR, STATUS_SUCCESS

pytestmark = [pytest.mark.timeout(60), pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js")]

CPU = (sorted(os.sched_getaffinity(0))[0],)
#: A log line as OpenWhisk shows it: the time (RFC 3339, nanoseconds) padded to 30 characters, the stream.
STAMPED = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z +"

NODE = """
async function main(params) {
  console.log('hello ' + params.who);
  if (params.throw) { console.error('uh-oh'); throw new Error('boom'); }
  if (params.reject) return Promise.reject({ reason: 'no' });
  if (params.number) return 42;
  await new Promise((r) => setTimeout(r, 1));
  return { greeting: 'hi ' + params.who, ns: process.env.__OW_NAMESPACE, key: process.env.__OW_API_KEY || null,
           activation: process.env.__OW_ACTIVATION_ID, name: process.env.__OW_ACTION_NAME };
}
"""


def run(pool: WorkerPool, a: ActionCode, *values: dict, namespace: str = "caller", key: str | None = None):
    return pool.run(WorkerKey(a.fqn, a.revision, "cpu", None, namespace), WorkerSpec(CPU), a,
                    [RunRequest(f"act-{i}", "tx", v, namespace=namespace, api_key=key) for i, v in enumerate(values)])


@pytest.fixture
def pool():
    p = WorkerPool(idle_ttl_s=60)
    yield p
    p.shutdown()


def test_a_nodejs_action_runs_with_openwhisks_result_codes_and_its_logs(pool):
    a = ActionCode("/owner/greet", "1", "nodejs:20", NODE, annotations={"provide-api-key": False})
    ok, thrown, rejected, number = run(pool, a, {"who": "ann"}, {"who": "bob", "throw": 1}, {"reject": 1},
                                       {"number": 1}, key="uuid:secret")
    assert ok.status_code == STATUS_SUCCESS and re.fullmatch(STAMPED + "stdout: hello ann", ok.logs[0])
    assert len(ok.logs) == 1 and re.fullmatch(STAMPED + "stderr: uh-oh", thrown.logs[-1])
    assert ok.result == {"greeting": "hi ann", "ns": "caller", "key": None, "activation": "act-0",
                         "name": "/owner/greet"}       # the caller's namespace; no key: provide-api-key false
    assert thrown.status_code == STATUS_DEVELOPER_ERROR and "boom" in thrown.result["error"]
    assert rejected.status_code == STATUS_APPLICATION_ERROR and rejected.result == {"error": {"reason": "no"}}
    assert number.status_code == STATUS_DEVELOPER_ERROR and "dictionary" in number.result["error"]
    assert pool.cold_starts == 1                                   # one warm worker served all four


def test_a_nodejs_zip_action_and_its_batch_entry_point(pool):
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("package.json", '{"main": "lib/entry.js"}')
        z.writestr("lib/entry.js", "const twice = require('./twice');\n"
                                   "exports.main = (p) => ({ y: twice(p.x) });\n"
                                   "exports.main_batch = (ps) => ps.map((p) => ({ y: twice(p.x), batched: ps.length }));\n")
        z.writestr("lib/twice.js", "module.exports = (x) => 2 * x;\n")
    a = ActionCode("/owner/zipped", "1", "nodejs:18", base64.b64encode(buf.getvalue()).decode(), binary=True)
    out = run(pool, a, {"x": 1}, {"x": 2}, {"x": 3})
    assert [r.result for r in out] == [{"y": 2, "batched": 3}, {"y": 4, "batched": 3}, {"y": 6, "batched": 3}]


def test_the_callers_key_is_given_unless_the_action_declines_it(pool):
    """OpenWhisk gives ``__OW_API_KEY`` when ``provide-api-key`` is true or absent."""
    given = ActionCode("/owner/greet", "1", "nodejs:20", NODE)
    declined = ActionCode("/owner/greet", "2", "nodejs:20", NODE, annotations={"provide-api-key": False})
    assert run(pool, given, {"who": "x"}, key="uuid:secret")[0].result["key"] == "uuid:secret"
    assert run(pool, declined, {"who": "x"}, key="uuid:secret")[0].result["key"] is None


def test_workers_are_never_shared_between_calling_namespaces(pool):
    code = "import os\nTOKEN = os.urandom(8).hex()\ndef main(a):\n    return {'t': TOKEN, 'ns': os.environ['__OW_NAMESPACE']}\n"
    a = ActionCode("/owner/shared", "1", "python:3", code)
    first = run(pool, a, {}, namespace="tenant-a")[0].result
    again = run(pool, a, {}, namespace="tenant-a")[0].result
    other = run(pool, a, {}, namespace="tenant-b")[0].result
    assert first == again and first["ns"] == "tenant-a"
    assert other["t"] != first["t"] and other["ns"] == "tenant-b" and pool.cold_starts == 2


@pytest.mark.parametrize("kind", ["blackbox", "java:8", "python:2", "nodejs:latest"])
def test_a_kind_without_a_runtime_is_the_developers_error_naming_it(pool, kind):
    a = ActionCode("/owner/other", "1", kind, "whatever")
    (out,) = run(pool, a, {})
    assert out.status_code == STATUS_DEVELOPER_ERROR and repr(kind) in out.result["error"]
    assert pool.warm_count() == 0
