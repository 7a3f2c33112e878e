"""SLO admission control (optional): a request no plan can meet is answered at once, not run late.

After Clockwork and the SLO-aware serverless work ESG builds on: when a request arrives, the scheduler
asks whether *any* plan could still finish it within its SLO -- every function of its app at its
fastest allowed configuration, each batch paying the per-batch overhead the driver adds
(``PolicyContext.stage_overhead_ms``), parallel branches overlapping, starting now. When even that
path ends after the request's deadline, running the request only spends resources on an answer that
is already late (and delays the requests behind it), so it is rejected with an application error
that says why. The rule looks at the request, its app and the profiles only -- not at warm workers or
queues -- so it never rejects the requests a cold cluster needs to warm up, and it is the same for
every policy and for both drivers (it runs inside ``Scheduler.step``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from esg.defaults import is_default
from esg.model import App, Config
from esg.profiles import Profile
from esg.slo_split import group_latency

REJECTED = "rejected by SLO admission control"
"""The start of every rejection's error message (the live answer's ``error`` field)."""


def fastest_path_ms(app: App, profiles: Mapping[str, Profile], allows: Callable[[str, Config], bool],
                    stage_overhead_ms: float) -> float:
    """The least time the whole app can take: each function at its fastest allowed configuration plus
    the per-batch overhead, along the DAG's longest path (infinite when a function has no allowed
    configuration). A function without a profile table (the default rule's, :mod:`esg.defaults`) counts
    as taking no time: its latency is unknown, never a reason to reject."""
    fastest = {f: stage_overhead_ms + _fastest_run_ms(profiles.get(f), lambda c, f=f: allows(f, c))
               for f in app.functions}
    return group_latency(app, app.functions, fastest)


def _fastest_run_ms(profile: Profile | None, allows: Callable[[Config], bool]) -> float:
    if profile is None or is_default(profile):
        return 0.0
    return min((e.latency_ms for e in profile.entries if allows(e.config)), default=float("inf"))


def verdict(app: App, fastest_ms: float, deadline_ms: float, now_ms: float) -> str | None:
    """None when a plan can still meet the deadline, else the rejection's message."""
    left = deadline_ms - now_ms
    if fastest_ms <= left:
        return None
    return (f"{REJECTED}: app {app.name!r} needs at least {fastest_ms:.1f} ms (every function at its fastest "
            f"configuration) and {max(left, 0.0):.1f} ms of its {app.slo_ms:g} ms SLO are left")
