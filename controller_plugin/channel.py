"""The scheduler's end of the agent channel (Redis streams; names in :mod:`agent_channel.keys`).

* :meth:`SchedulerChannel.stage` adds dispatches and pre-warms to their nodes' streams, in the
  pipeline the service's loop runs once per turn; each names this scheduler's results stream in
  ``reply_to``.
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

import redis

from agent_channel import protocol
from agent_channel.keys import AGENT_GROUP, Keys
from agent_channel.streams import Entry, entries, fields, last_id

log = logging.getLogger("esg.scheduler")

TRIM_EVERY_S = 1.0


class SchedulerChannel:
    def __init__(self, client: redis.Redis, keys: Keys) -> None:
        self.r = client
        self.keys = keys
        self._from: dict[str, str] = {}
        self._trimmed_s = 0.0

    @property
    def reply_to(self) -> str:
        return self.keys.results

    def stage(self, pipe, messages: Sequence[protocol.DispatchMessage | protocol.PrewarmMessage]) -> int:
        """Add each message to its node's stream in ``pipe`` (the replies are the entry ids, in order)."""
        for m in messages:
            pipe.xadd(self.keys.dispatch(m.node), fields(protocol.encode(m)))
        return len(messages)

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
