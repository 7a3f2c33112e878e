"""The sandbox every ``--runner process`` worker runs in: bubblewrap, a uid of its own, limits, a seccomp filter.

A worker is started as ``bwrap ... RUNTIME`` (Debian's ``bubblewrap``, the sandbox Flatpak uses) with:

- **its own user, PID, mount, IPC, UTS, cgroup and network namespaces** (``--unshare-all
  --unshare-user --disable-userns``): it sees its own processes only (``/proc`` is the PID namespace's),
  no capability (``--cap-drop ALL``; ``no_new_privs`` is always set by bwrap), no nested user namespace;
- **a uid of its own**: an agent running as root starts ``bwrap`` as a uid taken from
  :data:`UID_BASE` upwards, one per live worker (never the agent's, never another live worker's);
  an agent that is not root cannot change uid, so the worker's namespace maps that same synthetic uid
  onto the agent's (the worker still sees nothing of the agent: the namespaces above hold);
- **a file system of its own**: the system (``/usr``, the library links, a few files of ``/etc``) and the
  runtime's interpreter read-only, a fresh ``/dev`` with ``/dev/shm`` and ``/tmp`` as size-limited
  memory file systems (the worker's scratch space, gone with it), the runtime's own file read-only and
  one directory of the agent's, ``/run/esg``, where the runtime puts its Unix socket. Nothing else of
  the host: no agent log, no MIG journal, no other worker's directory, no Redis or OpenWhisk key;
- **no network**: the network namespace has only a loopback of its own. The agent reaches the runtime's
  HTTP server (OpenWhisk's ``/init`` and ``/run``) through the Unix socket in ``/run/esg``, so nothing
  of the host's network -- Redis, Kafka, CouchDB, the agent, OpenWhisk -- is reachable from an action;
- **the seccomp filter** of :mod:`invoker_agent.seccomp_policy`;
- **limits** (:class:`Limits`, as resource limits set before ``bwrap`` starts and inherited by every
  process of the worker): its address space and data (``RLIMIT_DATA`` = the action's memory limit, so an
  allocation past it fails; ``RLIMIT_AS`` = the limit plus :data:`ADDRESS_SLACK_MB`, since runtimes
  reserve address space they never use), its processes and threads (``RLIMIT_NPROC``, counted per uid:
  held when the worker has a uid of its own), open files (1024, as OpenWhisk's ``--ulimit nofile``), file
  size (what one activation can print), no core dumps, and its vCPUs (the affinity every process of the
  worker inherits, which the filter stops it from changing);
- **its lifetime**: ``--die-with-parent`` and the PID namespace: when the worker's first process ends, is
  killed, or its agent dies (even by ``kill -9``), the kernel kills every process of the worker. ``bwrap``
  sets the sandbox's own parent-death signal only late in the sandbox's set-up, so two more things close
  the gap before it: the runtime holds a **lifeline**, a pipe whose other end only the agent holds
  (``ESG_LIFELINE_FD``), and exits when that end closes -- the agent stopped the worker or died; and the
  outer ``bwrap`` is left to arm its own parent-death signal once the sandbox exists (armed before,
  an agent dying a moment after the sandbox's creation would kill it while the sandbox still waits for
  its word, leaving that sandbox blocked for ever). :func:`kill_tree` stops the outer ``bwrap`` before
  it kills, so a sandbox being created is never left behind either.

Resource limits hold per process; a cgroup would hold the whole worker's memory at once. Where the
agent's cgroup v2 subtree is not delegated to it (a container's usually is not), the limits above are
what holds; ``docs/security.md`` says what that leaves.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import resource
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from invoker_agent.runtime_client import WorkerStartError

#: Workers' uids: far above any account's and any distribution's subordinate-uid ranges.
UID_BASE = 2_100_000_000
UID_SLOTS = 1 << 20
#: Address space a worker may reserve beyond its memory limit (V8 reserves hundreds of MB it never uses).
ADDRESS_SLACK_MB = 4096
#: Where the runtime's Unix socket lives inside the sandbox (the agent's worker directory is mounted there).
RUN_DIR = "/run/esg"
#: Where the runtime's own file is mounted, read-only.
RUNTIME_DIR = "/opt/esg-runtime"
#: Files of /etc a runtime needs (the dynamic linker's cache, TLS roots, time zones), read-only if present.
ETC_FILES = ("ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates", "localtime", "alternatives",
             "mime.types")
#: Top-level links or directories of the system the runtimes' binaries need.
SYSTEM_DIRS = ("bin", "sbin", "lib", "lib32", "lib64", "libx32")


class SandboxUnavailable(WorkerStartError):
    """The sandbox cannot be made on this machine: the message says what is missing."""


@dataclass(frozen=True)
class Limits:
    """What one worker may use (every process of it inherits these)."""

    memory_mb: int
    vcpus: tuple[int, ...]
    pids: int = 1024                 # OpenWhisk's --pids-limit
    open_files: int = 1024           # OpenWhisk's --ulimit nofile=1024:1024
    file_mb: int = 64                # the largest file it can write (its log between two reads)
    tmp_mb: int | None = None        # /tmp and /dev/shm each (default: the memory limit)


@dataclass(frozen=True)
class Mount:
    """A host path made visible in the sandbox (read-only unless ``writable``; ``device`` for /dev nodes)."""

    source: str
    target: str
    writable: bool = False
    device: bool = False


class UidPool:
    """Uids for workers: each live worker holds one no other live worker of this agent holds. Agents on the
    same host start from different places (their pid), so two agents rarely pick the same one; if they
    do, the two workers still cannot reach each other (separate PID, mount and network namespaces)."""

    def __init__(self, base: int = UID_BASE, slots: int = UID_SLOTS) -> None:
        self._base = base
        self._slots = slots
        self._next = (os.getpid() * 64) % slots
        self._held: set[int] = set()
        self._lock = threading.Lock()

    def take(self) -> int:
        with self._lock:
            while True:
                uid = self._base + self._next
                self._next = (self._next + 1) % self._slots
                if uid not in self._held:
                    self._held.add(uid)
                    return uid

    def give_back(self, uid: int) -> None:
        with self._lock:
            self._held.discard(uid)


@dataclass(frozen=True)
class Started:
    """A sandbox just started: its outer ``bwrap``, the uid it runs as, and the agent's end of the runtime's
    lifeline (a descriptor: close it, and the runtime exits)."""

    proc: subprocess.Popen
    uid: int
    lifeline: int


class Sandbox:
    """Starts runtimes inside bubblewrap; one per agent (:func:`sandbox`)."""

    def __init__(self, bwrap: str, seccomp: bytes, own_uids: bool | None = None) -> None:
        self.bwrap = bwrap
        self.seccomp = seccomp
        self.own_uids = os.geteuid() == 0 if own_uids is None else own_uids
        """Whether each worker gets a uid of its own (the agent can change uid: it runs as root)."""
        self.uids = UidPool()

    # -- the command line ----------------------------------------------------------------------------
    def argv(self, command: Sequence[str], mounts: Sequence[Mount], run_dir: Path, limits: Limits, uid: int,
             seccomp_fd: int) -> list[str]:
        """``bwrap`` with everything the module docstring lists, then ``command`` (paths as inside)."""
        tmp = str((limits.tmp_mb or limits.memory_mb) * 1_048_576)
        args = [self.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--die-with-parent",
                "--new-session", "--cap-drop", "ALL", "--uid", str(uid), "--gid", str(uid),
                "--hostname", "action", "--seccomp", str(seccomp_fd),
                "--proc", "/proc", "--dev", "/dev",
                "--perms", "1777", "--size", tmp, "--tmpfs", "/dev/shm",
                "--perms", "1777", "--size", tmp, "--tmpfs", "/tmp",
                "--ro-bind", "/usr", "/usr"]
        for name in SYSTEM_DIRS:
            host = Path("/") / name
            if host.is_symlink():
                args += ["--symlink", os.readlink(host), str(host)]
            elif host.is_dir():
                args += ["--ro-bind", str(host), str(host)]
        for name in ETC_FILES:
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
        for m in mounts:
            args += ["--dev-bind" if m.device else "--bind" if m.writable else "--ro-bind", m.source, m.target]
        args += ["--bind", str(run_dir), RUN_DIR, "--remount-ro", "/", "--chdir", "/tmp", "--", *command]
        return args

    # -- starting ------------------------------------------------------------------------------------
    def start(self, command: Sequence[str], run_dir: Path, mounts: Sequence[Mount], limits: Limits,
              env: dict[str, str], log_fd: int) -> Started:
        """Start ``command`` in a new sandbox: the ``bwrap`` process (the worker: it lives as long as the
        runtime does), the uid it runs as and the agent's end of its lifeline (``command`` gets the other
        end's number as ``ESG_LIFELINE_FD``). ``run_dir`` is the worker's directory for its socket.

        ``bwrap`` finds what it mounts as the worker's uid. A source that uid cannot reach (a Python
        installed under ``/root``, a private temporary directory) is first bound, as root, onto a memory
        file system in a mount namespace of the starting process's own (:func:`_stage`), and mounted in
        the sandbox from there: nothing changes on the host."""
        uid = self.uids.take()
        try:
            staged: list[tuple[str, str, bool]] = []
            if self.own_uids:
                os.chmod(run_dir, 0o2770)                # the worker creates its socket there; the agent's
                os.chown(run_dir, uid, os.getegid())     # group (set-group-id) reads it without privileges
                mounts = [_staged(m, staged) for m in mounts]
                run_dir = Path(_staged(Mount(str(run_dir), RUN_DIR, writable=True), staged).source)
            read_fd, write_fd = os.pipe()
            life_in, life_out = os.pipe()               # both close on exec: only pass_fds reaches the worker
            try:
                with os.fdopen(write_fd, "wb") as w:     # a filter is far smaller than a pipe's buffer
                    w.write(self.seccomp)
                proc = subprocess.Popen(
                    self.argv(command, mounts, run_dir, limits, uid, read_fd),
                    env={**env, "ESG_LIFELINE_FD": str(life_in)}, cwd="/",
                    stdin=subprocess.DEVNULL, stdout=log_fd, stderr=log_fd, pass_fds=(read_fd, life_in),
                    start_new_session=True, preexec_fn=_enter(limits, uid if self.own_uids else None, staged))
            except subprocess.SubprocessError as e:    # the hook failed in the child: say what it tried
                os.close(life_out)
                hint = (f"; the worker's uid cannot reach {', '.join(s for s, _, _ in staged)}, and staging it "
                        "needs CAP_SYS_ADMIN (or make every directory above it searchable by all)") if staged else ""
                raise SandboxUnavailable(f"cannot start a worker's sandbox: {e}{hint}") from None
            except BaseException:
                os.close(life_out)
                raise
            finally:
                os.close(read_fd)
                os.close(life_in)
        except BaseException:
            self.uids.give_back(uid)
            raise
        return Started(proc, uid, life_out)

    def check(self) -> None:
        """Start one empty sandbox now, so that a machine where it cannot work is named at the agent's
        start (not at its first activation)."""
        from invoker_agent import scratch

        run_dir = scratch.make("sandbox-check-")
        run_dir.chmod(0o711)
        (run_dir / "run").mkdir()
        read_fd, write_fd = os.pipe()
        try:
            try:    # with the interpreter's mounts: a Python the workers' uids cannot reach is staged
                started = self.start(["/usr/bin/true"], run_dir / "run", interpreter_mounts(),
                                     Limits(64, (min(os.sched_getaffinity(0)),)), {"PATH": "/usr/bin"}, write_fd)
            finally:
                os.close(write_fd)
            os.close(started.lifeline)
            try:
                code: int | None = started.proc.wait(30)
            except subprocess.TimeoutExpired:
                started.proc.kill()
                started.proc.wait()
                code = None
            finally:
                self.uids.give_back(started.uid)
            with os.fdopen(read_fd, "rb", closefd=False) as r:
                said = r.read().decode(errors="replace").strip()
        finally:
            os.close(read_fd)
            shutil.rmtree(run_dir, ignore_errors=True)
        if code != 0:
            raise SandboxUnavailable(_explain(said, code))


def _others_reach(path: str) -> bool:
    """Whether a uid of no group of the path's can reach ``path`` (every directory above it searchable)."""
    for d in Path(path).parents:
        try:
            if not os.stat(d).st_mode & 0o001:
                return False
        except OSError:
            return False
    return True


#: Where unreachable sources are staged, in the starting process's own mount namespace: the first of these
#: that exists (a directory ``bwrap`` never uses; a memory file system is mounted over it there only).
STAGE_DIRS = ("/srv", "/media", "/mnt", "/opt", "/var/tmp")


def _staged(m: Mount, staged: list[tuple[str, str, bool]]) -> Mount:
    """``m``, or, when the worker's uid could not reach its source, the same mount from its staged place
    (``staged`` collects (source, place, is a directory))."""
    if m.device or _others_reach(m.source):
        return m
    stage = next((d for d in STAGE_DIRS if os.path.isdir(d) and not os.path.islink(d)), None)
    if stage is None:
        raise SandboxUnavailable(f"{m.source} is not reachable by a worker's uid and there is no directory "
                                 f"to stage it in ({', '.join(STAGE_DIRS)})")
    place = f"{stage}/{len(staged)}"
    staged.append((m.source, place, os.path.isdir(m.source)))
    return Mount(place, m.target, m.writable, m.device)


def _explain(said: str, code: int | None) -> str:
    what = said.splitlines()[-1] if said else f"exit code {code}"
    hint = ""
    if "namespace" in what.lower() or "permission" in what.lower():
        hint = (" (user namespaces must be allowed: sysctl user.max_user_namespaces > 0, and in a container "
                "the capability SYS_ADMIN or a seccomp profile that permits unshare; docs/security.md)")
    return f"the worker sandbox (bubblewrap) does not work here: {what}{hint}"


def _enter(limits: Limits, uid: int | None, staged: Sequence[tuple[str, str, bool]] = ()) -> Callable[[], None]:
    """The ``preexec_fn`` of ``bwrap``: between fork and exec, in the child -- pin it, set its limits,
    stage the sources the worker's uid cannot reach (:func:`_stage`), give up root for that uid, and stop
    if the agent is gone already. Its parent-death signal is left to ``bwrap --die-with-parent``, which arms
    it once the sandbox exists (the module docstring says why not sooner)."""
    parent = os.getpid()
    memory = limits.memory_mb * 1_048_576
    address = (limits.memory_mb + ADDRESS_SLACK_MB) * 1_048_576
    file_size = limits.file_mb * 1_048_576
    cpus = set(limits.vcpus)

    def hook() -> None:
        os.sched_setaffinity(0, cpus)
        _limit(resource.RLIMIT_DATA, memory)
        _limit(resource.RLIMIT_AS, address)
        _limit(resource.RLIMIT_NOFILE, limits.open_files)
        _limit(resource.RLIMIT_FSIZE, file_size)
        _limit(resource.RLIMIT_CORE, 0)
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)    # a write past the file limit fails, not kills
        os.umask(0o007)                                  # its socket: the agent's group may connect
        if staged:
            _stage(staged)
        if uid is not None:
            # counted per uid: only a uid of its own makes it this worker's limit
            _limit(resource.RLIMIT_NPROC, limits.pids)
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        if os.getppid() != parent:
            os.kill(os.getpid(), signal.SIGKILL)
    return hook


def _limit(which: int, value: int) -> None:
    """Set a resource limit (soft and hard) to ``value``, or to the agent's own hard limit where that is
    lower (raising it would need a privilege the agent may not have)."""
    hard = resource.getrlimit(which)[1]
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(which, (value, value))


_LIBC = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True) if sys.platform.startswith("linux") else None
CLONE_NEWNS, MS_BIND, MS_REC, MS_PRIVATE = 0x00020000, 4096, 16384, 1 << 18


def _stage(staged: Sequence[tuple[str, str, bool]]) -> None:
    """In the calling process (a child about to exec ``bwrap``, still root): a mount namespace of its own,
    a memory file system over the stage directory, and each source bound onto its place there."""
    def check(result: int, what: str) -> None:
        if result != 0:
            raise OSError(ctypes.get_errno(), what)
    if _LIBC is None:
        raise OSError("no C library to call unshare and mount with")
    check(_LIBC.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    check(_LIBC.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "mount --make-rprivate /")
    stage = os.path.dirname(staged[0][1])
    check(_LIBC.mount(b"tmpfs", stage.encode(), b"tmpfs", 0, b"mode=0755,size=64k"), f"mount tmpfs {stage}")
    for source, place, is_dir in staged:
        if is_dir:
            os.mkdir(place, 0o755)
        else:
            os.close(os.open(place, os.O_CREAT | os.O_WRONLY, 0o644))
        check(_LIBC.mount(source.encode(), place.encode(), None, MS_BIND | MS_REC, None), f"bind {source}")


# -- the agent's one sandbox ------------------------------------------------------------------------

_SANDBOX: Sandbox | None = None
_SANDBOX_LOCK = threading.Lock()


def sandbox() -> Sandbox:
    """This agent's sandbox, made (and checked) at the first call; :class:`SandboxUnavailable` names what
    is missing."""
    global _SANDBOX
    with _SANDBOX_LOCK:
        if _SANDBOX is None:
            from invoker_agent.seccomp_policy import SeccompUnavailable, compile_filter

            bwrap = shutil.which("bwrap")
            if bwrap is None:
                raise SandboxUnavailable("the worker sandbox needs bubblewrap (bwrap), which is not installed: "
                                         "run scripts/setup, or apt-get install bubblewrap")
            try:
                program = compile_filter()
            except SeccompUnavailable as e:
                raise SandboxUnavailable(str(e)) from None
            box = Sandbox(bwrap, program)
            box.check()
            _SANDBOX = box
        return _SANDBOX


# -- a worker's processes -----------------------------------------------------------------------------

def tree(root: int) -> list[int]:
    """``root`` and its descendants (the processes of one sandbox: ``bwrap``, its init, the runtime and
    whatever it started), walked down through each thread's ``children`` list in ``/proc`` (a scan of
    every process where the kernel keeps no such list)."""
    if not os.path.exists(f"/proc/{root}/task/{root}/children"):
        return _scanned_tree(root)
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        try:
            tids = os.listdir(f"/proc/{pid}/task")
        except OSError:
            continue
        for tid in tids:
            try:
                with open(f"/proc/{pid}/task/{tid}/children", "rb") as f:
                    todo += [int(c) for c in f.read().split()]
            except OSError:
                continue
    return out


def _scanned_tree(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        fields = _stat_fields(int(d))
        if fields is not None and len(fields) > 1 and fields[1].isdigit():
            children.setdefault(int(fields[1]), []).append(int(d))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def kill_tree(root: int, settle_s: float = 1.0) -> None:
    """Kill every process of the sandbox whose outer ``bwrap`` is ``root``, leaving none behind.

    ``root`` is stopped first: a child it is creating is then in ``/proc`` before the walk (killed
    without it, the outer would leave that child, whose own parent-death signal is not armed yet,
    running or blocked for ever). Then every process is killed, deepest first; the sandbox's first
    process goes before ``root``, and with it, by the kernel, everything in its PID namespace."""
    try:
        os.kill(root, signal.SIGSTOP)
    except OSError:
        return
    deadline = time.monotonic() + settle_s
    while _state(root) not in (None, "T", "t", "Z", "X") and time.monotonic() < deadline:
        time.sleep(0.001)
    for pid in reversed(tree(root)):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass


def _state(pid: int) -> str | None:
    """The state letter of ``pid`` (``/proc/PID/stat``), or None when it is gone."""
    fields = _stat_fields(pid)
    return fields[0].decode() if fields else None


def _stat_fields(pid: int) -> list[bytes] | None:
    """The fields of ``/proc/PID/stat`` from the third (the state) on, or None when it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def pin_tree(root: int, cpus: Sequence[int]) -> None:
    """Move every thread of every process of the worker rooted at ``root`` to ``cpus`` (the worker cannot:
    its filter refuses ``sched_setaffinity``)."""
    for pid in tree(root):
        try:
            tids = [int(t) for t in os.listdir(f"/proc/{pid}/task")]
        except OSError:
            continue
        for tid in tids:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                pass    # it ended meanwhile


def gpu_device_paths(gpu: int | None, gi: int | None = None, ci: int | None = None, mig_minors: str = "") -> list[str]:
    """The NVIDIA device nodes a worker on GPU ``gpu`` (MIG instance ``gi``/``ci``) needs: the control and
    unified-memory devices, the GPU's own node and, on a MIG slice, the access capabilities of that GPU
    instance and compute instance only (their minors from ``mig_minors``, the text of
    ``/proc/driver/nvidia-caps/mig-minors``) -- never ``mig/config`` or ``mig/monitor``, which would let it
    reshape or watch the other slices. None: a CPU-only worker (nothing)."""
    if gpu is None:
        return []
    paths = ["/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", f"/dev/nvidia{gpu}"]
    if gi is not None:
        wanted = {f"gpu{gpu}/gi{gi}/access"} | ({f"gpu{gpu}/gi{gi}/ci{ci}/access"} if ci is not None else set())
        for line in mig_minors.splitlines():
            name, _, minor = line.strip().rpartition(" ")
            if name in wanted and minor.isdigit():
                paths.append(f"/dev/nvidia-caps/nvidia-cap{minor}")
    return paths


def gpu_devices(gpu: int | None, gi: int | None = None, ci: int | None = None,
                minors_file: str = "/proc/driver/nvidia-caps/mig-minors") -> list[Mount]:
    """:func:`gpu_device_paths` as device mounts, those that exist on this host."""
    try:
        minors = Path(minors_file).read_text() if gi is not None else ""
    except OSError:
        minors = ""
    return [Mount(p, p, writable=True, device=True) for p in gpu_device_paths(gpu, gi, ci, minors)
            if os.path.exists(p)]


def interpreter_mounts() -> list[Mount]:
    """Read-only mounts for this Python and its environment where they lie outside ``/usr`` (a virtual
    environment: the actions' libraries are there)."""
    roots = {os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)}
    return [Mount(r, r) for r in sorted(roots) if not r.startswith("/usr/") and r != "/usr" and os.path.isdir(r)]
