"""ESG_1Q over a whole app (or the part of it still ahead of a job): options, grouping, search.

``Planner.plan`` turns profiles into per-function options (cost from the cost model), cuts the app into
dominator groups (unless ``exact``), and runs A* group by group: the first group yields the K cheapest
paths; each is completed by the cheapest feasible plan of the later groups, every later group getting
its SLO share plus what the earlier groups left unused, capped so the groups after it can still meet
their fastest latency.

With ``percentile`` (``--slo-percentile``) every function counts its configurations' run times at that
percentile (:mod:`esg.tail`: from the table's measured percentiles or its spread) instead of the
table's ``latency_ms``, in the search, the grouping's estimates and the returned paths' latencies; a
path's cost stays on ``latency_ms`` (resource-time is paid on average). Without it the planner is the
one it always was.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, field

from esg.cost import Prices, config_cost
from esg.errors import ProfileError
from esg.model import App, Config
from esg.profiles import Profile, median_latency
from esg.search import Group, Option, Path, SearchStats, astar_top_k, brute_force_top_k, longest_path
from esg.slo_split import DEFAULT_MAX_GROUP, group_latency, split_slo
from esg.tail import latencies_at

OptionFilter = Callable[[str, Config], bool]
"""Whether function ``f`` may use configuration ``c`` (e.g. batch caps, CPU-only functions)."""


def build_options(profile: Profile, prices: Prices, allow: Callable[[Config], bool] | None = None,
                  overhead_ms: float = 0.0, latencies: Mapping[Config, float] | None = None) -> tuple[Option, ...]:
    """The profile's configurations as search options: cost from the cost model (on the profiled run
    time), latency the profiled run time -- or the one ``latencies`` gives the configuration (a
    percentile's) -- plus ``overhead_ms``, what the system adds to every batch."""
    out = [Option(config_cost(prices, profile.gpu_model, e.config, e.latency_ms),
                  (e.latency_ms if latencies is None else latencies[e.config]) + overhead_ms, e.config)
           for e in profile.entries if allow is None or allow(e.config)]
    return tuple(sorted(out))


@dataclass(frozen=True)
class PlanResult:
    feasible: bool
    paths: tuple[Path, ...]
    groups: tuple[tuple[str, ...], ...]
    stats: SearchStats = field(default_factory=SearchStats, compare=False)
    valid_from_ms: float | None = field(default=None, compare=False)
    """The smallest budget for which planning again gives these same paths (the planned budget is the
    largest), or None when that is not known. Set for a search over the whole (sub-)app in one group:
    lowering the budget only removes paths, so while every returned path still fits, the K cheapest are
    the same; an infeasible plan stays infeasible below. A grouped plan splits the budget into shares,
    so its result can change with any budget."""

    def priority_list(self, function: str) -> list[Config]:
        """Distinct configurations of ``function`` across the paths, cheapest path first."""
        seen: list[Config] = []
        for p in self.paths:
            c = p.configs[function]
            if c not in seen:
                seen.append(c)
        return seen


@dataclass
class Planner:
    app: App
    profiles: Mapping[str, Profile]
    prices: Prices = field(default_factory=Prices)
    max_group: int = DEFAULT_MAX_GROUP
    exact: bool = False
    brute_force: bool = False
    stage_overhead_ms: float = 0.0
    """What the system adds to every batch beyond its profiled run time (the way to the worker and the
    result's way back): each function's latency on a path counts it once."""
    percentile: float | None = None
    """Plan every run time at this percentile (50 < p < 100, :mod:`esg.tail`); None: the tables'
    ``latency_ms``."""

    def __post_init__(self) -> None:
        missing = [f for f in self.app.functions if f not in self.profiles]
        if missing:
            raise ProfileError(f"app {self.app.name!r}: function {missing[0]!r} has no profile")
        over = self.stage_overhead_ms
        self._at: dict[str, dict[Config, float]] | None = None
        """Per function, each configuration's run time at :attr:`percentile` (None without one)."""
        if self.percentile is None:
            self._all_options = {f: build_options(self.profiles[f], self.prices, overhead_ms=over)
                                 for f in self.app.functions}
            self._estimate = {f: median_latency(self.profiles[f], "upper") + over for f in self.app.functions}
        else:
            at = self._at = {f: latencies_at(self.profiles[f], self.percentile) for f in self.app.functions}
            self._all_options = {f: build_options(self.profiles[f], self.prices, overhead_ms=over, latencies=at[f])
                                 for f in self.app.functions}
            self._estimate = {f: _upper_median(at[f].values()) + over for f in self.app.functions}
        self._filtered: dict[tuple[str, Hashable], tuple[Option, ...]] = {}
        self.largest_batch = max((o.config.batch for opts in self._all_options.values() for o in opts), default=1)
        """The largest batch any function of the app has a configuration for: a batch cap above it
        filters nothing more."""

    def options(self, function: str, allow: OptionFilter | None = None,
                allow_key: Hashable | None = None) -> tuple[Option, ...]:
        """``function``'s options that ``allow`` admits; with ``allow_key`` (naming what ``allow``
        depends on) the filtered tuple is computed once and reused."""
        opts = self._all_options[function]
        if allow is None:
            return opts
        if allow_key is None:
            return tuple(o for o in opts if allow(function, o.config))
        key = (function, allow_key)
        if key not in self._filtered:
            self._filtered[key] = tuple(o for o in opts if allow(function, o.config))
        return self._filtered[key]

    def plan(self, budget_ms: float, k: int = 1, start: str | None = None,
             allow: OptionFilter | None = None, allow_key: Hashable | None = None) -> PlanResult:
        """The K cheapest feasible paths for the app (or for ``start`` and its descendants)."""
        app = self.app if start is None else self.app.sub_app(self.app.descendants(start))
        options = {f: self.options(f, allow, allow_key) for f in app.functions}
        stats = SearchStats()
        if self.exact or self.brute_force or len(app.functions) <= self.max_group:
            # the search walks functions in topological order; an app file may list them in any order
            group = Group(app.topo_order, app.edges, options)
            paths = self._search(group, budget_ms, k, stats)
            valid_from = max((p.latency_ms for p in paths), default=0.0)
            return PlanResult(bool(paths), tuple(paths), (app.topo_order,), stats, valid_from)
        shares = split_slo(app, budget_ms, self._estimate, self.max_group)
        groups = [Group(s.functions, app.sub_app(s.functions).edges, options) for s in shares]
        quickest = _quickest(options)
        fastest = [group_latency(app, s.functions, quickest) for s in shares]
        first_budget = min(shares[0].share_ms, budget_ms - sum(fastest[1:]))
        heads = self._search(groups[0], first_budget, k, stats)
        if not heads:
            heads = self._search(groups[0], budget_ms - sum(fastest[1:]), k, stats)
        paths = []
        for head in heads:
            full = self._complete(head, groups, shares, fastest, budget_ms, stats)
            if full is not None:
                paths.append(full)
        paths.sort(key=lambda p: p.cost)
        if not paths and group_latency(app, app.topo_order, quickest) <= budget_ms:
            # Cutting a parallel region into sequential groups overstates its latency, so a tight
            # budget that the app can meet may have no grouped plan: search the whole app then.
            paths = self._search(Group(app.topo_order, app.edges, options), budget_ms, k, stats)
            return PlanResult(bool(paths), tuple(paths), (app.topo_order,), stats)
        return PlanResult(bool(paths), tuple(paths), tuple(s.functions for s in shares), stats)

    def run_latency(self, function: str, config: Config) -> float:
        """The run time ``function`` is planned with on ``config``: its table's ``latency_ms``, or its
        percentile's when planning at one (the per-batch overhead not included)."""
        if self._at is None:
            return self.profiles[function].latency(config)
        try:
            return self._at[function][config]
        except KeyError:
            raise ProfileError(f"profile {function!r} has no configuration {config.label()}") from None

    def fastest_latency(self, allow: OptionFilter | None = None) -> float:
        """The app's latency with every function at its fastest allowed configuration."""
        quickest = _quickest({f: self.options(f, allow) for f in self.app.functions})
        return group_latency(self.app, self.app.functions, quickest)

    def _search(self, group: Group, budget: float, k: int, stats: SearchStats) -> list[Path]:
        if self.brute_force:
            return brute_force_top_k(group, budget, k)
        return astar_top_k(group, budget, k, stats)

    def _complete(self, head: Path, groups, shares, fastest, budget_ms, stats) -> Path | None:
        configs = dict(head.configs)
        cost, used = head.cost, head.latency_ms
        carry = shares[0].share_ms - head.latency_ms
        for i in range(1, len(groups)):
            cap = budget_ms - used - sum(fastest[i + 1:])
            share = min(shares[i].share_ms + max(carry, 0.0), cap)
            best = self._search(groups[i], share, 1, stats) or self._search(groups[i], cap, 1, stats)
            if not best:
                return None
            configs.update(best[0].configs)
            cost += best[0].cost
            used += best[0].latency_ms
            carry = share - best[0].latency_ms
        latency = self._latency(configs)
        return Path(cost, latency, configs)

    def _latency(self, configs: Mapping[str, Config]) -> float:
        fs = [f for f in self.app.topo_order if f in configs]
        pos = {f: i for i, f in enumerate(fs)}
        preds = [tuple(pos[p] for p in self.app.predecessors(f) if p in pos) for f in fs]
        over = self.stage_overhead_ms
        return longest_path([self.run_latency(f, configs[f]) + over for f in fs], preds)


def _upper_median(values) -> float:
    """The upper of the middle values (:func:`esg.profiles.median_latency`'s ``"upper"``)."""
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def _quickest(options: Mapping[str, tuple[Option, ...]]) -> dict[str, float]:
    """Each function's fastest option latency (infinite when it has none)."""
    return {f: min((o.latency_ms for o in opts), default=float("inf")) for f, opts in options.items()}
