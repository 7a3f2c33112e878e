"""``esg scheduler``: run the ESG scheduler service on OpenWhisk's Kafka topics (DESIGN §2, §5)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from esg_cli import checks
from esg_cli.errors import CliError

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")

ENV = {"kafka": "ESG_KAFKA", "redis": "ESG_REDIS", "openwhisk_api": "ESG_OPENWHISK_API",
       "openwhisk_auth": "ESG_OPENWHISK_AUTH", "topic_prefix": "ESG_TOPIC_PREFIX",
       "controller_id": "ESG_CONTROLLER_ID"}


def register(sub: argparse._SubParsersAction) -> None:
    from esg.policies import policy_names

    p = sub.add_parser("scheduler", help="run the ESG scheduler service",
                       description="Run the ESG scheduler: pose as OpenWhisk's invokers on Kafka, schedule "
                                   "activations with ESG, dispatch batches to invoker agents.")
    p.add_argument("--kafka", metavar="HOST:PORT", type=checks.kafka_address,
                   help="Kafka bootstrap server (env ESG_KAFKA)")
    p.add_argument("--redis", metavar="URL", type=checks.redis_url,
                   help="Redis URL, may carry a password (env ESG_REDIS)")
    p.add_argument("--openwhisk-api", metavar="URL", type=checks.http_url,
                   help="OpenWhisk API host (env ESG_OPENWHISK_API)")
    p.add_argument("--openwhisk-auth", metavar="UUID:KEY", type=checks.api_key,
                   help="API key used to read action metadata (env ESG_OPENWHISK_AUTH)")
    p.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix,
                   help="OpenWhisk's Kafka topic prefix (env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", metavar="C", type=checks.controller_id,
                   help="controller id (env ESG_CONTROLLER_ID, default 0)")
    p.add_argument("--profiles", metavar="DIR", type=Path, help="profile tables (default: the shipped ones)")
    p.add_argument("--metrics-port", type=checks.port, metavar="PORT", help="serve Prometheus metrics on this port")
    p.add_argument("--agent-timeout-s", type=checks.positive_float, default=5.0, metavar="S",
                   help="an agent silent this long is lost (default 5)")
    p.add_argument("--policy", default="esg", choices=policy_names(), help="scheduling policy (default esg)")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="logging level")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace):
    """The service settings from the flags and their environment fallbacks, every one checked, and the
    profile tables read: no connection is made here."""
    from controller_plugin.settings import Settings, shipped_profiles_dir

    kafka = checks.from_env(args.kafka, ENV["kafka"], checks.kafka_address)
    redis_url = checks.from_env(args.redis, ENV["redis"], checks.redis_url)
    if not kafka:
        raise CliError("no Kafka given: pass --kafka HOST:PORT or set ESG_KAFKA")
    if not redis_url:
        raise CliError("no Redis given: pass --redis URL or set ESG_REDIS")
    profiles = args.profiles or shipped_profiles_dir()
    check_profile_tables(profiles, "--profiles")
    if args.metrics_port is not None:
        checks.check_port_free(args.metrics_port, "--metrics-port", host="0.0.0.0")
    return Settings(kafka=kafka, redis_url=redis_url,
                    openwhisk_api=checks.from_env(args.openwhisk_api, ENV["openwhisk_api"], checks.http_url),
                    openwhisk_auth=checks.from_env(args.openwhisk_auth, ENV["openwhisk_auth"], checks.api_key),
                    topic_prefix=checks.from_env(args.topic_prefix, ENV["topic_prefix"], checks.topic_prefix, ""),
                    controller_id=checks.from_env(args.controller_id, ENV["controller_id"], checks.controller_id,
                                                  "0"),
                    profiles_dir=profiles, metrics_port=args.metrics_port, agent_timeout_s=args.agent_timeout_s,
                    policy=args.policy)


def check_profile_tables(directory: Path, flag: str) -> None:
    """Every ``*.json`` of ``directory`` is a valid profile table (a bad one is named now, not at the first
    activation that needs it)."""
    from esg.profiles import load_profile

    checks.check_dir(directory, flag)
    for table in sorted(Path(directory).glob("*.json")):
        load_profile(table)


def run(args: argparse.Namespace) -> int:
    from controller_plugin.service import SchedulerService, ServiceError

    settings = settings_from(args)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        svc = SchedulerService(settings)
    except ServiceError as exc:
        raise CliError(str(exc)) from None
    for sig in (signal.SIGTERM, signal.SIGHUP):  # a hang-up stops it as cleanly as a kill
        signal.signal(sig, lambda *_: svc.stop())
    try:
        try:
            svc.start()
        except OSError as exc:  # e.g. the metrics port taken between the check and the bind
            raise CliError(f"cannot start: {exc}") from None
        print(f"esg scheduler: ready (incarnation {settings.incarnation})", file=sys.stderr, flush=True)
        svc.run()
    except ServiceError as exc:
        raise CliError(str(exc)) from None
    finally:
        svc.close()
    return 0
