"""``earthrl bench learn``: does an update move the policy toward reward? Learnability runs with negative controls.

Tests compare each loss and advantage with a plain computation, which a sign error shared by both, a mask on
the wrong tokens or an adapter the engine never receives would all pass. Here each algorithm preset
(``conf/algorithm/*.yaml``, as ``earthrl train algorithm=NAME`` composes it) trains the tiny random model on
the synthetic environments of :mod:`earthrl.bench.learn_envs` and must lift its success rate from chance to a
goal within a step budget, as CleanRL and Stable-Baselines keep reward curves on known tasks. Every step is
the trainer's own stages on their own code (:class:`~earthrl.bench.grpo_step.LocalStep`): the in-process HF
engine generates, :func:`~earthrl.rewards.scoring.score` scores with the preset's reward and turn reward,
:func:`~earthrl.algorithms.estimators.token_advantages` runs its estimator, ``Learner.update`` its policy
loss on the LoRA policy, and the new adapter is pushed to the engine.

Negative controls prove the check can fail: the same run with the advantages' sign flipped, and with the
response mask (and what is aligned with it) shifted one token early, must miss the goal on ``one_turn``. Both
are harness hooks on the estimator's output and on the packed batch (:data:`CONTROLS`), not options of the
product.

Settings (the bench's, not the presets' learning rate or temperature):

- sampling temperature :data:`TEMPERATURE`, engine and learner alike (at 1.0 the tiny model's logits barely
  move, see :mod:`~earthrl.bench.learn_envs`);
- the preset's adapter (``model.lora`` with its ``algorithm.lora``) without LoRA dropout: the engine samples
  without dropout, and with it every row of a group gets its own dropout noise, so even a batch that carries no
  signal gives a gradient (norm 1.4) that Adam follows: the mask-shift control wandered from 0.38 to 0.72;
- AdamW with learning rate :data:`LR_RANK` / rank: Adam moves every entry of B by about the learning rate, so
  the adapter's change per step grows with the rank (VG-HRL's rank 64 at rank 4's rate unlearnt what it had learnt);
- G = :data:`GROUP_SIZE` episodes of each of an env's two questions per step, :data:`MAX_NEW_TOKENS` token a turn
  (the deciding one), and before the first step and after the last an evaluation of :data:`EVAL_GROUP` episodes
  per question without update: the second's success rate is what meets the goal.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from earthrl.algorithms.learner import MicroBatch, PackedBatch
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.bench.grpo_step import LocalStep, model_lora
from earthrl.bench.inputs import resolve_model
from earthrl.bench.learn_envs import LEARN_ENVS, Episode, LearnEnv, VocabSplit, new_episodes, play_turn
from earthrl.launch.override_text import CONF_DIR, presets
from earthrl.models.lora import merge_lora
from earthrl.rollout.chat import ChatCodec

TEMPERATURE = 0.05
LR_RANK = 0.02  # learning rate × LoRA rank: 5e-3 at the tiny model's rank 4
ADAM_EPS = 1e-5
MAX_NEW_TOKENS = 1  # a turn is its deciding token: nothing else in the turn to learn from or to drift
GROUP_SIZE = 8
EVAL_GROUP = 32
SEED = 0


@dataclass(frozen=True)
class EnvGoal:
    """Step budget and goal of one env: the success rate after ``steps`` updates must reach ``goal``."""

    steps: int
    goal: float


ENV_GOALS: dict[str, EnvGoal] = {
    "one_turn": EnvGoal(steps=15, goal=0.85),
    "two_turn": EnvGoal(steps=40, goal=0.8),
    "final_only": EnvGoal(steps=25, goal=0.85),
    "tap": EnvGoal(steps=30, goal=0.8),
}
"""Env name → its budget and goal (the chance level of each is in :mod:`earthrl.bench.learn_envs`). Goals sit
well above chance (0.5, and 0.25 for ``two_turn``). Each budget is at least twice the step at which the slowest
preset's rollout first succeeded in ≥ 90 % of its episodes (measured on the tiny model, ``docs/benchmarks.md``):
``one_turn`` step 7 (budget 15, short enough for six presets with both controls in the bounded test),
``final_only`` step 4 (25), ``two_turn`` step 9, two decisions in a row (40), ``tap`` step 16 for ``tap_only``,
whose only signal is the error mask (30)."""


@dataclass(frozen=True)
class Pair:
    """One algorithm preset as the bench runs it.

    Attributes:
        name: the preset (``conf/algorithm/<name>.yaml``); aliases: presets with the very same spec.
        spec: its :class:`~earthrl.algorithms.spec.AlgorithmSpec`; lora: its ``algorithm.lora`` override.
        style: how the envs write turns for its rewards (:data:`~earthrl.bench.learn_envs.STYLES`).
    """

    name: str
    spec: AlgorithmSpec
    lora: dict
    style: str
    aliases: tuple[str, ...] = ()

    @property
    def envs(self) -> list[str]:
        """The envs it runs: every env, ``tap`` only for an estimator that reads the error mask (TAP)."""
        return [e for e in LEARN_ENVS if e != "tap" or "error_mask" in self.spec.advantage_inputs]


def style_of(spec: AlgorithmSpec) -> str:
    """``hierarchical`` for a recipe that needs the hierarchical format (VG-HRL), ``executor`` for one with a per-call
    turn reward on the json format (Earth-Agent-Pro), else ``agent``."""
    if spec.action_format == "hierarchical":
        return "hierarchical"
    return "executor" if spec.turn_reward else "agent"


def algorithm_pairs(names: Sequence[str] | None = None) -> tuple[list[Pair], list[str]]:
    """The algorithm presets, composed as ``earthrl train algorithm=NAME`` composes them.

    Args:
        names: presets to run (default: every ``conf/algorithm/*.yaml``); a preset with the spec of an
            earlier one runs once, under the first name, the others listed as its aliases.

    Returns:
        ``(pairs, notes)``: notes are one line per requested preset that does not exist (skipped).
    """
    from hydra import compose, initialize_config_dir  # lazy: hydra at import; the env checks need none of it
    from omegaconf import OmegaConf

    from earthrl.launch.hydra_app import CONFIG_NAMES  # lazy: with Hydra; registers the config's resolvers and schemas

    available = presets("algorithm")
    wanted = list(names) if names else available
    notes = [f"algorithm={n}: no conf/algorithm/{n}.yaml here, skipped" for n in wanted if n not in available]
    pairs: list[Pair] = []
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for name in (n for n in wanted if n in available):
            alg = OmegaConf.to_container(compose(CONFIG_NAMES["train"], overrides=[f"algorithm={name}"]).algorithm,
                                         resolve=True)
            spec = AlgorithmSpec.from_config(alg)
            same = next((i for i, p in enumerate(pairs) if replace(p.spec, name="") == replace(spec, name="")
                         and p.lora == dict(alg.get("lora") or {})), None)
            if same is not None:
                pairs[same] = replace(pairs[same], aliases=(*pairs[same].aliases, name))
                continue
            pairs.append(Pair(name, spec, dict(alg.get("lora") or {}), style_of(spec)))
    return pairs, notes


def flip_sign(advantages: list[torch.Tensor]) -> list[torch.Tensor]:
    """Negative control: every per-token advantage with its sign flipped (a sign error)."""
    return [-a for a in advantages]


def shift_mask(batch: PackedBatch) -> PackedBatch:
    """Negative control: the response mask, and the advantages, rollout logprobs and loss inputs aligned with it,
    one token early in every row (an off-by-one: ``mask[:, t] = mask[:, t + 1]``): the loss lands on the token
    before each turn (the prompt's or the observation's last) and on the turn's tokens but its last; ids and
    attention unchanged."""
    def earlier(t: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.pad(t, (0, 1))[:, 1:]

    def shifted(mb: MicroBatch) -> MicroBatch:
        return MicroBatch(mb.input_ids, mb.attention_mask, earlier(mb.response_mask), earlier(mb.rollout_logprobs),
                          earlier(mb.advantages), {k: earlier(v) for k, v in mb.inputs.items()})

    return replace(batch, micro=[shifted(mb) for mb in batch.micro], zero_micro=[shifted(mb) for mb in batch.zero_micro])


CONTROLS: dict[str, tuple[Callable | None, Callable | None]] = {
    "sign_flip": (flip_sign, None),
    "mask_shift": (None, shift_mask),
}
"""Control name → (hook on the per-token advantages, hook on the packed batch); each run must MISS its goal."""
CONTROL_ENVS = ("one_turn",)
"""The envs the controls run on. With one token a turn the shifted mask trains the prompt's last token, the same
in every episode of a group, whose advantages sum to 0. (On ``two_turn`` it also trains the observation's last
token, right before the answer and conditioned on the observation; through that neighbour vg_hrl's answer was
learnt all the same, 0.12 → 0.89 in 30 steps: an off-by-one mask can pass a multi-turn check.)"""


class LearnRunner:
    """The loaded model and the runs on it (one :class:`~earthrl.bench.grpo_step.LocalStep` per LoRA shape).

    Args:
        model: a fetched model name or an HF folder (default the tiny random test model).
        dtype: ``model.dtype`` rule; threads: torch threads.

    Raises:
        FileNotFoundError: the model is not fetched (names the fetch command).
    """

    def __init__(self, model: str = "tiny-llama", dtype: str = "float32", threads: int = 1) -> None:
        self.path = resolve_model(model)
        self.dtype, self.threads = dtype, threads
        self.threads_before = torch.get_num_threads()  # LocalStep sets the process's; close() gives it back
        self.model_lora = model_lora(self.path)
        self._steps: dict[tuple, LocalStep] = {}
        self._axes: dict[str, tuple[int, ...]] = {}
        self.tokenizer = LocalStep._tokenizer(self.path)
        self.codec = ChatCodec(self.tokenizer)

    def lora(self, pair: Pair) -> dict:
        """``pair``'s adapter: ``model.lora`` with its ``algorithm.lora`` (rank 16, alpha 32 where neither says)."""
        return {"rank": 16, "alpha": 32, **merge_lora(self.model_lora, pair.lora), "dropout": 0.0}

    def local_step(self, pair: Pair) -> LocalStep:
        """The runner for ``pair``'s adapter (:meth:`lora`), loaded once per adapter shape."""
        lora = self.lora(pair)
        key = tuple(sorted((k, str(v)) for k, v in lora.items()))
        if key not in self._steps:
            self._steps[key] = LocalStep(self.path, self.dtype, lora, pair.spec, MAX_NEW_TOKENS, self.threads,
                                         lr=LR_RANK / lora["rank"], temperature=TEMPERATURE,
                                         stop_ids=[self.codec.eos_id], gradient_checkpointing=False)
        return self._steps[key]

    def split(self, runner: LocalStep, env: LearnEnv) -> VocabSplit:
        """The env's :class:`~earthrl.bench.learn_envs.VocabSplit` with its decision coordinates
        (:meth:`~earthrl.bench.learn_envs.VocabSplit.coin_axes` of the untrained model on the env's questions at
        :data:`TEMPERATURE`; call it right after ``runner.restart``, while the adapter is the initial one, whose
        zero B leaves the model untrained). Computed once per env: every adapter starts untrained."""
        head = runner.policy.model.get_base_model().get_output_embeddings().weight
        if env.name not in self._axes:
            prompts = {tuple(e.context) for e in new_episodes(env, "agent", self.codec, 1, step=0)}
            with torch.no_grad():
                logits = torch.stack([runner.policy.model(input_ids=torch.tensor([list(p)])).logits[0, -1].float()
                                      for p in sorted(prompts)])
            self._axes[env.name] = VocabSplit(head).coin_axes(logits, TEMPERATURE, len(env.slots))
        return VocabSplit(head, self._axes[env.name])

    def rollout(self, runner: LocalStep, split: VocabSplit, env: LearnEnv, style: str, group_size: int,
                step: int, seed: int) -> list[Episode]:
        """Play ``group_size`` episodes of each task of ``env`` to their end, turns batched over episodes."""
        eps = new_episodes(env, style, self.codec, group_size, step, seed)
        for k in range(len(env.slots)):
            live = [e for e in eps if not e.done]
            if not live:
                break
            outs = runner.generate([e.context for e in live], seed=seed * 100_003 + step * 101 + k)
            for e, out in zip(live, outs):
                play_turn(env, style, split, e, k, out, self.codec, self.tokenizer)
        return eps

    def run(self, pair: Pair, env_name: str, control: str | None = None, *, steps: int | None = None,
            group_size: int = GROUP_SIZE, seed: int = SEED) -> dict:
        """Train ``pair`` on env ``env_name`` from the initial adapter, then evaluate.

        Args:
            control: a :data:`CONTROLS` name, or None for the real run.
            steps: updates (default the env's :data:`ENV_GOALS` budget).
            group_size: G, samples per task and step.

        Returns:
            ``algorithm``, ``env``, ``control``, ``steps``, ``lr``, ``goal``, ``start`` and ``end`` (success rate of
            :meth:`evaluate` before the first update and after the last), ``met`` (end ≥ goal), ``success`` and
            ``reward`` (per step: success rate and mean reward of the step's rollout), ``seconds``.

        Raises:
            KeyError: an unknown env or control (names the known ones).
        """
        if env_name not in LEARN_ENVS or (control is not None and control not in CONTROLS):
            raise KeyError(f"env {env_name!r} / control {control!r}: envs {', '.join(LEARN_ENVS)}, "
                           f"controls {', '.join(CONTROLS)}")
        t0 = time.perf_counter()
        env, goal = LEARN_ENVS[env_name], ENV_GOALS[env_name]
        steps = goal.steps if steps is None else steps
        runner, lr = self.local_step(pair), LR_RANK / self.lora(pair)["rank"]
        runner.restart(pair.spec, lr, TEMPERATURE, ADAM_EPS)
        torch.manual_seed(seed)
        split = self.split(runner, env)
        adv_hook, batch_hook = CONTROLS[control] if control else (None, None)
        tasks = env.tasks(pair.style)
        start = self.evaluate(runner, split, env, pair.style, seed)
        success, reward = [], []
        for step in range(steps):
            eps = self.rollout(runner, split, env, pair.style, group_size, step, seed)
            success.append(statistics.fmean(env.success(e.traj, e.task) for e in eps))
            out = runner.train_on([e.traj for e in eps], tasks, advantages_hook=adv_hook, batch_hook=batch_hook)
            reward.append(statistics.fmean(out["scores"].reward))
        end = self.evaluate(runner, split, env, pair.style, seed)
        return {"algorithm": pair.name, "env": env_name, "control": control, "steps": steps, "lr": lr, "goal": goal.goal,
                "start": start, "end": end, "met": end >= goal.goal,
                "success": [round(s, 4) for s in success], "reward": [round(r, 4) for r in reward],
                "seconds": round(time.perf_counter() - t0, 2)}

    def evaluate(self, runner: LocalStep, split: VocabSplit, env: LearnEnv, style: str, seed: int) -> float:
        """Success rate of :data:`EVAL_GROUP` episodes per question under the current adapter, no update (their
        own sampling seeds and coins: ``seed`` + 1, step −1)."""
        eps = self.rollout(runner, split, env, style, EVAL_GROUP, -1, seed + 1)
        return statistics.fmean(env.success(e.traj, e.task) for e in eps)

    def close(self) -> None:
        """Free every loaded model and give torch back its thread count."""
        for step in self._steps.values():
            step.close()
        self._steps.clear()
        torch.set_num_threads(self.threads_before)


def run_line(r: dict) -> str:
    """One result as a line: ``learn/grpo/one_turn: 0.48 → 0.93 in 15 steps (goal ≥ 0.85) met``; a control's
    line says whether it missed, as it must."""
    head = f"learn/{r['algorithm']}/{r['env']}" + (f" [{r['control']}]" if r["control"] else "")
    body = f"{r['start']:.2f} → {r['end']:.2f} in {r['steps']} steps (goal ≥ {r['goal']:.2f})"
    if r["control"]:
        return f"{head}: {body} " + ("MET: this control cannot fail the check" if r["met"] else "missed, as a control must")
    return f"{head}: {body} " + ("met" if r["met"] else "MISSED")


def bench_learn(model: str = "tiny-llama", algorithms: Sequence[str] | None = None,
                envs: Sequence[str] | None = None, controls: bool = True, steps: int | None = None,
                group_size: int = GROUP_SIZE, dtype: str = "float32", threads: int = 1) -> dict:
    """Every algorithm preset on its envs, each run against its goal, and the negative controls on ``one_turn``.

    Args:
        model: a fetched model name or an HF folder.
        algorithms: presets to run (default every ``conf/algorithm/*.yaml``; one missing here is skipped with
            a printed note).
        envs: envs to run (default each preset's :attr:`Pair.envs`).
        controls: also run :data:`CONTROLS` on ``one_turn`` for each preset.
        steps: updates per run (default each env's budget in :data:`ENV_GOALS`).
        group_size: G, samples per task and step.
        dtype, threads: the model's dtype rule and torch threads.

    Returns:
        ``model``, ``temperature``, ``lr_rank``, ``group_size``, ``runs`` (each :meth:`LearnRunner.run` result),
        ``met`` / ``missed`` (real runs), ``controls_met`` (controls that reached the goal: a check that cannot
        fail), ``skipped`` (notes) and ``ok`` (nothing missed and no control met).

    Raises:
        FileNotFoundError: the model is not fetched. ValueError: an unknown env.
    """
    unknown = sorted(set(envs or ()) - set(LEARN_ENVS))
    if unknown:
        raise ValueError(f"--envs {','.join(unknown)}: choose among {', '.join(LEARN_ENVS)}")
    pairs, skipped = algorithm_pairs(algorithms)
    for note in skipped:
        print(f"learn: {note}", flush=True)
    learner = LearnRunner(model, dtype, threads)
    runs = []
    try:
        for pair in pairs:
            if pair.aliases:
                print(f"learn/{pair.name}: also stands for {', '.join(pair.aliases)} (same spec)", flush=True)
            jobs = [(e, None) for e in pair.envs if not envs or e in envs]
            if controls:
                jobs += [(e, c) for e in CONTROL_ENVS for c in CONTROLS if e in pair.envs and (not envs or e in envs)]
            for env_name, control in jobs:
                r = learner.run(pair, env_name, control, steps=steps, group_size=group_size)
                runs.append(r)
                print(run_line(r), flush=True)
    finally:
        learner.close()
    missed = [f"{r['algorithm']}/{r['env']}" for r in runs if not r["control"] and not r["met"]]
    controls_met = [f"{r['algorithm']}/{r['env']}[{r['control']}]" for r in runs if r["control"] and r["met"]]
    return {"model": learner.path.name, "temperature": TEMPERATURE, "lr_rank": LR_RANK, "group_size": group_size,
            "runs": runs, "met": sum(1 for r in runs if not r["control"] and r["met"]), "missed": missed,
            "controls_met": controls_met, "skipped": skipped, "ok": not missed and not controls_met}
