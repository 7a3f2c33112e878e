"""Activations in progress through their apps: the core scheduler and each activation's :class:`Run`.

:class:`Workflows` is the only user of the core :class:`~esg.scheduler.Scheduler` in the service. It
has no I/O: the service feeds it what happened (an activation accepted, a batch answered, a batch lost
with its agent, time passing) and it returns what to do -- batches to dispatch (each with its
:class:`~agent_channel.protocol.DispatchMessage`), workers to pre-warm (each with its
:class:`~agent_channel.protocol.PrewarmMessage`) and activations to answer (:class:`Answer`, for the ack
pipeline). Events are folded into the core's ``step`` the next time the service calls :meth:`step`.

Status codes are the ones OpenWhisk's invoker would give (``isSystemError`` is true for status 3 alone,
and the controller counts system errors against the invoker's health): a function whose agent returned
nothing for it, a lost agent and an activation the scheduler could not finish in time are developer
errors (2), as a container that dies or times out is in OpenWhisk; a request the scheduling policy
refuses (admission control) is an application error (1). Status 3 is left to failures of the system
itself: reading the action (REST) and agent-side failures such as a missing MIG slice.

Start-up costs: each batch or pre-warm for which an agent changed MIG instances and timed it
(``reconfigured``, ``reconfig_ms``) teaches :class:`~esg.startup_costs.MigChangeTimes` the time per
changed instance of its node's GPU model; at the next step, when the figure for the cluster's models
(the slowest learned one) moved more than 10 % from what the policy plans with, the policy plans with
it (:meth:`~esg.scheduler.Scheduler.use_startup_costs`).

Deadlines: OpenWhisk's controller force-completes an activation at transaction start + max(timeout,
std)·factor + addon (:class:`~controller_plugin.settings.Deadline`; by default max(timeout, 60 s)·2 + 1 min). An activation still running ``deadline_margin_s`` before that is failed with a
system error (:meth:`overdue`); one whose agent was lost is failed at once when a re-run would not fit
before that point (:meth:`lost`), else its batch goes back to the front of its queue.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from agent_channel import protocol
from controller_plugin import acks, wire
from controller_plugin.ack_pipeline import Answer
from controller_plugin.activations import Accepted
from controller_plugin.metadata import ActivationError, AppPlan
from controller_plugin.metrics import Metrics
from controller_plugin.requests_state import FunctionResult, Outcome, Run
from controller_plugin.settings import Deadline
from esg.cluster import ClusterSnapshot
from esg.defaults import is_default
from esg.events import Arrival, BatchDone, BatchLost, Cancel, Dispatch, Prewarm, Request, Resume
from esg.online import Observation
from esg.scheduler import Scheduler
from esg.startup_costs import MigChangeTimes, moved
from openwhisk_status import STATUS_APPLICATION_ERROR, STATUS_DEVELOPER_ERROR, STATUS_WHISK_ERROR

log = logging.getLogger("esg.scheduler")

#: Stored outputs outlive the controller's deadline by this much (a backstop: the scheduler deletes them
#: when it answers the request).
DATA_TTL_SLACK_S = 60
#: The queue-length gauges are refreshed at most this often (each refresh walks every queue).
QUEUE_METRICS_EVERY_S = 0.5
#: OpenWhisk's defaults.
OPENWHISK_DEADLINE = Deadline()


def controller_deadline_ms(msg: wire.ActivationMessage, timeout_ms: int, now_ms: int,
                           deadline: Deadline = OPENWHISK_DEADLINE) -> int:
    """When the controller force-completes the activation, counted from its transaction start."""
    start = msg.transid[1] if isinstance(msg.transid[1], int) else now_ms
    return deadline.at_ms(start, timeout_ms)


@dataclass(frozen=True)
class Send:
    """A batch to dispatch, with the message its agent gets."""

    dispatch: Dispatch
    message: protocol.DispatchMessage


@dataclass(frozen=True)
class PrewarmSend:
    """A worker to pre-warm, with the message its agent gets."""

    prewarm: Prewarm
    message: protocol.PrewarmMessage


def keep_alive_ms(ms: float | None) -> int | None:
    """A decision's keep-alive as the channel carries it: whole milliseconds, rounded up (None: the agent's)."""
    return None if ms is None else max(0, math.ceil(ms))


class Workflows:
    def __init__(self, scheduler: Scheduler, reply_to: Callable[[str], str], metrics: Metrics,
                 deadline_margin_s: float, deadline: Deadline = OPENWHISK_DEADLINE) -> None:
        self.scheduler = scheduler
        self.deadline = deadline
        self.reply_to = reply_to
        """A node's results stream of this controller: where its agent answers."""
        self.epoch = 0
        """The leader epoch the messages carry."""
        self.metrics = metrics
        self.margin_ms = int(deadline_margin_s * 1000)
        self.runs: dict[str, Run] = {}
        self._callers: dict[str, tuple[str | None, dict, str]] = {}
        """Per app, its latest caller's key, init arguments and namespace: a pre-warm reads the action as
        that caller and starts the worker with those arguments, for that namespace (workers are kept per
        calling namespace), as a worker started for its batch would be."""
        self._events: list = []
        self._registered: dict[str, AppPlan] = {}
        self._queues_shown_s = 0.0
        self.last_outcomes: list = []
        self.wake_at_ms: float | None = None
        self.last_waiting: dict = {}
        """Why each queue the last step left waiting waits (for ``esg status``)."""
        """When a queue the core held (to fill a batch) wants to be looked at again (epoch ms)."""
        """The requests the last :meth:`step` ended (the core's outcomes, for the decision log)."""
        self.unsent_prewarms = 0
        """Pre-warms the last step decided and :meth:`step` could not send (no plan for their app)."""
        self._poked = False
        self.progress: list[tuple[str, str, FunctionResult]] = []
        """Functions of multi-function apps finished since the service last took them: ``(activation id,
        function, result)``, for the ledger (a scheduler taking over resumes the app from there)."""
        self.mig_changes = MigChangeTimes(scheduler.policy.ctx.mig_reconfig_ms)
        """The time per MIG instance changed, learned per GPU model from the agents' measurements."""
        self._mig_seen: list[tuple[str, int, float]] = []
        """MIG changes measured since the last step: (node, instances, ms)."""
        self._mig_nodes = -1
        """How many nodes the last look at the cluster's GPU models saw."""
        metrics.mig_change_planned.set(scheduler.policy.ctx.mig_reconfig_ms / 1000)

    def poke(self) -> None:
        """Have the next turn step although nothing arrived: the cluster changed in a way a policy acts
        on (a pre-warmed worker became ready), as the emulator steps at every worker that turns warm."""
        self._poked = True

    def busy(self, now_ms: float | None = None) -> bool:
        """Whether a step has anything to do: events to fold in, jobs waiting, or the time the last step
        asked to be woken at (a policy's pre-warming window) has come at ``now_ms``."""
        if self._events or self._poked or self.scheduler.queues.total() > 0:
            return True
        return now_ms is not None and self.wake_at_ms is not None and now_ms >= self.wake_at_ms

    # -- what happened ------------------------------------------------------------------------------
    def accept(self, item: Accepted, now_ms: int) -> Answer | None:
        """Start an activation; the answer at once if it cannot run."""
        aid = item.msg.activation_id
        if aid in self.runs:
            return None
        if item.error is not None or item.plan is None:
            err = item.error or ActivationError("no plan", STATUS_WHISK_ERROR)
            log.info("activation %s of %s answered with an error: %s", aid, item.msg.action.qualified, err)
            action = item.plan.action if item.plan is not None else None
            return Answer(item.msg, item.entry, action, acks.error_outcome(str(err), err.status_code, now_ms))
        plan = item.plan
        if self._registered.get(plan.app.name) is not plan:
            self.scheduler.add_app(plan.app, plan.profiles, plan.specs)
            self._registered[plan.app.name] = plan
        self.runs[aid] = Run(item.msg, plan, item.entry, args=item.args, init_env=item.init_env)
        self.metrics.accepted(plan.app.name, plan.app.slo_ms)
        self._callers[plan.app.name] = (item.msg.user.basic_auth, item.init_env, item.msg.user.namespace)
        self._events.append(Arrival(Request(aid, plan.app.name, float(item.entry.accepted_ms))))
        return None

    def resume(self, item: Accepted, results: dict[str, FunctionResult], running: list[Dispatch],
               now_ms: int) -> Answer | None:
        """Carry on an activation a former leader started (:mod:`controller_plugin.takeover`): ``results``
        of its finished functions, ``running`` its batches still running there; the answer at once if it
        cannot run, or if one of its functions failed already."""
        aid = item.msg.activation_id
        if aid in self.runs:
            return None
        if item.error is not None or item.plan is None:
            return self.accept(item, now_ms)
        plan = item.plan
        if self._registered.get(plan.app.name) is not plan:
            self.scheduler.add_app(plan.app, plan.profiles, plan.specs)
            self._registered[plan.app.name] = plan
        results = {f: r for f, r in results.items() if f in plan.functions}
        run = Run(item.msg, plan, item.entry, args=item.args, init_env=item.init_env, results=dict(results))
        failed = next((f for f, r in results.items() if r.run.status_code != 0), None)
        if failed is not None:
            return self._finish(run, run.failed(failed))
        self.runs[aid] = run
        self._callers[plan.app.name] = (item.msg.user.basic_auth, item.init_env, item.msg.user.namespace)
        self._events.append(Resume(Request(aid, plan.app.name, float(item.entry.accepted_ms)),
                                   tuple((f, r.node) for f, r in results.items()), tuple(running)))
        return None

    def record(self, d: Dispatch, rm: protocol.BatchResult, now_ms: int) -> list[Answer]:
        """Fold in a batch's result; the activations it ends (a function failed: the app fails)."""
        if rm.reconfigured and rm.reconfig_ms is not None:
            self._mig_seen.append((d.node, rm.reconfigured, rm.reconfig_ms))
        by_id = {r.activation_id: r for r in rm.results}
        if self.scheduler.explorer is not None:
            warm = (rm.succeeded and rm.run_ms is not None and not rm.overlapped_start
                    and all(r.init_ms is None for r in rm.results))
            self.scheduler.explorer.observed(d.function, d.config, warm)
        out = []
        for job in d.jobs:
            run = self.runs.get(job.request_id)
            if run is None:
                continue
            res = self._function_result(run, d, rm, by_id.get(job.request_id), now_ms)
            run.record(d.function, res)
            if len(run.plan.functions) > 1:
                self.progress.append((run.activation_id, d.function, res))
            if res.run.status_code != 0:
                self._events.append(Cancel(run.activation_id))
                out.append(self._finish(run, run.failed(d.function)))
        self._events.append(BatchDone(rm.batch_id, ok=True))
        return out

    @staticmethod
    def _function_result(run: Run, d: Dispatch, rm: protocol.BatchResult, r: protocol.RunResult | None,
                         now_ms: int) -> FunctionResult:
        short = run.plan.functions[d.function].short
        if r is None:
            why = rm.error or f"agent {rm.node} returned no result for it"
            r = protocol.RunResult(run.activation_id, STATUS_DEVELOPER_ERROR, {"error": f"{short}: {why}"},
                                   now_ms, now_ms)
        elif r.status_code == 0 and d.function not in run.plan.app.sinks and r.output_key is None:
            r = protocol.RunResult(r.activation_id, STATUS_DEVELOPER_ERROR,
                                   {"error": f"{short}: agent {rm.node} kept no output for the successors"},
                                   r.start_ms, r.end_ms)
        return FunctionResult(r, rm.node, d.config)

    def observation(self, d: Dispatch, rm: protocol.BatchResult) -> tuple[Observation, float | None] | None:
        """What the batch teaches its function's table (a successful batch with a measured run time), and
        the configuration's latency in the table the scheduler used. Call before :meth:`record`. A warm
        batch that another worker's start overlapped teaches nothing: its run time carries that start."""
        if rm.run_ms is None or not rm.succeeded or rm.overlapped_start:
            return None
        run = next((self.runs[j.request_id] for j in d.jobs if j.request_id in self.runs), None)
        if run is None or run.plan.plain:
            return None
        fp = run.plan.functions[d.function]
        inits = [r.init_ms for r in rm.results if r.init_ms is not None]
        table_ms = None
        if not is_default(fp.profile) and d.config in fp.profile.configs:
            table_ms = fp.profile.latency(d.config)
        return Observation(fp.table, d.config, float(rm.run_ms), bool(inits), float(max(inits, default=0))), table_ms

    def prewarmed(self, node: str, done: protocol.PrewarmDone) -> None:
        """A pre-warm ``node``'s heartbeat named done: the MIG change its agent made for it, if timed."""
        if done.reconfigured and done.reconfig_ms is not None:
            self._mig_seen.append((node, done.reconfigured, done.reconfig_ms))

    def _follow_mig_changes(self, snapshot: ClusterSnapshot) -> None:
        """Learn the MIG changes measured since the last step, and have the policy plan with the cluster's
        figure when it moved more than 10 % from the one it plans with. The cluster's figure is the slowest
        learned among its nodes' GPU models: a policy weighs every carve with one figure, and the slowest
        keeps it from promising start-ups the slowest GPUs cannot keep (looked at again when a change was
        measured or the number of nodes changed)."""
        if not self._mig_seen and len(snapshot.nodes) == self._mig_nodes:
            return
        seen, self._mig_seen = self._mig_seen, []
        self._mig_nodes = len(snapshot.nodes)
        for node, instances, ms in seen:
            state = snapshot.nodes.get(node)
            if state is not None:
                self.mig_changes.observe(state.gpu_model, instances, ms)
        figure = self.mig_changes.cluster_ms(n.gpu_model for n in snapshot.nodes.values())
        planned = self.scheduler.policy.ctx.mig_reconfig_ms
        if moved(planned, figure):
            log.info("MIG changes take %.0f ms per instance (%s); the policy planned with %.0f ms",
                     figure, ", ".join(f"{m}: {self.mig_changes.estimate(m):.0f} ms over "
                                       f"{self.mig_changes.samples(m)} changes" for m in self.mig_changes.models()),
                     planned)
            self.scheduler.use_startup_costs(figure)
            self.metrics.mig_change_planned.set(figure / 1000)

    def lost(self, d: Dispatch, node: str, now_ms: int) -> list[Answer]:
        """A batch's agent died: it runs again elsewhere, unless a re-run would miss the controller's
        deadline (then its activations fail with a developer error, as a container that died does)."""
        out = []
        for job in d.jobs:
            run = self.runs.get(job.request_id)
            if run is None:
                continue
            timeout = run.plan.action.timeout_ms
            if now_ms + self.margin_ms + timeout > controller_deadline_ms(run.msg, timeout, now_ms, self.deadline):
                short = run.plan.functions[d.function].short
                out.append(self._fail(run, f"agent {node} was lost while running {short}", now_ms))
        self._events.append(BatchLost(d.batch_id))
        return out

    def failed_on(self, d: Dispatch, node: str, now_ms: int) -> list[Answer]:
        """A batch that had started on an agent found lost: its activations are answered with a developer
        error, as a container that dies mid-run is, and never run again (at most once)."""
        short = None
        out = []
        for job in d.jobs:
            run = self.runs.get(job.request_id)
            if run is None:
                continue
            short = short or run.plan.functions[d.function].short
            out.append(self._fail(run, f"agent {node} was lost while running {short}; it is not run again "
                                       "(at most once)", now_ms))
        self._events.append(BatchLost(d.batch_id))
        return out

    def overdue(self, now_ms: int) -> list[Answer]:
        """Activations that would otherwise reach the controller's deadline unanswered."""
        return [self._fail(run, "the ESG scheduler could not finish the activation before the controller's "
                                "deadline (no agent had room for it, or its agent was lost)", now_ms)
                for run in list(self.runs.values())
                if now_ms + self.margin_ms > controller_deadline_ms(run.msg, run.plan.action.timeout_ms, now_ms,
                                                                 self.deadline)]

    # -- deciding -----------------------------------------------------------------------------------
    def step(self, now_ms: int, snapshot: ClusterSnapshot) -> tuple[list[Send], list[PrewarmSend], list[Answer]]:
        events, self._events = self._events, []
        self._poked = False
        self._follow_mig_changes(snapshot)
        explored = self.scheduler.explorer.batches if self.scheduler.explorer is not None else 0
        result = self.scheduler.step(now_ms, snapshot, events)
        if self.scheduler.explorer is not None and self.scheduler.explorer.batches > explored:
            self.metrics.explored.inc(self.scheduler.explorer.batches - explored)
        self.last_outcomes = [o for o in result.outcomes if o.request_id in self.runs]
        self.wake_at_ms = result.wake_at_ms
        self.last_waiting = result.waiting
        sends = [Send(d, self._message(d, now_ms)) for d in result.dispatches]
        prewarms = [PrewarmSend(p, m) for p in result.prewarms if (m := self._prewarm_message(p, now_ms)) is not None]
        self.unsent_prewarms = len(result.prewarms) - len(prewarms)
        answers = []
        for o in self.last_outcomes:
            run = self.runs.get(o.request_id)
            if run is None:
                continue
            outcome = run.final() if o.ok else acks.error_outcome(o.error or "failed", STATUS_APPLICATION_ERROR,
                                                                  now_ms)
            answers.append(self._finish(run, outcome))
        if self.last_outcomes:
            self.metrics.outcomes(self.last_outcomes)
        mono = time.monotonic()
        if mono - self._queues_shown_s >= QUEUE_METRICS_EVERY_S:
            self._queues_shown_s = mono
            self.metrics.set_queues(self.scheduler.queues, now_ms)
            self.metrics.set_waiting(result.waiting)
        return sends, prewarms, answers

    def _message(self, d: Dispatch, now_ms: int) -> protocol.DispatchMessage:
        runs = [self.runs[j.request_id] for j in d.jobs]
        plan = runs[0].plan
        meta = plan.functions[d.function].action
        action = protocol.ActionRef(meta.path, meta.name, meta.version, meta.kind, meta.timeout_ms, meta.memory_mb)
        reqs = []
        for r in runs:
            value, inputs = r.inputs_for(d.function)
            key = r.msg.user.basic_auth
            reqs.append(protocol.RunRequest(r.activation_id, str(r.msg.transid[0]), value, now_ms + meta.timeout_ms,
                                            r.msg.user.namespace, inputs, None if inputs else r.init_env or None,
                                            key))
        last = max(controller_deadline_ms(r.msg, r.plan.action.timeout_ms, now_ms, self.deadline) for r in runs)
        ttl = max(1, (last - now_ms) // 1000 + DATA_TTL_SLACK_S)
        return protocol.DispatchMessage(d.batch_id, d.node, d.app, d.function, action, d.config, d.fit.slice,
                                        d.fit.destroy, tuple(reqs), self.reply_to(d.node),
                                        d.function in plan.app.sinks, int(ttl),
                                        keep_alive_ms(d.keep_alive_ms), self.epoch, d.fit.evict)

    def _prewarm_message(self, p: Prewarm, now_ms: int) -> protocol.PrewarmMessage | None:
        """The message for a pre-warm of a function of an app this scheduler has planned (None: an app it
        has no plan for, so no action to name -- not expected, since the core plans only apps it was given).
        It carries the policy's keep-alive (none: the agent's ``--idle-ttl-s``) and when it was sent, so an
        agent that reads it after that keep-alive ran out drops it."""
        plan, caller = self._registered.get(p.app), self._callers.get(p.app)
        if plan is None or caller is None or p.function not in plan.functions:
            log.warning("pre-warm %s of %s/%s: no plan for that app here; not sent", p.prewarm_id, p.app, p.function)
            return None
        api_key, init_env, namespace = caller
        meta = plan.functions[p.function].action
        action = protocol.ActionRef(meta.path, meta.name, meta.version, meta.kind, meta.timeout_ms, meta.memory_mb)
        entry = not plan.app.predecessors(p.function)
        return protocol.PrewarmMessage(p.prewarm_id, p.node, p.app, p.function, action, p.config, p.fit.slice,
                                       p.fit.destroy, keep_alive_ms(p.keep_alive_ms), self.reply_to(p.node),
                                       (init_env or None) if entry else None, api_key, now_ms, namespace, self.epoch)

    # -- ending -------------------------------------------------------------------------------------
    def _fail(self, run: Run, message: str, now_ms: int) -> Answer:
        self._events.append(Cancel(run.activation_id))
        return self._finish(run, acks.error_outcome(message, STATUS_DEVELOPER_ERROR, now_ms))

    def _finish(self, run: Run, outcome: Outcome) -> Answer:
        self.runs.pop(run.activation_id, None)
        return Answer(run.msg, run.entry, run.plan.action, outcome, run.data_keys())
