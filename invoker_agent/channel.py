"""The agent's end of the channel: its node's dispatch stream, results, heartbeats (Redis streams).

* **Dispatches** are read from ``esg:{prefix}:node:{node}:dispatch`` in consumer group ``agents`` as
  consumer ``{node}`` (``XREADGROUP ... BLOCK``). A read entry stays in the group's pending list until
  it is answered, so an agent killed while running batches finds them again at its next start
  (:meth:`AgentChannel.pending`) and runs them then; nothing it took is lost.
* **Answering** a batch is one ``MULTI``: the outputs its successors need (:mod:`invoker_agent.data`),
  the :class:`~agent_channel.protocol.BatchResult` added to the dispatch's ``reply_to`` stream, and ``XACK`` +
  ``XDEL`` of the dispatch -- the result is published exactly when the dispatch stops being pending.
* **Heartbeats** go to ``esg:{prefix}:heartbeats`` (capped).

A scheduler that declares this agent lost removes its batches from the stream itself (``XACK`` +
``XDEL``) before sending them elsewhere, so a restarted agent does not pick them up again.
"""

from __future__ import annotations

from collections.abc import Sequence

import redis

from agent_channel.keys import AGENT_GROUP, HEARTBEAT_MAXLEN, RESULTS_MAXLEN, Keys
from agent_channel.protocol import BatchResult, Heartbeat, encode
from agent_channel.streams import Entry, ensure_group, entries, fields
from invoker_agent.data import Write


class AgentChannel:
    def __init__(self, client: redis.Redis, keys: Keys, node: str) -> None:
        self.r = client
        self.keys = keys
        self.node = node
        self.stream = keys.dispatch(node)
        ensure_group(client, self.stream, AGENT_GROUP)

    def pending(self) -> list[Entry]:
        """Dispatches this node's agent took and never answered (an earlier incarnation's), oldest first."""
        out: list[Entry] = []
        after = "0"
        while True:
            got = entries(self.r.xreadgroup(AGENT_GROUP, self.node, {self.stream: after}, count=100))
            if not got:
                return out
            out += got
            after = got[-1].id

    def take(self, count: int, block_ms: int) -> list[Entry]:
        """Up to ``count`` new dispatches, waiting at most ``block_ms`` for the first."""
        return entries(self.r.xreadgroup(AGENT_GROUP, self.node, {self.stream: ">"}, count=count,
                                         block=block_ms))

    def answer(self, entry_id: str, reply_to: str, result: BatchResult, writes: Sequence[Write] = ()) -> None:
        """Store the outputs, publish the result, and retire the dispatch: all or nothing."""
        pipe = self.r.pipeline(transaction=True)
        self.stage_answer(pipe, entry_id, reply_to, result, writes)
        pipe.execute()

    def stage_answer(self, pipe, entry_id: str, reply_to: str, result: BatchResult,
                     writes: Sequence[Write] = ()) -> None:
        """:meth:`answer`'s commands, added to ``pipe`` (a transaction: several answers can share one)."""
        for w in writes:
            pipe.set(w.key, w.blob, ex=w.ttl_s)
        if reply_to:
            pipe.xadd(reply_to, fields(encode(result)), maxlen=RESULTS_MAXLEN, approximate=True)
        pipe.xack(self.stream, AGENT_GROUP, entry_id)
        pipe.xdel(self.stream, entry_id)

    def drop(self, entry_id: str) -> None:
        """Retire a dispatch that cannot be answered (no ``reply_to`` can be read from it)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.xack(self.stream, AGENT_GROUP, entry_id)
        pipe.xdel(self.stream, entry_id)
        pipe.execute()

    def heartbeat(self, hb: Heartbeat) -> None:
        self.r.xadd(self.keys.heartbeats, fields(encode(hb)), maxlen=HEARTBEAT_MAXLEN, approximate=True)
