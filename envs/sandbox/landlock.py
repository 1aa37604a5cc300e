"""Kernel-level file, TCP and signal confinement of the sandbox interpreter with Landlock (Linux
LSM, kernel >= 5.13; https://docs.kernel.org/userspace-api/landlock.html).

The audit hook of :mod:`earthrl.envs.sandbox.child` can be switched off by Python code that digs
out its state (PEP 578 hooks are not a security boundary). Landlock cannot: once
:func:`restrict` runs, the process and everything it starts can only open files beneath the
granted paths (root and capabilities do not help), cannot bind or connect TCP sockets (ABI >= 4)
and cannot signal processes outside its domain, e.g. the env (ABI >= 6). Standalone (stdlib +
ctypes only): the interpreter loads it by file path before its audit hook forbids ctypes.
x86_64 and aarch64 syscall numbers.
"""

import ctypes
import os
import platform

_SYSCALLS = {"x86_64": (444, 445, 446), "aarch64": (444, 445, 446)}
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_PR_SET_NO_NEW_PRIVS = 38

# filesystem access rights by the ABI that introduced them
_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 5: (1 << 16) - 1}
# rights that apply to a single file: execute, write, read, truncate, ioctl
_FILE_RIGHTS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 14) | (1 << 15)
READ = (1 << 0) | (1 << 2) | (1 << 3)  # EXECUTE | READ_FILE | READ_DIR
_NET_TCP = (1 << 0) | (1 << 1)  # BIND_TCP | CONNECT_TCP (ABI 4)
_SCOPE = (1 << 0) | (1 << 1)  # ABSTRACT_UNIX_SOCKET | SIGNAL (ABI 6)


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


def _libc():
    libc = ctypes.CDLL(None, use_errno=True)
    libc.syscall.restype = ctypes.c_long
    return libc


def landlock_abi() -> int:
    """Landlock ABI version the kernel offers; 0 when unavailable (old kernel, LSM disabled,
    seccomp filter, unknown architecture)."""
    nums = _SYSCALLS.get(platform.machine())
    if nums is None:
        return 0
    try:
        v = _libc().syscall(nums[0], None, ctypes.c_size_t(0),
                            ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except (OSError, AttributeError):
        return 0
    return max(int(v), 0)


def _fs_rights(abi: int) -> int:
    return _FS_BY_ABI[max(k for k in _FS_BY_ABI if k <= abi)]


def restrict(read_paths, write_paths) -> int:
    """Confine this process (irreversibly) to reading ``read_paths`` and reading + writing
    ``write_paths`` (folders or single files; missing ones are skipped), no TCP, no signals or
    abstract sockets outside the domain.

    Returns:
        the ABI applied; 0 when Landlock is unavailable (nothing was restricted).

    Raises:
        OSError: a Landlock call failed after the ruleset was created.
    """
    abi = landlock_abi()
    if abi == 0:
        return 0
    create, add_rule, restrict_self = _SYSCALLS[platform.machine()]
    libc = _libc()
    fs = _fs_rights(abi)
    attr = _RulesetAttr(fs, _NET_TCP if abi >= 4 else 0, _SCOPE if abi >= 6 else 0)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    ruleset = libc.syscall(create, ctypes.byref(attr), ctypes.c_size_t(size), ctypes.c_uint32(0))
    if ruleset < 0:
        raise OSError(ctypes.get_errno(), "landlock_create_ruleset failed")
    try:
        for paths, rights in ((read_paths, READ & fs), (write_paths, fs)):
            for path in paths:
                try:
                    fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
                except OSError:
                    continue
                try:
                    allowed = rights if os.path.isdir(path) else rights & _FILE_RIGHTS
                    rule = _PathBeneathAttr(allowed, fd)
                    if libc.syscall(add_rule, ctypes.c_int(ruleset),
                                    ctypes.c_int(_RULE_PATH_BENEATH), ctypes.byref(rule),
                                    ctypes.c_uint32(0)) < 0:
                        raise OSError(ctypes.get_errno(), f"landlock_add_rule {path} failed")
                finally:
                    os.close(fd)
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        if libc.syscall(restrict_self, ctypes.c_int(ruleset), ctypes.c_uint32(0)) < 0:
            raise OSError(ctypes.get_errno(), "landlock_restrict_self failed")
    finally:
        os.close(ruleset)
    return abi
