"""Synthetic environments of ``earthrl bench learn``: tasks whose optimal policy is known and within reach of
the tiny random test model, played turn by turn and written into real :class:`~earthrl.rollout.trajectory.Turn`
fields (role, tool call, error, verdict, sub-goal, answer), so that EarthRL's own rewards score them.

The decision of a turn is its FIRST generated token: :class:`VocabSplit` cuts the vocabulary into two halves
along one coordinate of the model's frozen output embedding (token ids whose coordinate lies above its median
form the upper half). A LoRA on the attention and MLP projections can turn the final hidden state toward that
coordinate and so make one half likely. (A split by token id cannot be learnt by this model: its tied embedding
has std 0.02 and the final RMSNorm bounds the hidden state's norm to √64, so every logit stays within ±1.3 and no
adapter below the head moves the share of a random half of the 49,152 ids by more than a fraction of a percent.)

Which coordinate decides turn k is a property of the untrained model, not a choice per seed
(:meth:`VocabSplit.coin_axes`): the coordinates are ranked by how close the untrained model's exact
first-token distribution (at the bench's temperature) is to a fair coin on every question of the env, and
turn k takes the (k+1)-th. On a fixed coordinate the untrained model need not be at chance: at temperature 0.05
its mass on the upper half of coordinate 0 is 0.65 after question 0 and 0.32 after question 1 of ``one_turn``,
so that env started at 0.70 (success 0.67 expected) before any update. On the first-ranked coordinate both are
within 0.01 of 1/2: the first turn starts at chance, and every group has samples of both halves to learn from.
Later turns see earlier turns' tokens and observations in their context; their coordinates are chosen on the
question alone, so their start is near chance but not exactly (the measured starts are in the bench's lines).

A turn is one of four *slots*:

- ``answer``: the final ``answer`` call; upper half answers ``A``, lower half ``B``; correct when it equals
  the task's hidden answer. Ends the episode.
- ``call``: a tool call; upper half calls the task's reference tool (``ndvi``, whose observation shows the
  hidden answer), lower half an in-domain wrong tool (``ndwi``), which ends the episode unanswered.
- ``free``: the reference call whatever the token (a turn that changes nothing).
- ``risky``: upper half a valid call, lower half a schema violation (E = 1, RS-Claw-Evolution's error
  indicator); the episode goes on either way.

A slot is written in one of three *styles*, so that each recipe's reward sees the decision:
``agent`` (json format: outcome, MEFR), ``hierarchical`` (HiRS-Agent VG-HRL: calls are specialist turns with
the routed family as sub-goal, answers are manager turns) and ``executor`` (Earth-Agent-Pro: the answer slot is
a call node ``class_area(class_name=A|B)`` matched against the reference step, so the per-call tiered reward
grades it).

The four environments of :data:`LEARN_ENVS` (two tasks each):

- ``one_turn`` [answer]: question 0's answer is A, question 1's B, as each question states (chance 0.5).
- ``two_turn`` [call, answer]: the two tasks have the same question and hidden answers A and B; only the
  reference tool's observation tells them apart, so the answer must follow the observation (chance ≈ 0.25).
- ``final_only`` [free, free, answer]: only the last turn decides; answers as in ``one_turn`` (chance ≈ 0.5).
- ``tap`` [risky, answer]: a task the agent cannot solve: a coin decides whether its answer is right (the
  answer slot's value is flipped in half of the episodes, at random), so the outcome reward is noise that
  ignores errors. Success is an episode without error turn (chance ≈ 0.5): under GRPO an error turn gets
  the advantage of its trajectory, zero on average; only TAP's rule (an error turn never gets a positive
  advantage, RS-Claw-Evolution §IV-C) pushes errors out.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from earthrl.envs.tools.registry import TOOLS
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.trajectory import Trajectory, Turn

STYLES = ("agent", "hierarchical", "executor")
RIGHT_TOOL, WRONG_TOOL = "ndvi", "ndwi"  # both PRA: a wrong tool of the routed family (HiRS tier 2)
CALL_ARGS = {"raster": "scene.tif"}
NODE_TOOL = "class_area"  # executor style: the answer slot's call node
ANSWERS = ("A", "B")  # upper half, lower half
SYSTEM = "You are a test agent. Each turn, reply with one short action."
REPEAT = 32  # a class stated in a question or an observation: the tiny model's near-uniform attention needs the mass


def question(k: int, shown: str | None) -> str:
    """The text of question ``k``; ``shown``: the class it states (:data:`REPEAT` times), or None (it states none)."""
    says = f" The scene's class is {' '.join([shown] * REPEAT)}." if shown else ""
    return f"Question {k}:{says} Which class is the scene?"


class VocabSplit:
    """Halves of the vocabulary along coordinates of the model's output embedding (frozen: no adapter touches it),
    and the coordinate that decides each turn.

    Args:
        output_embedding: (V, H) float weight of the LM head.
        axes: the deciding coordinate of turn 0, 1, …; default coordinate k for turn k (:meth:`coin_axes` gives
            the bench's choice).

    Attributes:
        upper: (V, H) bool, ``upper[i, a]``: token i's coordinate ``a`` lies above that coordinate's median.
        axes: as given.
    """

    def __init__(self, output_embedding: torch.Tensor, axes: Sequence[int] | None = None) -> None:
        w = output_embedding.detach().float()
        self.upper = w > w.median(dim=0).values
        self.axes = tuple(range(w.shape[1])) if axes is None else tuple(axes)

    def is_upper(self, token_id: int, axis: int) -> bool:
        """Whether ``token_id`` lies in the upper half of coordinate ``axis``.

        Raises:
            IndexError: ``token_id`` outside the vocabulary or ``axis`` outside the hidden size.
        """
        return bool(self.upper[token_id, axis])

    def decides(self, token_id: int, k: int) -> bool:
        """Turn ``k``'s decision: whether ``token_id`` lies in the upper half of the turn's coordinate ``axes[k]``.

        Raises:
            IndexError: no axis for turn ``k``, or ``token_id`` outside the vocabulary.
        """
        return self.is_upper(token_id, self.axes[k])

    def coin_axes(self, logits: torch.Tensor, temperature: float, n: int) -> tuple[int, ...]:
        """The ``n`` coordinates on which a policy is closest to a fair coin on every prompt: coordinates sorted
        by ``max_q |P_q(upper) − 1/2|``, where ``P_q(upper)`` is the mass that ``softmax(logits[q] / temperature)``
        puts on the coordinate's upper half (exact, no sampling; ties by coordinate).

        Args:
            logits: (Q, V) float next-token logits of the untrained model after each of Q prompts.
            temperature: the sampling temperature (> 0).
            n: how many coordinates (one per decision turn), at most the hidden size.

        Raises:
            ValueError: ``n`` above the hidden size.
        """
        if n > self.upper.shape[1]:
            raise ValueError(f"{n} decision turns but only {self.upper.shape[1]} coordinates to split on")
        p = torch.softmax(logits.double() / temperature, dim=-1)  # (Q, V)
        gap = (p @ self.upper.double() - 0.5).abs().amax(dim=0)  # (H,)
        return tuple(sorted(range(gap.numel()), key=lambda a: (round(gap[a].item(), 12), a))[:n])


@dataclass(frozen=True)
class LearnEnv:
    """One synthetic environment: its slots, what its tasks ask and how success is judged.

    Each of its two questions is one GRPO group per step. An episode's hidden answer is the question's
    (``hidden="question"``: question 0 is A, question 1 is B, and the question says so, :data:`REPEAT` times) or a
    coin's (``hidden="coin"``: A or B at random per episode; the group's episodes then live in different worlds
    behind one question). The task an episode is scored against is its question's in its world (id
    ``<env>-<k><answer>``).

    Attributes:
        name: the env's name in :data:`LEARN_ENVS`.
        slots: the turn kinds in order (``answer``, ``call``, ``free``, ``risky``); the last is ``answer``.
        hidden: ``"question"`` or ``"coin"`` (above).
        goal: ``"answer"`` (the answer is the hidden one) or ``"no_errors"`` (no turn with E = 1).
    """

    name: str
    slots: tuple[str, ...]
    hidden: str = "question"
    goal: str = "answer"

    def tasks(self, style: str) -> list[dict]:
        """The env's TaskSpec dicts in ``style``, one per question and hidden answer (their reference workflow
        is the optimal play).

        Raises:
            ValueError: an unknown style (names the known ones).
        """
        if style not in STYLES:
            raise ValueError(f"style {style!r}: use one of {', '.join(STYLES)}")
        out = []
        for k in range(len(ANSWERS)):
            for hidden in ANSWERS if self.hidden == "coin" else ANSWERS[k:k + 1]:
                reference = [{"name": RIGHT_TOOL, "arguments": dict(CALL_ARGS)} for s in self.slots if s != "answer"]
                reference.append({"name": NODE_TOOL, "arguments": {"class_name": hidden}} if style == "executor"
                                 else {"name": "answer", "arguments": {"value": hidden}})
                out.append({"id": f"{self.name}-{k}{hidden}", "question": question(k, hidden if self.hidden == "question" else None),
                            "skill": "learn", "answer": {"kind": "choice", "value": hidden}, "reference": reference})
        return out

    def success(self, traj: Trajectory, task: dict) -> bool:
        """The env's goal (:attr:`goal`): the hidden answer was given, or no turn had E = 1."""
        if self.goal == "no_errors":
            return traj.num_error_turns == 0
        return bool(traj.answer) and traj.answer.get("value") == task["answer"]["value"]


LEARN_ENVS: dict[str, LearnEnv] = {env.name: env for env in (
    LearnEnv("one_turn", ("answer",)),
    LearnEnv("two_turn", ("call", "answer"), hidden="coin"),
    LearnEnv("final_only", ("free", "free", "answer")),
    LearnEnv("tap", ("risky", "answer"), hidden="coin", goal="no_errors"),
)}
"""The environments by name (module doc)."""

@dataclass
class Episode:
    """One episode in play: its trajectory, its task (question and hidden answer), the context the next turn
    sees and the observations so far (its state: GiGPO's anchor)."""

    traj: Trajectory
    task: dict
    context: list[int]
    observations: list[str] = field(default_factory=list)
    done: bool = False


def play_turn(env: LearnEnv, style: str, split: VocabSplit, ep: Episode, k: int, out: dict, codec: ChatCodec,
              tokenizer) -> None:
    """Append turn ``k`` generated as ``out`` (the engine's dict: ``response_ids``, ``logprobs``,
    ``finish_reason``) to the episode: decide it by its first token (:meth:`VocabSplit.decides`), write the slot's
    Turn fields in ``style``, and extend the context by the response and the observation's chat-template
    delta (:meth:`~earthrl.rollout.chat.ChatCodec.observation_ids`; none after the last turn)."""
    slot, hidden = env.slots[k], ep.task["answer"]["value"]
    upper = split.decides(out["response_ids"][0], k)
    role = "agent"
    anchor = f"{ep.traj.group}|{'|'.join(ep.observations)}"  # the question and what the episode has seen
    fields_: dict = {"error": False, "error_kind": None, "verdict": "pass"}
    if slot == "answer":
        value = ANSWERS[0] if upper else ANSWERS[1]
        call = ({"name": NODE_TOOL, "arguments": {"class_name": value}} if style == "executor"
                else {"name": "answer", "arguments": {"value": value}})
        role = "manager" if style == "hierarchical" else "agent"
        observation = f"answer {value}"
        ep.traj.answer, ep.done = {"value": value, "unit": None}, True
    elif slot == "risky" and not upper:
        call = {"name": RIGHT_TOOL, "arguments": {}}
        fields_ = {"error": True, "error_kind": "schema_error", "verdict": None}
        observation = "error: ndvi needs the argument 'raster'"
    else:
        name = RIGHT_TOOL if upper or slot in ("free", "risky") else WRONG_TOOL
        call = {"name": name, "arguments": dict(CALL_ARGS)}
        observation = f"{name}: class " + " ".join([hidden] * REPEAT) if name == RIGHT_TOOL and slot == "call" else f"{name}: done"
        ep.done = name == WRONG_TOOL  # a dead end: the episode ends unanswered
        artifacts = ep.traj.record["artifacts"]
        artifacts.append({"name": f"{name}_{len(artifacts)}.tif", "tool": name, "parents": []})
    if style == "hierarchical" and role == "agent":
        role = "specialist"
        fields_["subgoal"] = {"family": TOOLS[RIGHT_TOOL].family, "subgoal": "compute the index"}
    fields_["anchor"] = anchor
    last = ep.done or k + 1 == len(env.slots)
    obs_ids = [] if last else codec.observation_ids(observation, out["response_ids"])
    text = tokenizer.decode(out["response_ids"], skip_special_tokens=True)
    ep.traj.turns.append(Turn(response_ids=out["response_ids"], response_logprobs=out["logprobs"],
                              observation_ids=obs_ids, response_text=text, observation=observation,
                              tool_call=call, finish_reason=out["finish_reason"], role=role,
                              tool_calls=[{**call, "error": fields_["error"], "error_kind": fields_["error_kind"]}],
                              **fields_))
    ep.context += out["response_ids"] + obs_ids
    ep.observations.append(observation)
    ep.done = last


def new_episodes(env: LearnEnv, style: str, codec: ChatCodec, group_size: int, step: int,
                 seed: int = 0) -> list[Episode]:
    """``group_size`` fresh episodes of each of the env's questions (group key ``<step>/<env>-<k>``), prompted
    through the model's chat template (:meth:`~earthrl.rollout.chat.ChatCodec.prompt_ids`); hidden answers
    (``hidden="coin"``) drawn from ``random.Random(f"{seed}/{step}")``."""
    rng = random.Random(f"{seed}/{step}")
    tasks = {t["id"]: t for t in env.tasks(style)}
    eps = []
    for k in range(len(ANSWERS)):
        for _ in range(group_size):
            hidden = rng.choice(ANSWERS) if env.hidden == "coin" else ANSWERS[k]
            task = tasks[f"{env.name}-{k}{hidden}"]
            prompt = codec.prompt_ids(SYSTEM, task["question"])
            traj = Trajectory(task_id=task["id"], group=f"{step}/{env.name}-{k}", prompt_ids=list(prompt),
                              record={"artifacts": [], "skills_opened": [], "docs_opened": []})
            eps.append(Episode(traj, task, list(prompt)))
    return eps
