"""Child processes that die with their parent.

Every process the project starts (the broker, Redis, the scheduler and agents of ``esg up``) is started
with :func:`die_with_parent` as its ``preexec_fn``: Linux's parent-death signal
(``prctl(PR_SET_PDEATHSIG)``) delivers ``sig`` to the child when its parent goes away, however it goes
(SIGTERM, SIGHUP, Ctrl-C, ``kill -9``, a crash), so nothing is left running re-parented to PID 1.
Action workers die with their agent by ``bwrap --die-with-parent`` and a lifeline instead
(:mod:`invoker_agent.sandbox` says why).
The children are also started in a session of their own, so a terminal's Ctrl-C reaches only the
parent, which stops them in order.

One Linux rule to keep in mind: the signal fires when the *thread* that started the child exits, not
only the process. Start long-lived children from a thread that lives as long as they should (the main
thread, or a pool thread that lasts until the pool shuts down); the agent's batch threads and the
profiler's main thread do.

On systems without ``prctl`` the hook does nothing: the parent's own clean-up still stops its children
on SIGTERM, SIGHUP and Ctrl-C.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import signal
import sys
from collections.abc import Callable

PR_SET_PDEATHSIG = 1


def _load_prctl() -> Callable[..., int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


# Resolved once, in the parent: the hook runs between fork and exec, where loading a library is unsafe.
_PRCTL = _load_prctl()


def die_with_parent(sig: signal.Signals = signal.SIGTERM, hold: bool = False) -> Callable[[], None]:
    """A ``preexec_fn`` that makes the child receive ``sig`` when this process (more exactly: the calling
    thread) ends.

    With ``hold`` the child starts with ``sig`` blocked, so a parent that dies while the child is still
    starting cannot kill it before it has installed its handler; the child must unblock it (the action
    worker does, once its clean-up handler is in place)."""
    parent = os.getpid()

    def hook() -> None:
        if hold:
            signal.pthread_sigmask(signal.SIG_BLOCK, {sig})
        if _PRCTL is not None:
            _PRCTL(PR_SET_PDEATHSIG, int(sig), 0, 0, 0)
        if os.getppid() != parent:  # the parent died before the hook ran: act on it now
            os.kill(os.getpid(), sig)
    return hook
