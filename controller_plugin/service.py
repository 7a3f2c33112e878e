"""The ESG scheduler service: OpenWhisk's Kafka topics on one side, the agents' Redis channel on the other.

**Leader and standbys.** Every scheduler of a deployment runs this service; one leads, holding the
lease (:mod:`controller_plugin.lease`), the others stand by. A standby reads the agents' heartbeats
(so it knows every agent, its invoker id and state), warms the plans of the activations in flight,
holds no Kafka assignment and writes nothing but its own status; it publishes how far behind it is.
When the lease is free it takes it and **takes over** (:meth:`SchedulerService._take_over`): it
compares the ledger with the latest checkpoint in Kafka (:mod:`controller_plugin.checkpoint`) and says
loudly if Redis lost ledger entries (every activation of the range the lost ledger held is then
answered, never forgotten, never run twice), settles what the former leader left in the agents' streams
and resumes every open activation where it was (:mod:`controller_plugin.takeover`), pings ``health``
at once, and assigns the ``invoker{N}`` topics from the committed offsets. A leader whose lease is gone
-- a pause, a partition from Redis, Redis losing the key -- finds every write refused (fenced), stops
acting at once and steps down: :meth:`run` returns with :attr:`SchedulerService.stepped_down` set, and
``esg scheduler`` starts a fresh standby in the same process.

The leader wires four parts, each owning its own state, and runs the main loop:

* :class:`~controller_plugin.activations.ActivationReader` (its own thread) -- the Kafka consumer of
  ``invoker{N}``: ledger first, then checkpoint and commit, then each activation's plan, to the inbox;
* :class:`~controller_plugin.workflows.Workflows` -- the core scheduler and each activation's progress
  through its app (no I/O);
* :class:`~controller_plugin.dispatcher.Dispatcher` -- the agents (heartbeats, virtual invoker ids),
  the Redis channel to them and the batches in flight; its reader thread delivers results and
  heartbeats to the inbox;
* :class:`~controller_plugin.ack_pipeline.AckPipeline` -- the ledger's ``acking``/``done`` states, the
  acks on ``completed{C}`` and the acks a former leader left; its
  :class:`~controller_plugin.record_writer.RecordWriter` (its own thread) writes every activation record
  to OpenWhisk's activation store.

**The main loop** (the caller's thread, :meth:`SchedulerService.run`) waits on the inbox and wakes at
once for each item (a poll's activations come as one, a read's results and heartbeats as one:
:mod:`controller_plugin.inbox`): accepted activations and results go into ``Workflows``; a step turns them into
dispatches and answers. The dispatches go out first (one Redis round trip, fenced: the agents run them
while the loop goes on); then one more pipeline carries the turn's ledger writes -- its acks' ``acking``
entries (fenced), what the multi-function apps' finished functions returned, the ``done`` marks, the
decision log's entries, and the trimming of the results streams to what the ledger now holds -- and only
once Redis took them are the acks produced (each round trip retried while Redis fails, never once it
says the lease is gone). Once a second, and whenever an agent joins, it pings ``health`` as each live
agent's virtual invoker (after checking the lease in Redis); it answers a controller's health test
action for invoker N while the agent behind N is alive (one pending test per invoker and controller:
several controllers test the same invoker); it declares an agent lost only when a read that started
after the agent timeout found no heartbeat of it (:mod:`controller_plugin.health`), revokes its batches
(those not started run again elsewhere, those started are answered with an error: at most once) and
fails what would reach the controller's deadline unanswered.
"""

from __future__ import annotations

import itertools
import json
import logging
import queue
import threading
import time
import uuid
from collections.abc import Callable, Iterable

import redis
from kafka.errors import KafkaError

from agent_channel import protocol
from agent_channel.connect import ChannelError, connect, redact_url
from agent_channel.keys import Keys
from controller_plugin import wire
from controller_plugin.ack_pipeline import AckPipeline, Answer, acked_ids
from controller_plugin.activation_store import ActivationStore, StoreError
from controller_plugin.activations import Accepted, ActivationReader, HealthTest, Leading
from controller_plugin.bus import Bus, BusError, Topics
from controller_plugin.channel import SchedulerChannel
from controller_plugin.checkpoint import Checkpoint, Checkpoints, OpenRange, checkpoint_topic, loss
from controller_plugin.deadletters import DeadLetters
from controller_plugin.decisions import DecisionLog, decisions_key, status_key
from controller_plugin.dispatcher import Dispatcher, ReadMark
from controller_plugin.health import AgentRegistry
from controller_plugin.inbox import Inbox
from controller_plugin.lease import Fenced, Lease, epoch_of, holder_of, is_fenced
from controller_plugin.ledger import Ledger, LedgerEntry
from controller_plugin.metadata import ActivationError, MetadataClient, ProfileStore
from controller_plugin.metrics import Metrics
from controller_plugin.online import OnlineStore
from controller_plugin.plans import PlanCache
from controller_plugin.record_writer import RecordWriter, Stored
from controller_plugin.settings import SchedulerSettings
from controller_plugin.takeover import Found, adopted_dispatch, encode_progress, take_over
from controller_plugin.workflows import PrewarmSend, Send, Workflows
from esg.events import Dispatch
from esg.explore import Explorer
from esg.online import Observation
from esg.policies import make_policy
from esg.policies.base import PolicyContext
from esg.scheduler import Scheduler
from openwhisk_status import STATUS_WHISK_ERROR

log = logging.getLogger("esg.scheduler")

#: The most messages folded into one turn of the main loop (a poll's or a read's count as theirs).
MAX_ITEMS_PER_TURN = 5000
#: A standby whose reads have caught up within this long is ready to take over.
SYNCED_S = 2.0
#: How often each scheduler publishes its role and lag (``esg status``), and a standby warms plans.
PUBLISH_EVERY_S = 1.0
#: A scheduler's published status older than this is gone.
STATUS_STALE_S = 10.0


class ServiceError(Exception):
    """A dependency is missing or unreachable at start-up; the message names it."""


def now_ms() -> int:
    return int(time.time() * 1000)


def schedulers_key(scope: str) -> str:
    """Hash: each scheduler of the scope (by holder) -> its role, epoch, lag and when it said so (JSON)."""
    return f"esg:{scope}:schedulers"


class _Stop:
    """Put in the inbox to end the main loop."""


class SchedulerService:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.s = settings
        try:
            self.redis = connect(settings.redis_url)
        except ChannelError as exc:
            raise ServiceError(str(exc)) from None
        try:
            # an ack still queued when the lease runs out times out in the producer (never sent late)
            self.bus = Bus(settings.kafka, delivery_timeout_ms=max(500, int(settings.lease_s * 500)))
        except BusError as exc:
            raise ServiceError(str(exc)) from None
        self.topics = Topics(settings.topic_prefix, settings.controller_id)
        self.keys = keys = Keys(settings.topic_prefix, settings.controller_id)
        self.metrics = Metrics()
        self.inbox = Inbox()
        self.stop_event = threading.Event()
        self.errors: list[str] = []
        self.holder = f"{settings.name}/{settings.incarnation}"
        self.lease = Lease(self.redis, keys.scope, self.holder, settings.lease_s)
        self.ledger = Ledger(self.redis, keys.scope, settings.topic_prefix, fence=self.lease)
        self.dead_letters = DeadLetters(self.bus, self.topics.dead_letter, self.metrics)
        self.registry = AgentRegistry(self.ledger.invoker_id, self.ledger.invoker_ids(), settings.agent_timeout_s,
                                      reload_ids=self.ledger.invoker_ids)
        self.registry.leading = False
        self.online = OnlineStore(self.redis, settings.topic_prefix) if settings.online_profiles else None
        self.plans = PlanCache(MetadataClient(settings.openwhisk_api, settings.openwhisk_auth),
                               ProfileStore(settings.profiles_dir, self.online, settings.shared_profiles,
                                            settings.slo_percentile))
        self._observed: list[tuple[Observation, float | None]] = []
        self.open_range = OpenRange()
        self.checkpoints = Checkpoints(settings.kafka, checkpoint_topic(settings.topic_prefix, settings.controller_id))
        self.leading = Leading(self.lease, "", self.checkpoints, self.open_range,
                               completed_at=lambda: self.acks.completed_at)
        self.reader = ActivationReader(
            self.bus, self.topics, self.ledger, self.plans,
            self.dead_letters, self.inbox, settings.group_id, self.registry.invoker_count(), settings.incarnation,
            settings.parameter_keys, self.leading)
        self.channel = SchedulerChannel(self.redis, keys, fence=self.lease)
        self.dispatcher = Dispatcher(self.channel, self.registry, settings.incarnation, self.metrics)
        policy = make_policy(settings.policy, PolicyContext(apps={}, profiles={},
                                                            stage_overhead_ms=settings.stage_overhead_ms,
                                                            slo_percentile=settings.slo_percentile))
        explorer = Explorer(settings.explore_fraction) if settings.online_profiles else None
        # pre-warm ids carry the incarnation too: an agent skips an id it has taken before. The dispatcher
        # hands the step one snapshot kept across turns, so a waiting head is placed again only after an
        # event that can end its wait (esg.waits), as in the emulator
        core = Scheduler({}, policy, batch_ids=(f"{settings.incarnation}-{i}" for i in itertools.count()),
                         explorer=explorer, admission_control=settings.admission_control,
                         prewarm=settings.prewarm,
                         prewarm_ids=(f"{settings.incarnation}-w{i}" for i in itertools.count()))
        self.workflows = Workflows(core, self.channel.reply_to, self.metrics, settings.deadline_margin_s,
                                   settings.deadline)
        self.records = None
        if settings.activation_store:
            store = ActivationStore(settings.activation_store)
            try:
                store.ensure()
            except StoreError as exc:
                self.bus.close()
                self.redis.close()
                raise ServiceError(str(exc)) from None
            self.records = RecordWriter(store, self.inbox.put)
        else:
            log.warning("no activation store (--activation-store): the controller cannot read the records of "
                        "non-blocking calls or of acks too large for Kafka")
        self.acks = AckPipeline(self.bus, self.ledger, self.topics, self.metrics, self.records,
                                on_done=self.open_range.remove)
        self.acks.may_send = self.lease.held
        self.decisions = DecisionLog(decisions_key(keys.scope))
        self.status_key = status_key(keys.scope)
        self.health_waiting: dict[tuple[int, str], HealthTest] = {}
        self._answers: list[Answer] = []
        """The turn's answers, written to the ledger and produced once its dispatches went out."""
        self._results: list[tuple[Dispatch, protocol.BatchResult]] = []
        """The turn's answered batches, put in the decision log once its dispatches went out."""
        self._threads: list[threading.Thread] = []
        self._last_ping = 0.0
        self._last_watchdog = 0.0
        self._last_publish = 0.0
        self.role = "standby"
        self.stepped_down = False
        """The lease went while this service led: it stopped acting; the caller starts a fresh standby."""
        self._read_started = time.monotonic()
        """When the read whose messages the loop is handling started (a heartbeat counts as seen then)."""
        self._horizon = 0.0
        """When the latest read the loop handled, which caught up, started: silent agents are measured to it."""
        self._results_at: dict[str, str] = {}
        self._trimmed: dict[str, str] = {}
        self._acking: list[LedgerEntry] = []
        self._resolve_at: float | None = None
        self._checked_turn = -1
        self._turn = 0
        self._warmed: set[tuple[str, str | None]] = set()
        self._taking_over = False
        self.takeover_ms: float | None = None
        """How long the last takeover took (the lease taken to the reader started)."""

    @property
    def stats(self) -> dict[str, int]:
        return {"acks": self.acks.count, "dispatches": self.dispatcher.count, "prewarms": self.dispatcher.prewarms,
                "dead_letters": self.dead_letters.count, "ignored_results": self.dispatcher.ignored,
                "stale_starts": self.dispatcher.stale_starts}

    @property
    def leader(self) -> bool:
        return self.role == "leader"

    # -- start and stop ---------------------------------------------------------------------------------
    def start(self) -> None:
        """Check the dependencies, follow the agents, and lead at once if nobody does (else stand by)."""
        log.info("esg scheduler starting: %s", self.s.describe())
        base = [(self.topics.completed, "completed"), (self.topics.health, "health"),
                (self.topics.dead_letter, "deadletter"), (self.checkpoints.topic, "checkpoint")]
        base += [(self.topics.invoker(n), "invoker") for n in range(self.reader.wanted)]
        try:
            self.bus.ensure_topics(base)
        except (KafkaError, OSError) as exc:
            raise ServiceError(f"Kafka at {self.s.kafka} refused topic creation: {exc}") from None
        if self.s.metrics_port is not None:
            self.metrics.serve(self.s.metrics_port, self.s.metrics_host)
        self._warn_default_user()
        try:
            latest = self.checkpoints.latest(lambda: self.bus.consumer(None))
            self.lease.floor = latest.epoch if latest is not None else 0
            self.channel.open()
            self.channel.follow(set(self.registry.ids) | self.channel.known_nodes())
            if self.lease.try_acquire():
                self._take_over()
        except Fenced:
            log.warning("the lease went while taking over; standing by")
            self.stepped_down = True
        except redis.RedisError as exc:
            raise ServiceError(f"Redis at {redact_url(self.s.redis_url)} failed during start-up: "
                               f"{type(exc).__name__}: {exc}") from None
        if not self.leader and not self.stepped_down:
            log.info("esg scheduler standing by: %s leads", self._leader_name())
        self._spawn(lambda: self.dispatcher.read_loop(self.stop_event, self.inbox.put, self.dead_letters),
                    "esg-agents")
        self._spawn(lambda: self.lease.run(self.stop_event), "esg-lease")
        if self.records is not None:
            writer = self.records
            self._spawn(lambda: writer.run(self.stop_event), "esg-records")

    def _warn_default_user(self) -> None:
        try:
            who = self.redis.execute_command("ACL", "WHOAMI")
        except redis.RedisError:
            return
        if (who.decode() if isinstance(who, bytes) else who) == "default":
            log.warning("connected to Redis as its default user: agents are not kept apart by Redis ACL users "
                        "(docs/deployment.md, 'Redis')")

    def _leader_name(self) -> str:
        token, _ = self.lease.current()
        return f"{holder_of(token)} (epoch {epoch_of(token)})" if token else "nobody"

    def _spawn(self, fn: Callable[[], None], name: str) -> None:
        def run() -> None:
            try:
                fn()
            except Exception as exc:  # a reader died: stop the service rather than hang silently
                if is_fenced(exc):
                    self.lease.lose(f"{name}: a write was fenced")
                    self.inbox.put(_Stop())
                    return
                log.exception("%s failed", name)
                self.errors.append(f"{name}: {exc}")
                self.inbox.put(_Stop())
        t = threading.Thread(target=run, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self.stop_event.set()
        self.inbox.put(_Stop())

    def close(self) -> None:
        self.stop_event.set()
        for t in self._threads:
            t.join(timeout=5)
        try:
            while True:  # records stored while the loop was ending
                item = self.inbox.get_nowait()
                if isinstance(item, Stored):
                    self.acks.stored(item.ids)
        except queue.Empty:
            pass
        if self.leader and self.lease.held():
            try:
                self._hand_on_answers()  # a turn stopped before they reached the acks (while Redis refused)
                self.acks.finish()
            except Exception:  # best effort on the way out; the ledger finishes it at the next start
                log.warning("could not send the last acks; the next leader finishes them")
            self.lease.release()
        self._forget_status()
        self.plans.close()
        self.checkpoints.close()
        self.bus.close()
        self.redis.close()
        if self.records is not None:
            self.records.store.close()
        self.metrics.close()

    def run(self, duration_s: float | None = None) -> None:
        """The main loop, until :meth:`stop` (or ``duration_s``), or until this service stepped down."""
        end = None if duration_s is None else time.monotonic() + duration_s
        while not self.stop_event.is_set() and not self.stepped_down:
            if end is not None and time.monotonic() > end:
                break
            self.tick(self._wait_s())
        if self.errors:
            raise ServiceError("; ".join(self.errors))

    def _wait_s(self, longest: float = 0.02) -> float:
        """How long the loop may wait for the inbox: until a held queue's timer (as the emulator wakes
        at it), at most ``longest``."""
        wake = self.workflows.wake_at_ms
        if wake is None:
            return longest
        return min(longest, max(0.0, (wake - time.time() * 1000) / 1000))

    # -- the loop -------------------------------------------------------------------------------------
    def tick(self, wait_s: float = 0.02) -> None:
        """One turn: as a standby, follow the agents and take over when the lease is won; as the leader,
        :meth:`_lead`; a fenced write (the lease is gone) steps down. Redis failing in a leader's turn
        (outside the retried round trips: a lease check, a revocation, an invoker id) skips the rest of
        the turn -- every write is fenced, every read asked again next turn -- and one that cuts a takeover
        short steps down, so that a fresh standby starts it over."""
        self._turn += 1
        try:
            if self.leader:
                if self.lease.lost.is_set():
                    raise Fenced("the lease is gone")
                self._lead(wait_s)
            else:
                self._stand_by(wait_s)
        except Exception as exc:
            if is_fenced(exc):
                self._step_down(str(exc))
            elif isinstance(exc, redis.RedisError) and self._taking_over:
                self._step_down(f"Redis failed while taking over ({type(exc).__name__})")
            elif isinstance(exc, redis.RedisError):
                log.error("Redis failed during a turn (%s); going on", exc)
                self.stop_event.wait(0.2)
            else:
                raise

    def _stand_by(self, wait_s: float) -> None:
        for item in self.inbox.take(max(wait_s, 0.05), MAX_ITEMS_PER_TURN):
            if isinstance(item, _Stop):
                self.stop_event.set()
            elif isinstance(item, ReadMark):
                self._mark(item)
            elif isinstance(item, protocol.Heartbeat):
                self.dispatcher.heartbeat(item, self._read_started)
        mono = time.monotonic()
        if mono - self._last_publish >= PUBLISH_EVERY_S:
            self._last_publish = mono
            self._publish(mono)
            self._warm_plans()
        if self.lease.acquired.is_set() and not self.lease.lost.is_set() and not self.stop_event.is_set():
            self._take_over()

    def _lead(self, wait_s: float) -> None:
        """One turn of the leader: take what the inbox has, step, send the step's dispatches (their own
        round trip, first), then write the turn's acks and the rest to the ledger, then produce the acks,
        log its answered batches.

        The dispatches go before the acks' work so that the agents run them while this thread does the
        rest of the turn: with a node's batches in flight bounded by its vCPUs, a burst of a plain action
        otherwise ran in lockstep -- the agent idle while the scheduler answered a read's results, the
        scheduler idle while the agent ran what it sent -- and the node's window of batches was full a
        quarter of the time (``benchmarks/bench_agent_cpu.py --window``; docs/results/2026-11-28-live-path-runs.md, run N)."""
        items = self.inbox.take(wait_s, MAX_ITEMS_PER_TURN)
        mono, t = time.monotonic(), now_ms()
        for item in items:
            self._take(item, mono, t)
        for lost in self.dispatcher.expire(self._horizon):
            log.warning("agent %s lost (no heartbeat in %.1f s of reads): %d batches taken back to run elsewhere, "
                        "%d that had started answered with an error", lost.agent.node, self.s.agent_timeout_s,
                        len(lost.rerun), len(lost.started))
            for d in lost.rerun:
                self._answer(self.workflows.lost(d, lost.agent.node, t))
            for d in lost.started:
                self._answer(self.workflows.failed_on(d, lost.agent.node, t))
            self.decisions.forget([d.batch_id for d in lost.rerun + lost.started])
            self._last_ping = 0.0
        if mono - self._last_ping >= self.s.ping_interval_s:
            self._last_ping = mono
            self._ping()
        if self.health_waiting:
            self._answer_health_tests()
        if mono - self._last_watchdog >= 1.0:
            self._last_watchdog = mono
            self._answer(self.workflows.overdue(t))
            self.decisions.status(self.status_key, self.workflows.scheduler.queue_lengths(),
                                  self.workflows.last_waiting, t)
            self.metrics.set_queues(self.workflows.scheduler.queues, t)    # also once the queues are idle
            self.metrics.set_waiting(self.workflows.last_waiting)
        if mono - self._last_publish >= PUBLISH_EVERY_S:
            self._last_publish = mono
            self._publish(mono)
        if self.workflows.busy(t):
            began = time.perf_counter()
            sends, prewarms, answers = self.workflows.step(t, self.dispatcher.snapshot())
            self.metrics.step_time.observe(time.perf_counter() - began)
            if self.workflows.unsent_prewarms:
                self.dispatcher.forget_view()   # their reservations are on the kept snapshot
            for o in self.workflows.last_outcomes:
                self.decisions.outcome(o)
            self._answer(answers)
            self._write(sends, t, prewarms)
        self._hand_on_answers()
        results, self._results = self._results, []
        for d, rm in results:
            agent = self.registry.agents.get(d.node)
            sent, decided = self.decisions.done(d, rm, agent.heartbeat.gpu_model if agent else None, t)
            self.metrics.batch_done(d, decided, sent, t, rm.run_ms, rm.cold)
        self._write_ledger()
        self.acks.produce()
        self.acks.confirm()
        if self._resolve_at is not None and mono >= self._resolve_at:
            self._resolve_acking()
        self._learn()

    def _mark(self, mark: ReadMark) -> None:
        self._read_started = mark.started_s
        if mark.caught_up:
            self._horizon = max(self._horizon, mark.started_s)
        self._results_at.update(mark.results_at)

    def _fence_kafka(self) -> None:
        """Check the lease in Redis once this turn before producing pings or health answers."""
        if self._checked_turn != self._turn:
            self.lease.check()
            self._checked_turn = self._turn

    def _step_down(self, why: str) -> None:
        if self.stepped_down:
            return
        log.warning("stepping down (%s): this scheduler stops acting; the next leader finishes what it had "
                    "started, and it rejoins as a standby", why)
        self.lease.lose(why)
        self.stepped_down = True
        self.role = "stepped-down"
        self.metrics.leader.set(0)
        dropped = self.acks.drop_unwritten()
        if dropped:
            log.info("%d answers not written to the ledger are left to the next leader", dropped)
        self.stop_event.set()

    def _learn(self) -> None:
        """The turn's measured batches into the learned profiles; a table that changed is planned afresh.
        Learning is best effort: Redis failing here loses these samples, never an activation."""
        if not self._observed or self.online is None:
            return
        observed, self._observed = self._observed, []
        try:
            learned = self.online.record(observed)
        except redis.RedisError as exc:
            log.warning("could not record %d measured batches (%s)", len(observed), type(exc).__name__)
            return
        for x in learned:
            if x.drift_ms is not None:
                log.warning("profile %s drifted at %s: %.1f ms in the table, %.1f ms measured; table updated",
                            x.table, x.config.label(), x.was_ms or 0.0, x.drift_ms)
                self.metrics.profile_events.labels("drift").inc()
            else:
                log.info("profile %s: %s measured", x.table, x.config.label())
                self.metrics.profile_events.labels("measured").inc()
        if learned:
            self.plans.drop()

    def _write(self, sends: list[Send], decided_ms: int | None = None, prewarms: list[PrewarmSend] | None = None
               ) -> None:
        """The turn's dispatches and pre-warms, one round trip (a node's in one fenced script call); retried
        (whole) while Redis fails. A repeated dispatch or pre-warm reaches its agent twice and runs once
        (agents skip an id they took)."""
        prewarms = prewarms or []
        if not sends and not prewarms:
            return
        staged = None

        def stage(pipe: redis.client.Pipeline) -> int:
            nonlocal staged
            staged = self.dispatcher.stage(pipe, sends, prewarms)
            return staged.commands

        replies = self._round_trip(stage, "the dispatches", "dispatches")
        if replies is None or staged is None:
            return
        self.dispatcher.sent(sends, staged.entry_ids(replies)[:len(sends)])
        self.dispatcher.prewarmed(prewarms, time.monotonic(), now_ms())
        self.decisions.sent([s.dispatch for s in sends], decided_ms=decided_ms)

    def _write_ledger(self) -> None:
        """The ledger writes of the turn, one round trip: the acks' ``acking`` entries, what finished functions
        of multi-function apps returned, the ``done`` marks, the decision log's entries, and the results
        streams trimmed to what the ledger now holds; retried (whole) while Redis fails."""
        progress, self.workflows.progress = self.workflows.progress, []
        blobs = [(a, f, encode_progress(r)) for a, f, r in progress]
        trims = self._due_trims()

        def stage(pipe: redis.client.Pipeline) -> int:
            n = self.ledger.stage_progress(pipe, blobs) + self.acks.stage(pipe) + self.decisions.stage(pipe)
            for node, keep in trims.items():
                n += self.channel.stage_trim(pipe, node, keep)
            return n

        if self._round_trip(stage, "the ledger writes", "ledger") is not None:
            self.decisions.written()
            self.acks.written()
            self._trimmed.update(trims)

    def _due_trims(self) -> dict[str, str]:
        """The results streams to trim this turn, to the last result the loop folded in: everything before
        it is recorded in the ledger once this turn's writes are in."""
        if self.workflows.progress:
            return {}
        return {n: i for n, i in self._results_at.items() if self._trimmed.get(n) != i}

    def _round_trip(self, stage: Callable[[redis.client.Pipeline], int], what: str, label: str) -> list | None:
        """One pipeline of what ``stage`` puts in it (the number of commands it staged), executed and
        retried whole, staged afresh, while Redis fails; None when it staged nothing. A fenced write is
        not retried: :class:`Fenced`. Stopping while Redis fails raises the last error. Each try is timed
        (``esg_redis_round_trip_seconds{what=label}``)."""
        while True:
            pipe = self.redis.pipeline(transaction=False)
            if stage(pipe) == 0:
                return None
            began = time.perf_counter()
            try:
                replies = pipe.execute()
                self.metrics.round_trip(label, time.perf_counter() - began)
                return replies
            except redis.RedisError as exc:
                self.metrics.round_trip(label, time.perf_counter() - began)
                if is_fenced(exc):
                    raise Fenced(str(exc)) from None
                log.error("Redis refused %s (%s); retrying", what, exc)
                if self.stop_event.wait(0.5):
                    raise

    def _take(self, item: object, mono: float, t: int) -> None:
        if isinstance(item, _Stop):
            self.stop_event.set()
        elif isinstance(item, ReadMark):
            self._mark(item)
        elif isinstance(item, Accepted):
            answer = self.workflows.accept(item, t)
            if answer is not None:
                self._answer([answer])
        elif isinstance(item, protocol.BatchResult):
            d = self.dispatcher.complete(item)
            if d is not None:
                if self.online is not None and (obs := self.workflows.observation(d, item)) is not None:
                    self._observed.append(obs)
                self._answer(self.workflows.record(d, item, t))
                self._results.append((d, item))     # into the decision log after the turn's dispatches
        elif isinstance(item, protocol.Heartbeat):
            self._heartbeat(item)
        elif isinstance(item, Stored):
            self.acks.stored(item.ids)
        elif isinstance(item, HealthTest):
            self.health_waiting[(item.topic, item.msg.root_controller.as_string)] = item

    def _hand_on_answers(self) -> None:
        """The turn's answers (:meth:`_answer`) to the ack pipeline, in the order they came."""
        answered, self._answers = self._answers, []
        for a in answered:
            self.acks.answer(a, self.registry.instance(a.entry.topic))

    def _answer(self, answers: Iterable[Answer]) -> None:
        """Answer at the end of the turn, after its dispatches went out (:meth:`tick`)."""
        self._answers.extend(answers)

    # -- posing as the invokers -----------------------------------------------------------------------
    def _heartbeat(self, hb: protocol.Heartbeat) -> None:
        joined = self.dispatcher.heartbeat(hb, self._read_started)
        if self.dispatcher.warmed:
            t = now_ms()
            self.workflows.poke()
            for w in self.dispatcher.take_warmed():
                self.decisions.prewarm(w.prewarm, w.sent_ms, t, hb.gpu_model, w.ready, w.done)
                if w.done is not None:
                    self.workflows.prewarmed(w.prewarm.node, w.done)
        if joined is None:
            return
        log.info("agent %s is alive as invoker%d (%d MB)", hb.node, joined.invoker_id, hb.memory_mb)
        self.bus.ensure_topics([(self.topics.invoker(joined.invoker_id), "invoker")])
        self.reader.want(joined.invoker_id + 1)
        self._last_ping = 0.0  # ping at once: the controller learns of the new invoker now

    def _ping(self) -> None:
        pings = self.registry.pings()
        if pings:
            self._fence_kafka()
        for ping in pings:
            self.bus.send(self.topics.health, ping)
        self.metrics.set_nodes([a.node for a in self.registry.live()], self.registry.agents)

    def _answer_health_tests(self) -> None:
        for key, ht in list(self.health_waiting.items()):
            if self.registry.alive_as(ht.topic):
                self._fence_kafka()
                del self.health_waiting[key]
                self.acks.health(ht.msg, self.registry.instance(ht.topic))

    # -- taking over ------------------------------------------------------------------------------------
    def _take_over(self) -> None:
        """Lead from now on (module doc): check the ledger against Kafka, settle what the former leader left,
        resume its activations, ping, and read the invoker topics."""
        started = time.monotonic()
        epoch = self.lease.epoch
        log.info("taking over as leader: epoch %d", epoch)
        self._taking_over = True
        self.registry.leading = True
        self.workflows.epoch = self.channel.epoch = epoch
        ckpt = self.checkpoints.latest(lambda: self.bus.consumer(None))
        generation, seq = self.ledger.generation()
        why = loss(generation, seq, ckpt)
        if why:
            log.error("LEDGER LOST: %s. Every activation the lost ledger held is answered with an error that says "
                      "it may have run; none is run again (docs/deployment.md, 'What a Redis loss means')", why)
            self.metrics.ledger_losses.inc()
        self.leading.generation = self.ledger.make_generation(uuid.uuid4().hex) if generation is None else generation
        for node in list(self.registry.agents):
            if node not in self.registry.ids:
                self.registry.ids[node] = self.ledger.invoker_id(node)
        nodes = set(self.registry.ids) | self.channel.nodes | self.channel.known_nodes()
        self.channel.follow(nodes)
        found = take_over(self.ledger, self.channel, nodes, epoch)
        self._resume(found)
        if why and ckpt is not None:
            self._answer_lost(ckpt)
        self.channel.lead(found.results_at)
        self._acking = found.acking
        self._resolve_at = time.monotonic() + self.bus_timeout_s() + 0.5 if found.acking else None
        self.role = "leader"
        self._last_ping = 0.0
        self.metrics.leader.set(1)
        self.metrics.epoch.set(epoch)
        self.metrics.leader_changes.inc()
        for n in range(self.registry.invoker_count()):
            self.reader.want(n + 1)
        self.reader.open()
        self._spawn(lambda: self.reader.run(self.stop_event), "esg-activations")
        self.takeover_ms = (time.monotonic() - started) * 1000
        self._taking_over = False
        log.info("leading as epoch %d (took over in %.0f ms)", epoch, self.takeover_ms)

    def bus_timeout_s(self) -> float:
        return max(0.5, self.s.lease_s / 2)

    def _resume(self, found: Found) -> None:
        """Every open activation the former leader left, resumed where it was; its adopted batches awaited."""
        t = now_ms()
        items: dict[str, Accepted] = {}
        broken = []
        for e in found.open:
            try:
                msg = wire.parse_activation(e.raw or "")
            except wire.WireError:
                broken.append(e.activation_id)
                continue
            items[e.activation_id] = self.reader.accepted(msg, e)
            self.open_range.add(e.activation_id, self.topics.invoker(e.topic), e.offset, e.completed_from)
        if broken:
            self.ledger.mark_done(broken)
        arrival = {e.activation_id: float(e.accepted_ms) for e in found.open}
        dispatches: dict[str, Dispatch] = {}
        for a in found.adopted:
            plans = [items[r.activation_id].plan for r in a.message.requests if r.activation_id in items]
            plan = next((p for p in plans if p is not None), None)
            if plan is None:
                continue
            d = dispatches[a.message.batch_id] = adopted_dispatch(a, arrival, plan.app.slo_ms, t)
            self.dispatcher.adopt(d, a.entry_id, a.message.data_ttl_s)
        for aid, item in items.items():
            running = [dispatches[a.message.batch_id] for a in found.running(aid) if a.message.batch_id in dispatches]
            answer = self.workflows.resume(item, found.progress.get(aid, {}), running, t)
            if answer is not None:
                self._answer([answer])
        if items or found.acking:
            log.info("recovery: %d activations resumed (%d batches adopted, %d revoked and run again), %d acks to "
                     "check", len(items), len(dispatches), found.revoked, len(found.acking))

    def _answer_lost(self, ckpt: Checkpoint) -> None:
        """After a ledger loss: every activation of the checkpoint's ranges that the ledger does not hold and
        that has no ack on ``completed{C}`` is answered with a whisk error (it may have run: never run again);
        reading resumes after the ranges."""
        found: list[tuple[wire.ActivationMessage, LedgerEntry]] = []
        for topic, (low, high) in ckpt.partitions.items():
            self.leading.start_at[topic] = high
            for rec in self._read_range(topic, low, high):
                try:
                    msg = wire.parse_activation(rec.value)
                except wire.WireError:
                    continue
                if msg.is_health_test:
                    continue
                entry = LedgerEntry(msg.activation_id, "open", self.topics.invoker_index(topic), now_ms(),
                                    rec.value.decode("utf-8"), offset=rec.offset, completed_from=ckpt.completed_from)
                found.append((msg, entry))
        if not found:
            return
        held = [self.redis.exists(f"esg:{self.keys.scope}:act:{m.activation_id}") for m, _ in found]
        unknown = [(m, e) for (m, e), h in zip(found, held) if not h]
        acked = acked_ids(self.bus, self.topics.completed, {m.activation_id for m, _ in unknown},
                          max(0, ckpt.completed_from))
        todo = [(m, e) for m, e in unknown if m.activation_id not in acked]
        fresh = self.ledger.accept([(e.activation_id, e.topic, e.accepted_ms, e.raw or "", e.offset, e.completed_from)
                                    for _, e in todo], self.s.incarnation)
        error = ActivationError("the ESG scheduler's ledger was lost (Redis lost its data) while this activation "
                                "was in progress: it may have run, and is not run again (at most once)",
                                STATUS_WHISK_ERROR)
        for (m, e), new in zip(todo, fresh):
            if new:
                self.open_range.add(e.activation_id, self.topics.invoker(e.topic), e.offset, e.completed_from)
                answer = self.workflows.accept(Accepted(m, e, error=error), now_ms())
                if answer is not None:
                    self._answer([answer])
        log.error("ledger loss: %d activations of the lost ledger's range checked: %d answered already, %d "
                  "answered now with an error", len(found), len(found) - len(todo), len(todo))

    def _read_range(self, topic: str, low: int, high: int) -> list:
        """The records of ``topic`` from offset ``low`` to ``high`` (exclusive)."""
        from kafka import TopicPartition

        if high <= low:
            return []
        consumer = self.bus.consumer(None)
        tp = TopicPartition(topic, 0)
        out: list = []
        try:
            consumer.assign([tp])
            consumer.seek(tp, low)
            deadline = time.monotonic() + 60
            while consumer.position(tp) < high and time.monotonic() < deadline:
                for recs in consumer.poll(timeout_ms=200).values():
                    out += [r for r in recs if r.offset < high]
        finally:
            consumer.close(autocommit=False)
        return out

    def _resolve_acking(self) -> None:
        """The ``acking`` entries a former leader left, once an ack it still held would have timed out."""
        acking, self._acking, self._resolve_at = self._acking, [], None
        self.lease.check()
        self.acks.resolve(acking)

    # -- standing by ------------------------------------------------------------------------------------
    def _warm_plans(self) -> None:
        """Plan the actions of the activations in flight, so that a takeover finds them planned."""
        try:
            open_ = [e for e in self.ledger.unfinished() if e.state == "open"]
        except redis.RedisError:
            return
        for e in open_[:200]:
            try:
                msg = wire.parse_activation(e.raw or "")
            except wire.WireError:
                continue
            key = (msg.action.qualified, msg.revision)
            if key not in self._warmed:
                self._warmed.add(key)
                self.plans.plan(msg)

    def lag_s(self, mono: float | None = None) -> float:
        """How far behind the agents' streams this scheduler's reading is (since its latest caught-up read)."""
        return max(0.0, (time.monotonic() if mono is None else mono) - self._horizon) if self._horizon else float("inf")

    def ready(self) -> bool:
        """The leader, or a standby synced enough to take over now."""
        return self.leader or (self.role == "standby" and self.lag_s() <= SYNCED_S)

    def _publish(self, mono: float) -> None:
        """This scheduler's role, epoch and lag, in Redis (``esg status``) and in its metrics; the leader
        also shows each standby's lag."""
        lag = self.lag_s(mono)
        self.metrics.standby_lag.set(0.0 if self.leader else (lag if lag != float("inf") else -1))
        self.metrics.ready.set(1 if self.ready() else 0)
        self.metrics.leader.set(1 if self.leader else 0)
        state = {"role": self.role, "name": self.s.name, "epoch": self.lease.epoch if self.leader else 0,
                 "lag_ms": None if lag == float("inf") else round(lag * 1000), "t_ms": now_ms(),
                 "synced": self.ready()}
        try:
            key = schedulers_key(self.keys.scope)
            self.redis.hset(key, self.holder, json.dumps(state, separators=(",", ":")))
            if self.leader:
                self._show_standbys(self.redis.hgetall(key))
        except redis.RedisError:
            pass

    def _show_standbys(self, states: dict) -> None:
        shown: set[str] = set()
        stale = []
        for holder, raw in states.items():
            try:
                st = json.loads(raw)
            except ValueError:
                continue
            if now_ms() - int(st.get("t_ms", 0)) > STATUS_STALE_S * 1000:
                stale.append(holder)
                continue
            if st.get("role") == "standby":
                name = str(st.get("name"))
                shown.add(name)
                lag = st.get("lag_ms")
                self.metrics.standbys_lag.labels(name).set(-1 if lag is None else lag / 1000)
        self.metrics.show_standbys(shown)
        if stale:
            self.redis.hdel(schedulers_key(self.keys.scope), *stale)

    def _forget_status(self) -> None:
        try:
            self.redis.hdel(schedulers_key(self.keys.scope), self.holder)
        except redis.RedisError:
            pass
