"""The user catalogue: scenes a user indexed from their own GeoTIFFs / COGs / STAC items
(``earthrl catalog add``, :mod:`earthrl.envs.data.sources`), which :func:`earthrl.envs.data.catalog.catalog`
serves beside the fetched data sets.

File: ``$EARTHRL_HOME/catalog/user.json`` (default ``~/.cache/earthrl/catalog/user.json``)::

    {"version": 1,
     "sources": {"<name>": {"input": "<folder or STAC file>", "kind": "folder" | "stac",
                            "options": {...}, "scenes": [<scene record>, ...]}}}

Scene records: :func:`earthrl.envs.data.scene.scene_record`. Written atomically (temporary file
+ rename), so a reader never sees half a file.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

from earthrl.envs.data.scene import Scene, scene_from_record
from earthrl.envs.paths import earthrl_home

VERSION = 1


class UserIndexError(ValueError):
    """The user catalogue file cannot be read (names the file and the fix)."""


def user_index_path() -> Path:
    """``$EARTHRL_HOME/catalog/user.json`` (may not exist)."""
    return earthrl_home() / "catalog" / "user.json"


def read_index(path: Path | None = None) -> dict:
    """The user catalogue as a dict (``{"version", "sources"}``; empty sources when absent).

    Raises:
        UserIndexError: the file is not valid JSON of this layout.
    """
    path = path or user_index_path()
    if not path.is_file():
        return {"version": VERSION, "sources": {}}
    try:
        d = json.loads(path.read_text())
        if not isinstance(d.get("sources"), dict):
            raise ValueError("no 'sources' object")
    except (ValueError, AttributeError) as exc:
        raise UserIndexError(f"{path} is not a valid user catalogue ({exc}); delete it and re-run "
                             "`earthrl catalog add`") from None
    return d


def user_scenes(path: Path | None = None) -> list[Scene]:
    """Every scene of the user catalogue, source by source (source name order).

    Raises:
        UserIndexError: an unreadable file or a malformed scene record.
    """
    path = path or user_index_path()
    out = []
    for name, src in sorted(read_index(path)["sources"].items()):
        for rec in src.get("scenes", []):
            try:
                out.append(scene_from_record(rec, source=name))
            except (KeyError, TypeError, ValueError) as exc:
                raise UserIndexError(f"{path}: source {name!r} has a malformed scene record ({exc!r}); "
                                     f"re-run `earthrl catalog add {src.get('input', 'DIR')}`") from None
    return out


def _write(d: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".user-", suffix=".json")
    with os.fdopen(fd, "w") as f:
        json.dump(d, f, indent=1)
    os.replace(tmp, path)


def put_source(name: str, source: dict, path: Path | None = None) -> Path:
    """Add or replace source ``name`` (``{"input", "kind", "options", "scenes"}``); returns the file."""
    path = path or user_index_path()
    d = read_index(path)
    d["sources"][name] = source
    d["version"] = VERSION
    _write(d, path)
    return path


def remove_source(name: str, path: Path | None = None) -> int:
    """Remove source ``name``; returns how many scenes it had.

    Raises:
        KeyError: no such source (names the sources there are).
    """
    path = path or user_index_path()
    d = read_index(path)
    if name not in d["sources"]:
        raise KeyError(f"no user source {name!r}; sources: {', '.join(d['sources']) or 'none'}")
    n = len(d["sources"].pop(name).get("scenes", []))
    _write(d, path)
    return n
