"""``esg agent``: run an invoker agent on this node (MIG slices, warm workers, batches over Redis).

Every service flag has an environment fallback (DESIGN §5). A missing or unreachable dependency --
Redis, OpenWhisk's API settings, NVML without ``--fake-gpu`` -- is one line naming it (exit 2).
The OpenWhisk key and the Redis password are never printed or logged. The agent talks to the
scheduler over Redis only; ``--kafka`` is still accepted (deployments pass the same settings to both
services) and ignored.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys

from esg_cli.errors import CliError


def _env(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name) or default


def host_memory_mb() -> int:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("agent", help="run an invoker agent (MIG slices, warm workers, batches over Redis)",
                       description="Run an invoker agent: read the node's dispatch stream, carve MIG slices, "
                                   "run batches on warm workers, pass outputs on, publish results and heartbeats.")
    p.add_argument("--redis", default=_env("ESG_REDIS"), metavar="URL",
                   help="Redis URL, may carry a password: dispatches, results, heartbeats and data passed "
                        "between agents go through it (env ESG_REDIS)")
    p.add_argument("--kafka", default=_env("ESG_KAFKA"), metavar="HOST:PORT",
                   help="accepted for symmetry with esg scheduler; unused: the agent needs no Kafka (env ESG_KAFKA)")
    p.add_argument("--openwhisk-api", default=_env("ESG_OPENWHISK_API"), metavar="URL",
                   help="OpenWhisk REST API base URL, for action code (env ESG_OPENWHISK_API)")
    p.add_argument("--openwhisk-auth", default=_env("ESG_OPENWHISK_AUTH"), metavar="UUID:KEY",
                   help="OpenWhisk credentials (env ESG_OPENWHISK_AUTH; never logged)")
    p.add_argument("--topic-prefix", default=_env("ESG_TOPIC_PREFIX", ""), metavar="P",
                   help="OpenWhisk's topic prefix: names this deployment's streams and keys in Redis "
                        "(env ESG_TOPIC_PREFIX)")
    p.add_argument("--controller-id", default=_env("ESG_CONTROLLER_ID", "0"), metavar="C",
                   help="accepted for symmetry with esg scheduler; unused: each dispatch says where to answer "
                        "(env ESG_CONTROLLER_ID)")
    p.add_argument("--name", default=_env("ESG_AGENT_NAME", socket.gethostname()), metavar="NODE",
                   help="node name: the agent reads the dispatch stream of NODE (env ESG_AGENT_NAME; "
                        "default hostname)")
    p.add_argument("--vcpus", type=int, default=int(_env("ESG_AGENT_VCPUS", "0") or 0), metavar="N",
                   help="vCPUs this node advertises (env ESG_AGENT_VCPUS; default: the CPUs available); "
                        "more than the host has share host CPUs round-robin")
    p.add_argument("--memory-mb", type=int, default=int(_env("ESG_AGENT_MEMORY_MB", "0") or 0), metavar="MB",
                   help="memory this node advertises (env ESG_AGENT_MEMORY_MB; default: MemTotal)")
    p.add_argument("--fake-gpu", default=_env("ESG_FAKE_GPU"), metavar="MODEL",
                   help="use the fake NVML backend with this GPU's MIG geometry (env ESG_FAKE_GPU); "
                        "without it, real NVML")
    p.add_argument("--runner", choices=("process", "docker"), default=_env("ESG_RUNNER", "process"),
                   help="where actions run (env ESG_RUNNER; default process)")
    p.add_argument("--journal", default=_env("ESG_AGENT_JOURNAL"), metavar="PATH",
                   help="MIG crash journal file (env ESG_AGENT_JOURNAL; default: in memory)")
    p.add_argument("--max-batches", type=int, default=4, metavar="N",
                   help="batches run at once (default 4)")
    p.add_argument("--idle-ttl-s", type=float, default=600.0, metavar="S",
                   help="evict warm workers idle this long (default 600)")
    p.add_argument("--heartbeat-s", type=float, default=1.0, metavar="S", help="heartbeat period (default 1)")
    p.add_argument("--local-data-mb", type=float, default=256.0, metavar="MB",
                   help="memory for function outputs kept on this node for successors placed here "
                        "(default 256; 0: successors always read them from Redis)")
    p.add_argument("--log-level", default="INFO", choices=("DEBUG", "INFO", "WARNING", "ERROR"))
    p.set_defaults(func=run_agent)


def run_agent(args: argparse.Namespace) -> int:
    import redis

    from agent_channel.connect import ChannelError, connect, redact_url
    from agent_channel.keys import Keys
    from invoker_agent.actions import ActionFetcher
    from invoker_agent.batch import BatchRunner
    from invoker_agent.channel import AgentChannel
    from invoker_agent.data import DataPlane, LocalOutputs
    from invoker_agent.heartbeat import HeartbeatBuilder, WarmRegistry
    from invoker_agent.mig_backend import MigOperationError
    from invoker_agent.node import NodeAgent
    from invoker_agent.service import AgentService, ServiceSettings
    from invoker_agent.slices import SliceManager
    from invoker_agent.vcpus import VcpuAllocator, VcpuError

    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    if not args.redis:
        raise CliError("no Redis given: pass --redis URL or set ESG_REDIS")
    if not args.openwhisk_api:
        raise CliError("no OpenWhisk API: pass --openwhisk-api URL or set ESG_OPENWHISK_API")
    if not args.openwhisk_auth or ":" not in args.openwhisk_auth:
        raise CliError("no OpenWhisk credentials: pass --openwhisk-auth UUID:KEY or set ESG_OPENWHISK_AUTH")
    if args.max_batches < 1:
        raise CliError("--max-batches must be at least 1")
    if args.local_data_mb < 0:
        raise CliError("--local-data-mb must not be negative")
    host_cpus = sorted(os.sched_getaffinity(0))
    vcpus = args.vcpus or len(host_cpus)
    memory_mb = args.memory_mb or host_memory_mb()
    try:
        allocator = VcpuAllocator(vcpus, host_cpus)
    except VcpuError as e:
        raise CliError(f"--vcpus: {e}") from None

    try:
        node = NodeAgent.create(args.name, vcpus=vcpus, fake_gpu=args.fake_gpu, runner=args.runner,
                                journal=args.journal, idle_ttl_s=args.idle_ttl_s)
    except MigOperationError as e:
        raise CliError(str(e)) from None
    except ValueError as e:
        raise CliError(f"--fake-gpu: {e}" if args.fake_gpu and "GPU model" in str(e) else str(e)) from None
    except Exception as e:  # e.g. no Docker engine for --runner docker
        raise CliError(f"cannot start the node agent: {e}") from None
    for line in node.recovered:
        logging.getLogger("esg.agent").info("MIG journal recovery: %s", line)

    keys = Keys(args.topic_prefix, args.controller_id)
    try:
        client = connect(args.redis)
        channel = AgentChannel(client, keys, args.name)
    except ChannelError as e:
        node.close()
        raise CliError(str(e)) from None
    except redis.RedisError as e:
        node.close()
        raise CliError(f"Redis refused the agent's dispatch stream: {e}") from None

    slices = SliceManager(node)
    warm = WarmRegistry()
    fetcher = ActionFetcher(args.openwhisk_api, args.openwhisk_auth)
    data = DataPlane(client, keys, LocalOutputs(int(args.local_data_mb * 1024 * 1024)))
    runner = BatchRunner(node, fetcher, slices, allocator, warm, data)
    heartbeats = HeartbeatBuilder(args.name, memory_mb, allocator, slices, node.pool, warm)
    service = AgentService(ServiceSettings(args.name, args.heartbeat_s, args.max_batches), node, runner,
                           heartbeats, channel)

    def on_signal(signum, _frame):
        logging.getLogger("esg.agent").info("signal %d: draining", signum)
        service.stop()
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    logging.getLogger("esg.agent").info(
        "agent %s up: %d vCPUs, %d MB, GPU %s, runner %s, Redis %s, OpenWhisk %s", args.name, vcpus, memory_mb,
        slices.gpu_model or "none", args.runner, redact_url(args.redis), fetcher)
    return service.run()
