"""The scheduler service's settings: the service flags of ``docs/architecture.md`` §6, each with an environment fallback.

Secrets stay out of logs: :meth:`SchedulerSettings.describe` shows the Redis URL without its password, the
activation store's URL without its credentials and the OpenWhisk key only as its uuid.
"""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agent_channel.connect import redact_url
from controller_plugin.activation_store import redact
from controller_plugin.arguments import ParameterKeys
from esg.defaults import HOP_MS

DEFAULT_GROUP = "esg-scheduler"
DEFAULT_AGENT_TIMEOUT_S = 5.0


def shipped_profiles_dir() -> Path:
    """The profile tables shipped with the project (``profiles/tables/cpu``, else ``profiles/tables``)."""
    tables = Path(__file__).resolve().parent.parent / "profiles" / "tables"
    return tables / "cpu" if (tables / "cpu").is_dir() else tables


@dataclass(frozen=True)
class Deadline:
    """When OpenWhisk's controller force-completes an activation (``CommonLoadBalancer``): after
    max(action timeout, ``std_s``) x ``factor`` + ``addon_s`` from its transaction start; its defaults
    (``timeout-factor = 2``, ``timeout-addon = 1m``, ``time-limit.std = 1m``)."""

    factor: int = 2
    addon_s: float = 60.0
    std_s: float = 60.0

    def at_ms(self, start_ms: int, timeout_ms: int) -> int:
        return start_ms + int(max(timeout_ms, self.std_s * 1000) * self.factor + self.addon_s * 1000)


@dataclass(frozen=True)
class SchedulerSettings:
    kafka: str
    redis_url: str = field(repr=False)
    openwhisk_api: str | None = None
    openwhisk_auth: str | None = field(default=None, repr=False)
    topic_prefix: str = ""
    controller_id: str = "0"
    profiles_dir: Path = field(default_factory=shipped_profiles_dir)
    metrics_port: int | None = None
    #: Where ``/metrics`` is served: loopback unless a deployment scrapes from elsewhere.
    metrics_host: str = "127.0.0.1"
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    policy: str = "esg"
    group_id: str = DEFAULT_GROUP
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    ping_interval_s: float = 1.0
    #: How long before the controller's forced-completion deadline an unanswered activation is failed.
    deadline_margin_s: float = 30.0
    #: Learn profiles from what runs, in Redis (docs/online-profiles.md); off: the offline tables only.
    online_profiles: bool = True
    #: What is learned is kept per namespace unless the operator shares it between all (docs/security.md).
    shared_profiles: bool = False
    #: The share of a function's calls that may run in configurations its table lacks.
    explore_fraction: float = 0.05
    #: SLO admission control (esg.admission): reject at once what no plan can meet; off by default.
    admission_control: bool = False
    #: The per-batch overhead the scheduler plans with (ESG_1Q's path latencies, admission control).
    stage_overhead_ms: float = HOP_MS
    #: The run-time percentile ESG plans with (esg.tail); None: the tables' one latency figure.
    slo_percentile: float | None = None
    #: OpenWhisk's activation store (CouchDB API), ``http://user:password@host:port[/database]``.
    activation_store: str | None = field(default=None, repr=False)
    deadline: Deadline = field(default_factory=Deadline)
    #: OpenWhisk's parameter-encryption keys, to unlock locked arguments.
    parameter_keys: ParameterKeys = field(default_factory=ParameterKeys, repr=False)
    #: Let the policy start workers ahead of their batches and set its keep-alive (``esg emulate
    #: --no-prewarm`` is the emulator's off switch); off: no pre-warms, every worker the agent's TTL.
    prewarm: bool = True
    #: How long the leader lease lasts unless renewed (renewed every quarter of it): how soon a standby
    #: takes over from a leader that stopped.
    lease_s: float = 2.0
    #: This scheduler's name among the deployment's schedulers (status, metrics): by default the host's.
    name: str = field(default_factory=lambda: socket.gethostname() or "scheduler")

    def describe(self) -> str:
        """One log line of the settings with every secret removed."""
        auth = "none" if not self.openwhisk_auth else self.openwhisk_auth.partition(":")[0] + ":***"
        return (f"kafka={self.kafka} redis={redact_url(self.redis_url)} openwhisk_api={self.openwhisk_api} "
                f"auth={auth} prefix={self.topic_prefix!r} controller={self.controller_id} "
                f"profiles={self.profiles_dir} online_profiles={self.online_profiles} "
                f"explore_fraction={self.explore_fraction} admission_control={self.admission_control} "
                f"stage_overhead_ms={self.stage_overhead_ms:g} "
                f"slo_percentile={'none' if self.slo_percentile is None else format(self.slo_percentile, 'g')} "
                f"agent_timeout_s={self.agent_timeout_s} prewarm={self.prewarm} "
                f"incarnation={self.incarnation} name={self.name} lease_s={self.lease_s:g} "
                f"activation_store={redact(self.activation_store) if self.activation_store else 'none'} "
                f"parameter_keys={','.join(sorted(self.parameter_keys.keys)) or 'none'}")


def env_or(value: str | None, env: str, default: str | None = None) -> str | None:
    """A flag's value, else the environment variable ``env``, else ``default``."""
    if value is not None:
        return value
    got = os.environ.get(env)
    return got if got not in (None, "") else default
