"""The data model: configurations, apps (validated DAGs), jobs and batches."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from esg.errors import AppError

set_field = object.__setattr__
"""How a frozen dataclass's written-out ``__init__`` sets its fields (the dataclass's own ``__init__``,
generated at import, stays interpreted Python where the module is compiled)."""


@dataclass(frozen=True)
class Config:
    """One way to run a function: ``batch`` requests at once on ``vcpus`` vCPUs and MIG profile ``gpu``
    (None = CPU only).

    Its ``__init__``, hash, ``==`` and order are written out (those ``@dataclass(frozen=True, order=True)``
    makes, the hash ``hash((batch, vcpus, gpu))``, worked out once, at construction): compiled
    (esg_build), they are native methods, where the dataclass's would stay interpreted Python -- a Config
    keys the dicts the scheduler looks up at every placement. The ``__init__`` checks its arguments
    before it stores them, so a bad one is a ``ValueError`` naming it, compiled or not. A copy (pickle,
    ``copy.deepcopy``) is rebuilt from the three fields, so one in a process with another hash seed
    hashes afresh."""

    batch: int
    vcpus: int
    gpu: str | None = None
    _hash: int = field(init=False, repr=False, compare=False)

    def __init__(self, batch: Any, vcpus: Any, gpu: Any = None) -> None:
        if not isinstance(batch, int) or isinstance(batch, bool) or batch <= 0:
            raise ValueError(f"batch must be a positive integer, got {batch!r}")
        if not isinstance(vcpus, int) or isinstance(vcpus, bool) or vcpus <= 0:
            raise ValueError(f"vcpus must be a positive integer, got {vcpus!r}")
        if gpu is not None and (not isinstance(gpu, str) or not gpu):
            raise ValueError(f"gpu must be a MIG profile name or null, got {gpu!r}")
        set_field(self, "batch", batch)
        set_field(self, "vcpus", vcpus)
        set_field(self, "gpu", gpu)
        set_field(self, "_hash", hash((batch, vcpus, gpu)))

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Config):
            return self.batch == other.batch and self.vcpus == other.vcpus and self.gpu == other.gpu
        return NotImplemented

    def __hash__(self) -> int:
        return self._hash

    def __lt__(self, other: object) -> bool:
        if isinstance(other, Config):
            return (self.batch, self.vcpus, self.gpu) < (other.batch, other.vcpus, other.gpu)
        return NotImplemented

    def __le__(self, other: object) -> bool:
        if isinstance(other, Config):
            return (self.batch, self.vcpus, self.gpu) <= (other.batch, other.vcpus, other.gpu)
        return NotImplemented

    def __gt__(self, other: object) -> bool:
        if isinstance(other, Config):
            return (self.batch, self.vcpus, self.gpu) > (other.batch, other.vcpus, other.gpu)
        return NotImplemented

    def __ge__(self, other: object) -> bool:
        if isinstance(other, Config):
            return (self.batch, self.vcpus, self.gpu) >= (other.batch, other.vcpus, other.gpu)
        return NotImplemented

    def __reduce__(self) -> tuple:
        return (Config, (self.batch, self.vcpus, self.gpu))

    def to_dict(self) -> dict[str, Any]:
        return {"batch": self.batch, "vcpus": self.vcpus, "gpu": self.gpu}

    def label(self) -> str:
        return f"b{self.batch}/{self.vcpus}c/{self.gpu or 'cpu'}"


@dataclass(frozen=True)
class App:
    """A workflow: functions (profile names) joined by edges into a DAG, with an end-to-end SLO.

    Its ``__init__`` is written out (see :class:`Config`): it checks the arguments first (an
    :class:`~esg.errors.AppError` naming the bad one), then stores them with the DAG's indexes."""

    name: str
    slo_ms: float
    functions: tuple[str, ...]
    edges: tuple[tuple[str, str], ...] = ()
    _preds: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _succs: dict[str, tuple[str, ...]] = field(init=False, repr=False, compare=False)
    _order: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _entries: tuple[str, ...] = field(init=False, repr=False, compare=False)
    _sinks: tuple[str, ...] = field(init=False, repr=False, compare=False)

    def __init__(self, name: Any, slo_ms: Any, functions: Any, edges: Any = ()) -> None:
        _validate_app(name, slo_ms, functions, edges)
        functions = tuple(functions)
        edges = tuple((a, b) for a, b in edges)
        preds: dict[str, list[str]] = {f: [] for f in functions}
        succs: dict[str, list[str]] = {f: [] for f in functions}
        for a, b in edges:
            succs[a].append(b)
            preds[b].append(a)
        set_field(self, "name", name)
        set_field(self, "slo_ms", slo_ms)
        set_field(self, "functions", functions)
        set_field(self, "edges", edges)
        _preds = {f: tuple(v) for f, v in preds.items()}
        _succs = {f: tuple(v) for f, v in succs.items()}
        order = _topological_order(functions, _succs, _preds, name)
        set_field(self, "_preds", _preds)
        set_field(self, "_succs", _succs)
        set_field(self, "_order", order)
        set_field(self, "_entries", tuple(f for f in order if not _preds[f]))
        set_field(self, "_sinks", tuple(f for f in order if not _succs[f]))

    def __reduce__(self) -> tuple:
        return (App, (self.name, self.slo_ms, self.functions, self.edges))

    def predecessors(self, function: str) -> tuple[str, ...]:
        return self._preds[function]

    def successors(self, function: str) -> tuple[str, ...]:
        return self._succs[function]

    @property
    def entries(self) -> tuple[str, ...]:
        return self._entries

    @property
    def sinks(self) -> tuple[str, ...]:
        return self._sinks

    @property
    def topo_order(self) -> tuple[str, ...]:
        return self._order

    def descendants(self, function: str) -> tuple[str, ...]:
        """``function`` and everything reachable from it, in topological order."""
        seen = {function}
        stack = [function]
        while stack:
            for s in self._succs[stack.pop()]:
                if s not in seen:
                    seen.add(s)
                    stack.append(s)
        return tuple(f for f in self._order if f in seen)

    def sub_app(self, functions: Iterable[str], slo_ms: float | None = None) -> App:
        """The app restricted to ``functions`` (edges among them only)."""
        keep = set(functions)
        return App(
            name=self.name,
            slo_ms=self.slo_ms if slo_ms is None else slo_ms,
            functions=tuple(f for f in self._order if f in keep),
            edges=tuple((a, b) for a, b in self.edges if a in keep and b in keep),
        )

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "slo_ms": self.slo_ms, "functions": list(self.functions),
                "edges": [list(e) for e in self.edges]}


def _validate_app(name: Any, slo_ms: Any, functions: Any, edges: Any) -> None:
    if not isinstance(name, str) or not name:
        raise AppError(f"app name must be a non-empty string, got {name!r}")
    if isinstance(slo_ms, bool) or not isinstance(slo_ms, int | float) or not 0 < slo_ms < float("inf"):
        raise AppError(f"app {name!r}: slo_ms must be a positive number, got {slo_ms!r}")
    if not functions:
        raise AppError(f"app {name!r}: 'functions' must list at least one function")
    for f in functions:
        if not isinstance(f, str) or not f:
            raise AppError(f"app {name!r}: function names must be non-empty strings, got {f!r}")
    dupes = sorted({f for f in functions if list(functions).count(f) > 1})
    if dupes:
        raise AppError(f"app {name!r}: function names must be unique, repeated: {', '.join(dupes)}")
    known = set(functions)
    for e in edges:
        if not isinstance(e, list | tuple) or len(e) != 2:
            raise AppError(f"app {name!r}: an edge must be a pair [from, to], got {e!r}")
        a, b = e
        for end in (a, b):
            if not isinstance(end, str) or end not in known:
                raise AppError(f"app {name!r}: edge {[a, b]} names unknown function {end!r}")
        if a == b:
            raise AppError(f"app {name!r}: edge {[a, b]} is a self-loop (cycle at {a!r})")
    if len(set(map(tuple, edges))) != len(edges):
        raise AppError(f"app {name!r}: an edge is listed twice")


def _topological_order(functions, succs, preds, name) -> tuple[str, ...]:
    indeg = {f: len(preds[f]) for f in functions}
    ready = [f for f in functions if indeg[f] == 0]
    order: list[str] = []
    while ready:
        f = ready.pop(0)
        order.append(f)
        for s in succs[f]:
            indeg[s] -= 1
            if indeg[s] == 0:
                ready.append(s)
    if len(order) != len(functions):
        cyc = sorted(f for f in functions if indeg[f] > 0)
        raise AppError(f"app {name!r}: the DAG has a cycle through {', '.join(cyc)}")
    return tuple(order)


def app_from_dict(data: Any, source: str = "app") -> App:
    """Build an App from the app-file object (``docs/architecture.md`` §6); errors name ``source`` and the
    field. :func:`esg_files.load_app` reads the file."""
    if not isinstance(data, dict):
        raise AppError(f"{source}: an app must be a JSON object")
    for key in ("name", "slo_ms", "functions"):
        if key not in data:
            raise AppError(f"{source}: missing field {key!r}")
    functions = data["functions"]
    edges = data.get("edges", [])
    if not isinstance(functions, list):
        raise AppError(f"{source}: 'functions' must be a list")
    if not isinstance(edges, list) or not all(isinstance(e, list | tuple) for e in edges):
        raise AppError(f"{source}: 'edges' must be a list of [from, to] pairs")
    try:
        return App(name=data["name"], slo_ms=data["slo_ms"], functions=tuple(functions),
                   edges=tuple(tuple(e) for e in edges))
    except AppError as exc:
        raise AppError(f"{source}: {exc}") from None


@dataclass
class Job:
    """One function invocation of one request of an app, waiting in an AFW queue.

    ``deadline_ms`` is the request's end-to-end deadline (arrival + SLO); the budget left for this
    function and everything after it is ``deadline_ms - now``.
    """

    job_id: str
    request_id: str
    app: str
    function: str
    arrival_ms: float
    deadline_ms: float
    enqueued_ms: float
    pred_node: str | None = None
    payload: Any = None

    def __init__(self, job_id: str, request_id: str, app: str, function: str, arrival_ms: float,
                 deadline_ms: float, enqueued_ms: float, pred_node: str | None = None, payload: Any = None) -> None:
        # written out (the dataclass keeps it): compiled, the one the dataclass generates stays
        # interpreted Python, and one of these is made per function of every request
        self.job_id, self.request_id, self.app, self.function = job_id, request_id, app, function
        self.arrival_ms, self.deadline_ms, self.enqueued_ms = arrival_ms, deadline_ms, enqueued_ms
        self.pred_node, self.payload = pred_node, payload

    def budget_ms(self, now_ms: float) -> float:
        return self.deadline_ms - now_ms
