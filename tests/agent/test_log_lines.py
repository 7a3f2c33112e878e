"""An activation's log lines are what OpenWhisk's log store makes of a container's output
(``DockerToActivationLogStore``'s ``LogLine.toFormattedString``): ``f"$time%-30s $stream: $line"``, the time
each line was written (RFC 3339 with nanoseconds), the stream it went to, the text without its line end.
"""

from __future__ import annotations

import re
import time

from agent_channel.protocol import RunRequest
from invoker_agent.action_worker import log_line
from invoker_agent.workers import WorkerSpec
from tests.agent.test_workers import CPU, action, key, pool  # noqa: F401 - the pool fixture

LINE = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{9}Z) (stdout|stderr): (.*)")

TALKER = """
import os
import sys
import time

def main(args):
    print("first")
    time.sleep(0.05)
    print("to stderr", file=sys.stderr)
    print("two", "words", end="")
    sys.stdout.write(" and more\\nunfinished")
    os.write(1, b"from native code\\n")
    return {"ok": True}
"""


def test_each_line_is_stamped_with_its_time_and_stream(pool):  # noqa: F811
    a = action(TALKER, name="talker")
    before = time.time_ns()
    (out,) = pool.run(key(a), WorkerSpec(CPU), a, [RunRequest("act-1", "tx", {})])
    after = time.time_ns()
    assert out.status_code == 0
    parsed = [LINE.fullmatch(line) for line in out.logs]
    assert all(parsed), out.logs
    by_text = {m[3]: m for m in parsed}
    assert set(by_text) == {"first", "to stderr", "two words and more", "from native code", "unfinished"}
    assert by_text["to stderr"][2] == "stderr" and by_text["first"][2] == "stdout"
    assert by_text["from native code"][2] == "stdout"      # past Python's streams: stamped when read
    stamps = {text: m[1] for text, m in by_text.items()}
    assert stamps["first"] < stamps["to stderr"]          # the time each was written, 50 ms apart
    stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(before // 10**9))
    assert stamp[:16] <= stamps["first"][:16] <= time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(after // 10**9))


def test_the_format_is_openwhisks():
    assert log_line("stdout", "hello", 1_718_007_821_502_123_456) == \
        "2024-06-10T08:23:41.502123456Z stdout: hello"
    assert log_line("stderr", "", 1_718_007_821_000_000_007) == "2024-06-10T08:23:41.000000007Z stderr: "
