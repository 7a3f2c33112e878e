"""The probing action: what a tenant's code finds when it looks around from inside its worker.

Plain Python with the standard library only, so any runner runs it: it reports its uid, capabilities,
``no_new_privs`` and seccomp mode, every process it can see with the environment and command line it can
read of each, which of the paths it is given it can write, which of the files it can read, which of the
loopback ports (or ``host:port`` addresses) it can connect to, its network interfaces and CPUs, whether it can widen its CPUs, how
much of an allocation it got; it can leave a ``sleep`` running behind it (``spawn``) and die (``exit``).
It knows no secret itself: the tests look for theirs in what it reports.
"""

import textwrap

PROBE = textwrap.dedent("""
    import errno, os, socket, subprocess
    def status(field):
        for line in open("/proc/self/status"):
            if line.startswith(field + ":"):
                return line.split(":", 1)[1].strip()
    def readable(path):
        try:
            with open(path, "rb") as f:
                return f.read().decode(errors="replace")
        except OSError:
            return None
    def writable(path):
        try:
            with open(os.path.join(path, ".probe"), "w") as f:
                f.write("x")
            os.unlink(os.path.join(path, ".probe"))
            return True
        except OSError:
            return False
    def main(args):
        pids = sorted(int(p) for p in os.listdir("/proc") if p.isdigit())
        out = {"uid": os.getuid(), "euid": os.geteuid(), "caps": status("CapEff"), "nnp": status("NoNewPrivs"),
               "seccomp": status("Seccomp"), "pids": pids,
               "environs": [readable(f"/proc/{p}/environ") or "" for p in pids],
               "cmdlines": [readable(f"/proc/{p}/cmdline") or "" for p in pids],
               "writable": {p: writable(p) for p in args.get("paths", [])},
               "readable": {p: readable(p) is not None for p in args.get("files", [])},
               "interfaces": sorted(n for _, n in socket.if_nameindex()),
               "cpus": sorted(os.sched_getaffinity(0))}
        reached = {}
        for target in args.get("ports", []) + args.get("addresses", []):
            host, _, port = str(target).rpartition(":")
            s = socket.socket()
            s.settimeout(1)
            try:
                s.connect((host or "127.0.0.1", int(port)))
                reached[target] = True
            except OSError:
                reached[target] = False
            finally:
                s.close()
        out["reached"] = reached
        try:
            os.sched_setaffinity(0, set(range(os.cpu_count())))
            out["widened"] = True
        except OSError:
            out["widened"] = False
        if args.get("allocate_mb"):
            try:
                block = bytearray(args["allocate_mb"] << 20)
                out["allocated"] = len(block) >> 20
            except MemoryError:
                out["allocated"] = 0
        if args.get("spawn"):
            subprocess.Popen(["sleep", args["spawn"]], start_new_session=True)
        if args.get("exit"):
            os._exit(3)
        return out
""")
