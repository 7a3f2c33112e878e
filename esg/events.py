"""Events and decisions: what the drivers tell the scheduler step function, and what it answers.

The vocabulary shared by :mod:`esg.scheduler`, the policies (:mod:`esg.policies.base`) and both drivers
(the live service and the emulator). It sits below all of them, so the policy interface and the
scheduler never import each other (an import contract keeps it so).

* in (:data:`Event`): a request arrived, a batch finished or was lost, a request is cancelled, a request
  another scheduler had started is resumed where it was (:class:`Resume`);
* out: a batch to run (:class:`Dispatch`), a worker to start ahead of its first batch
  (:class:`Prewarm`), a function done (:class:`FunctionDone`), a request finished
  (:class:`RequestOutcome`).

Values, never changed once made. Those made per request, batch or job (:class:`Arrival`,
:class:`BatchDone`, :class:`Dispatch`, :class:`RequestOutcome`, :class:`FunctionDone`) are plain
dataclasses, hashable by value (``unsafe_hash``) as the frozen ones they were, with their ``__init__``
written out: compiled (esg_build), a frozen dataclass's ``__init__`` must set each field through
``object.__setattr__`` (a call through the interpreter, about half a microsecond a field), where a plain
one's is a native store -- about 6 % of the emulator's replay. The rest stay frozen.
"""

from __future__ import annotations

from dataclasses import dataclass

from esg.cluster import Fit
from esg.model import Config, Job


@dataclass(frozen=True)
class Request:
    """One call of an app (its SLO is the app's ``slo_ms``)."""

    request_id: str
    app: str
    arrival_ms: float


@dataclass(unsafe_hash=True)
class Arrival:
    request: Request

    def __init__(self, request: Request) -> None:
        self.request = request  # (see Dispatch: one is made per request)


@dataclass(unsafe_hash=True)
class BatchDone:
    batch_id: str
    ok: bool = True
    error: str | None = None

    def __init__(self, batch_id: str, ok: bool = True, error: str | None = None) -> None:
        self.batch_id = batch_id  # (see Dispatch)
        self.ok = ok
        self.error = error


@dataclass(frozen=True)
class BatchLost:
    """A batch's node died before it answered: its jobs go back to the front of their queue."""

    batch_id: str


@dataclass(frozen=True)
class Cancel:
    """Stop tracking a request (the driver answered it otherwise, e.g. a bad input found later)."""

    request_id: str


@dataclass(frozen=True)
class Resume:
    """Continue a request another scheduler had started (a live driver taking over from a former leader):
    ``done`` names the functions that ran (function, node), ``running`` the batches still running that
    hold some of its jobs (their :class:`BatchDone` comes later, as for a batch this scheduler placed).
    Every function neither done nor running whose predecessors are all done is enqueued; with nothing
    done and nothing running, this is the request's :class:`Arrival` (without admission control: it was
    admitted already)."""

    request: Request
    done: tuple[tuple[str, str], ...] = ()
    running: tuple[Dispatch, ...] = ()


Event = Arrival | BatchDone | BatchLost | Cancel | Resume


@dataclass(unsafe_hash=True)
class Dispatch:
    """Run ``jobs`` (one batch) of ``app``/``function`` with ``config`` on ``fit.node``."""

    batch_id: str
    app: str
    function: str
    jobs: tuple[Job, ...]
    config: Config
    fit: Fit
    planned_latency_ms: float | None = None
    keep_alive_ms: float | None = None
    """How long its worker stays warm after the batch (the policy's keep-alive); None: the driver's
    default."""

    def __init__(self, batch_id: str, app: str, function: str, jobs: tuple[Job, ...], config: Config, fit: Fit,
                 planned_latency_ms: float | None = None, keep_alive_ms: float | None = None) -> None:
        # written out (the dataclass keeps it): compiled (esg_build), the one the dataclass generates stays
        # interpreted, and one of these is made per batch
        self.batch_id = batch_id
        self.app = app
        self.function = function
        self.jobs = jobs
        self.config = config
        self.fit = fit
        self.planned_latency_ms = planned_latency_ms
        self.keep_alive_ms = keep_alive_ms

    @property
    def node(self) -> str:
        return self.fit.node


@dataclass(frozen=True)
class Prewarm:
    """Start a worker of ``app``/``function`` with ``config`` on ``fit.node`` before a batch needs it.

    No job runs: the worker starts (a MIG instance created where ``fit`` needs one, then the cold start)
    and waits idle for at most ``keep_alive_ms`` for a batch, as a worker does after one (None: the
    driver's default, as for a :class:`Dispatch` -- the emulator's ``keep_alive_ms``, the agent's
    ``--idle-ttl-s``). ``ready_by_ms`` is when the policy expects its first batch (None: not known).
    """

    prewarm_id: str
    app: str
    function: str
    config: Config
    fit: Fit
    keep_alive_ms: float | None
    ready_by_ms: float | None = None

    @property
    def node(self) -> str:
        return self.fit.node


@dataclass(unsafe_hash=True)
class RequestOutcome:
    request_id: str
    app: str
    arrival_ms: float
    finished_ms: float
    slo_ms: float
    ok: bool
    error: str | None = None
    rejected: bool = False
    """Answered at once by SLO admission control (:mod:`esg.admission`), never run; ``ok`` is False."""

    def __init__(self, request_id: str, app: str, arrival_ms: float, finished_ms: float, slo_ms: float, ok: bool,
                 error: str | None = None, rejected: bool = False) -> None:
        self.request_id = request_id  # (see Dispatch)
        self.app = app
        self.arrival_ms = arrival_ms
        self.finished_ms = finished_ms
        self.slo_ms = slo_ms
        self.ok = ok
        self.error = error
        self.rejected = rejected

    @property
    def latency_ms(self) -> float:
        return self.finished_ms - self.arrival_ms

    @property
    def slo_hit(self) -> bool:
        return self.ok and self.latency_ms <= self.slo_ms


@dataclass(unsafe_hash=True)
class FunctionDone:
    """A job finished; the driver uses this to route its result to successors."""

    request_id: str
    app: str
    function: str
    node: str

    def __init__(self, request_id: str, app: str, function: str, node: str) -> None:
        self.request_id = request_id  # (see Dispatch)
        self.app = app
        self.function = function
        self.node = node
