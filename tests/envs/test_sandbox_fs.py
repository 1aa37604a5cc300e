"""The parent never follows a link out of a workspace: links planted by the
sandboxed code (or, where isolation is weaker, by anyone) and then written or read by a tool run
in the unsandboxed parent leave the outside file unchanged and unread, with a sandbox_violation."""

from __future__ import annotations

import os

import numpy as np
import pytest
from rasterio.transform import Affine

from earthrl.envs.data.artifacts import ArtifactRegistry, ToolError
from earthrl.envs.data.workspace_fs import UnsafeWorkspaceFile, read_bytes, write_bytes
from tests.envs.sandbox_kit import (
    HOOK,
    IndexArgs,
    NameArgs,
    assert_serving,
    fake_tool,
    make_sandbox,  # noqa: F401 (fixture)
    run,
)

TOOLS = {"spectral_index": fake_tool("spectral_index", IndexArgs),
         "save_table": fake_tool("save_table", NameArgs),
         "read_table": fake_tool("read_table", NameArgs)}


class RegistryHandler:
    """Tools of the parent on the real artifact registry of the sandbox's workspace."""

    def __init__(self, workspace):
        self.reg = ArtifactRegistry(workspace)

    def __call__(self, name, kw):
        try:
            if name == "spectral_index":
                art = self.reg.write(f"ndvi_{kw['scene']}", np.full((4, 4), 0.5, np.float32),
                                     kind="raster", crs="EPSG:32633",
                                     transform=Affine(10, 0, 0, 0, -10, 0), units="index",
                                     parents=[], call=None)
                return {"text": f"saved {art.name}", "data": {"artifact": art.name}}
            if name == "save_table":
                self.reg.write_json(kw["name"], {"rows": [1, 2]}, "table", units="", parents=[],
                                    call=None)
                return {"text": "saved", "data": {}}
            return {"text": str(self.reg.load_json(kw["name"], ("table",))), "data": {}}
        except ToolError as e:
            return {"text": e.message, "error": True, "error_kind": e.kind}


@pytest.fixture
def outside(tmp_path):
    path = tmp_path / "outside.txt"
    path.write_text("host secret")
    return path


def box(make_sandbox, tmp_path):
    return make_sandbox(handler=RegistryHandler(tmp_path / "ws"), tools=TOOLS)


@HOOK
def test_symlink_planted_then_written_by_a_tool(make_sandbox, tmp_path, outside, hook):
    sb = box(make_sandbox, tmp_path)
    res = run(sb, f"import os\nos.symlink({str(outside)!r}, 'ndvi_S2.tif')\n"
                  "spectral_index(scene='S2')", hook)
    assert res.error and res.error_kind == "sandbox_violation", res.observation
    why = "os.symlink" if hook else "ndvi_S2.tif is a symbolic link in the workspace"
    assert why in res.message and sb.violations == 1
    assert outside.read_text() == "host secret"
    assert_serving(sb)


@HOOK
def test_symlink_planted_then_read_by_a_tool(make_sandbox, tmp_path, outside, hook):
    sb = box(make_sandbox, tmp_path)
    assert not sb.exec("save_table(name='t')\nprint(read_table(name='t'))").error
    res = run(sb, f"import os\nos.remove('t.json')\nos.symlink({str(outside)!r}, 't.json')\n"
                  "print(read_table(name='t'))", hook)
    assert res.error_kind == "sandbox_violation", res.observation
    assert ("os.symlink" if hook else "t.json is a symbolic link") in res.message
    assert "host secret" not in res.observation
    assert_serving(sb)


@HOOK
def test_hard_link_planted_then_written_and_read_by_a_tool(make_sandbox, tmp_path, outside,
                                                          hook):
    sb = box(make_sandbox, tmp_path)
    res = run(sb, f"import os\nos.link({str(outside)!r}, 'ndvi_S2.tif')", hook)
    assert res.error, res.observation  # the hook, or the outside file is not in the sandbox
    assert res.error_kind == "sandbox_violation" if hook else "No such file" in res.message
    # where isolation is weaker someone else may plant it: the tools still refuse
    os.link(outside, tmp_path / "ws" / "ndvi_S2.tif")
    res2 = run(sb, "spectral_index(scene='S2')", hook)
    assert res2.error_kind == "sandbox_violation" and "has 2 hard links" in res2.message
    assert sb.exec("save_table(name='t')").error is False
    os.remove(tmp_path / "ws" / "t.json")
    os.link(outside, tmp_path / "ws" / "t.json")
    res3 = run(sb, "print(read_table(name='t'))", hook)
    assert res3.error_kind == "sandbox_violation" and "host secret" not in res3.observation
    assert outside.read_text() == "host secret"
    assert_serving(sb)


def test_registry_refuses_a_planted_entry_for_direct_path_readers(tmp_path, outside):
    """Tools that open ``art.path`` themselves (GeoPackages) go through ``registry.get``."""
    reg = ArtifactRegistry(tmp_path / "ws")
    reg.write_json("t", {"a": 1}, "table", units="", parents=[], call=None)
    assert reg.get("t").path.read_text() == '{"a":1}'
    os.remove(tmp_path / "ws" / "t.json")
    os.symlink(outside, tmp_path / "ws" / "t.json")
    with pytest.raises(ToolError, match="t.json is a symbolic link") as e:
        reg.get("t")
    assert e.value.kind == "sandbox_violation"


def test_safe_write_and_read_refuse_links_folders_and_fifos(tmp_path, outside):
    ws = tmp_path / "ws"
    ws.mkdir()
    write_bytes(ws, "a.json", b"1")
    write_bytes(ws, "a.json", b"22")  # replacing a plain file is fine
    assert read_bytes(ws, "a.json") == b"22"
    os.symlink(outside, ws / "l.json")
    os.mkdir(ws / "d.json")
    os.mkfifo(ws / "f.json")
    for name, why in [("l.json", "symbolic link"), ("d.json", "not a regular file"),
                      ("f.json", "not a regular file")]:
        with pytest.raises(UnsafeWorkspaceFile, match=why):
            write_bytes(ws, name, b"x")
        with pytest.raises(UnsafeWorkspaceFile, match=why):
            read_bytes(ws, name)
    with pytest.raises(UnsafeWorkspaceFile, match="larger than 1 bytes"):
        read_bytes(ws, "a.json", max_bytes=1)
    with pytest.raises(UnsafeWorkspaceFile, match="single file name"):
        write_bytes(ws, "../x", b"x")
    assert outside.read_text() == "host secret"
    assert sorted(os.listdir(ws)) == ["a.json", "d.json", "f.json", "l.json"]  # no temp left
