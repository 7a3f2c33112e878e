"""Plans of actions, cached: an activation's action metadata (REST) turned into an :class:`AppPlan`.

Actions are read as the activation's caller (its ``user`` identity), and a plan is kept per calling
namespace: an app and each function of its DAG are read with the caller's key, so a plan never lets one
namespace run a function that only another may read (OpenWhisk checks a sequence's components against
the caller alike). A caller whose key is not a ``uuid:key`` (the scheduler then reads with its own key)
may name DAG functions of its own namespace only. A plan is kept ``PLAN_TTL_S`` per (action, revision,
calling namespace): activations name the revision they run, and an action read without one -- or a
share its owner has withdrawn since -- is read again after the TTL. Anything that makes the action unrunnable is an
:class:`~controller_plugin.metadata.ActivationError` naming it; a bug while planning is one too (a
system error), so the activation is answered rather than lost.

Only an action never planned is read on an activation's way (the activation reader's thread). A plan
past its TTL, or dropped because a profile table changed, still serves the activations that come while
a thread of the cache reads it again (stale while revalidating): reading an app and its functions
through the REST API takes tens of milliseconds, on a loaded machine up to a hundred and more, and
every activation behind it in the reader waited that long -- every ``PLAN_TTL_S`` for every app
(docs/live-vs-emulated.md).
"""

from __future__ import annotations

import logging
import queue
import threading
import time

from controller_plugin import wire
from controller_plugin.metadata import (
    ActivationError,
    AppPlan,
    MetadataClient,
    ProfileStore,
    plan_for,
)
from openwhisk_status import STATUS_WHISK_ERROR

log = logging.getLogger("esg.scheduler")

PLAN_TTL_S = 10.0


class PlanCache:
    def __init__(self, metadata: MetadataClient, profiles: ProfileStore) -> None:
        self.metadata = metadata
        self.profiles = profiles
        self._plans: dict[tuple[str, str | None, str], tuple[float, AppPlan]] = {}
        self._latest: dict[tuple[str, str | None], AppPlan] = {}
        """The last plan read of each (action, revision), whoever called: an equal plan read for another
        caller is that same object (the scheduler registers an app again only when its plan changes)."""
        self._lock = threading.Lock()
        self._todo: queue.Queue = queue.Queue()
        self._pending: set[tuple[str, str | None, str]] = set()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def drop(self) -> None:
        """Every plan is read again (a table changed): each serves on until its new one is ready."""
        with self._lock:
            self._plans = {k: (-float("inf"), p) for k, (_, p) in self._plans.items()}

    def plan(self, msg: wire.ActivationMessage) -> AppPlan | ActivationError:
        key = (msg.action.qualified, msg.revision, msg.user.namespace)
        with self._lock:
            hit = self._plans.get(key)
        if hit is None:
            return self._read(key, msg)
        if time.monotonic() - hit[0] >= PLAN_TTL_S:
            self._refresh(key, msg)
        return hit[1]

    def close(self) -> None:
        """Stop the refreshing thread (it finishes the read it is in)."""
        self._stop.set()
        self._todo.put(None)
        if self._thread is not None:
            self._thread.join(timeout=5)

    def _refresh(self, key: tuple[str, str | None, str], msg: wire.ActivationMessage) -> None:
        with self._lock:
            if key in self._pending or self._stop.is_set():
                return
            self._pending.add(key)
            if self._thread is None:
                self._thread = threading.Thread(target=self._refresh_loop, name="esg-plans", daemon=True)
                self._thread.start()
        self._todo.put((key, msg))

    def _refresh_loop(self) -> None:
        while not self._stop.is_set():
            item = self._todo.get()
            if item is None:
                return
            key, msg = item
            try:
                self._read(key, msg)  # an error keeps the old plan until the next try
            finally:
                with self._lock:
                    self._pending.discard(key)

    def _read(self, key: tuple[str, str | None, str], msg: wire.ActivationMessage) -> AppPlan | ActivationError:
        mono = time.monotonic()
        with self._lock:
            hit = self._plans.get(key)
        auth = msg.user.basic_auth
        caller = msg.user.namespace

        def function(fqn: str):
            """A DAG function, read as the caller (never from a cache another caller filled)."""
            if auth is None and fqn.split("/", 1)[0] != caller:
                raise ActivationError(f"cannot check that the caller may run {fqn}: its key is not a uuid:key "
                                      f"pair, and only functions of its own namespace {caller} are run for it")
            return self.metadata.action(fqn, None, cache=False, auth=auth)
        try:
            meta = self.metadata.action(msg.action.qualified, msg.revision, cache=msg.revision is not None,
                                        auth=auth)
            plan = plan_for(meta, msg.revision, function, self.profiles)
        except ActivationError as exc:
            if hit is not None:
                with self._lock:
                    self._plans.pop(key, None)  # unrunnable now: the next activation learns why
            return exc
        except Exception as exc:  # a bug must not lose the activation: it is answered as a system error
            log.exception("planning %s failed", msg.action.qualified)
            return ActivationError(f"the ESG scheduler could not plan {msg.action.qualified}: "
                                   f"{type(exc).__name__}", STATUS_WHISK_ERROR)
        with self._lock:
            same = self._latest.get(key[:2])
            if same is not None and same == plan:
                plan = same  # the same object: the scheduler need not register the app again
            self._latest[key[:2]] = plan
            self._plans[key] = (mono, plan)
        return plan
