"""The Redis ledger: every accepted activation, from acceptance to its one ack.

Keys (``scope`` = topic prefix + controller id, so two deployments on one Redis never mix):

* ``esg:{scope}:act:{activationId}`` -- hash ``state, topic, accepted_ms, raw, owner, off, ck[, ack, record,
  f:{function}...]`` (``raw``: the ActivationMessage as it came; ``ack``: the ack's bytes; both stored as
  they are, never re-encoded; ``record``: the WhiskActivation, until OpenWhisk's activation store has
  it; ``off``: its offset in ``invoker{topic}``; ``ck``: how far ``completed{C}`` had got when it was
  accepted, where a search for its ack may start; ``f:{function}``: what each finished function of its
  app returned, so a scheduler that takes over resumes the app where it was instead of running a
  function twice). ``state`` is ``open`` (accepted, not answered), ``acking`` (the ack's bytes are
  stored here; it is produced right after) or ``done`` (answered; kept ``DONE_TTL_S`` with the state
  alone, for dedupe). ``owner`` is the incarnation that accepted it.
* ``esg:{scope}:open`` -- set of the ids in state ``open`` or ``acking``: what a restart must finish.
* ``esg:{scope}:generation`` and ``esg:{scope}:seq`` -- the ledger's generation (a random id made with
  the ledger) and how many activations it accepted; the ledger checkpoints in Kafka carry both
  (:mod:`controller_plugin.checkpoint`), so a ledger Redis lost is noticed.
* ``esg:{prefix}:invokers`` -- hash node name -> virtual invoker id.

Every write is a fenced script (:data:`controller_plugin.lease.FENCE`): only the leader's token passes.

Exactly once: an activation is inserted only if its key is absent (a redelivered message is dropped;
asking again for one's own open entry, e.g. after a lost reply, says it is new); its offset is
committed only after that. Its ack's bytes are written into the entry (``acking``) and only then
produced, in the same turn of the scheduler's loop, then marked ``done`` once the broker took it.
After a crash an ``acking`` entry is looked up in ``completed{C}``: found means the ack went out;
otherwise its stored bytes are sent. An ``open`` entry was never acked: it is resumed (or run again,
if none of its functions ran). An ``acking`` entry's record is stored again (the activation store
takes a record twice as once).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis

from controller_plugin.lease import FENCE

DONE_TTL_S = 6 * 3600

# KEYS: leader, the open set, the seq counter, then the entries; ARGV: token, owner, then per entry: id,
# topic, accepted_ms, raw, offset, completed offset. Per entry 1 (new) or 0, then the seq counter.
_ACCEPT = FENCE + """
local owner = ARGV[2]
local out = {}
local added = 0
for i = 4, #KEYS do
  local key = KEYS[i]
  local at = 2 + (i - 4) * 6
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'state', 'open', 'topic', ARGV[at + 2], 'accepted_ms', ARGV[at + 3],
               'raw', ARGV[at + 4], 'owner', owner, 'off', ARGV[at + 5], 'ck', ARGV[at + 6])
    redis.call('SADD', KEYS[2], ARGV[at + 1])
    added = added + 1
    out[i - 3] = 1
  else
    local cur = redis.call('HMGET', key, 'state', 'owner')
    if cur[1] == 'open' and cur[2] == owner then
      out[i - 3] = 1
    else
      out[i - 3] = 0
    end
  end
end
local seq = redis.call('INCRBY', KEYS[3], added)
out[#KEYS - 2] = seq
return out
"""

# KEYS: leader, the open set, then the entries' keys; ARGV: token, the TTL, then the ids (in KEYS' order).
# One call marks a turn's entries done: the entry is emptied to its state (kept DONE_TTL_S for dedupe) and
# leaves the set.
_DONE = FENCE + """
local ttl = ARGV[2]
for i = 3, #KEYS do
  redis.call('DEL', KEYS[i])
  redis.call('HSET', KEYS[i], 'state', 'done')
  redis.call('EXPIRE', KEYS[i], ttl)
end
for i = 3, #ARGV, 1000 do
  redis.call('SREM', KEYS[2], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return #KEYS - 2
"""
#: The most entries one ``_DONE`` call marks (its keys and ids are Lua stack slots).
DONE_PER_CALL = 2000

# KEYS: leader, then the entries' keys, then the data keys to delete; ARGV: token, the number of entries,
# then per entry the ack's bytes and the record's JSON ('' when there is none: the entry's record is left
# as it is). One call writes a turn's acks into their entries (and drops their requests' stored outputs).
_ACKING = FENCE + """
local n = tonumber(ARGV[2])
for i = 1, n do
  local record = ARGV[2 + 2 * i]
  if record == '' then
    redis.call('HSET', KEYS[1 + i], 'state', 'acking', 'ack', ARGV[1 + 2 * i])
  else
    redis.call('HSET', KEYS[1 + i], 'state', 'acking', 'ack', ARGV[1 + 2 * i], 'record', record)
  end
end
for j = n + 2, #KEYS, 1000 do
  redis.call('DEL', unpack(KEYS, j, math.min(j + 999, #KEYS)))
end
return n
"""
#: The most entries one ``_ACKING`` call writes.
ACKING_PER_CALL = 1000

# KEYS: leader, then the entries' keys; ARGV: token, then per entry a field and its value. Only an open
# entry takes what one of its functions returned.
_PROGRESS = FENCE + """
for i = 2, #KEYS do
  if redis.call('HGET', KEYS[i], 'state') == 'open' then
    redis.call('HSET', KEYS[i], ARGV[2 * i - 2], ARGV[2 * i - 1])
  end
end
return #KEYS - 1
"""

# KEYS: leader, the invokers hash; ARGV: token, node. The node's id: its stored one, else the lowest unused.
_ASSIGN = FENCE + """
local known = redis.call('HGET', KEYS[2], ARGV[2])
if known then return tonumber(known) end
local used = {}
for _, v in ipairs(redis.call('HVALS', KEYS[2])) do used[tonumber(v)] = true end
local id = 0
while used[id] do id = id + 1 end
redis.call('HSET', KEYS[2], ARGV[2], id)
return id
"""

# KEYS: leader, generation; ARGV: token, a new generation id. The generation, made if there was none.
_GENERATION = FENCE + """
local g = redis.call('GET', KEYS[2])
if g then return g end
redis.call('SET', KEYS[2], ARGV[2])
return ARGV[2]
"""

#: One encoder for every activation record (``json.dumps`` with arguments builds an encoder at each call).
_RECORD_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)
PROGRESS_FIELD = "f:"


class Fence(Protocol):
    """What a fenced script needs: the leader key and this writer's token (:class:`controller_plugin.lease.Lease`)."""

    key: str

    def fence(self) -> str: ...


@dataclass(frozen=True)
class LedgerEntry:
    activation_id: str
    state: str
    topic: int
    accepted_ms: int
    raw: str | None
    ack: str | None = None
    record: str | None = None
    offset: int = -1
    """Its offset in ``invoker{topic}`` (-1: not known)."""
    completed_from: int = -1
    """Where ``completed{C}`` stood when it was accepted (-1: not known): its ack, if any, is after."""
    progress: Mapping[str, str] = field(default_factory=dict)
    """What its app's finished functions returned, by function (JSON, :mod:`controller_plugin.takeover`)."""


class Ledger:
    def __init__(self, client: redis.Redis, scope: str, prefix: str = "", fence: Fence | None = None) -> None:
        self.r = client
        self.scope = scope
        self.fence = fence
        self._open = f"esg:{scope}:open"
        self._invokers = f"esg:{prefix}:invokers"
        self.generation_key = f"esg:{scope}:generation"
        self.seq_key = f"esg:{scope}:seq"
        self.seq = 0
        """How many activations the ledger had accepted at this process's last :meth:`accept`."""

    def _key(self, activation_id: str) -> str:
        return f"esg:{self.scope}:act:{activation_id}"

    def _token(self) -> tuple[str, str]:
        if self.fence is None:
            raise RuntimeError("the ledger writes only under a lease")
        return self.fence.key, self.fence.fence()

    def accept(self, entries: Sequence[tuple[str, int, int, str] | tuple[str, int, int, str, int, int]],
               owner: str = "") -> list[bool]:
        """Insert ``(activation_id, topic, accepted_ms, raw[, offset, completed_from])`` entries for ``owner``;
        True for each that is new (absent before, or already ``owner``'s and still open: asking twice is
        harmless)."""
        if not entries:
            return []
        lease, token = self._token()
        keys = [lease, self._open, self.seq_key] + [self._key(e[0]) for e in entries]
        args: list[Any] = [token, owner]
        for e in entries:
            a, t, ms, raw = e[0], e[1], e[2], e[3]
            off, ck = (e[4], e[5]) if len(e) > 4 else (-1, -1)  # type: ignore[misc]
            args += [a, t, ms, raw, off, ck]
        got = self.r.eval(_ACCEPT, len(keys), *keys, *args)
        self.seq = int(got[-1])
        return [bool(x) for x in got[:-1]]

    def mark_acking(self, items: Iterable[tuple[LedgerEntry, bytes, bytes | dict[str, Any] | None]],
                    forget: Iterable[str] = (), done: Iterable[str] = ()) -> None:
        pipe = self.r.pipeline(transaction=False)
        if self.stage_acking(pipe, items, forget, done):
            pipe.execute()

    def stage_acking(self, pipe, items: Iterable[tuple[LedgerEntry, bytes, bytes | dict[str, Any] | None]],
                     forget: Iterable[str] = (), done: Iterable[str] = ()) -> int:
        """Add to ``pipe``: the ``done`` marks, then each ack's bytes (and the activation record: a dict, or
        its JSON already encoded) with the deletion of the ``forget`` keys (the answered requests'
        intermediate data); how many commands."""
        n = self._done(pipe, done)
        keys: list[str] = []
        args: list[Any] = []
        for entry, ack, record in items:
            keys.append(self._key(entry.activation_id))
            if record is None:
                args += [ack, ""]
            else:
                args += [ack, record if isinstance(record, bytes) else _RECORD_ENCODER.encode(record)]
        gone = list(forget)
        if not keys and not gone:
            return n
        lease, token = self._token()
        # one script call per ACKING_PER_CALL entries, not an HSET each: redis-py packs every command of a
        # pipeline and parses every reply in Python, which cost the loop as much as the write itself
        for i in range(0, max(len(keys), 1), ACKING_PER_CALL):
            chunk = keys[i:i + ACKING_PER_CALL]
            extra = gone if i == 0 else []
            pipe.eval(_ACKING, 1 + len(chunk) + len(extra), lease, *chunk, *extra, token, len(chunk),
                      *args[2 * i:2 * (i + len(chunk))])
            n += 1
        return n

    def stage_progress(self, pipe, results: Iterable[tuple[str, str, str]]) -> int:
        """Add to ``pipe`` what finished functions returned, ``(activation_id, function, json)`` each, kept
        in the open entries; how many commands."""
        items = list(results)
        if not items:
            return 0
        lease, token = self._token()
        args: list[Any] = [token]
        for _, function, blob in items:
            args += [PROGRESS_FIELD + function, blob]
        pipe.eval(_PROGRESS, 1 + len(items), lease, *(self._key(a) for a, _, _ in items), *args)
        return 1

    def mark_done(self, activation_ids: Iterable[str]) -> None:
        pipe = self.r.pipeline(transaction=False)
        if self._done(pipe, activation_ids):
            pipe.execute()

    def _done(self, pipe, activation_ids: Iterable[str]) -> int:
        """The ``done`` marks, one script call per :data:`DONE_PER_CALL` entries (where three commands an
        entry cost the scheduler's loop a fifth of its pipeline). ``EVAL``, not a registered script's
        ``EVALSHA``: redis-py checks a pipeline's registered scripts with a round trip of its own at every
        execute, and the body is short; Redis compiles it once and finds it by its hash after."""
        ids = list(activation_ids)
        if not ids:
            return 0
        lease, token = self._token()
        for i in range(0, len(ids), DONE_PER_CALL):
            chunk = ids[i:i + DONE_PER_CALL]
            pipe.eval(_DONE, 2 + len(chunk), lease, self._open, *(self._key(a) for a in chunk), token, DONE_TTL_S,
                      *chunk)
        return -(-len(ids) // DONE_PER_CALL)

    def unfinished(self) -> list[LedgerEntry]:
        """Entries in state ``open`` or ``acking`` (what a previous incarnation left)."""
        ids = sorted(self.r.smembers(self._open))
        ids = [i.decode() if isinstance(i, bytes) else i for i in ids]
        out: list[LedgerEntry] = []
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self._key(i))
        for aid, h in zip(ids, pipe.execute() if ids else []):
            d = {k.decode(): v.decode("utf-8") for k, v in (h or {}).items()}
            if d.get("state") not in ("open", "acking"):
                continue    # done meanwhile, or gone: the done mark takes it out of the set
            progress = {k[len(PROGRESS_FIELD):]: v for k, v in d.items() if k.startswith(PROGRESS_FIELD)}
            out.append(LedgerEntry(aid, d["state"], int(d.get("topic", 0)), int(d.get("accepted_ms", 0)),
                                   d.get("raw"), d.get("ack"), d.get("record"), int(d.get("off", -1)),
                                   int(d.get("ck", -1)), progress))
        return out

    def open_count(self) -> int:
        return int(self.r.scard(self._open))

    # -- generation ----------------------------------------------------------------------------------
    def generation(self) -> tuple[str | None, int]:
        """The ledger's generation id (None: there is none: a new Redis, or one that lost its data) and
        how many activations it accepted."""
        pipe = self.r.pipeline(transaction=False)
        pipe.get(self.generation_key)
        pipe.get(self.seq_key)
        gen, seq = pipe.execute()
        return (gen.decode() if isinstance(gen, bytes) else gen), int(seq or 0)

    def make_generation(self, new_id: str) -> str:
        """The generation, made now with ``new_id`` if there is none."""
        lease, token = self._token()
        got = self.r.eval(_GENERATION, 2, lease, self.generation_key, token, new_id)
        return got.decode() if isinstance(got, bytes) else got

    # -- virtual invoker ids -------------------------------------------------------------------------
    def invoker_ids(self) -> dict[str, int]:
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in self.r.hgetall(self._invokers).items()}

    def invoker_id(self, node: str) -> int:
        """The node's stable id: its stored one, else the lowest unused id (stored before use, atomically:
        two schedulers never hand out the same id, and only the leader hands one out)."""
        lease, token = self._token()
        return int(self.r.eval(_ASSIGN, 2, lease, self._invokers, token, node))
