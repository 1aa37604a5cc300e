"""HiRS-Agent Expert-tuning data (Expert-to-Workflow Alignment Tuning, HiRS-Agent §Training).

The paper's two supervised stages, built from what EarthRL itself defines rather than from textbooks:

- Stage I, knowledge chunks (instruction → text): one per EarthRL tool (its description, HiRS family,
  SimCRAFT domain, skills, sensors, output kind and valid range, arguments from its JSON schema), one per
  skill-tree node (:mod:`earthrl.envs.core.skills`: tools, order rules, parameter ranges) and one per
  spectral index the suite's workflows compute (name, formula, bands, application domain and source
  paper from the spyndex catalogue, Montero et al. 2023, Scientific Data 10:197).
- Stage II, workflow items (question → answer) from the reference workflows of the suite's train split
  (one representative task per workflow template): *Workflow MCQ* — which tool comes next after the
  steps done so far (the reference's tool, three registered tools of another output kind that the
  workflow never calls as distractors); *index MCQ* — which index a formula defines (three other
  indices with other formulas as distractors); *Workflow Order* — the workflow's steps shuffled, to be
  put back in the reference order (only workflows whose tool names are all distinct, so the order is
  unique).

Split (:func:`split_items`): the MCQ/ordering items are divided 80/20 by *group* (the workflow template
without its ``_mc`` choice suffix; the index), seeded, so the held-out items never share a workflow or
an index with a training item; knowledge chunks are all training data. Records are plain chat
:class:`~earthrl.rollout.sft_data.SFTTrajectory` records (system, user, one assistant turn, no
environment), ``source="expert_tuning"``, ``action_format="chat"``; the held-out ones carry
``answer={"kind", "key", "options"}`` for :mod:`earthrl.rewards.metrics.expert_items`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from earthrl.envs.core.skills import SKILLS, skill_tools
from earthrl.envs.tools.registry import TOOLS, openai_schema
from earthrl.rollout.sft_data import SFTTrajectory, SFTTurn

SOURCE = "expert_tuning"
SYSTEM = ("You are a remote-sensing expert. You know EarthRL's tools, its skill tree, the spectral indices "
          "and the order in which remote-sensing workflows call the tools.")
LETTERS = "ABCDEFGHIJ"
KINDS = ("knowledge", "mcq", "order")
FAMILY_NAMES = {"SPA": "Surface Parsing", "PRA": "Physical Retrieval", "SAA": "Statistical Analytics"}
HELDOUT_SHARE = 0.2
#: the spectral_index tool's dedicated twins (tool name -> spyndex index).
INDEX_TOOLS = {"ndvi": "NDVI", "ndwi": "NDWI", "mndwi": "MNDWI", "ndbi": "NDBI", "evi": "EVI", "savi": "SAVI",
               "nbr": "NBR", "ndsi": "NDSI"}


@dataclass(frozen=True)
class ExpertItem:
    """One Expert-tuning sample.

    Attributes:
        id: unique id (``knowledge/tool/ndvi``, ``mcq/next/<template>/2``, ``order/<template>`` …).
        kind: one of :data:`KINDS`.
        group: the split unit (items of one group fall on one side).
        question: the user message; answer: the assistant's target text.
        options: MCQ options / the ordering item's shuffled steps, lettered A, B, … in this order.
        key: the correct letter (MCQ) or the letters in reference order joined by ``", "`` (ordering).
    """

    id: str
    kind: str
    group: str
    question: str
    answer: str
    options: tuple[str, ...] = field(default=())
    key: str = ""

    def to_record(self) -> SFTTrajectory:
        """The plain chat record of this item (module doc)."""
        answer = None if self.kind == "knowledge" else {"kind": self.kind, "key": self.key,
                                                        "options": list(self.options)}
        return SFTTrajectory(task_id=self.id, source=SOURCE, action_format="chat", phrasing="", system=SYSTEM,
                             user=self.question, turns=[SFTTurn(action=self.answer, observation="")],
                             answer=answer, correct=True)


def lettered(options: Iterable[str]) -> str:
    """``"A) x\\nB) y"`` of ``options``."""
    return "\n".join(f"{LETTERS[i]}) {o}" for i, o in enumerate(options))


# ----------------------------------------------------------------------- Stage I: knowledge chunks


def tool_chunk(name: str) -> ExpertItem:
    """The knowledge chunk of registered tool ``name``."""
    t = TOOLS[name]
    params = openai_schema(t)["function"]["parameters"]
    required = set(params.get("required", []))
    args = "; ".join(f"{a} ({p.get('type', 'any')}{', required' if a in required else ''}"
                     f"{': ' + p['description'] if p.get('description') else ''})"
                     for a, p in params["properties"].items()) or "none"
    rng = f", plausible values in [{t.valid_range[0]:g}, {t.valid_range[1]:g}]" if t.valid_range else ""
    text = (f"{name}: {t.description} Family {t.family} ({FAMILY_NAMES[t.family]}), domain {t.domain}. "
            f"Skills: {', '.join(t.skills)}. Sensors: {', '.join(t.sensors)}. Output: {t.output_kind}{rng}. "
            f"Arguments: {args}.")
    return ExpertItem(f"knowledge/tool/{name}", "knowledge", f"knowledge/tool/{name}",
                      f"Describe the EarthRL tool {name}.", text)


def skill_chunk(skill_id: str) -> ExpertItem:
    """The knowledge chunk of skill-tree node ``skill_id``: its registered tools, order rules and ranges."""
    s, tools = SKILLS[skill_id], dict(TOOLS.items())
    order = [f"{tool} needs one of {', '.join(e for e in earlier if e in tools)} first"
             for tool, earlier in s.order.items() if tool in tools and any(e in tools for e in earlier)]
    ranges = [f"{tool}.{arg} in [{lo:g}, {hi:g}]" for (tool, arg), (lo, hi) in s.constraints.items()]
    text = (f"Skill {skill_id}: {s.description} Tools: {', '.join(skill_tools(skill_id, tools))}. "
            f"Order: {'; '.join(order) or 'none'}. Ranges: {'; '.join(ranges) or 'none'}.")
    return ExpertItem(f"knowledge/skill/{skill_id}", "knowledge", f"knowledge/skill/{skill_id}",
                      f"Explain the EarthRL skill {skill_id}.", text)


def index_info(name: str) -> dict:
    """spyndex's entry of index ``name``: ``{"name", "long_name", "formula", "bands", "domain", "reference"}``.

    Raises:
        KeyError: not in the spyndex catalogue.
    """
    import spyndex  # lazy: the catalogue loads a JSON file

    i = spyndex.indices[name]
    return {"name": name, "long_name": i.long_name, "formula": i.formula, "bands": list(i.bands),
            "domain": i.application_domain, "reference": i.reference}


def index_chunk(name: str) -> ExpertItem:
    """The knowledge chunk of spectral index ``name`` (spyndex band symbols: N near infrared, R red, G green,
    B blue, S1/S2 shortwave infrared 1.6/2.2 µm, RE1 red edge 1)."""
    i = index_info(name)
    text = (f"{name} ({i['long_name']}) = {i['formula']}, from bands {', '.join(i['bands'])}; "
            f"application domain {i['domain']}; source {i['reference']}.")
    return ExpertItem(f"knowledge/index/{name}", "knowledge", f"knowledge/index/{name}",
                      f"What is the spectral index {name}?", text)


# ----------------------------------------------------------------------- Stage II: workflow items


def representatives(tasks: list[dict]) -> dict[str, dict]:
    """One task per workflow template (the first by id), in template order."""
    out: dict[str, dict] = {}
    for t in sorted(tasks, key=lambda t: t["id"]):
        out.setdefault(t["template"], t)
    return dict(sorted(out.items()))


def workflow_group(template: str) -> str:
    """The split group of a template: its name without the ``_mc`` (multiple-choice answer) suffix, whose
    workflow is the same."""
    return "workflow/" + template.removesuffix("_mc")


def goal(task: dict) -> str:
    """The task's goal-only (AP) phrasing, else its first phrasing."""
    q = task["question"]
    return q.get("AP") or next(iter(q.values()))


def next_step_mcqs(task: dict, rng: np.random.Generator) -> list[ExpertItem]:
    """Workflow MCQs of ``task``: for each reference call, which tool comes next after the calls before it.
    Distractors: registered EarthRL tools the workflow never calls whose output kind differs from the
    correct tool's (so none can stand in for it)."""
    names = [c["name"] for c in task["reference"]]
    out = []
    for k, correct in enumerate(names):
        kind = TOOLS[correct].output_kind
        pool = sorted(n for n, t in TOOLS.items() if t.surface == "earthrl" and n not in names and n != "answer"
                      and t.output_kind != kind)
        options = [correct, *rng.choice(pool, size=3, replace=False).tolist()]
        rng.shuffle(options)
        done = "\n".join(f"{i + 1}. {n}" for i, n in enumerate(names[:k])) or "(none yet)"
        key = LETTERS[options.index(correct)]
        q = (f"Task: {goal(task)}\nSteps done so far:\n{done}\nWhich tool comes next in the workflow?\n"
             f"{lettered(options)}\nAnswer with the letter.")
        out.append(ExpertItem(f"mcq/next/{task['template']}/{k + 1}", "mcq", workflow_group(task["template"]),
                              q, key, tuple(options), key))
    return out


def ordering_item(task: dict, rng: np.random.Generator) -> ExpertItem | None:
    """The Workflow Order item of ``task`` (its reference tools then ``answer``, shuffled into an order that
    differs from the reference), or None when the workflow has fewer than 3 steps or repeats a tool."""
    steps = [c["name"] for c in task["reference"]] + ["answer"]
    if len(steps) < 3 or len(set(steps)) != len(steps):
        return None
    shuffled = list(steps)
    while shuffled == steps:
        rng.shuffle(shuffled)
    key = ", ".join(LETTERS[shuffled.index(s)] for s in steps)
    q = (f"Task: {goal(task)}\nPut these workflow steps in the order they run:\n{lettered(shuffled)}\n"
         f"Answer with the letters in order, separated by commas.")
    return ExpertItem(f"order/{task['template']}", "order", workflow_group(task["template"]), q, key,
                      tuple(shuffled), key)


def index_mcq(name: str, others: list[str], rng: np.random.Generator) -> ExpertItem:
    """Which index ``formula`` defines: ``name`` and three of ``others`` whose formulas differ."""
    formula = index_info(name)["formula"]
    pool = sorted(o for o in others if o != name and index_info(o)["formula"] != formula)
    options = [name, *rng.choice(pool, size=3, replace=False).tolist()]
    rng.shuffle(options)
    key = LETTERS[options.index(name)]
    q = (f"Which spectral index is computed as {formula} (spyndex band symbols)?\n{lettered(options)}\n"
         "Answer with the letter.")
    return ExpertItem(f"mcq/index/{name}", "mcq", f"index/{name}", q, key, tuple(options), key)


def workflow_indices(tasks: list[dict]) -> list[str]:
    """The spectral indices the workflows compute (``index`` arguments and dedicated index tools), sorted."""
    out = set()
    for t in tasks:
        for c in t["reference"]:
            if isinstance(c["arguments"].get("index"), str):
                out.add(c["arguments"]["index"])
            if c["name"] in INDEX_TOOLS:
                out.add(INDEX_TOOLS[c["name"]])
    return sorted(out)


def build_items(tasks: list[dict], seed: int = 0) -> list[ExpertItem]:
    """Every Expert-tuning item of ``tasks`` (task dicts with ``reference``, ``template``, ``question``):
    knowledge chunks of every EarthRL tool, skill and workflow index, then per template its Workflow MCQs and
    Workflow Order item, then one index MCQ per index. Same tasks and seed, same items."""
    rng = np.random.default_rng(seed)
    indices = workflow_indices(tasks)
    items = [tool_chunk(n) for n, t in TOOLS.items() if t.surface == "earthrl"]
    items += [skill_chunk(s) for s in SKILLS] + [index_chunk(i) for i in indices]
    for task in representatives(tasks).values():
        items += next_step_mcqs(task, rng)
        item = ordering_item(task, rng)
        items += [item] if item is not None else []
    if len(indices) >= 4:
        items += [index_mcq(i, indices, rng) for i in indices]
    return items


def split_items(items: list[ExpertItem], seed: int = 0,
                heldout_share: float = HELDOUT_SHARE) -> tuple[list[ExpertItem], list[ExpertItem]]:
    """``(train, heldout)``: the groups of the MCQ/ordering items in a seeded permutation, the first
    ``round(heldout_share · groups)`` held out; knowledge chunks all train (module doc).

    Raises:
        ValueError: ``heldout_share`` outside (0, 1).
    """
    if not 0.0 < heldout_share < 1.0:
        raise ValueError(f"heldout_share={heldout_share}: give a share in (0, 1), e.g. 0.2")
    groups = sorted({i.group for i in items if i.kind != "knowledge"})
    order = np.random.default_rng(seed).permutation(len(groups))
    held = {groups[j] for j in order[: round(heldout_share * len(groups))]}
    return [i for i in items if i.group not in held], [i for i in items if i.group in held]


def build_expert(tasks: list[dict], seed: int = 0) -> tuple[list[SFTTrajectory], list[SFTTrajectory], dict]:
    """``(train records, held-out records, counts)`` of the Expert-tuning data of ``tasks`` (module doc)."""
    train, held = split_items(build_items(tasks, seed), seed)
    counts = {f"{side}_{k}": sum(i.kind == k for i in part) for side, part in (("train", train), ("heldout", held))
              for k in KINDS}
    return [i.to_record() for i in train], [i.to_record() for i in held], counts

