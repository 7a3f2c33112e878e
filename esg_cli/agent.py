"""``esg agent``: run an invoker agent on this node (MIG slices, warm workers, batches over Redis).

Every service flag has an environment fallback (``docs/architecture.md`` §6). A missing or unreachable dependency --
Redis, OpenWhisk's API settings, NVML without ``--fake-gpu`` -- is one line naming it (exit 2).
The OpenWhisk key and the Redis password are never printed or logged. The agent talks to the
scheduler over Redis only; ``--kafka`` is still accepted and checked (deployments pass the same
settings to both services) and otherwise unused.
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import socket
import sys

from esg import mig
from esg.defaults import KEEP_ALIVE_MS
from esg.mig import GEOMETRIES, MAX_GPU_SHARE
from esg_cli import checks, service_gc
from esg_cli.errors import CliError
from esg_cli.stop_signals import StopSignals

RUNNERS = ("process", "docker", "twin")


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
                                   "run batches on warm workers, pass outputs on, publish results and heartbeats. "
                                   "Each flag without a value on the command line falls back to its environment "
                                   "variable.")
    p.add_argument("--redis", type=checks.redis_url, metavar="URL",
                   help="Redis URL (redis://USER:PASSWORD@HOST:PORT/DB, or a Sentinel's redis+sentinel://...; prefer env "
                        "ESG_REDIS or a file named by ESG_REDIS_FILE: a flag shows its password in the process list): "
                        "dispatches, results, heartbeats and data passed "
                        "between agents go through it (env ESG_REDIS)")
    p.add_argument("--kafka", type=checks.kafka_address, metavar="HOST:PORT",
                   help="accepted for symmetry with esg scheduler; unused: the agent needs no Kafka (env ESG_KAFKA)")
    p.add_argument("--openwhisk-api", type=checks.http_url, metavar="URL",
                   help="OpenWhisk REST API base URL, for action code (env ESG_OPENWHISK_API)")
    p.add_argument("--openwhisk-auth", type=checks.api_key, metavar="UUID:KEY",
                   help="OpenWhisk credentials (env ESG_OPENWHISK_AUTH; never logged)")
    p.add_argument("--topic-prefix", type=checks.topic_prefix, metavar="P",
                   help="OpenWhisk's topic prefix: names this deployment's streams and keys in Redis "
                        "(env ESG_TOPIC_PREFIX; default empty)")
    p.add_argument("--controller-id", type=checks.controller_id, metavar="C",
                   help="accepted for symmetry with esg scheduler; unused: each dispatch says where to answer "
                        "(env ESG_CONTROLLER_ID)")
    p.add_argument("--name", type=checks.node_name, metavar="NODE",
                   help="node name: the agent reads the dispatch stream of NODE (env ESG_AGENT_NAME; default: "
                        "the host name)")
    p.add_argument("--vcpus", type=checks.positive_int, metavar="N",
                   help="vCPUs this node advertises (env ESG_AGENT_VCPUS; default: the CPUs available); "
                        "more than the host has share host CPUs round-robin")
    p.add_argument("--memory-mb", type=checks.positive_int, metavar="MB",
                   help="memory this node advertises (env ESG_AGENT_MEMORY_MB; default: MemTotal)")
    p.add_argument("--fake-gpu", type=checks.gpu_model, metavar="MODEL",
                   help="use the fake NVML backend with this GPU's MIG geometry (env ESG_FAKE_GPU; one of "
                        f"{', '.join(GEOMETRIES)}); without it, real NVML")
    p.add_argument("--no-mig", action="store_true",
                   help="offer the GPU whole, as one slice kind '<MODEL>:whole' (env ESG_NO_MIG=1): with "
                        "--fake-gpu the fake GPU's MIG mode is off; on real NVML the agent refuses to start "
                        "if a GPU's MIG mode is on (it never changes it). Without it a GPU whose MIG mode is "
                        "off is offered whole anyway")
    p.add_argument("--gpu-share", type=checks.positive_int, metavar="N",
                   help="batches a whole GPU runs at once (env ESG_GPU_SHARE; default 1): time-sliced by the "
                        "driver, without isolation between them -- an operator's choice; MIG slices are never "
                        "shared")
    p.add_argument("--runner", choices=RUNNERS,
                   help="where actions run (env ESG_RUNNER; default process); twin: run nothing, wait each "
                        "batch's profiled latency with the emulator's noise and cold starts (needs --profiles)")
    p.add_argument("--profiles", metavar="DIR",
                   help="profile tables the twin times batches by (the scheduler's; --runner twin only)")
    p.add_argument("--seed", type=checks.non_negative_int, default=0, metavar="N",
                   help="seed of the twin's execution-time noise (with the node name)")
    p.add_argument("--journal", metavar="PATH",
                   help="MIG crash journal file (env ESG_AGENT_JOURNAL; default: in memory)")
    p.add_argument("--alive-file", metavar="PATH",
                   help="a file the heartbeat thread touches every turn, for a liveness probe that asks no other "
                        "service (deploy/healthcheck.py alive; env ESG_AGENT_ALIVE_FILE)")
    p.add_argument("--max-batches", type=checks.positive_int, default=4, metavar="N",
                   help="batches run at once")
    p.add_argument("--idle-ttl-s", type=checks.positive_float, default=KEEP_ALIVE_MS / 1000, metavar="S",
                   help="evict warm workers idle this long when their policy names no keep-alive")
    p.add_argument("--heartbeat-s", type=checks.positive_float, default=1.0, metavar="S", help="heartbeat period")
    p.add_argument("--local-data-mb", type=checks.non_negative_float, default=256.0, metavar="MB",
                   help="memory for function outputs kept on this node for successors placed here "
                        "(0: successors always read them from Redis)")
    p.add_argument("--metrics-port", type=checks.port, metavar="PORT",
                   help="serve the node's Prometheus metrics on this port (env ESG_METRICS_PORT; default: none)")
    p.add_argument("--metrics-host", type=checks.ip_address, metavar="ADDR",
                   help="address the metrics are served on (env ESG_METRICS_HOST; default 127.0.0.1: loopback "
                        "only; 0.0.0.0 for a Prometheus on another host)")
    p.add_argument("--log-level", default="INFO", type=str.upper, choices=("DEBUG", "INFO", "WARNING", "ERROR"),
                   help="logging level")
    p.set_defaults(func=run_agent)


def _choice(known: tuple[str, ...]):
    def parse(text: str) -> str:
        if text not in known:
            raise argparse.ArgumentTypeError(f"expected one of {', '.join(known)}, got {text!r}")
        return text
    return parse


def check_args(args: argparse.Namespace) -> argparse.Namespace:
    """Every flag, with its environment fallback, checked and resolved in place before anything starts."""
    env = checks.from_env
    args.kafka = env(args.kafka, "ESG_KAFKA", checks.kafka_address)
    args.openwhisk_api = env(args.openwhisk_api, "ESG_OPENWHISK_API", checks.http_url)
    args.openwhisk_auth = env(args.openwhisk_auth, "ESG_OPENWHISK_AUTH", checks.api_key)
    args.topic_prefix = env(args.topic_prefix, "ESG_TOPIC_PREFIX", checks.topic_prefix, "")
    args.controller_id = env(args.controller_id, "ESG_CONTROLLER_ID", checks.controller_id, "0")
    args.redis = checks.from_env(args.redis, "ESG_REDIS", checks.redis_url)
    args.name = env(args.name, "ESG_AGENT_NAME", checks.node_name) or _host_name()
    args.vcpus = env(args.vcpus, "ESG_AGENT_VCPUS", checks.positive_int)
    args.memory_mb = env(args.memory_mb, "ESG_AGENT_MEMORY_MB", checks.positive_int)
    args.fake_gpu = env(args.fake_gpu, "ESG_FAKE_GPU", checks.gpu_model)
    args.no_mig = args.no_mig or env(None, "ESG_NO_MIG", checks.flag, False)
    args.gpu_share = env(args.gpu_share, "ESG_GPU_SHARE", checks.positive_int, 1)
    if args.gpu_share > MAX_GPU_SHARE:
        raise CliError(f"--gpu-share must be 1 to {MAX_GPU_SHARE}, got {args.gpu_share}")
    args.runner = env(args.runner, "ESG_RUNNER", _choice(RUNNERS), "process")
    args.journal = env(args.journal, "ESG_AGENT_JOURNAL", str)
    args.metrics_port = env(args.metrics_port, "ESG_METRICS_PORT", checks.port)
    args.metrics_host = env(args.metrics_host, "ESG_METRICS_HOST", checks.ip_address, "127.0.0.1")
    args.alive_file = env(args.alive_file, "ESG_AGENT_ALIVE_FILE", str)
    if args.alive_file:
        checks.check_writable_file(args.alive_file, "--alive-file")
    if not args.redis:
        raise CliError("no Redis given: set ESG_REDIS or ESG_REDIS_FILE (or pass --redis URL)")
    if not args.openwhisk_api:
        raise CliError("no OpenWhisk API: pass --openwhisk-api URL or set ESG_OPENWHISK_API")
    if not args.openwhisk_auth:
        raise CliError("no OpenWhisk credentials: pass --openwhisk-auth UUID:KEY or set ESG_OPENWHISK_AUTH")
    if args.journal:
        checks.check_writable_file(args.journal, "--journal")
    if args.runner == "twin" and not args.profiles:
        raise CliError("--runner twin needs --profiles DIR (the profile tables it times batches by)")
    if args.profiles and args.runner != "twin":
        raise CliError("--profiles is used only with --runner twin")
    if args.profiles:
        checks.check_dir(args.profiles, "--profiles")
    if args.metrics_port is not None:
        checks.check_port_free(args.metrics_port, "--metrics-port", host=args.metrics_host)
    return args


def check_gpus(node, args: argparse.Namespace) -> None:
    """What the node's GPUs allow of the flags: ``--no-mig`` and ``--gpu-share`` need a GPU offered whole
    (MIG mode off), and actions on a real GPU need onnxruntime's CUDA provider
    (:func:`invoker_agent.cuda_check.missing_cuda_package`); one line naming the problem otherwise."""
    from invoker_agent.cuda_check import missing_cuda_package

    gpus = node.backend.gpus()
    mig_on = [g for g in gpus if g.mig_enabled]
    if args.no_mig and mig_on:
        g = mig_on[0]
        raise CliError(f"--no-mig: GPU {g.index} ({g.name}) has MIG mode on; this agent never changes it: turn it "
                       f"off yourself (nvidia-smi -i {g.index} -mig 0, then reset the GPU) or drop --no-mig")
    if args.gpu_share > 1 and not any(mig.is_whole(g.model) for g in gpus):
        raise CliError("--gpu-share shares a whole GPU: this node has none with MIG mode off")
    if gpus and not args.fake_gpu and args.runner == "process":
        problem = missing_cuda_package()
        if problem is not None:
            raise CliError(f"GPU {gpus[0].index} ({gpus[0].name}) found, but its actions cannot use it: {problem}")


def _host_name() -> str:
    """The host name as a node name (characters a topic name cannot hold become '-')."""
    return "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname())[:200] or "node"


def run_agent(args: argparse.Namespace) -> int:
    import redis

    from agent_channel.connect import ChannelError, connect, redact_url
    from agent_channel.keys import Keys
    from invoker_agent import scratch
    from invoker_agent.actions import ActionFetcher
    from invoker_agent.batch import BatchHandler
    from invoker_agent.channel import AgentChannel
    from invoker_agent.data import DataPlane, LocalOutputs
    from invoker_agent.heartbeat import BatchTrack, HeartbeatBuilder, WarmRegistry
    from invoker_agent.metrics import AgentMetrics
    from invoker_agent.mig_backend import MigOperationError
    from invoker_agent.node import NodeAgent
    from invoker_agent.service import AgentService, AgentSettings
    from invoker_agent.slices import SliceManager
    from invoker_agent.vcpus import VcpuAllocator, VcpuError

    check_args(args)
    scratch.sweep()         # what an agent killed outright left: its workers' directories, its servers'
    logging.basicConfig(level=args.log_level, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    host_cpus = sorted(os.sched_getaffinity(0))
    vcpus = args.vcpus or len(host_cpus)
    memory_mb = args.memory_mb or host_memory_mb()
    try:
        allocator = VcpuAllocator(vcpus, host_cpus)
    except VcpuError as e:
        raise CliError(f"--vcpus: {e}") from None

    twin = None
    if args.runner == "twin":
        from esg.emulator.config import EmulatorParams
        from invoker_agent.twin import TwinClock, TwinError, TwinFactory, TwinProfiles
        try:
            twin = TwinFactory(TwinProfiles(args.profiles), TwinClock(EmulatorParams(), args.seed, args.name))
        except TwinError as e:
            raise CliError(str(e)) from None
    try:
        node = NodeAgent.create(args.name, vcpus=vcpus, fake_gpu=args.fake_gpu, runner=args.runner,
                                journal=args.journal, idle_ttl_s=args.idle_ttl_s, worker_factory=twin,
                                fake_mig=not args.no_mig, gpu_share=args.gpu_share)
    except MigOperationError as e:
        raise CliError(str(e)) from None
    except ValueError as e:
        raise CliError(f"--fake-gpu: {e}" if args.fake_gpu and "GPU model" in str(e) else str(e)) from None
    except Exception as e:  # e.g. no Docker engine for --runner docker
        raise CliError(f"cannot start the node agent: {e}") from None
    try:
        check_gpus(node, args)
    except CliError:
        node.close()
        raise
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
    if twin is not None:
        twin.profile_of_slice = node.slice_profile
        slices.change_delay_s = twin.clock.params.mig_reconfig_ms / 1000
    warm = WarmRegistry()
    fetcher = ActionFetcher(args.openwhisk_api, args.openwhisk_auth)
    data = DataPlane(client, keys, LocalOutputs(int(args.local_data_mb * 1024 * 1024)), args.name)
    batches = BatchHandler(node, fetcher, slices, allocator, warm, data)
    # every answered batch is named in at least two heartbeats (the scheduler forgets its claim then)
    heartbeats = HeartbeatBuilder(args.name, memory_mb, allocator, slices, node.pool, warm,
                                  BatchTrack(keep_s=max(3.0, 2.5 * args.heartbeat_s)))
    metrics = AgentMetrics(args.name, slices.gpu_model)
    slices.on_change = metrics.mig_changed
    service = AgentService(AgentSettings(args.name, args.heartbeat_s, args.max_batches,
                                           alive_file=args.alive_file), node, batches,
                           heartbeats, channel, metrics)
    if args.metrics_port is not None:
        try:
            url = metrics.serve(args.metrics_port, args.metrics_host)
        except OSError as e:    # the port taken between the check and the bind
            node.close()
            raise CliError(f"--metrics-port {args.metrics_port}: {e.strerror or e}") from None
        logging.getLogger("esg.agent").info("metrics on %s", url)

    def on_signal(signum: int) -> None:
        logging.getLogger("esg.agent").info("signal %d: draining", signum)
        service.stop()
    StopSignals(on_signal, (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)).install()
    logging.getLogger("esg.agent").info(
        "agent %s up: %d vCPUs, %d MB, GPU %s, runner %s, Redis %s, OpenWhisk %s", args.name, vcpus, memory_mb,
        slices.gpu_model or "none", args.runner, redact_url(args.redis), fetcher)
    service_gc.settle()
    try:
        return service.run()
    finally:
        metrics.close()
