"""The scheduler service's settings: DESIGN §5 flags, each with an environment fallback.

Secrets stay out of logs: :meth:`Settings.describe` shows the Redis URL without its password and the
OpenWhisk key only as its uuid.
"""

from __future__ import annotations

import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from agent_channel.connect import redact_url

DEFAULT_GROUP = "esg-scheduler"
DEFAULT_AGENT_TIMEOUT_S = 5.0


def shipped_profiles_dir() -> Path:
    """The profile tables shipped with the project (``profiles/tables/cpu``, else ``profiles/tables``)."""
    tables = Path(__file__).resolve().parent.parent / "profiles" / "tables"
    return tables / "cpu" if (tables / "cpu").is_dir() else tables


@dataclass(frozen=True)
class Settings:
    kafka: str
    redis_url: str = field(repr=False)
    openwhisk_api: str | None = None
    openwhisk_auth: str | None = field(default=None, repr=False)
    topic_prefix: str = ""
    controller_id: str = "0"
    profiles_dir: Path = field(default_factory=shipped_profiles_dir)
    metrics_port: int | None = None
    agent_timeout_s: float = DEFAULT_AGENT_TIMEOUT_S
    policy: str = "esg"
    group_id: str = DEFAULT_GROUP
    incarnation: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    ping_interval_s: float = 1.0
    #: How long before the controller's forced-completion deadline an unanswered activation is failed.
    deadline_margin_s: float = 30.0

    def describe(self) -> str:
        """One log line of the settings with every secret removed."""
        auth = "none" if not self.openwhisk_auth else self.openwhisk_auth.partition(":")[0] + ":***"
        return (f"kafka={self.kafka} redis={redact_url(self.redis_url)} openwhisk_api={self.openwhisk_api} "
                f"auth={auth} prefix={self.topic_prefix!r} controller={self.controller_id} "
                f"profiles={self.profiles_dir} agent_timeout_s={self.agent_timeout_s} "
                f"incarnation={self.incarnation}")


def env_or(value: str | None, env: str, default: str | None = None) -> str | None:
    """A flag's value, else the environment variable ``env``, else ``default``."""
    if value is not None:
        return value
    got = os.environ.get(env)
    return got if got not in (None, "") else default
