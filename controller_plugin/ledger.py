"""The Redis ledger: every accepted activation, from acceptance to its one ack.

Keys (``scope`` = topic prefix + controller id, so two deployments on one Redis never mix):

* ``esg:{scope}:act:{activationId}`` -- hash ``state, topic, accepted_ms, raw, owner[, ack, record]``
  (``raw``: the ActivationMessage as it came; ``ack``: the ack's bytes; both stored as they are, never
  re-encoded; ``record``: the WhiskActivation, until OpenWhisk's activation store has it).
  ``state`` is ``open`` (accepted, not answered), ``acking`` (the ack's bytes are stored here; it was
  produced, or is being) or ``done`` (answered; kept ``DONE_TTL_S`` with the state alone, for dedupe).
  ``owner`` is the incarnation that accepted it.
* ``esg:{scope}:open`` -- set of the ids in state ``open`` or ``acking``: what a restart must finish.
* ``esg:{prefix}:invokers`` -- hash node name -> virtual invoker id.

Exactly once: an activation is inserted only if its key is absent (a redelivered message is dropped;
asking again for one's own open entry, e.g. after a lost reply, says it is new); its offset is
committed only after that. Its ack is produced, and in the same turn of the scheduler's loop written
into the entry (``acking``, with the bytes), then marked ``done`` once the broker took it. After a
crash every ``open`` or ``acking`` entry is looked up in ``completed{C}``: found means the ack went out
(whatever the entry says); otherwise an ``acking`` entry's stored bytes are sent, and an ``open`` entry
is run again. An ``acking`` entry's record is stored again (the activation store takes a record twice
as once).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import redis

DONE_TTL_S = 6 * 3600

# ARGV: the open set, the owner, then per entry: id, topic, accepted_ms, raw.
_ACCEPT = """
local owner = ARGV[2]
local out = {}
for i, key in ipairs(KEYS) do
  local at = 2 + (i - 1) * 4
  if redis.call('EXISTS', key) == 0 then
    redis.call('HSET', key, 'state', 'open', 'topic', ARGV[at + 2], 'accepted_ms', ARGV[at + 3],
               'raw', ARGV[at + 4], 'owner', owner)
    redis.call('SADD', ARGV[1], ARGV[at + 1])
    out[i] = 1
  else
    local cur = redis.call('HMGET', key, 'state', 'owner')
    if cur[1] == 'open' and cur[2] == owner then
      out[i] = 1
    else
      out[i] = 0
    end
  end
end
return out
"""

# KEYS: the open set, then the entries' keys; ARGV: the TTL, then the ids (in KEYS' order). One call marks
# a turn's entries done: the entry is emptied to its state (kept DONE_TTL_S for dedupe) and leaves the set.
_DONE = """
local ttl = ARGV[1]
for i = 2, #KEYS do
  redis.call('DEL', KEYS[i])
  redis.call('HSET', KEYS[i], 'state', 'done')
  redis.call('EXPIRE', KEYS[i], ttl)
end
for i = 2, #ARGV, 1000 do
  redis.call('SREM', KEYS[1], unpack(ARGV, i, math.min(i + 999, #ARGV)))
end
return #KEYS - 1
"""
#: The most entries one ``_DONE`` call marks (its keys and ids are Lua stack slots).
DONE_PER_CALL = 2000

# KEYS: the entries' keys; ARGV: per entry, the ack's bytes and the record's JSON ('' when there is none:
# the entry's record is left as it is). One call writes a turn's acks into their entries.
_ACKING = """
for i = 1, #KEYS do
  local record = ARGV[2 * i]
  if record == '' then
    redis.call('HSET', KEYS[i], 'state', 'acking', 'ack', ARGV[2 * i - 1])
  else
    redis.call('HSET', KEYS[i], 'state', 'acking', 'ack', ARGV[2 * i - 1], 'record', record)
  end
end
return #KEYS
"""
#: The most entries one ``_ACKING`` call writes.
ACKING_PER_CALL = 1000
#: One encoder for every activation record (``json.dumps`` with arguments builds an encoder at each call).
_RECORD_ENCODER = json.JSONEncoder(separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class LedgerEntry:
    activation_id: str
    state: str
    topic: int
    accepted_ms: int
    raw: str | None
    ack: str | None = None
    record: str | None = None


class Ledger:
    def __init__(self, client: redis.Redis, scope: str, prefix: str = "") -> None:
        self.r = client
        self.scope = scope
        self._open = f"esg:{scope}:open"
        self._invokers = f"esg:{prefix}:invokers"
        self._accept = client.register_script(_ACCEPT)

    def _key(self, activation_id: str) -> str:
        return f"esg:{self.scope}:act:{activation_id}"

    def accept(self, entries: Sequence[tuple[str, int, int, str]], owner: str = "") -> list[bool]:
        """Insert ``(activation_id, topic, accepted_ms, raw)`` entries for ``owner``; True for each that is
        new (absent before, or already ``owner``'s and still open: asking twice is harmless)."""
        if not entries:
            return []
        keys = [self._key(a) for a, _, _, _ in entries]
        args: list[Any] = [self._open, owner]
        for a, t, ms, raw in entries:
            args += [a, t, ms, raw]
        return [bool(x) for x in self._accept(keys=keys, args=args)]

    def mark_acking(self, items: Iterable[tuple[LedgerEntry, bytes, bytes | dict[str, Any] | None]],
                    forget: Iterable[str] = (), done: Iterable[str] = ()) -> None:
        pipe = self.r.pipeline(transaction=False)
        if self.stage_acking(pipe, items, forget, done):
            pipe.execute()

    def stage_acking(self, pipe, items: Iterable[tuple[LedgerEntry, bytes, bytes | dict[str, Any] | None]],
                     forget: Iterable[str] = (), done: Iterable[str] = ()) -> int:
        """Add to ``pipe``: each ack's bytes (and the activation record: a dict, or its JSON already
        encoded), the deletion of the ``forget`` keys (the answered requests' intermediate data), the
        ``done`` marks; how many commands."""
        n = 0
        gone = list(forget)
        if gone:
            pipe.delete(*gone)
            n += 1
        n += self._done(pipe, done)
        keys: list[str] = []
        args: list[Any] = []
        for entry, ack, record in items:
            keys.append(self._key(entry.activation_id))
            if record is None:
                args += [ack, ""]
            else:
                args += [ack, record if isinstance(record, bytes) else
                         _RECORD_ENCODER.encode(record)]
        # one script call per ACKING_PER_CALL entries, not an HSET each: redis-py packs every command of a
        # pipeline and parses every reply in Python, which cost the loop as much as the write itself
        for i in range(0, len(keys), ACKING_PER_CALL):
            chunk = keys[i:i + ACKING_PER_CALL]
            pipe.eval(_ACKING, len(chunk), *chunk, *args[2 * i:2 * (i + len(chunk))])
            n += 1
        return n

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
        for i in range(0, len(ids), DONE_PER_CALL):
            chunk = ids[i:i + DONE_PER_CALL]
            pipe.eval(_DONE, 1 + len(chunk), self._open, *(self._key(a) for a in chunk), DONE_TTL_S, *chunk)
        return -(-len(ids) // DONE_PER_CALL)

    def unfinished(self) -> list[LedgerEntry]:
        """Entries in state ``open`` or ``acking`` (what a previous incarnation left)."""
        ids = sorted(self.r.smembers(self._open))
        ids = [i.decode() if isinstance(i, bytes) else i for i in ids]
        out: list[LedgerEntry] = []
        stale: list[str] = []
        pipe = self.r.pipeline(transaction=False)
        for i in ids:
            pipe.hgetall(self._key(i))
        for aid, h in zip(ids, pipe.execute() if ids else []):
            d = {k.decode(): v.decode("utf-8") for k, v in (h or {}).items()}
            if d.get("state") not in ("open", "acking"):
                stale.append(aid)
                continue
            out.append(LedgerEntry(aid, d["state"], int(d.get("topic", 0)), int(d.get("accepted_ms", 0)),
                                   d.get("raw"), d.get("ack"), d.get("record")))
        if stale:
            self.r.srem(self._open, *stale)
        return out

    def open_count(self) -> int:
        return int(self.r.scard(self._open))

    # -- virtual invoker ids -------------------------------------------------------------------------
    def invoker_ids(self) -> dict[str, int]:
        return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in self.r.hgetall(self._invokers).items()}

    def invoker_id(self, node: str) -> int:
        """The node's stable id: its stored one, else the lowest unused id (stored before use)."""
        while True:
            known = self.invoker_ids()
            if node in known:
                return known[node]
            candidate = min(set(range(len(known) + 1)) - set(known.values()))
            # WATCH the hash so two schedulers never hand out the same id.
            with self.r.pipeline() as pipe:
                try:
                    pipe.watch(self._invokers)
                    if pipe.hexists(self._invokers, node):
                        continue
                    pipe.multi()
                    pipe.hset(self._invokers, node, candidate)
                    pipe.execute()
                    return candidate
                except redis.WatchError:
                    continue
