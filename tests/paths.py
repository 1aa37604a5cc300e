"""Where tests find Earth-Bench's files: ``$EARTHRL_EARTHBENCH``, else ``../shared/earthbench``
beside the repository (read in place, never copied into it)."""

import os
from pathlib import Path

EARTHBENCH = Path(os.environ.get("EARTHRL_EARTHBENCH") or Path(__file__).resolve().parents[1] / ".." / "shared" / "earthbench")

# Earth-Bench's files carry no licence, so the repository never ships them: where they are not
# beside the project (or named by $EARTHRL_EARTHBENCH), the tests that read them cannot run.
EARTHBENCH_MISSING = (f"needs Earth-Bench's question.json and extracted_tool_calls_GT.json, not found at {EARTHBENCH} "
                      "(not redistributable, so not in the repository): get them from the Earth-Agent release of "
                      "Earth-Bench and set EARTHRL_EARTHBENCH to their folder (or put it at ../shared/earthbench)")
