r"""The scheduler's end of the agent channel (Redis streams; names in :mod:`agent_channel.keys`).

* :meth:`SchedulerChannel.stage` adds dispatches and pre-warms to their nodes' streams, in the
  pipeline the service's loop runs once per turn; each names this scheduler's results stream in
  ``reply_to``. A node's messages of one turn go in one script call: they enter its stream at once, so
  an agent blocked in ``XREADGROUP`` gets them in one read (Redis serves a blocked reader after each
  command: separate ``XADD``\ s would hand it the first alone) and can run and answer them together.
* :meth:`SchedulerChannel.read` blocks on this scheduler's results stream and the deployment's
  heartbeat stream at once (``XREAD BLOCK``), from where it last read; the reader thread calls it in a
  loop and wakes the main loop with each message. Read results are trimmed once a second.
* :meth:`SchedulerChannel.retract` takes back the dispatches of a lost agent (``XACK`` + ``XDEL`` in
  the agents' group), so an agent restarted later does not run what was sent elsewhere.
* :meth:`SchedulerChannel.purge` at start-up retracts the dispatches an earlier incarnation of this
  scheduler left in node streams: their activations are run again from the ledger.

Results of an earlier incarnation are void (batch ids carry the incarnation), so the reader starts at
the streams' ends.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import redis

from agent_channel import protocol
from agent_channel.keys import AGENT_GROUP, FIELD, Keys
from agent_channel.streams import Entry, entries, last_id

log = logging.getLogger("esg.scheduler")

TRIM_EVERY_S = 1.0

# KEYS[1]: a node's dispatch stream; ARGV: the entries' field, then the messages in order. Returns the
# entry ids, in that order.
_ADD = """
local ids = {}
for i = 2, #ARGV do
  ids[i - 1] = redis.call('XADD', KEYS[1], '*', ARGV[1], ARGV[i])
end
return ids
"""
#: The most messages one ``_ADD`` call adds.
ADD_PER_CALL = 1000


@dataclass(frozen=True)
class Staged:
    """What :meth:`SchedulerChannel.stage` put in a pipeline: its first ``commands`` replies, and where
    each message's entry id is in them."""

    commands: int
    positions: tuple[tuple[int, int], ...]
    """Per message: (reply, index in that reply)."""

    def entry_ids(self, replies: Sequence) -> list[str]:
        out = []
        for reply, index in self.positions:
            eid = replies[reply][index]
            out.append(eid.decode() if isinstance(eid, bytes) else eid)
        return out


class SchedulerChannel:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._from: dict[str, str] = {}
        self._trimmed_s = 0.0

    @property
    def reply_to(self) -> str:
        return self.keys.results

    def stage(self, pipe, messages: Sequence[protocol.DispatchMessage | protocol.PrewarmMessage]) -> Staged:
        """Add the messages to their nodes' streams in ``pipe``, in order, one call a node (per
        :data:`ADD_PER_CALL`); where their entry ids will be among the replies."""
        by_node: dict[str, list[int]] = {}
        for i, m in enumerate(messages):
            by_node.setdefault(m.node, []).append(i)
        positions: list[tuple[int, int]] = [(0, 0)] * len(messages)
        calls = 0
        for node, order in by_node.items():
            for start in range(0, len(order), ADD_PER_CALL):
                chunk = order[start:start + ADD_PER_CALL]
                pipe.eval(_ADD, 1, self.keys.dispatch(node), FIELD, *(protocol.encode(messages[i]) for i in chunk))
                for k, i in enumerate(chunk):
                    positions[i] = (calls, k)
                calls += 1
        return Staged(calls, tuple(positions))

    def retract(self, node: str, entry_ids: Iterable[str]) -> None:
        ids = list(entry_ids)
        if ids:
            stream = self.keys.dispatch(node)
            pipe = self.r.pipeline(transaction=True)
            pipe.xack(stream, AGENT_GROUP, *ids)
            pipe.xdel(stream, *ids)
            pipe.execute()

    def purge(self, nodes: Iterable[str], stale: Callable[[protocol.DispatchMessage], bool]) -> int:
        """Retract the dispatches in ``nodes``' streams for which ``stale`` says so; how many went."""
        gone = 0
        for node in nodes:
            ids = []
            for e in entries([(self.keys.dispatch(node), self.r.xrange(self.keys.dispatch(node)))]):
                try:
                    m = protocol.decode(e.raw or b"")
                except protocol.ProtocolError:
                    continue
                if isinstance(m, protocol.DispatchMessage) and stale(m):
                    ids.append(e.id)
            self.retract(node, ids)
            gone += len(ids)
        return gone

    # -- reading ------------------------------------------------------------------------------------
    def open(self) -> None:
        """Start reading at the streams' current ends; drop the results nobody will read."""
        for stream in (self.keys.results, self.keys.heartbeats):
            self._from[stream] = last_id(self.r, stream)
        self.r.xtrim(self.keys.results, minid=self._from[self.keys.results])

    def read(self, block_ms: int) -> list[Entry]:
        got = entries(self.r.xread(self._from, count=1000, block=block_ms))
        for e in got:
            self._from[e.stream] = e.id
        now = time.monotonic()
        if now - self._trimmed_s > TRIM_EVERY_S:
            self._trimmed_s = now
            self.r.xtrim(self.keys.results, minid=self._from[self.keys.results])
        return got
