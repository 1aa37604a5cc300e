"""Seccomp filter of the CodeAct sandbox, loaded by bubblewrap (``bwrap --seccomp FD``).

Built with libseccomp (PyPI ``pyseccomp``: ctypes over the system ``libseccomp.so.2``; Debian
``libseccomp2``) and exported as a BPF program once per process. Default action: allow. A denied
system call kills the whole interpreter (``SECCOMP_RET_KILL_PROCESS``); the parent sees it die
of SIGSYS and counts a ``sandbox_violation`` itself, so no code in the sandbox can hide the
attempt. Denied (the syscalls a Python data-analysis cell never needs, and the ones used to
escape or to reach the host):

- debugging and other processes' memory: ptrace, process_vm_readv/writev, kcmp;
- mounts and namespaces: mount, umount2, pivot_root, chroot, move_mount, open_tree, fsopen,
  fsconfig, fsmount, fspick, mount_setattr, unshare, setns, and clone with a CLONE_NEW* flag
  (clone3 answers ENOSYS so that libc falls back to clone, whose flags a filter can read);
- kernel keyrings, BPF, perf events, userfaultfd, io_uring, handles to files by number
  (open_by_handle_at), kernel modules, kexec, reboot, swap, accounting, quotas, clocks, ioperm;
- System V IPC (shmget/shmat/shmctl/shmdt, msgget/msgsnd/msgrcv/msgctl, semget/semop/
  semtimedop/semctl) and POSIX message queues;
- sockets of every family but AF_UNIX (the network namespace is empty anyway).
"""

from __future__ import annotations

import errno
import os
import tempfile
from functools import lru_cache

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "kcmp",
    "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsconfig",
    "fsmount", "fspick", "mount_setattr", "unshare", "setns",
    "keyctl", "add_key", "request_key", "bpf", "perf_event_open", "userfaultfd",
    "io_uring_setup", "io_uring_enter", "io_uring_register", "open_by_handle_at",
    "name_to_handle_at", "init_module", "finit_module", "delete_module", "kexec_load",
    "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl", "settimeofday",
    "clock_settime", "clock_adjtime", "adjtimex", "ioperm", "iopl", "personality",
    "shmget", "shmat", "shmctl", "shmdt", "msgget", "msgsnd", "msgrcv", "msgctl", "semget",
    "semop", "semtimedop", "semctl", "mq_open", "mq_unlink", "mq_timedsend", "mq_timedreceive",
    "mq_notify", "mq_getsetattr",
)
_AF_UNIX = 1
# CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, NEWTIME
_CLONE_NS_FLAGS = (0x00020000, 0x02000000, 0x04000000, 0x08000000, 0x10000000, 0x20000000,
                   0x40000000, 0x00000080)


@lru_cache(maxsize=1)
def seccomp_program() -> bytes | None:
    """The BPF program (bytes for ``bwrap --seccomp``), or None when ``pyseccomp`` or the system
    libseccomp is missing (``Sandbox.isolation["seccomp"]`` is then False)."""
    try:
        import pyseccomp as sc

        f = sc.SyscallFilter(sc.ALLOW)
        for name in DENIED:
            try:
                f.add_rule(sc.KILL_PROCESS, name)
            except (RuntimeError, ValueError, OSError):  # not a syscall on this architecture
                pass
        f.add_rule(sc.KILL_PROCESS, "socket", sc.Arg(0, sc.NE, _AF_UNIX))
        f.add_rule(sc.KILL_PROCESS, "socketpair", sc.Arg(0, sc.NE, _AF_UNIX))
        for flag in _CLONE_NS_FLAGS:
            f.add_rule(sc.KILL_PROCESS, "clone", sc.Arg(0, sc.MASKED_EQ, flag, flag))
        f.add_rule(sc.ERRNO(errno.ENOSYS), "clone3")
        with tempfile.TemporaryFile() as t:  # libseccomp writes to a file descriptor
            f.export_bpf(t)
            t.seek(0)
            return t.read() or None
    except (ImportError, OSError, RuntimeError, ValueError, AttributeError):
        return None


def seccomp_fd() -> int | None:
    """A fresh memfd holding :func:`seccomp_program` at offset 0, for one ``bwrap --seccomp FD``
    (bwrap reads it to the end, so every start needs its own); None without a program. The
    caller closes it after the child started."""
    prog = seccomp_program()
    if prog is None:
        return None
    fd = os.memfd_create("earthrl-seccomp", 0)
    os.write(fd, prog)
    os.lseek(fd, 0, os.SEEK_SET)
    return fd
