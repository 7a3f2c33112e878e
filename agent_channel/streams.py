"""Stream entries of the channel: one field holding an encoded message, read back in order."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis

from agent_channel.keys import FIELD


@dataclass(frozen=True)
class Entry:
    stream: str
    id: str
    raw: bytes | None
    """The message's bytes; None when the entry has no message field (or was deleted while pending)."""


def fields(raw: bytes) -> dict[bytes, bytes]:
    return {FIELD: raw}


def entries(reply: Iterable | None) -> list[Entry]:
    """Entries of an ``XREAD`` / ``XREADGROUP`` reply, in stream order."""
    out = []
    for stream, items in reply or ():
        name = stream.decode() if isinstance(stream, bytes) else stream
        for eid, data in items:
            eid = eid.decode() if isinstance(eid, bytes) else eid
            out.append(Entry(name, eid, (data or {}).get(FIELD)))
    return out


def ensure_group(r: redis.Redis, stream: str, group: str) -> None:
    """Create ``group`` on ``stream`` (and the stream) reading from its start; an existing one is kept."""
    try:
        r.xgroup_create(stream, group, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise


def last_id(r: redis.Redis, stream: str) -> str:
    """The id of the stream's newest entry ("0-0" when empty or absent): read after it to see only new ones."""
    newest = r.xrevrange(stream, count=1)
    if not newest:
        return "0-0"
    eid = newest[0][0]
    return eid.decode() if isinstance(eid, bytes) else eid
