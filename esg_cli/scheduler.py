"""``esg scheduler``: run the ESG scheduler service on OpenWhisk's Kafka topics (``docs/architecture.md`` §4, §6)."""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import uuid
from dataclasses import replace
from pathlib import Path

from esg_cli import checks, service_gc
from esg_cli.errors import CliError
from esg_cli.stop_signals import StopSignals

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR")
#: How long the scheduler may take to stop once told to (SIGTERM, SIGHUP, its parent's death) before it
#: exits anyway: a broker or store that died at the same moment can leave a client library waiting on
#: it, and a process that outlives its parent is an orphan. What it did not finish stays in the ledger
#: for the next start.
STOP_GRACE_S = 20.0

ENV = {"kafka": "ESG_KAFKA", "redis": "ESG_REDIS", "openwhisk_api": "ESG_OPENWHISK_API",
       "openwhisk_auth": "ESG_OPENWHISK_AUTH", "topic_prefix": "ESG_TOPIC_PREFIX",
       "controller_id": "ESG_CONTROLLER_ID", "activation_store": "ESG_ACTIVATION_STORE",
       "aes128": "ESG_PARAMETER_STORAGE_AES128", "aes256": "ESG_PARAMETER_STORAGE_AES256",
       "name": "ESG_SCHEDULER_NAME"}


def register(sub: argparse._SubParsersAction) -> None:
    from esg.policies import policy_names

    p = sub.add_parser("scheduler", help="run the ESG scheduler service",
                       description="Run the ESG scheduler: pose as OpenWhisk's invokers on Kafka, schedule "
                                   "activations with ESG, dispatch batches to invoker agents.")
    p.add_argument("--kafka", metavar="HOST:PORT", type=checks.kafka_address,
                   help="Kafka bootstrap server (env ESG_KAFKA)")
    p.add_argument("--redis", metavar="URL", type=checks.redis_url,
                   help="Redis URL (redis://USER:PASSWORD@HOST:PORT/DB, or a Sentinel's redis+sentinel://...); prefer "
                        "env ESG_REDIS or a file named by ESG_REDIS_FILE: a flag shows its password in the process "
                        "list")
    p.add_argument("--openwhisk-api", metavar="URL", type=checks.http_url,
                   help="OpenWhisk API host (env ESG_OPENWHISK_API)")
    p.add_argument("--openwhisk-auth", metavar="UUID:KEY", type=checks.api_key,
                   help="API key used to read action metadata (env ESG_OPENWHISK_AUTH)")
    p.add_argument("--topic-prefix", metavar="P", type=checks.topic_prefix,
                   help="OpenWhisk's Kafka topic prefix (env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", metavar="C", type=checks.controller_id,
                   help="controller id (env ESG_CONTROLLER_ID, default 0)")
    p.add_argument("--activation-store", metavar="URL", type=checks.activation_store_url,
                   help="OpenWhisk's activation store, http://USER:PASSWORD@HOST:PORT/DATABASE (CouchDB API; "
                        "default database whisk_local_activations); every activation record is written there "
                        "(env ESG_ACTIVATION_STORE)")
    p.add_argument("--timeout-factor", type=checks.positive_int, default=2, metavar="N",
                   help="the controller's timeout-factor: it force-completes an activation after "
                        "max(action timeout, --std-time-limit-s) x N + --timeout-addon-s (default 2)")
    p.add_argument("--timeout-addon-s", type=checks.non_negative_float, default=60.0, metavar="S",
                   help="the controller's timeout-addon in seconds (default 60)")
    p.add_argument("--std-time-limit-s", type=checks.positive_float, default=60.0, metavar="S",
                   help="OpenWhisk's standard action time limit, whisk.time-limit.std, in seconds (default 60)")
    for bits in ("128", "256"):
        p.add_argument(f"--parameter-storage-aes{bits}", metavar="BASE64", dest=f"aes{bits}",
                       type=checks.parameter_key(f"aes-{bits}"),
                       help=f"OpenWhisk's whisk.parameter-storage.aes{bits} key, to unlock arguments locked with "
                            f"aes-{bits} (env ESG_PARAMETER_STORAGE_AES{bits}; prefer the variable: a flag "
                            "shows in the process list)")
    p.add_argument("--profiles", metavar="DIR", type=Path, help="profile tables (default: the shipped ones)")
    p.add_argument("--metrics-port", type=checks.port, metavar="PORT", help="serve Prometheus metrics on this port")
    p.add_argument("--metrics-host", type=checks.ip_address, metavar="ADDR",
                   help="address the metrics are served on (env ESG_METRICS_HOST; default 127.0.0.1: loopback "
                        "only; 0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--agent-timeout-s", type=checks.positive_float, default=5.0, metavar="S",
                   help="an agent silent this long is lost (default 5)")
    p.add_argument("--lease-s", type=checks.positive_float, default=2.0, metavar="S",
                   help="the leader lease: a standby takes over this long after the leader stopped renewing it "
                        "(renewed every quarter of it; default 2). Every scheduler of a deployment competes for it; "
                        "one leads, the others stand by (docs/deployment.md, 'Failover')")
    p.add_argument("--name", metavar="NAME", type=checks.node_name,
                   help="this scheduler's name in esg status and the metrics (env ESG_SCHEDULER_NAME; default: the "
                        "host name)")
    p.add_argument("--explore-fraction", type=checks.fraction, default=0.05, metavar="F",
                   help="share of a function's calls that may run in configurations its table lacks, to learn "
                        "them (docs/online-profiles.md)")
    p.add_argument("--no-online-profiles", action="store_true",
                   help="plan with the offline tables only: learn nothing, explore nothing")
    p.add_argument("--shared-profiles", action="store_true",
                   help="keep what is learned of a table in one place for every namespace (by default each "
                        "namespace learns its own: no tenant reads or skews another's; docs/security.md)")
    p.add_argument("--policy", default="esg", choices=policy_names(), help="scheduling policy (default esg)")
    p.add_argument("--admission-control", action="store_true",
                   help="answer an activation at once with an application error when not even its app's fastest "
                        "path fits what is left of its SLO, instead of running it late (off by default)")
    p.add_argument("--stage-overhead-ms", type=checks.non_negative_float, default=None, metavar="MS",
                   help="the per-batch overhead the scheduler plans with: dispatch to the agent and the result "
                        "back (default 2.5, as esg emulate's --hop-ms; docs/live-vs-emulated.md measures it)")
    p.add_argument("--slo-percentile", type=checks.percentile, default=None, metavar="P",
                   help="ESG plans every run time at its P-th percentile (50 < P < 100, e.g. 95), from the tables' "
                        "measured percentiles or spread and, with online profiles, the learned sketches, instead of "
                        "the tables' one latency figure (as esg emulate --slo-percentile; default: that figure)")
    p.add_argument("--no-prewarm", action="store_true",
                   help="the policy starts no worker ahead of a batch and every worker keeps the agent's "
                        "--idle-ttl-s (as esg emulate --no-prewarm; default: the policy pre-warms and keeps "
                        "workers alive as docs/baselines.md says)")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=LOG_LEVELS, help="logging level")
    p.set_defaults(func=run)


def settings_from(args: argparse.Namespace):
    """The service settings from the flags and their environment fallbacks, every one checked, and the
    profile tables read: no connection is made here."""
    from controller_plugin.settings import Deadline, SchedulerSettings, shipped_profiles_dir
    from esg.defaults import HOP_MS

    kafka = checks.from_env(args.kafka, ENV["kafka"], checks.kafka_address)
    redis_url = checks.from_env(args.redis, ENV["redis"], checks.redis_url)
    if not kafka:
        raise CliError("no Kafka given: pass --kafka HOST:PORT or set ESG_KAFKA")
    if not redis_url:
        raise CliError("no Redis given: set ESG_REDIS or ESG_REDIS_FILE (or pass --redis URL)")
    profiles = args.profiles or shipped_profiles_dir()
    check_profile_tables(profiles, "--profiles")
    metrics_host = checks.from_env(args.metrics_host, "ESG_METRICS_HOST", checks.ip_address, "127.0.0.1")
    if args.metrics_port is not None:
        checks.check_port_free(args.metrics_port, "--metrics-port", host=metrics_host)
    return SchedulerSettings(kafka=kafka, redis_url=redis_url,
                    openwhisk_api=checks.from_env(args.openwhisk_api, ENV["openwhisk_api"], checks.http_url),
                    openwhisk_auth=checks.from_env(args.openwhisk_auth, ENV["openwhisk_auth"], checks.api_key),
                    topic_prefix=checks.from_env(args.topic_prefix, ENV["topic_prefix"], checks.topic_prefix, ""),
                    controller_id=checks.from_env(args.controller_id, ENV["controller_id"], checks.controller_id,
                                                  "0"),
                    profiles_dir=profiles, metrics_port=args.metrics_port, metrics_host=metrics_host,
                    agent_timeout_s=args.agent_timeout_s,
                    policy=args.policy, online_profiles=not args.no_online_profiles,
                    shared_profiles=args.shared_profiles, prewarm=not args.no_prewarm,
                    explore_fraction=args.explore_fraction, admission_control=args.admission_control,
                    stage_overhead_ms=(HOP_MS if args.stage_overhead_ms is None
                                       else args.stage_overhead_ms),
                    slo_percentile=args.slo_percentile,
                    activation_store=activation_store(args),
                    deadline=Deadline(args.timeout_factor, args.timeout_addon_s, args.std_time_limit_s),
                    parameter_keys=parameter_keys(args), lease_s=args.lease_s,
                    **_name(checks.from_env(args.name, ENV["name"], checks.node_name)))


def _name(name: str | None) -> dict:
    return {"name": name} if name else {}


def activation_store(args: argparse.Namespace) -> str | None:
    """The activation store's URL from --activation-store / ESG_ACTIVATION_STORE, with the credentials of
    ESG_ACTIVATION_STORE_USER and ESG_ACTIVATION_STORE_PASSWORD (or ESG_ACTIVATION_STORE_PASSWORD_FILE)
    put into it percent-encoded: a deployment passes them as they are (a password with ``@``, ``:`` or
    ``/`` in it would break a URL it was spliced into)."""
    from urllib.parse import quote, urlsplit

    url = checks.from_env(args.activation_store, ENV["activation_store"], checks.activation_store_url)
    user = os.environ.get("ESG_ACTIVATION_STORE_USER") or None
    password = os.environ.get("ESG_ACTIVATION_STORE_PASSWORD")
    password_file = os.environ.get("ESG_ACTIVATION_STORE_PASSWORD_FILE")
    if password_file:
        if password is not None:
            raise CliError("ESG_ACTIVATION_STORE_PASSWORD and ESG_ACTIVATION_STORE_PASSWORD_FILE both give the "
                           "activation store's password: set one of them")
        try:
            password = Path(password_file).read_text().rstrip("\r\n")
        except OSError as exc:
            raise CliError(f"ESG_ACTIVATION_STORE_PASSWORD_FILE {password_file}: {exc.strerror or exc}") from None
    if user is None:
        if password is not None:
            raise CliError("the activation store's password is set but ESG_ACTIVATION_STORE_USER is not")
        return url
    if url is None:
        raise CliError("ESG_ACTIVATION_STORE_USER is set but no activation store: pass --activation-store URL "
                       "or set ESG_ACTIVATION_STORE")
    parts = urlsplit(url)
    if parts.username is not None:
        raise CliError("the activation store's URL carries credentials and ESG_ACTIVATION_STORE_USER gives them "
                       "again: keep one of them")
    auth = quote(user, safe="") + (":" + quote(password, safe="") if password is not None else "")
    return checks.activation_store_url(parts._replace(netloc=f"{auth}@{parts.netloc}").geturl())


def parameter_keys(args: argparse.Namespace):
    """OpenWhisk's parameter-encryption keys given by flag or environment, checked."""
    from controller_plugin.arguments import ParameterKeys, key_bytes

    keys = {}
    for bits in ("128", "256"):
        text = checks.from_env(getattr(args, f"aes{bits}"), ENV[f"aes{bits}"], checks.parameter_key(f"aes-{bits}"))
        if text:
            keys[f"aes-{bits}"] = key_bytes(text, f"aes-{bits}")
    return ParameterKeys(keys)


def check_profile_tables(directory: Path, flag: str) -> None:
    """Every ``*.json`` of ``directory`` is a valid profile table (a bad one is named now, not at the first
    activation that needs it)."""
    from esg_files import load_profile

    checks.check_dir(directory, flag)
    for table in sorted(Path(directory).glob("*.json")):
        load_profile(table)


def run(args: argparse.Namespace) -> int:
    from controller_plugin.service import SchedulerService, ServiceError

    settings = settings_from(args)
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("kafka").setLevel(logging.CRITICAL)
    stopping = threading.Event()
    current: list = []

    def stop(_signum: int) -> None:  # from the stop-signals thread, while the main thread runs the service
        stopping.set()
        for svc in current[-1:]:  # one slice: the main thread may clear the list meanwhile
            svc.stop()
    # a hang-up stops it as cleanly as a kill
    StopSignals(stop, (signal.SIGTERM, signal.SIGHUP), STOP_GRACE_S,
                f"esg scheduler: did not stop within {STOP_GRACE_S:.0f} s; exiting (the ledger keeps what it "
                f"did not finish)").install()
    while not stopping.is_set():
        # one service per term: a leader that lost its lease stepped down and stopped acting; a fresh one
        # (a new incarnation, nothing kept of the old one's state) stands by in its place
        try:
            svc = SchedulerService(settings)
        except ServiceError as exc:
            raise CliError(str(exc)) from None
        current.append(svc)
        try:
            try:
                svc.start()
            except OSError as exc:  # e.g. the metrics port taken between the check and the bind
                raise CliError(f"cannot start: {exc}") from None
            role = "leading" if svc.leader else "standing by"
            print(f"esg scheduler: ready, {role} (incarnation {settings.incarnation})", file=sys.stderr, flush=True)
            service_gc.settle()
            if stopping.is_set():
                break
            svc.run()
        except ServiceError as exc:
            raise CliError(str(exc)) from None
        finally:
            svc.close()
            current.clear()
        if not svc.stepped_down:
            break
        settings = replace(settings, incarnation=uuid.uuid4().hex[:12])
        logging.getLogger("esg.scheduler").warning("rejoining as a standby (incarnation %s)", settings.incarnation)
    return 0
