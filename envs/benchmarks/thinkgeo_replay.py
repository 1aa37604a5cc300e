"""ThinkGeo's recorded tool outputs: the recording source of replay mode for ThinkGeo tasks (template
``thinkgeo``; :mod:`earthrl.envs.core.replay`).

ThinkGeo's dialogs (``ThinkGeoBench.json``, GTA's layout: :mod:`earthrl.envs.benchmarks.thinkgeo`) hold each
reference call in an assistant turn's ``tool_calls`` and the tool's output in the ``tool`` turn that follows
(``{"role": "tool", "name", "content": {"type": "text", "content": …}}``). A task's recording pairs each call
with the following tool turn of the same tool name, as Earth-Bench's dialogs are read
(:func:`~earthrl.envs.benchmarks.earthbench_replay.dialog_recording`); a call without a tool turn is left out
(nothing was recorded for it), and the observation of a matched call is the tool turn's ``content``.
"""

from __future__ import annotations

from pathlib import Path

from earthrl.envs.benchmarks.earthbench_replay import dialog_recording
from earthrl.envs.benchmarks.thinkgeo import ID_PREFIX, read_thinkgeo
from earthrl.envs.core.replay import RECORDINGS, RecordedCall


@RECORDINGS.register("thinkgeo")
def thinkgeo_recordings(folder: Path) -> dict[str, list[RecordedCall]]:
    """``{"thinkgeo/<idx>": [RecordedCall]}`` for every task of ``<folder>/ThinkGeoBench.json``.

    Raises:
        FileNotFoundError: the file is missing (names the folder to give).
        ThinkGeoFormatError: the file is not JSON mapping indices to tasks.
    """
    out = {}
    for key, task in read_thinkgeo(Path(folder)).items():
        dialogs = task.get("dialogs") if isinstance(task, dict) else None
        out[ID_PREFIX + str(key)] = dialog_recording(dialogs if isinstance(dialogs, list) else [])
    return out
