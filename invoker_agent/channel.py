"""The agent's end of the channel: its node's dispatch stream, claims, results, heartbeats (Redis streams).

Everything the agent writes is in its node's own key space (:meth:`agent_channel.keys.Keys.node_space`),
the only keys its Redis ACL user may write (:mod:`agent_channel.acl`).

* **Dispatches** are read from ``esg:{prefix}:node:{node}:dispatch`` in consumer group ``agents`` as
  consumer ``{node}`` (``XREADGROUP ... BLOCK``). A read entry stays in the group's pending list until
  it is answered, so an agent killed while running batches finds them again at its next start
  (:meth:`AgentChannel.pending`). A group that is gone (Redis lost its data: ``NOGROUP``) is made again,
  logged and counted (:attr:`AgentChannel.recoveries`, reported in the heartbeats), and reading goes on.
* **Claims** (:mod:`agent_channel.claims`): a batch starts only once :meth:`AgentChannel.claim` took it;
  one the scheduler revoked, or of an older leader than the node was told of, is not run.
* **Answering** a batch is one ``MULTI``: the outputs its successors need (:mod:`invoker_agent.data`),
  the :class:`~agent_channel.protocol.BatchResult` added to the dispatch's ``reply_to`` stream (the
  node's own results stream of the scheduler that sent it: nothing else is answered to), its claim
  marked ``done``, and ``XACK`` + ``XDEL`` of the dispatch -- the result is published exactly when the
  dispatch stops being pending.
  Answers of batches that finish while another thread's answer is on its way share the next ``MULTI``
  (group commit, :class:`AnswerGroup`): one round trip for all of them, and the scheduler reads them
  together and handles them in one turn of its loop, where one each cost it a turn each (its loop's
  fixed costs per turn -- the step, the pipeline, the acks' produce request -- were most of its CPU per
  activation with a real agent in a burst). An answer alone goes at once, as before.
* **Heartbeats** go to the node's own ``esg:{prefix}:node:{node}:heartbeats`` (capped); every
  :data:`HELLO_EVERY` th one also announces the node on ``esg:{prefix}:hello``, so a scheduler started
  later finds it.

A scheduler that declares this agent lost revokes its unstarted batches and removes them from the
stream itself (``XACK`` + ``XDEL``) before sending them elsewhere, so a restarted agent does not pick
them up again.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import redis

from agent_channel import claims
from agent_channel.keys import AGENT_GROUP, HEARTBEAT_MAXLEN, HELLO_MAXLEN, RESULTS_MAXLEN, Keys
from agent_channel.protocol import BatchResult, Heartbeat, encode
from agent_channel.streams import Entry, ensure_group, entries, fields
from invoker_agent.data import Write

log = logging.getLogger("esg.agent")

#: How long the answer of a dispatch read with others waits for theirs (from its cohort's first answer):
#: long enough for batches started together on warm workers to finish together, short against a
#: scheduler turn's cost on the loop's thread. An answer waits only for siblings of its own kind (the
#: same function and configuration: the same run time); a ResNet-50 batch read with a DenseNet-121 one
#: waited for it, and was answered 5 ms late, a fifth of an image-classification SLO
#: (docs/results/2026-11-28-live-vs-emulated-history.md).
COHORT_WAIT_S = 0.005
#: Every this many heartbeats the node is announced on the hello stream again.
HELLO_EVERY = 10


def is_nogroup(exc: BaseException) -> bool:
    """Whether a read failed because the stream or its group is gone (``NOGROUP``; ``UNBLOCKED``: deleted
    while a read was blocked on it)."""
    return isinstance(exc, redis.ResponseError) and str(exc).startswith(("NOGROUP", "UNBLOCKED"))


class AgentChannel:
    def __init__(self, client: redis.Redis, keys: Keys, node: str) -> None:
        self.r = client
        self.keys = keys
        self.node = node
        self.stream = keys.dispatch(node)
        self.recoveries = 0
        """Consumer groups made again after Redis lost them."""
        self._answers = AnswerGroup(self._commit)
        self._beats = 0
        self._group_lock = threading.Lock()
        ensure_group(client, self.stream, AGENT_GROUP)

    def _read_group(self, streams: dict, **kw) -> list[Entry]:
        """``XREADGROUP`` on this node's stream; a group Redis lost is made again (and nothing read)."""
        try:
            return entries(self.r.xreadgroup(AGENT_GROUP, self.node, streams, **kw))
        except redis.ResponseError as exc:
            if not is_nogroup(exc):
                raise
            with self._group_lock:
                ensure_group(self.r, self.stream, AGENT_GROUP)
                self.recoveries += 1
            log.warning("agent %s: the consumer group of %s was gone (Redis lost its data?): made again "
                        "(%d time(s))", self.node, self.stream, self.recoveries)
            return []

    def pending(self) -> list[Entry]:
        """Dispatches this node's agent took and never answered (an earlier incarnation's), oldest first."""
        out: list[Entry] = []
        after = "0"
        while True:
            got = self._read_group({self.stream: after}, count=100)
            if not got:
                return out
            out += got
            after = got[-1].id

    def take(self, count: int, block_ms: int, cohort: bool = False) -> list[Entry]:
        """Up to ``count`` new dispatches, waiting at most ``block_ms`` for the first. ``cohort``: those
        read together are answered together (each must then be :meth:`answer`-ed or :meth:`settle`-d)."""
        got = self._read_group({self.stream: ">"}, count=count, block=block_ms)
        if cohort:
            self._answers.join([e.id for e in got])
        return got

    def claim(self, batch_id: str, epoch: int, ttl_s: int) -> str:
        """Take ``batch_id``'s claim before running it (:func:`agent_channel.claims.claim`)."""
        return claims.claim(self.r, self.keys, self.node, [(batch_id, epoch, ttl_s)])[0]

    def answers_to(self, reply_to: str) -> bool:
        """Whether ``reply_to`` is a stream this agent answers to: one of its node's results streams."""
        return self.keys.is_results_of(self.node, reply_to)

    def settle(self, entry_id: str) -> None:
        """Done with ``entry_id`` without (or after) an answer: its cohort's answers wait for it no longer."""
        self._answers.settle(entry_id)

    def describe(self, entry_id: str, kind: Hashable) -> None:
        """``entry_id`` runs a batch of ``kind`` (its function and configuration): only its cohort's answers
        of the same kind wait for it."""
        self._answers.describe(entry_id, kind)

    def answer(self, entry_id: str, reply_to: str, result: BatchResult, writes: Sequence[Write] = (),
               claim_ttl_s: int | None = None) -> None:
        """Store the outputs, publish the result, mark the batch's claim ``done`` (``claim_ttl_s``: None
        when it had none), and retire the dispatch: all or nothing. Returns once Redis took it (in a
        ``MULTI`` that may carry other threads' answers too); raises what Redis raised for it."""
        self._answers.commit(_Answer(entry_id, reply_to, result, tuple(writes), claim_ttl_s))

    def _commit(self, answers: list[_Answer]) -> list[Exception | None]:
        """One ``MULTI`` for ``answers``; each answer's error (None: taken). A command refused inside
        the transaction fails its own answer only."""
        pipe = self.r.pipeline(transaction=True)
        spans = []
        for a in answers:
            first = len(pipe.command_stack)
            self.stage_answer(pipe, a.entry_id, a.reply_to, a.result, a.writes, retire=False,
                              claim_ttl_s=a.claim_ttl_s)
            spans.append((first, len(pipe.command_stack)))
        # the dispatches are retired together: one XACK and one XDEL for all (both take many ids), not
        # two commands an answer -- each costs redis-py its packing and two replies to parse (QUEUED, EXEC)
        ids = [a.entry_id for a in answers]
        pipe.xack(self.stream, AGENT_GROUP, *ids)
        pipe.xdel(self.stream, *ids)
        replies = pipe.execute(raise_on_error=False)
        retired = next((r for r in replies[-2:] if isinstance(r, Exception)), None)
        return [next((r for r in replies[i:j] if isinstance(r, Exception)), retired) for i, j in spans]

    def stage_answer(self, pipe, entry_id: str, reply_to: str, result: BatchResult,
                     writes: Sequence[Write] = (), retire: bool = True, claim_ttl_s: int | None = None) -> None:
        """:meth:`answer`'s commands, added to ``pipe`` (a transaction: several answers can share one);
        without ``retire``, the caller adds the dispatch's ``XACK`` and ``XDEL``."""
        for w in writes:
            pipe.set(w.key, w.blob, ex=w.ttl_s)
        if claim_ttl_s is not None:
            pipe.set(self.keys.claim(self.node, result.batch_id), claims.DONE, ex=max(1, claim_ttl_s))
        if reply_to:
            pipe.xadd(reply_to, fields(encode(result)), maxlen=RESULTS_MAXLEN, approximate=True)
        if retire:
            pipe.xack(self.stream, AGENT_GROUP, entry_id)
            pipe.xdel(self.stream, entry_id)

    def drop(self, entry_id: str) -> None:
        """Retire a dispatch that is not answered (a pre-warm, a revoked batch, one that cannot be read)."""
        pipe = self.r.pipeline(transaction=True)
        pipe.xack(self.stream, AGENT_GROUP, entry_id)
        pipe.xdel(self.stream, entry_id)
        pipe.execute()

    def heartbeat(self, hb: Heartbeat) -> None:
        pipe = self.r.pipeline(transaction=False)
        pipe.xadd(self.keys.heartbeats(self.node), fields(encode(hb)), maxlen=HEARTBEAT_MAXLEN, approximate=True)
        if self._beats % HELLO_EVERY == 0:
            pipe.xadd(self.keys.hello, fields(self.node.encode()), maxlen=HELLO_MAXLEN, approximate=True)
        self._beats += 1
        pipe.execute()


@dataclass(frozen=True)
class _Answer:
    entry_id: str
    reply_to: str
    result: BatchResult
    writes: tuple[Write, ...]
    claim_ttl_s: int | None = None


@dataclass
class _Cohort:
    """Dispatches read together: those not answered nor settled yet, and when the first answer came."""

    running: set[str]
    first_answer_s: float | None = field(default=None)
    kinds: dict[str, Hashable] = field(default_factory=dict)
    """What each dispatch runs, once its thread said (:meth:`AnswerGroup.describe`)."""

    def holds(self, entry_id: str) -> bool:
        """Whether the answer of ``entry_id`` waits for a running sibling: one of its kind, or one whose
        kind is not known yet."""
        mine = self.kinds.get(entry_id)
        return any(e != entry_id and (mine is None or self.kinds.get(e, mine) == mine) for e in self.running)


class _Waiter:
    """One caller of :meth:`AnswerGroup.commit`: its answer, its outcome once committed, and the event
    that wakes it -- it alone: a commit wakes the callers it committed for, not every waiting thread."""

    __slots__ = ("answer", "cohort", "done", "error", "wake")

    def __init__(self, answer: _Answer, cohort: _Cohort | None) -> None:
        self.answer = answer
        self.cohort = cohort
        self.done = False
        self.error: BaseException | None = None
        self.wake = threading.Event()


class AnswerGroup:
    """Group commit of answers from several batch threads, without a thread of its own: the first
    caller commits its answer at once; callers arriving while a commit is on its way queue theirs, and
    when it is back, the first of them whose answer may go is woken to commit the whole queue. Every
    caller returns when its own answer is committed (or raises its error), so what it does next --
    naming the batch answered in a heartbeat, retrying -- is as before.

    A caller whose cohort (:meth:`join`) still has dispatches of its kind running (:meth:`describe`; one
    not described yet counts) waits for their answers, at most ``cohort_wait_s`` from the cohort's first
    answer; whoever answers last commits the queue, its siblings' answers with it, or the first whose
    wait is over does. Batches of other kinds run for other times, so none waits for them.

    Each wake-up goes to the one thread that has something to do (its outcome is in, or the queue is
    its to commit). With one condition shared by all and ``notify_all``, every commit and every
    cohort's last answer woke every waiting batch thread, and each wake-up costs a context switch and a
    turn at the interpreter's lock: a burst's answers spent a fifth of the agent's samples there."""

    def __init__(self, commit, cohort_wait_s: float = COHORT_WAIT_S) -> None:
        self._commit = commit
        self._cohort_wait_s = cohort_wait_s
        self._lock = threading.Lock()
        self._queue: list[_Waiter] = []
        self._busy = False
        self._cohorts: dict[str, _Cohort] = {}

    def join(self, entry_ids: Sequence[str]) -> None:
        """``entry_ids`` were read together: a cohort (one alone is none)."""
        if len(entry_ids) < 2:
            return
        cohort = _Cohort(set(entry_ids))
        with self._lock:
            for e in entry_ids:
                self._cohorts[e] = cohort

    def describe(self, entry_id: str, kind: Hashable) -> None:
        """``entry_id`` runs a batch of ``kind``."""
        with self._lock:
            cohort = self._cohorts.get(entry_id)
            if cohort is not None:
                cohort.kinds[entry_id] = kind

    def settle(self, entry_id: str) -> None:
        """``entry_id`` will not be answered (or already was): its cohort stops waiting for it."""
        with self._lock:
            cohort = self._cohorts.pop(entry_id, None)
            if cohort is not None:
                cohort.running.discard(entry_id)
                self._wake_next()       # a queued sibling may have waited for this one alone

    def commit(self, answer: _Answer) -> None:
        with self._lock:
            cohort = self._cohorts.pop(answer.entry_id, None)
            me = _Waiter(answer, cohort)
            self._queue.append(me)
            if cohort is not None:
                cohort.running.discard(answer.entry_id)
                if cohort.first_answer_s is None:
                    cohort.first_answer_s = time.monotonic()
            batch, timeout = self._next_step(me)
        while not me.done:
            if batch is None:
                me.wake.wait(timeout)
                with self._lock:
                    batch, timeout = self._next_step(me)
                continue
            try:
                errors: list[Exception | None] = self._commit([w.answer for w in batch])
            except BaseException as e:  # noqa: BLE001 - each caller gets it and decides (retry);
                errors = [e] * len(batch)   # none of them is left waiting for an outcome
            with self._lock:
                self._busy = False
                for w, err in zip(batch, errors, strict=True):
                    w.error, w.done = err, True
                    if w is not me:
                        w.wake.set()
                self._wake_next()
            batch = None
        if me.error is not None:
            raise me.error

    def _next_step(self, me: _Waiter) -> tuple[list[_Waiter] | None, float | None]:
        """(Under the lock.) The queue to commit now, taken; or (None, how long to wait at most: None for
        as long as it takes) -- until woken, with ``me``'s wake-up cleared first so that none is lost."""
        if me.done:
            return None, None
        left: float | None = None
        if me.cohort is not None and me.cohort.holds(me.answer.entry_id):
            left = me.cohort.first_answer_s + self._cohort_wait_s - time.monotonic()
            if left <= 0:
                left = None
            elif not self._busy:
                me.wake.clear()
                return None, left
        if self._busy:
            me.wake.clear()
            return None, left
        self._busy = True
        batch, self._queue = self._queue, []
        return batch, None

    def _wake_next(self) -> None:
        """(Under the lock.) Unless a commit is on its way, wake the first queued caller whose answer may
        go now (the others' cohorts still wait; they wake when their wait is over)."""
        if self._busy:
            return
        now = time.monotonic()
        for w in self._queue:
            c = w.cohort
            if c is None or not c.holds(w.answer.entry_id) or now >= c.first_answer_s + self._cohort_wait_s:
                w.wake.set()
                return
