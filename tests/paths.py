"""Where tests find Earth-Bench's files: ``$EARTHRL_EARTHBENCH``, else ``../shared/earthbench``
beside the repository (read in place, never copied into it)."""

import os
from pathlib import Path

EARTHBENCH = Path(os.environ.get("EARTHRL_EARTHBENCH") or Path(__file__).resolve().parents[1] / ".." / "shared" / "earthbench")
