"""Shared pieces of the sandbox tests: fake tools, a recording handler, the hook bypass."""

from __future__ import annotations

from typing import Literal, NoReturn

import pytest

from earthrl.envs.sandbox.parent import SandboxLimits
from earthrl.envs.tools.registry import Args, Tool, ToolResult

LIMITS = SandboxLimits(wall_s=5.0, cpu_s=5, memory_mb=1024)

#: model code that digs out the audit hook and switches it off for the rest of the cell (PEP 578
#: hooks cannot be removed, but their state can be reached): the kernel layers must hold alone.
BYPASS = ("import gc\nguard = [o for o in gc.get_objects() if type(o).__name__ == '_Guard'][0]\n"
          "guard.trusted = True  # the audit hook now lets everything through\n")

HOOK = pytest.mark.parametrize("hook", [True, False], ids=["hook_on", "hook_off"])


class IndexArgs(Args):
    scene: str
    index: Literal["NDVI", "NDWI"] = "NDVI"


class NameArgs(Args):
    name: str


def fake_tool(name, args=IndexArgs):
    """A Tool with ``args`` as its argument model (the handler, not the tool, does the work)."""
    return Tool(name, lambda ctx, a: ToolResult(""), args, f"{name} tool.", "AI Interpretation",
                "PRA", ("spectral_index",), ("any",), "raster")


FAKE_TOOLS = {"spectral_index": fake_tool("spectral_index")}


class Handler:
    """Fake env side: records calls; ``missing`` scenes come back as hallucinated paths."""

    def __init__(self):
        self.calls = []

    def __call__(self, name, kwargs):
        self.calls.append((name, kwargs))
        if kwargs.get("scene") == "missing":
            return {"text": "no scene 'missing'; scenes: S2", "error": True,
                    "error_kind": "hallucinated_path"}
        return {"text": f"{name} of {kwargs['scene']}: mean 0.25", "data": {"mean": 0.25}}


def run(sb, code: str, hook: bool):
    """Exec ``code`` with the audit hook on, or switched off by the code itself."""
    return sb.exec(code if hook else BYPASS + code)


def assert_serving(sb):
    """The sandbox still answers ``print(1+1)`` with E=0."""
    res = sb.exec("print(1+1)")
    assert (res.stdout, res.error) == ("2\n", False), res.observation


@pytest.fixture
def make_sandbox(tmp_path):
    """``make(name="ws", limits=LIMITS, handler=None, **Sandbox kwargs)``; all closed at the end."""
    from earthrl.envs.sandbox.parent import Sandbox

    boxes = []

    def make(name="ws", limits=LIMITS, handler=None, **kw):
        sb = Sandbox(tmp_path / name, limits, handler, tools=kw.pop("tools", FAKE_TOOLS), **kw)
        boxes.append(sb)
        return sb

    yield make
    for sb in boxes:
        sb.close()


def skip_or_fail_without_bwrap(backend: str) -> None:
    """Bubblewrap is the sandbox boundary and `make` installs it when run as root: there its absence
    is a broken install and fails the test; a non-root machine may lack it (docs/security.md, Installing
    bubblewrap), so the bwrap-only tests skip there, saying so."""
    import os

    if backend == "bwrap":
        return
    if os.geteuid() == 0:
        pytest.fail("bubblewrap cannot run although make installs it as root: `apt-get install bubblewrap`, "
                    "then `earthrl doctor`", pytrace=False)
    pytest.skip(reason="needs bubblewrap, which cannot run here (not root): ask the admin for "
                       "`apt-get install bubblewrap`, then `earthrl doctor`")


def skip_without(what: str, check) -> NoReturn:
    """Skip a test that needs a kernel feature this machine lacks; the reason names the feature and the fix
    ``earthrl doctor`` gives for it.

    Args:
        what: the feature, e.g. ``"a writable pids cgroup"``.
        check: the doctor check of the feature (:func:`earthrl.launch.doctor.check_cgroups`, ...), called here.
    """
    found = check()
    pytest.skip(reason=f"needs {what}: {found.fix} (`earthrl doctor` reports {found.name})")
