"""Per-sandbox control groups: process cap, freezer and CPU accounting of every process and thread
of one CodeAct interpreter (Linux cgroups v1 or v2; https://docs.kernel.org/admin-guide/cgroup-v2.html).

RLIMIT_NPROC does not bind a process whose real uid is root, which is how the sandbox runs on the
training machines, and RLIMIT_CPU is set inside the interpreter. The parent therefore puts the
sandbox's processes into cgroups of its own, where the machine allows it:

- ``pids``: ``pids.max`` = ``SandboxLimits.max_processes`` (processes + threads together);
- ``freezer``: the parent freezes the sandbox between execs and while it runs a tool call, so no
  thread of the model's code computes then (v1 ``freezer.state``, v2 ``cgroup.freeze``);
- ``cpu``: CPU seconds of all threads, read by the parent (v1 ``cpuacct.usage``, v2 ``cpu.stat``).

A v1 hierarchy with the controller is used when mounted and writable, else the v2 hierarchy
(``pids`` only when in its root's ``subtree_control``; freezing and ``cpu.stat`` exist in every
non-root v2 cgroup). Where none is available :mod:`earthrl.envs.sandbox.procs` does the same from
``/proc`` and with SIGSTOP/SIGCONT. The parent writes the sandbox's pids into ``cgroup.procs``
before any model code runs; :meth:`SandboxCgroup.remove` deletes the groups once they are empty.
"""

from __future__ import annotations

import itertools
import os
import time
from functools import lru_cache
from pathlib import Path

_COUNTER = itertools.count()
_V1_NAMES = {"pids": "pids", "freezer": "freezer", "cpu": "cpuacct"}
CONTROLLERS = tuple(_V1_NAMES)


@lru_cache(maxsize=1)
def controller_roots() -> dict[str, tuple[Path, int]]:
    """``{"pids" | "freezer" | "cpu": (writable hierarchy root, cgroup version 1 or 2)}`` for the
    controllers this machine offers (read from ``/proc/self/mounts``)."""
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
    except OSError:
        return {}
    v1, v2 = {}, None
    for line in mounts:
        fields = line.split()
        if len(fields) < 4:
            continue
        mount, fstype, opts = Path(fields[1]), fields[2], fields[3].split(",")
        if not os.access(mount, os.W_OK):
            continue
        if fstype == "cgroup":
            for ctrl, name in _V1_NAMES.items():
                if name in opts:
                    v1.setdefault(ctrl, (mount, 1))
        elif fstype == "cgroup2" and v2 is None:
            v2 = mount
    roots = dict(v1)
    if v2 is not None:
        try:
            v2_pids = "pids" in (v2 / "cgroup.subtree_control").read_text().split()
        except OSError:
            v2_pids = False
        for ctrl in CONTROLLERS:
            if ctrl not in roots and (ctrl != "pids" or v2_pids):
                roots[ctrl] = (v2, 2)
    return roots


def pids_controller_root() -> Path | None:
    """Root of the writable hierarchy with the ``pids`` controller, or None."""
    root = controller_roots().get("pids")
    return root[0] if root else None


class SandboxCgroup:
    """The cgroups of one sandbox (one folder per hierarchy used).

    Args:
        max_pids: ``pids.max`` (processes + threads).

    Attributes:
        dirs: controller name -> cgroup folder, for the controllers in force.
    """

    def __init__(self, max_pids: int):
        self.dirs: dict[str, Path] = {}
        self._version: dict[Path, int] = {}
        made: dict[Path, Path] = {}
        for ctrl, (root, version) in controller_roots().items():
            if root not in made:
                _remove_stale(root)
                path = root / f"earthrl_sandbox_{os.getpid()}_{next(_COUNTER)}"
                try:
                    path.mkdir()
                except OSError:
                    continue
                made[root] = path
                self._version[path] = version
            self.dirs[ctrl] = made[root]
        if "pids" in self.dirs:
            try:
                (self.dirs["pids"] / "pids.max").write_text(str(int(max_pids)))
            except OSError:
                del self.dirs["pids"]
        self._joined = False

    @property
    def folders(self) -> set[Path]:
        """The cgroup folders created."""
        return set(self._version)

    def add(self, pids) -> bool:
        """Move ``pids`` into every folder; True when all moved (then :meth:`procs`,
        :meth:`freeze` and :meth:`cpu_s` cover them and their future children)."""
        ok = bool(self._version)
        for path in self._version:
            for pid in pids:
                try:
                    (path / "cgroup.procs").write_text(str(pid))
                except OSError:
                    ok = False
        self._joined = ok
        return ok

    def has(self, ctrl: str) -> bool:
        """The sandbox's processes are in a cgroup with controller ``ctrl``."""
        return self._joined and ctrl in self.dirs

    def procs(self) -> list[int] | None:
        """Pids in the sandbox's cgroup, or None when not joined."""
        if not self._joined:
            return None
        path = next(iter(self._version))
        try:
            return [int(x) for x in (path / "cgroup.procs").read_text().split()]
        except (OSError, ValueError):
            return None

    def pids_current(self) -> int | None:
        """``pids.current`` (processes + threads), or None without a pids cgroup."""
        if not self.has("pids"):
            return None
        try:
            return int((self.dirs["pids"] / "pids.current").read_text())
        except (OSError, ValueError):
            return None

    def freeze(self, frozen: bool, wait_s: float = 2.0) -> bool:
        """Freeze (``True``) or thaw the sandbox; True when the state was reached."""
        if not self.has("freezer"):
            return False
        path = self.dirs["freezer"]
        try:
            if self._version[path] == 1:
                (path / "freezer.state").write_text("FROZEN" if frozen else "THAWED")
                want, probe = ("FROZEN" if frozen else "THAWED"), path / "freezer.state"
            else:
                (path / "cgroup.freeze").write_text("1" if frozen else "0")
                want, probe = f"frozen {int(frozen)}", path / "cgroup.events"
            deadline = time.monotonic() + wait_s
            while want not in probe.read_text():
                if time.monotonic() > deadline:
                    return False
                time.sleep(0.001)
            return True
        except OSError:
            return False

    def cpu_s(self) -> float | None:
        """CPU seconds used by every process and thread ever in the cgroup, or None."""
        if not self.has("cpu"):
            return None
        path = self.dirs["cpu"]
        try:
            if self._version[path] == 1:
                return int((path / "cpuacct.usage").read_text()) / 1e9
            for line in (path / "cpu.stat").read_text().splitlines():
                if line.startswith("usage_usec "):
                    return int(line.split()[1]) / 1e6
        except (OSError, ValueError):
            pass
        return None

    def remove(self, wait_s: float = 2.0) -> None:
        """Thaw and delete the folders once their processes are gone (never raises)."""
        if "freezer" in self.dirs:
            self.freeze(False, wait_s=0.2)
        for path in self._version:
            remove_cgroup(path, wait_s)
        self._version.clear()
        self.dirs.clear()
        self._joined = False


def _remove_stale(root: Path) -> None:
    """Delete cgroups left by EarthRL processes that died without closing their sandboxes."""
    for path in root.glob("earthrl_sandbox_*_*"):
        owner = path.name.split("_")[2]
        if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
            remove_cgroup(path, wait_s=0)


def remove_cgroup(path: Path | None, wait_s: float = 2.0) -> None:
    """Delete the cgroup once its processes are gone (retries while busy; never raises)."""
    if path is None:
        return
    deadline = time.monotonic() + wait_s
    while True:
        try:
            path.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            if time.monotonic() > deadline:
                return
            time.sleep(0.01)
