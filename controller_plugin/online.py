"""Learned profiles in Redis: every scheduler of a deployment writes and reads the same statistics, and
they outlive any scheduler (docs/online-profiles.md §2).

Per table (the name ``esg-profile`` gives, default the action's name) and configuration label:

* ``esg:{prefix}:profile:{table}:{label}:sketch`` -- hash, bucket index -> count: the
  :class:`~esg.sketch.QuantileSketch` of its warm run times, incremented in place (HINCRBY) by any
  scheduler; folded when it outgrows :data:`~esg.sketch.MAX_BUCKETS`;
* ``...:{label}:recent`` -- list of its last :data:`~esg.online.RECENT` warm run times (drift);
* ``...:{label}:info`` -- hash ``n`` (warm batches), ``cold`` (cold batches), ``init_ms`` (their sum);
* ``esg:{prefix}:profile:{table}:configs`` -- set of its configuration labels;
* ``esg:{prefix}:profile:{table}:prior`` -- an offline table imported with ``esg profile import`` (JSON);
* ``esg:{prefix}:profile:tables`` -- set of the tables with statistics or a prior.

The rules (when a configuration is measured, drift, the table built) are :mod:`esg.online`'s; this
module only keeps their state. Numbers are written with ``repr`` so a float reads back exactly.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from esg.model import Config
from esg.online import (
    DRIFT_TOLERANCE,
    MIN_SAMPLES,
    RECENT,
    ConfigStats,
    Learned,
    Observation,
    verdict_of,
)
from esg.profiles import Profile, profile_from_dict
from esg.sketch import MAX_BUCKETS, QuantileSketch

_LABEL = re.compile(r"^b(\d+)/(\d+)c/(.+)$")


def config_of(label: str) -> Config | None:
    """The configuration a label names (:meth:`Config.label`); None for anything else."""
    m = _LABEL.match(label)
    if m is None:
        return None
    try:
        return Config(int(m.group(1)), int(m.group(2)), None if m.group(3) == "cpu" else m.group(3))
    except ValueError:
        return None


@dataclass(frozen=True)
class ProfileKeys:
    prefix: str = ""

    @property
    def tables(self) -> str:
        return f"esg:{self.prefix}:profile:tables"

    def configs(self, table: str) -> str:
        return f"esg:{self.prefix}:profile:{table}:configs"

    def prior(self, table: str) -> str:
        return f"esg:{self.prefix}:profile:{table}:prior"

    def sketch(self, table: str, label: str) -> str:
        return f"esg:{self.prefix}:profile:{table}:{label}:sketch"

    def recent(self, table: str, label: str) -> str:
        return f"esg:{self.prefix}:profile:{table}:{label}:recent"

    def info(self, table: str, label: str) -> str:
        return f"esg:{self.prefix}:profile:{table}:{label}:info"


class OnlineStore:
    def __init__(self, client: redis.Redis, prefix: str = "", min_samples: int = MIN_SAMPLES,
                 tolerance: float = DRIFT_TOLERANCE) -> None:
        self.redis = client
        self.keys = ProfileKeys(prefix)
        self.min_samples = min_samples
        self.tolerance = tolerance
        self._sketch = QuantileSketch()

    # -- writing ----------------------------------------------------------------------------------------
    def record(self, observations: Sequence[tuple[Observation, float | None]]) -> list[Learned]:
        """Fold batches in (two round trips); what they changed. ``float | None`` is each configuration's
        latency in the table the scheduler used."""
        if not observations:
            return []
        k = self.keys
        pipe = self.redis.pipeline(transaction=False)
        ends = []
        for obs, _ in observations:
            label = obs.config.label()
            info = k.info(obs.table, label)
            pipe.sadd(k.tables, obs.table)
            pipe.sadd(k.configs(obs.table), label)
            if obs.cold:
                pipe.hincrby(info, "cold", 1)
                pipe.hincrbyfloat(info, "init_ms", obs.init_ms)
                pipe.hget(info, "n")
            else:
                pipe.hincrby(k.sketch(obs.table, label), str(self._sketch.index(obs.run_ms)), 1)
                pipe.rpush(k.recent(obs.table, label), repr(float(obs.run_ms)))
                pipe.ltrim(k.recent(obs.table, label), -RECENT, -1)
                pipe.hincrby(info, "n", 1)
            pipe.lrange(k.recent(obs.table, label), 0, -1)
            pipe.hlen(k.sketch(obs.table, label))
            ends.append(len(pipe))
        replies = pipe.execute()
        out: list[Learned] = []
        fix = self.redis.pipeline(transaction=False)
        for (obs, table_ms), end in zip(observations, ends):
            n, recent, buckets = replies[end - 3:end]
            recent_ms = [float(x) for x in recent]
            learned = verdict_of(obs, int(n or 0), recent_ms, table_ms, self.min_samples, self.tolerance)
            if learned is not None:
                out.append(learned)
                if learned.drift_ms is not None:
                    self._restart(fix, obs, recent_ms)
                    continue
            if int(buckets) > MAX_BUCKETS:
                self._fold(obs)
        if len(fix):
            fix.execute()
        return out

    def _restart(self, pipe, obs: Observation, recent: Sequence[float]) -> None:
        """After drift the statistics are the recent run times (esg.online.ConfigStats.restart)."""
        label = obs.config.label()
        sk = QuantileSketch()
        sk.update(recent)
        key = self.keys.sketch(obs.table, label)
        pipe.delete(key)
        pipe.hset(key, mapping={str(i): n for i, n in sk.counts.items()})
        pipe.hset(self.keys.info(obs.table, label), "n", len(recent))
        pipe.delete(self.keys.recent(obs.table, label))

    def _fold(self, obs: Observation) -> None:
        key = self.keys.sketch(obs.table, obs.config.label())
        sk = QuantileSketch(counts={int(i): int(n) for i, n in self.redis.hgetall(key).items()})
        sk.merge({})  # adding nothing folds the lowest buckets down to the bound
        pipe = self.redis.pipeline(transaction=True)
        pipe.delete(key)
        pipe.hset(key, mapping={str(i): n for i, n in sk.counts.items()})
        pipe.execute()

    def import_table(self, table: str, profile: Profile) -> None:
        """Seed ``table``'s prior (the offline table online statistics refine)."""
        pipe = self.redis.pipeline(transaction=False)
        pipe.sadd(self.keys.tables, table)
        pipe.set(self.keys.prior(table), json.dumps(profile.to_dict()))
        pipe.execute()

    # -- reading ----------------------------------------------------------------------------------------
    def tables(self) -> list[str]:
        return sorted(t.decode() if isinstance(t, bytes) else t for t in self.redis.smembers(self.keys.tables))

    def prior(self, table: str) -> Profile | None:
        raw = self.redis.get(self.keys.prior(table))
        if raw is None:
            return None
        return profile_from_dict(json.loads(raw), f"Redis {self.keys.prior(table)}")

    def stats(self, table: str) -> dict[Config, ConfigStats]:
        labels = sorted(x.decode() if isinstance(x, bytes) else x for x in self.redis.smembers(self.keys.configs(table)))
        configs = [(label, c) for label in labels if (c := config_of(label)) is not None]
        pipe = self.redis.pipeline(transaction=False)
        for label, _ in configs:
            pipe.hgetall(self.keys.sketch(table, label))
            pipe.lrange(self.keys.recent(table, label), 0, -1)
            pipe.hgetall(self.keys.info(table, label))
        replies = pipe.execute()
        out = {}
        for j, (_, c) in enumerate(configs):
            buckets, recent, info = replies[3 * j:3 * j + 3]
            info = {(a.decode() if isinstance(a, bytes) else a): b for a, b in info.items()}
            sk = QuantileSketch(counts={int(i): int(n) for i, n in buckets.items()})
            out[c] = ConfigStats(sk, [float(x) for x in recent], int(info.get("cold", 0)),
                                 float(info.get("init_ms", 0.0)))
        return out
