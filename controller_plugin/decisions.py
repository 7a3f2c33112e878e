"""The scheduler's decisions as they turned out, for replays and operators.

Stream ``esg:{scope}:decisions`` (capped at about :data:`DECISIONS_MAXLEN` entries) of JSON objects,
written in the main loop's pipeline with the turn's other writes. One per request the scheduler ended
(``type: "request"``: ``id, app, arrival_ms`` -- when the scheduler accepted it --, ``finished_ms`` -- when it
answered --, ``slo_ms, ok``), and one per answered batch (``type: "batch"``):

``batch_id, app, function, node, gpu_model, batch, vcpus, gpu, slice ("3g.20gb@4" or null), create,
destroy (instances), destroyed (their labels), warm (the plan took an idle warm worker), evicted ([function,
count] pairs: idle workers stopped on its instance for its worker's GPU memory), jobs (activation
ids), enqueued_ms (the step that queued its last job), decided_ms (the step that placed it: the same when
it waited for nothing), sent_ms, done_ms (epoch ms: dispatched, result read), run_ms (the agent's
measured run), cold (the agent started a worker), overlapped_start (another worker started on the node
while it ran: its run time is not learned from), reconfigured (MIG instances the agent changed), status
(0 when every activation succeeded), keep_alive_ms (the policy's keep-alive for its worker; null: the
agents' own)``.

One per pre-warm a heartbeat named done (``type: "prewarm"``): ``prewarm_id, app, function, node,
gpu_model, vcpus, gpu, slice, create, keep_alive_ms, sent_ms, done_ms`` (done: the heartbeat that named
it read: the agent beats as soon as a pre-warm finishes), ``ready`` (that heartbeat showed an idle worker of the function
on its slice; false: it failed or was taken already), ``outcome`` (what the agent did with it, as its
heartbeat said: ``started`` a worker, found one ``warm`` -- its keep-alive extended, nothing started --,
``failed``, ``expired``, ``repeated`` or ``dropped``; null: an agent that does not say) and
``reconfigured`` (MIG instances the agent created or destroyed for it; null when it does not say).

``esg replay`` reads it for the cost (idle MIG instances kept for warm workers included, by the
emulator's rule), cold starts, MIG changes and batch sizes of its measured requests (what the emulator
counts); the configurations chosen are compared with the emulator's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import Any

from agent_channel import protocol
from esg.events import Dispatch, Prewarm, RequestOutcome

DECISIONS_MAXLEN = 200_000

# KEYS[1]: the stream; ARGV: its cap, then the entries, each added as one entry with the field ``m``. A
# turn's entries (two an activation) in one call instead of one command each.
_ADD = """
for i = 2, #ARGV do
  redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[1], '*', 'm', ARGV[i])
end
return #ARGV - 1
"""
#: The most entries one ``_ADD`` call carries.
ADD_PER_CALL = 2000
#: One encoder for every entry (``json.dumps`` with arguments builds an encoder at each call).
_ENCODER = json.JSONEncoder(separators=(",", ":"))


def decisions_key(scope: str) -> str:
    return f"esg:{scope}:decisions"


def status_key(scope: str) -> str:
    """The scheduler's AFW queue lengths and why each waiting queue waits (``esg status``), a JSON
    string refreshed about once a second: ``{"t_ms", "queues": {"app/function": n}, "waiting":
    {"app/function": reason}}``."""
    return f"esg:{scope}:status"


def slice_label(d: Dispatch) -> str | None:
    s = d.fit.slice
    return None if s is None else f"{s.profile}@{s.start}"


class DecisionLog:
    def __init__(self, key: str) -> None:
        self.key = key
        self._sent: dict[str, tuple[int, int]] = {}
        self._staged: list[bytes] = []
        self._status: tuple[str, str] | None = None

    def sent(self, dispatches: Sequence[Dispatch], decided_ms: int | None = None) -> None:
        """The batches written to their agents (now), placed by the step at ``decided_ms``."""
        t = int(time.time() * 1000)
        for d in dispatches:
            self._sent[d.batch_id] = (t, t if decided_ms is None else decided_ms)

    def forget(self, batch_ids: Sequence[str]) -> None:
        for b in batch_ids:
            self._sent.pop(b, None)

    def done(self, d: Dispatch, rm: protocol.BatchResult, gpu_model: str | None, now_ms: int) -> tuple[int, int]:
        """Log an answered batch; when it was sent and when it was decided (epoch ms)."""
        sent, decided = self._sent.pop(d.batch_id, (now_ms, now_ms))
        entry: dict[str, Any] = {
            "type": "batch", "batch_id": d.batch_id, "app": d.app, "function": d.function, "node": d.node, "gpu_model": gpu_model,
            "batch": d.config.batch, "vcpus": d.config.vcpus, "gpu": d.config.gpu, "slice": slice_label(d),
            "create": d.fit.create, "destroy": len(d.fit.destroy),
            "destroyed": [f"{r.profile}@{r.start}" for r in d.fit.destroy], "warm": d.fit.warm_worker is not None,
            "evicted": [[f, n] for f, n in d.fit.evict],
            "jobs": [j.request_id for j in d.jobs], "enqueued_ms": max((j.enqueued_ms for j in d.jobs), default=None),
            "decided_ms": decided, "sent_ms": sent,
            "done_ms": now_ms, "cold": rm.cold, "overlapped_start": rm.overlapped_start,
            "reconfigured": rm.reconfigured, "run_ms": rm.run_ms,
            "status": max((r.status_code for r in rm.results), default=3 if rm.error else 0),
            "keep_alive_ms": d.keep_alive_ms}
        self._staged.append(_ENCODER.encode(entry).encode())
        return sent, decided

    def prewarm(self, p: Prewarm, sent_ms: int, done_ms: int, gpu_model: str | None, ready: bool,
                done: protocol.PrewarmDone | None = None) -> None:
        """A pre-warm a heartbeat named done at ``done_ms`` (sent at ``sent_ms``), with what the agent did
        with it (``done``; None: it did not say)."""
        s = p.fit.slice
        self._staged.append(json.dumps({
            "type": "prewarm", "prewarm_id": p.prewarm_id, "app": p.app, "function": p.function, "node": p.node,
            "gpu_model": gpu_model, "vcpus": p.config.vcpus, "gpu": p.config.gpu,
            "slice": None if s is None else f"{s.profile}@{s.start}", "create": p.fit.create,
            "keep_alive_ms": p.keep_alive_ms, "sent_ms": sent_ms, "done_ms": done_ms, "ready": ready,
            "outcome": None if done is None else done.outcome,
            "reconfigured": None if done is None else done.reconfigured},
            separators=(",", ":")).encode())

    def outcome(self, o: RequestOutcome) -> None:
        record = {"type": "request", "id": o.request_id, "app": o.app, "arrival_ms": o.arrival_ms,
                  "finished_ms": o.finished_ms, "slo_ms": o.slo_ms, "ok": o.ok}
        if o.rejected:
            record["rejected"] = True  # answered at once by admission control, never run
        self._staged.append(_ENCODER.encode(record).encode())

    def status(self, key: str, queues: dict, waiting: dict, now_ms: int) -> None:
        """Publish the queues (by (app, function)) and why the waiting ones wait, with the next writes."""
        self._status = (key, json.dumps({"t_ms": now_ms,
                                         "queues": {f"{a}/{f}": n for (a, f), n in queues.items()},
                                         "waiting": {f"{a}/{f}": why for (a, f), why in waiting.items()}},
                                        separators=(",", ":")))

    def stage(self, pipe) -> int:
        status = self._status
        if status is not None:
            pipe.set(status[0], status[1], ex=60)
        staged = self._staged
        calls = 0
        for i in range(0, len(staged), ADD_PER_CALL):     # EVAL, not EVALSHA: see ledger._done
            pipe.eval(_ADD, 1, self.key, DECISIONS_MAXLEN, *staged[i:i + ADD_PER_CALL])
            calls += 1
        return calls + (status is not None)

    def written(self) -> None:
        self._staged.clear()
        self._status = None


def read_decisions(client, key: str, since_ms: int = 0) -> list[dict[str, Any]]:
    """The decisions of batches answered at or after ``since_ms`` (epoch ms), oldest first."""
    out = []
    start = f"{since_ms}-0" if since_ms else "-"
    while True:
        got = client.xrange(key, start, "+", count=5000)
        if not got:
            return out
        for _entry_id, fields in got:
            try:
                out.append(json.loads(fields[b"m"]))
            except (KeyError, ValueError):
                continue
        last = got[-1][0].decode() if isinstance(got[-1][0], bytes) else got[-1][0]
        ms, seq = last.split("-")
        start = f"{ms}-{int(seq) + 1}"
