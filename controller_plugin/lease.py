"""The leader lease and its fencing token: one scheduler of a deployment acts, the others stand by.

Every ``esg scheduler`` of one deployment (same Redis, topic prefix and controller id: one ``scope``)
competes for the key ``esg:{scope}:leader``, which holds the holder's **token** ``"{epoch}:{holder}"``
and expires after the lease time (``--lease-ms``, default 2 s) unless its holder renews it (every
``--lease-ms``/4). Whoever sets the key when it is absent takes the next **epoch** from the counter
``esg:{scope}:epoch`` (never lowered: a floor from the ledger checkpoints in Kafka keeps it rising even
after Redis lost it), so epochs grow with every change of leader.

**Fencing.** Every write that can change what runs -- ledger transitions, dispatches, the revocation of
a batch, the MIG destroy lists those carry, invoker ids -- is a Lua script whose first line compares the
leader key with the writer's token (:data:`FENCE`) and fails with ``FENCED`` otherwise, in the same
atomic step as the write. A scheduler that was paused or cut off from Redis past its lease, and wakes to
find another epoch, can therefore change nothing in Redis; :func:`is_fenced` tells that error from a
Redis failure, and the service steps down on it instead of retrying. What goes to Kafka (acks, pings,
health-test answers) is produced only right after such a script succeeded in the same turn (acks: the
ledger's ``acking`` write; pings and health answers: :meth:`Lease.check`), and the producer's message
timeout is shorter than the lease (``controller_plugin/bus.py``): an ack still queued in a process that
stalls past its lease times out instead of being sent when it wakes (docs/deployment.md, "Failover",
says what window remains).

The holder's own view, :meth:`Lease.held`, is measured from *before* each renewal was sent, on the
monotonic clock (which runs on while the process is stopped), so a scheduler never believes it leads
longer than Redis does.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

import redis

log = logging.getLogger("esg.scheduler")

DEFAULT_LEASE_S = 2.0

#: What a fenced script answers a writer whose token is not the lease's.
FENCED_ERROR = "FENCED the lease is not held with this token"
#: The first line of every fenced script: KEYS[1] is the leader key, ARGV[1] the writer's token.
FENCE = f"if redis.call('GET', KEYS[1]) ~= ARGV[1] then return redis.error_reply('{FENCED_ERROR}') end\n"

# KEYS: leader, epoch counter; ARGV: holder, lease ms, epoch floor. {1, token} when taken, {0, holder's token}.
_ACQUIRE = """
local cur = redis.call('GET', KEYS[1])
if cur then return {0, cur} end
local e = redis.call('INCR', KEYS[2])
local floor = tonumber(ARGV[3])
if e <= floor then
  e = floor + 1
  redis.call('SET', KEYS[2], e)
end
local token = e .. ':' .. ARGV[1]
redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
return {1, token}
"""
# KEYS: leader; ARGV: token, lease ms.
_RENEW = """
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return 1
end
return 0
"""
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
_CHECK = FENCE + "return 1"


class Fenced(Exception):
    """This scheduler does not hold the lease (any more): it must not act."""


def is_fenced(exc: BaseException) -> bool:
    """Whether a Redis error is a fenced script refusing a write (not a failure to retry)."""
    return isinstance(exc, Fenced) or (isinstance(exc, redis.ResponseError) and FENCED_ERROR in str(exc))


def leader_key(scope: str) -> str:
    return f"esg:{scope}:leader"


def epoch_key(scope: str) -> str:
    return f"esg:{scope}:epoch"


def epoch_of(token: str | bytes | None) -> int:
    """The epoch a token carries (0: none)."""
    if token is None:
        return 0
    text = token.decode() if isinstance(token, bytes) else token
    head, _, _ = text.partition(":")
    return int(head) if head.isdigit() else 0


def holder_of(token: str | bytes | None) -> str | None:
    if token is None:
        return None
    text = token.decode() if isinstance(token, bytes) else token
    return text.partition(":")[2] or None


class Lease:
    """One scheduler's side of the lease: acquiring it, renewing it (:meth:`run`, its own thread), the
    token its fenced scripts carry, and whether it may still act."""

    def __init__(self, client: redis.Redis, scope: str, holder: str, lease_s: float = DEFAULT_LEASE_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.r = client
        self.key = leader_key(scope)
        self.epoch_key = epoch_key(scope)
        self.holder = holder
        self.lease_s = lease_s
        self.renew_s = lease_s / 4
        self.clock = clock
        self.token: str | None = None
        self.epoch = 0
        self.floor = 0
        """The least epoch the next acquisition may take minus one (raised from the Kafka checkpoints)."""
        self.lost = threading.Event()
        """Set when a lease this process held is gone: it must step down."""
        self.acquired = threading.Event()
        self._valid_until = 0.0

    # -- the token ----------------------------------------------------------------------------------
    def fence(self) -> str:
        """The token for a fenced script; :class:`Fenced` when this process does not lead."""
        token = self.token
        if token is None or self.lost.is_set():
            raise Fenced("this scheduler does not hold the lease")
        return token

    def held(self) -> bool:
        """Whether this process leads, as far as it can know without asking Redis."""
        return self.token is not None and not self.lost.is_set() and self.clock() < self._valid_until

    def remaining_s(self) -> float:
        return max(0.0, self._valid_until - self.clock()) if self.token is not None else 0.0

    # -- talking to Redis ---------------------------------------------------------------------------
    def try_acquire(self) -> bool:
        """Take the lease if nobody holds it; True when this process now leads."""
        if self.token is not None:
            return not self.lost.is_set()
        sent = self.clock()
        taken, token = self.r.eval(_ACQUIRE, 2, self.key, self.epoch_key, self.holder, int(self.lease_s * 1000),
                                   self.floor)
        if not taken:
            return False
        self.token = token.decode() if isinstance(token, bytes) else token
        self.epoch = epoch_of(self.token)
        self._valid_until = sent + self.lease_s
        self.acquired.set()
        log.info("lease acquired: epoch %d (holder %s)", self.epoch, self.holder)
        return True

    def renew(self) -> bool:
        """Extend the lease; False (and :attr:`lost` set) when it is no longer this process's."""
        token = self.token
        if token is None or self.lost.is_set():
            return False
        sent = self.clock()
        if sent >= self._valid_until:
            self.lose("the lease ran out before it was renewed (the process stalled, or Redis was slow)")
            return False
        ok = self.r.eval(_RENEW, 1, self.key, token, int(self.lease_s * 1000))
        if not ok:
            self.lose("another scheduler holds the lease now, or Redis lost it")
            return False
        self._valid_until = sent + self.lease_s
        return True

    def check(self) -> None:
        """Ask Redis whether this process still leads, atomically; :class:`Fenced` if not."""
        try:
            self.r.eval(_CHECK, 1, self.key, self.fence())
        except redis.ResponseError as exc:
            if is_fenced(exc):
                self.lose("the lease is held with another token")
                raise Fenced(str(exc)) from None
            raise

    def release(self) -> None:
        """Give the lease up now (a clean stop), so a standby need not wait for it to run out."""
        token, self.token = self.token, None
        if token is None:
            return
        try:
            self.r.eval(_RELEASE, 1, self.key, token)
        except redis.RedisError as exc:
            log.warning("could not release the lease (%s); it runs out by itself", type(exc).__name__)

    def current(self) -> tuple[str | None, int]:
        """The leader's token now and the lease's milliseconds left (-2: none)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.get(self.key)
        pipe.pttl(self.key)
        token, ttl = pipe.execute()
        return (token.decode() if isinstance(token, bytes) else token), int(ttl)

    def lose(self, why: str) -> None:
        """This process stops acting: its lease is gone (``why`` is logged once)."""
        if not self.lost.is_set():
            log.warning("lease of epoch %d lost: %s; this scheduler stops acting", self.epoch, why)
            self.lost.set()

    # -- the thread ---------------------------------------------------------------------------------
    def run(self, stop: threading.Event, poll_s: float = 0.1) -> None:
        """Until ``stop``: try to acquire every ``poll_s`` while standing by, renew every :attr:`renew_s`
        while leading; once the lease is lost, do nothing more (the service steps down)."""
        failing = False
        while not stop.is_set() and not self.lost.is_set():
            try:
                if self.token is None:
                    self.try_acquire()
                    wait = poll_s
                else:
                    self.renew()
                    wait = self.renew_s
                failing = False
            except redis.RedisError as exc:
                if not failing:
                    log.error("the lease could not be %s (%s)", "renewed" if self.token else "asked for",
                              type(exc).__name__)
                failing = True
                if self.token is not None and not self.held():
                    self.lose("Redis did not answer while the lease ran out")
                wait = min(poll_s, self.renew_s)
            stop.wait(wait)
