r"""The scheduler's end of the agent channel (Redis streams; names in :mod:`agent_channel.keys`).

* :meth:`SchedulerChannel.stage` adds dispatches and pre-warms to their nodes' streams, in the
  pipeline the service's loop runs once per turn; each names its node's results stream of this
  controller in ``reply_to`` and carries the leader's epoch. A node's messages of one turn go in one
  fenced script call (:data:`controller_plugin.lease.FENCE`): only the lease holder's pass, and they
  enter the stream at once, so an agent blocked in ``XREADGROUP`` gets them in one read (Redis serves a
  blocked reader after each command: separate ``XADD``\ s would hand it the first alone) and can run and
  answer them together.
* :meth:`SchedulerChannel.read` blocks on the nodes' heartbeat streams, the hello stream and -- once
  this scheduler leads -- the nodes' results streams at once (``XREAD BLOCK``), from where it last read;
  the reader thread calls it in a loop and wakes the main loop with each read, even an empty one: the
  read's start time is what tells a silent agent from a scheduler that was itself paused
  (:class:`Read`). A message is believed only from its node's own stream: a heartbeat or a result
  naming another node than the stream's is set aside as forged. A node named on the hello stream is
  followed once its heartbeat stream exists.
* :meth:`SchedulerChannel.revoke` takes batches back (:mod:`agent_channel.claims`): an unstarted one is
  revoked and leaves the stream (``XACK`` + ``XDEL``) in one fenced script, so it can never start; a
  started one is reported as such and left alone.
* :meth:`SchedulerChannel.stage_trim` trims a results stream up to what the ledger recorded (fenced:
  a former leader cannot trim what its successor still needs).
* A new leader tells each node its epoch (:meth:`SchedulerChannel.tell_epoch`: from then on its agent
  refuses what older leaders sent) and reads what is in the nodes' streams (:meth:`pending`,
  :meth:`unread_results`) to adopt or revoke it (:mod:`controller_plugin.takeover`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, replace

import redis

from agent_channel import protocol
from agent_channel.keys import AGENT_GROUP, FIELD, Keys
from agent_channel.streams import Entry, entries
from controller_plugin.lease import FENCE
from openwhisk_status import STATUS_WHISK_ERROR

log = logging.getLogger("esg.scheduler")

#: The most entries one read takes from each stream.
READ_COUNT = 1000

# KEYS: leader, a node's dispatch stream; ARGV: token, the entries' field, then the messages in order.
# Returns the entry ids, in that order.
_ADD = FENCE + """
local ids = {}
for i = 3, #ARGV do
  ids[i - 2] = redis.call('XADD', KEYS[2], '*', ARGV[2], ARGV[i])
end
return ids
"""
#: The most messages one ``_ADD`` call adds.
ADD_PER_CALL = 1000

# KEYS: leader, the node's dispatch stream, then the batches' claim keys; ARGV: token, the group, whether a
# started batch is given up too ('1': its entry leaves the stream as well), then per batch its entry id
# ('' if not known) and the claim's TTL. Per batch: 'revoked' (it can never start now), else the claim's
# state ('running' or 'done').
_REVOKE = FENCE + """
local out = {}
for i = 3, #KEYS do
  local cur = redis.call('GET', KEYS[i])
  local eid = ARGV[2 * i - 2]
  local gone = false
  if cur == false or cur == 'revoked' then
    redis.call('SET', KEYS[i], 'revoked', 'EX', ARGV[2 * i - 1])
    out[i - 2] = 'revoked'
    gone = true
  else
    out[i - 2] = cur
    gone = ARGV[3] == '1'
  end
  if gone and eid ~= '' then
    redis.call('XACK', KEYS[2], ARGV[2], eid)
    redis.call('XDEL', KEYS[2], eid)
  end
end
return out
"""

# KEYS: leader, then the nodes' epoch keys; ARGV: token, the epoch.
_TELL_EPOCH = FENCE + """
for i = 2, #KEYS do
  local cur = tonumber(redis.call('GET', KEYS[i]) or '0')
  if cur < tonumber(ARGV[2]) then redis.call('SET', KEYS[i], ARGV[2]) end
end
return #KEYS - 1
"""

# KEYS: leader, a results stream; ARGV: token, the least id to keep.
_TRIM = FENCE + "return redis.call('XTRIM', KEYS[2], 'MINID', ARGV[2])"


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


@dataclass(frozen=True)
class Read:
    """One read's messages, each with the stream it came from, and when the read started (monotonic s).
    ``caught_up``: every stream gave less than a full read, so nothing older is still unread."""

    entries: tuple[Entry, ...]
    started_s: float
    caught_up: bool


class SchedulerChannel:
    def __init__(self, client: redis.Redis, keys: Keys, fence=None) -> None:
        self.r = client
        self.keys = keys
        self.fence = fence
        """The lease (:class:`controller_plugin.lease.Lease`) whose token the writes carry."""
        self.epoch = 0
        self._lock = threading.Lock()
        self._from: dict[str, str] = {}
        self._nodes: set[str] = set()
        self._leading = False
        self.forged = 0
        """Messages set aside because they named another node than the stream they were in."""

    def reply_to(self, node: str) -> str:
        return self.keys.results(node)

    def _token(self) -> tuple[str, str]:
        if self.fence is None:
            raise RuntimeError("the channel writes only under a lease")
        return self.fence.key, self.fence.fence()

    # -- writing ------------------------------------------------------------------------------------
    def stage(self, pipe, messages: Sequence[protocol.DispatchMessage | protocol.PrewarmMessage]) -> Staged:
        """Add the messages to their nodes' streams in ``pipe``, in order, one fenced call a node (per
        :data:`ADD_PER_CALL`); where their entry ids will be among the replies."""
        by_node: dict[str, list[int]] = {}
        for i, m in enumerate(messages):
            by_node.setdefault(m.node, []).append(i)
        positions: list[tuple[int, int]] = [(0, 0)] * len(messages)
        calls = 0
        lease, token = self._token() if messages else ("", "")
        for node, order in by_node.items():
            for start in range(0, len(order), ADD_PER_CALL):
                chunk = order[start:start + ADD_PER_CALL]
                pipe.eval(_ADD, 2, lease, self.keys.dispatch(node), token, FIELD,
                          *(protocol.encode(messages[i]) for i in chunk))
                for k, i in enumerate(chunk):
                    positions[i] = (calls, k)
                calls += 1
        return Staged(calls, tuple(positions))

    def revoke(self, node: str, batches: Sequence[tuple[str, str, int]], give_up: bool = False) -> list[str]:
        """Take back ``(batch_id, entry_id, ttl_s)`` batches of ``node``: per batch ``revoked`` (it will
        never start; its entry left the stream) or its claim's state (``running``, ``done``). ``give_up``:
        a started one's entry leaves the stream too (its activations are answered without it)."""
        if not batches:
            return []
        lease, token = self._token()
        args: list = [token, AGENT_GROUP, "1" if give_up else "0"]
        for _, eid, ttl in batches:
            args += [eid or "", max(1, int(ttl))]
        got = self.r.eval(_REVOKE, 2 + len(batches), lease, self.keys.dispatch(node),
                          *(self.keys.claim(node, b) for b, _, _ in batches), *args)
        return [g.decode() if isinstance(g, bytes) else g for g in got]

    def tell_epoch(self, nodes: Iterable[str], epoch: int) -> None:
        """Tell ``nodes`` this leader's epoch: their agents refuse what older leaders sent from now on."""
        nodes = list(nodes)
        if nodes:
            lease, token = self._token()
            self.r.eval(_TELL_EPOCH, 1 + len(nodes), lease, *(self.keys.node_epoch(n) for n in nodes), token, epoch)

    def stage_trim(self, pipe, node: str, keep_from: str) -> int:
        """Trim ``node``'s results stream to ``keep_from`` (an entry id, exclusive of what is older) in ``pipe``."""
        lease, token = self._token()
        pipe.eval(_TRIM, 2, lease, self.keys.results(node), token, keep_from)
        return 1

    # -- what a new leader finds ---------------------------------------------------------------------
    def pending(self, node: str) -> list[tuple[str, protocol.DispatchMessage | protocol.PrewarmMessage | None]]:
        """Every entry still in ``node``'s dispatch stream, decoded (None: unreadable), oldest first."""
        out = []
        for e in entries([(self.keys.dispatch(node), self.r.xrange(self.keys.dispatch(node)))]):
            try:
                m = protocol.decode(e.raw or b"")
            except protocol.ProtocolError:
                m = None
            out.append((e.id, m if isinstance(m, protocol.DispatchMessage | protocol.PrewarmMessage) else None))
        return out

    def unread_results(self, node: str) -> list[Entry]:
        """Every entry of ``node``'s results stream (what the former leader had not recorded and trimmed)."""
        return entries([(self.keys.results(node), self.r.xrange(self.keys.results(node)))])

    def known_nodes(self) -> set[str]:
        """Nodes named on the hello stream whose heartbeat stream exists."""
        names = {(e.raw or b"").decode(errors="replace") for e in
                 entries([(self.keys.hello, self.r.xrange(self.keys.hello))])}
        return {n for n in names if n and self.r.exists(self.keys.heartbeats(n))}

    # -- reading ------------------------------------------------------------------------------------
    def follow(self, nodes: Iterable[str]) -> None:
        """Read these nodes' heartbeats from now on (their latest one first)."""
        with self._lock:
            new = [n for n in nodes if n not in self._nodes]
        for node in new:
            stream = self.keys.heartbeats(node)
            last = self.r.xrevrange(stream, count=2)
            start = "0-0" if len(last) < 2 else (last[1][0].decode() if isinstance(last[1][0], bytes) else last[1][0])
            with self._lock:
                self._nodes.add(node)
                self._from.setdefault(stream, start)
                if self._leading:
                    self._from.setdefault(self.keys.results(node), "0-0")

    def lead(self, positions: dict[str, str]) -> None:
        """Read results too from now on: each node's results stream from ``positions[node]`` (after what the
        takeover read), a node not in it from its start."""
        with self._lock:
            self._leading = True
            for node in self._nodes | set(positions):
                self._from[self.keys.results(node)] = positions.get(node, "0-0")

    def open(self) -> None:
        """Start reading the hello stream from its start, and follow every node known there."""
        with self._lock:
            self._from.setdefault(self.keys.hello, "0-0")

    @property
    def nodes(self) -> set[str]:
        with self._lock:
            return set(self._nodes)

    def read(self, block_ms: int) -> Read:
        started = time.monotonic()
        with self._lock:
            streams = dict(self._from)
        got = entries(self.r.xread(streams, count=READ_COUNT, block=block_ms)) if streams else []
        counts: dict[str, int] = {}
        kept: list[Entry] = []
        hello: list[str] = []
        for e in got:
            counts[e.stream] = counts.get(e.stream, 0) + 1
            if e.stream == self.keys.hello:
                hello.append((e.raw or b"").decode(errors="replace"))
            else:
                kept.append(e)
        with self._lock:
            for e in got:
                self._from[e.stream] = e.id
        if hello:
            known = self.nodes
            fresh = [n for n in dict.fromkeys(hello) if n and n not in known and self.r.exists(self.keys.heartbeats(n))]
            if fresh:
                self.follow(fresh)
        return Read(tuple(kept), started, all(n < READ_COUNT for n in counts.values()))

    def position(self, node: str) -> str | None:
        """Where the reading of ``node``'s results stream stands (None: not read)."""
        with self._lock:
            return self._from.get(self.keys.results(node))

    def believe(self, e: Entry, msg: protocol.Message) -> bool:
        """Whether ``msg``, read from ``e.stream``, is what that stream may carry: a heartbeat from the
        stream's own node in its heartbeat stream, a result of that node in one of its results streams."""
        node = self.keys.node_of(e.stream)
        if isinstance(msg, protocol.Heartbeat):
            ok = node is not None and e.stream == self.keys.heartbeats(node) and msg.node == node
        elif isinstance(msg, protocol.BatchResult):
            ok = node is not None and e.stream == self.keys.results(node) and msg.node == node
        else:
            ok = False
        if not ok:
            self.forged += 1
        return ok

    def sanitize(self, rm: protocol.BatchResult) -> protocol.BatchResult:
        """``rm`` with every output key outside its node's own data keys turned into a whisk error: a node
        never points its successors at data another node stored."""
        bad = [r for r in rm.results if r.output_key is not None and not self.keys.is_data_of(rm.node, r.output_key)]
        if not bad:
            return rm
        log.warning("batch %s: node %s named %d output(s) outside its own data keys: refused", rm.batch_id, rm.node,
                    len(bad))
        fixed = tuple(replace(r, status_code=STATUS_WHISK_ERROR, output_key=None, output_bytes=0,
                              result={"error": f"node {rm.node} named an output it did not store"})
                      if r in bad else r for r in rm.results)
        return replace(rm, results=fixed)
