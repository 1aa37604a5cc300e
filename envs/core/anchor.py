"""Anchor states of an episode: the environment state GiGPO groups turns by.

GiGPO (Feng et al. 2025, *Group-in-Group Policy Optimization for LLM Agent Training*,
arXiv:2505.10978, §4, Eq. 6 "anchor state grouping") compares the turns of different episodes of one
task that start from the same environment state. Its reference code (verl-agent) takes the state
as the observation text; an EO agent's observations rarely repeat token for token (numbers, paths,
the model's own names), so EarthRL's anchor state is what the episode has *made*:

- the **lineage id** of an artifact is ``sha1`` of its tool's name, the call's canonical arguments
  and its place among the call's outputs. Canonical arguments: keys sorted (JSON), output-name
  arguments dropped (:func:`earthrl.envs.core.mock.data_arguments` with role ``"output"``), a
  reference to an earlier artifact (its name, ``name.tif`` or its path) replaced by that
  artifact's lineage id — recursively, so one id stands for a whole derivation —, a task scene
  reference by ``scene:<id>`` (``scene:<id>:<band>`` with the scene's own spelling of the band),
  and any other string stripped and lower-cased (index names, operators, units are
  case-insensitive in EarthRL's tools). Two episodes that reach the same artifacts through
  differently named outputs, other argument order or other spelling get the same ids. An artifact
  registered without a call (a file given with the task) is identified by its name.
- the **anchor** of a turn is the first 16 hex digits of ``sha1`` of the task id and the sorted
  *set* of the lineage ids of the artifacts in the episode's registry when the turn starts
  (:meth:`earthrl.envs.core.env.RSEnv.step`). The order in which independent artifacts were
  made, a repeated computation and a failed call change nothing.

Only verified artifacts count: the registry holds what a call made after the mode's engine
accepted it (schema, registered-path dependencies, sensors; SimCRAFT's dynamic path registry); a
call refused or failing before it writes registers nothing. The step verifier's plausibility verdict and the skill-tree state
(skills and docs opened) are not part of the key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

from earthrl.envs.core.mock import data_arguments
from earthrl.envs.data.artifacts import _EXTS, Artifact, ArtifactRegistry, HallucinatedPathError
from earthrl.envs.tools.registry import Tool


def _sha1(obj) -> str:
    return hashlib.sha1(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()


def artifact_key(ref: str, names: Mapping[str, object]) -> str | None:
    """The artifact name among ``names`` that ``ref`` refers to (a name, ``name.tif``, or a workspace
    path; :meth:`earthrl.envs.data.artifacts.ArtifactRegistry.get`'s rule), or None."""
    key = Path(ref.strip()).name
    candidates = [key] + [key[: -len(ext)] for ext in _EXTS if key.lower().endswith(ext)]
    return next((c for c in candidates if c in names), None)


class LineageIds:
    """Lineage ids (module doc) of the artifacts of one episode's registry.

    An id is fixed when its artifact is registered (:meth:`after_call`), from its parents as they
    were then, so that a later call re-using a parent's name does not change it. An artifact that
    reached the registry outside a call (no :meth:`after_call`) gets its id on first use from the
    registry as it is then.

    Args:
        registry: the episode's artifact registry (its scenes and artifacts).
        tools: tool name → :class:`~earthrl.envs.tools.registry.Tool` (which arguments name outputs).
    """

    def __init__(self, registry: ArtifactRegistry, tools: Mapping[str, Tool]) -> None:
        self.registry = registry
        self.tools = tools
        self._ids: dict[str, tuple[Artifact, str]] = {}  # name -> (the artifact object, its id)

    def snapshot(self) -> dict[str, Artifact]:
        """The registry's artifacts before a call (name → object), for :meth:`after_call`."""
        return dict(self.registry.artifacts)

    def after_call(self, before: Mapping[str, Artifact]) -> None:
        """Fix the ids of the artifacts a call registered (names not in ``before``, or replaced)."""
        made = [a for n, a in self.registry.artifacts.items() if before.get(n) is not a]
        outputs = {a.name for a in made}
        for art in made:
            index = [a for a in made if a.call == art.call].index(art)
            self._ids[art.name] = (art, self._identify(art, before, outputs, index))

    def lineage_id(self, name: str) -> str:
        """The lineage id (40 hex digits) of artifact ``name``.

        Raises:
            KeyError: no artifact of that name in the registry.
        """
        return self._id_in(name, self.registry.artifacts)

    def anchor(self, task_id: str) -> str:
        """The anchor key (module doc): 16 hex digits from the task id and the set of lineage ids."""
        ids = sorted({self.lineage_id(n) for n in self.registry.artifacts})
        return _sha1({"task": task_id, "artifacts": ids})[:16]

    def _id_in(self, name: str, artifacts: Mapping[str, Artifact]) -> str:
        """The id of ``artifacts[name]``: the fixed one, else computed with the other ``artifacts`` as its
        possible parents (an artifact registered outside :meth:`after_call`)."""
        art = artifacts[name]
        known = self._ids.get(name)
        if known is not None and known[0] is art:
            return known[1]
        others = {n: a for n, a in artifacts.items() if n != name}
        same_call = [a for a in artifacts.values() if a.call is not None and a.call == art.call]
        ident = self._identify(art, others, {name}, same_call.index(art) if art in same_call else 0)
        if self.registry.artifacts.get(name) is art:
            self._ids[name] = (art, ident)
        return ident

    def _identify(self, art: Artifact, before: Mapping[str, Artifact], outputs: set[str], index: int) -> str:
        """sha1 of (tool, canonical arguments, output index); ``before``: the artifacts the call could read."""
        if art.call is None:
            return _sha1({"given": art.name})
        arguments = dict(art.call.get("arguments") or {})
        tool = self.tools.get(art.call.get("name"))
        if tool is not None:
            for field_name, _ in data_arguments(tool, arguments, "output"):
                arguments.pop(field_name, None)
        return _sha1({"tool": art.call.get("name"), "output": index,
                      "arguments": self._canonical(arguments, before, outputs)})

    def _canonical(self, value, before: Mapping[str, Artifact], outputs: set[str]):
        if isinstance(value, str):
            return self._reference(value, before, outputs)
        if isinstance(value, Mapping):
            return {str(k): self._canonical(v, before, outputs) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [self._canonical(v, before, outputs) for v in value]
        return value

    def _reference(self, text: str, before: Mapping[str, Artifact], outputs: set[str]) -> str:
        """A string argument in canonical form: an artifact's id, ``output``, a scene reference, or the
        stripped, lower-cased text."""
        name = artifact_key(text, before)
        if name is not None:
            return "artifact:" + self._id_in(name, before)
        if artifact_key(text, dict.fromkeys(outputs)) is not None:
            return "output"
        try:
            scene = self.registry.scene(text)
        except HallucinatedPathError:
            return text.strip().lower()
        band = text.strip().partition(":")[2]
        try:
            band = scene.band_name(band) if band else ""
        except KeyError:  # a vector of the scene (<scene>:<vector>), or a band it lacks
            band = band.strip().lower()
        return f"scene:{scene.id}" + (f":{band}" if band else "")
