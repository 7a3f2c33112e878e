"""``esg scheduler``: run the ESG scheduler service on OpenWhisk's Kafka topics (DESIGN §2, §5)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from pathlib import Path

from esg_cli.errors import CliError

ENV = {"kafka": "ESG_KAFKA", "redis": "ESG_REDIS", "openwhisk_api": "ESG_OPENWHISK_API",
       "openwhisk_auth": "ESG_OPENWHISK_AUTH", "topic_prefix": "ESG_TOPIC_PREFIX",
       "controller_id": "ESG_CONTROLLER_ID"}


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("scheduler", help="run the ESG scheduler service",
                       description="Run the ESG scheduler: pose as OpenWhisk's invokers on Kafka, schedule "
                                   "activations with ESG, dispatch batches to invoker agents.")
    p.add_argument("--kafka", metavar="HOST:PORT", help="Kafka bootstrap server (env ESG_KAFKA)")
    p.add_argument("--redis", metavar="URL", help="Redis URL, may carry a password (env ESG_REDIS)")
    p.add_argument("--openwhisk-api", metavar="URL", help="OpenWhisk API host (env ESG_OPENWHISK_API)")
    p.add_argument("--openwhisk-auth", metavar="UUID:KEY",
                   help="API key used to read action metadata (env ESG_OPENWHISK_AUTH)")
    p.add_argument("--topic-prefix", metavar="P", help="OpenWhisk's Kafka topic prefix (env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", metavar="C", help="controller id (env ESG_CONTROLLER_ID, default 0)")
    p.add_argument("--profiles", metavar="DIR", type=Path, help="profile tables (default: the shipped ones)")
    p.add_argument("--metrics-port", type=int, metavar="PORT", help="serve Prometheus metrics on this port")
    p.add_argument("--agent-timeout-s", type=float, default=5.0, metavar="S",
                   help="an agent silent this long is lost (default 5)")
    p.add_argument("--policy", default="esg", help="scheduling policy (default esg)")
    p.add_argument("--log-level", default="INFO", help="logging level (default INFO)")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace):
    from controller_plugin.settings import Settings, env_or, shipped_profiles_dir

    kafka = env_or(args.kafka, ENV["kafka"])
    redis_url = env_or(args.redis, ENV["redis"])
    if not kafka:
        raise CliError("no Kafka given: pass --kafka HOST:PORT or set ESG_KAFKA")
    if not redis_url:
        raise CliError("no Redis given: pass --redis URL or set ESG_REDIS")
    controller = env_or(args.controller_id, ENV["controller_id"], "0")
    if args.agent_timeout_s <= 0:
        raise CliError("--agent-timeout-s must be positive")
    return Settings(kafka=kafka, redis_url=redis_url,
                    openwhisk_api=env_or(args.openwhisk_api, ENV["openwhisk_api"]),
                    openwhisk_auth=env_or(args.openwhisk_auth, ENV["openwhisk_auth"]),
                    topic_prefix=env_or(args.topic_prefix, ENV["topic_prefix"], "") or "",
                    controller_id=controller, profiles_dir=args.profiles or shipped_profiles_dir(),
                    metrics_port=args.metrics_port, agent_timeout_s=args.agent_timeout_s, policy=args.policy)


def run(args: argparse.Namespace) -> int:
    from controller_plugin.service import SchedulerService, ServiceError

    settings = settings_from(args)
    logging.basicConfig(level=args.log_level.upper(), stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    try:
        svc = SchedulerService(settings)
    except ServiceError as exc:
        raise CliError(str(exc)) from None
    signal.signal(signal.SIGTERM, lambda *_: svc.stop())
    try:
        svc.start()
        print(f"esg scheduler: ready (incarnation {settings.incarnation})", file=sys.stderr, flush=True)
        svc.run()
    except ServiceError as exc:
        raise CliError(str(exc)) from None
    finally:
        svc.close()
    return 0
