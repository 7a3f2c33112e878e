"""The seccomp filter every sandboxed worker runs under, compiled to the BPF program ``bwrap --seccomp`` loads.

The filter is built with libseccomp (through ``pyseccomp``, ctypes bindings with the API of libseccomp's
own Python module) for the machine's architecture, once per agent. It allows by default and refuses,
with ``EPERM``, the system calls an action has no use for and that widen what a process can reach: the
same families Docker's default profile and Flatpak's bubblewrap filter refuse --

- namespaces and mounts (``unshare``, ``setns``, ``mount``, the new mount API, ``pivot_root``,
  ``chroot``): a worker stays in the namespaces the sandbox made for it; ``clone3`` answers ``ENOSYS``
  so the C library falls back to ``clone``, whose namespace flags are refused here;
- other processes and the kernel (``ptrace``, ``process_vm_*``, ``kcmp``, ``bpf``, ``perf_event_open``,
  ``userfaultfd``, ``io_uring_*``, module loading, ``kexec``, ``reboot``, ``swapon``, ``acct``, keyrings,
  ``syslog``, clock setting, ``open_by_handle_at``);
- ``sched_setaffinity``: a worker keeps the vCPUs the agent pinned it to (without a cgroup cpuset,
  the affinity is what holds it there);
- terminal input injection (``ioctl`` ``TIOCSTI``, ``TIOCLINUX``);
- sockets of families other than Unix, IPv4, IPv6 and netlink (raw packets, Bluetooth, ...).

Everything else an ordinary program uses (threads, ``fork``/``exec``, files, Unix and IP sockets inside
the worker's own network namespace) is allowed.
"""

from __future__ import annotations

import errno
import socket
import tempfile

#: Refused with EPERM: a worker has no use for them and each widens what it can reach.
DENIED = (
    "unshare", "setns", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount", "fsopen",
    "fsconfig", "fsmount", "fspick", "mount_setattr",
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
    "bpf", "perf_event_open", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "reboot",
    "swapon", "swapoff", "acct", "quotactl", "syslog", "lookup_dcookie", "uselib", "vhangup",
    "add_key", "request_key", "keyctl",
    "settimeofday", "clock_settime", "clock_adjtime", "adjtimex",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
    "move_pages", "migrate_pages", "mbind", "set_mempolicy",
    "sched_setaffinity",
)
#: ``clone`` flags that make new namespaces (CLONE_NEWNS ... CLONE_NEWNET, CLONE_NEWCGROUP, CLONE_NEWTIME).
NAMESPACE_FLAGS = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 | 0x20000000 | 0x40000000 | 0x00000080
TIOCSTI, TIOCLINUX = 0x5412, 0x541C
#: Socket families a worker may open.
ALLOWED_FAMILIES = (socket.AF_UNIX, socket.AF_INET, socket.AF_INET6, socket.AF_NETLINK)
#: Families above the highest one Linux knows are refused too.
MAX_FAMILY = 64


class SeccompUnavailable(RuntimeError):
    """libseccomp (or its Python bindings) is missing: the message says what to install."""


def compile_filter() -> bytes:
    """The filter as a BPF program for this machine's architecture (what ``bwrap --seccomp FD`` reads)."""
    try:
        import pyseccomp as sc
    except (ImportError, OSError) as e:     # the bindings load libseccomp.so.2 when imported
        raise SeccompUnavailable(f"the seccomp filter needs libseccomp and the pyseccomp package ({e}); "
                                 "run scripts/setup") from None
    deny = sc.ERRNO(errno.EPERM)
    f = sc.SyscallFilter(sc.ALLOW)
    for name in DENIED:
        try:
            f.add_rule(deny, name)
        except (OSError, ValueError, RuntimeError):   # a call this architecture does not have
            continue
    f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")     # its flags sit in memory a filter cannot read
    _deny_namespace_clones(f, sc, deny)
    for request in (TIOCSTI, TIOCLINUX):
        f.add_rule(deny, "ioctl", sc.Arg(1, sc.MASKED_EQ, 0xFFFFFFFF, request))
    for family in range(MAX_FAMILY + 1):
        if family not in ALLOWED_FAMILIES:
            f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.EQ, family))
    f.add_rule(sc.ERRNO(errno.EAFNOSUPPORT), "socket", sc.Arg(0, sc.GT, MAX_FAMILY))
    with tempfile.TemporaryFile() as out:
        f.export_bpf(out)
        out.seek(0)
        return out.read()


def _deny_namespace_clones(f, sc, deny) -> None:
    """``clone`` with any namespace flag is refused: one rule per flag (a rule tests one mask)."""
    flag = 1
    while flag <= NAMESPACE_FLAGS:
        if NAMESPACE_FLAGS & flag:
            f.add_rule(deny, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        flag <<= 1
