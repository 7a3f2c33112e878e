"""Plans of actions, cached: an activation's action metadata (REST) turned into an :class:`AppPlan`.

Actions are read as the activation's caller (its ``user`` identity). A plan is kept ``PLAN_TTL_S`` per
(action, revision): activations name the revision they run, and an
action read without one is read again after the TTL. Anything that makes the action unrunnable is an
:class:`~controller_plugin.metadata.ActivationError` naming it; a bug while planning is one too (a
system error), so the activation is answered rather than lost.
"""

from __future__ import annotations

import logging
import threading
import time

from agent_channel.protocol import STATUS_WHISK_ERROR
from controller_plugin import wire
from controller_plugin.metadata import (
    ActivationError,
    AppPlan,
    MetadataClient,
    ProfileStore,
    plan_for,
)

log = logging.getLogger("esg.scheduler")

PLAN_TTL_S = 10.0


class PlanCache:
    def __init__(self, metadata: MetadataClient, profiles: ProfileStore) -> None:
        self.metadata = metadata
        self.profiles = profiles
        self._plans: dict[tuple[str, str | None], tuple[float, AppPlan]] = {}
        self._lock = threading.Lock()

    def drop(self) -> None:
        """Forget every plan (a table changed): each action is planned afresh at its next activation."""
        with self._lock:
            self._plans.clear()

    def plan(self, msg: wire.ActivationMessage) -> AppPlan | ActivationError:
        key = (msg.action.qualified, msg.revision)
        mono = time.monotonic()
        with self._lock:
            hit = self._plans.get(key)
        if hit is not None and mono - hit[0] < PLAN_TTL_S:
            return hit[1]
        auth = msg.user.api_key if msg.user.api_key and ":" in msg.user.api_key else None
        try:
            meta = self.metadata.action(msg.action.qualified, msg.revision, cache=msg.revision is not None,
                                        auth=auth)
            plan = plan_for(meta, msg.revision, lambda fqn: self.metadata.action(fqn, None, cache=False, auth=auth),
                            self.profiles)
        except ActivationError as exc:
            return exc
        except Exception as exc:  # a bug must not lose the activation: it is answered as a system error
            log.exception("planning %s failed", msg.action.qualified)
            return ActivationError(f"the ESG scheduler could not plan {msg.action.qualified}: "
                                   f"{type(exc).__name__}", STATUS_WHISK_ERROR)
        if hit is not None and hit[1] == plan:
            plan = hit[1]  # the same object: the scheduler need not register the app again
        with self._lock:
            self._plans[key] = (mono, plan)
        return plan
