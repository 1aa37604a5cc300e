"""``earthrl bench train``: EarthRL's local GRPO step against TRL's ``GRPOTrainer`` on the same work.

The same single-turn task for both: B real earthrl-mini-core first-turn prompts
(:func:`~earthrl.bench.inputs.bench_prompts`), G samples each of exactly ``max_new_tokens``
tokens (EarthRL: a stop id the model cannot sample; TRL: ``min_new_tokens``), temperature 1, the same
reward (:func:`action_similarity`: how close the completion is to the task's reference first call),
the same model, dtype, LoRA (the model config's rank, alpha and targets), β, learning rate, one
optimizer step per step over all B·G sequences in one micro-batch, gradient checkpointing on.

EarthRL's step is the local recipe's stages on their own code: the HF engine's ``generate``
(in this process), :func:`~earthrl.rewards.scoring.score`, :func:`~earthrl.algorithms.estimators.token_advantages`,
``Learner.update(pack(...))`` and the LoRA push to the engine. TRL's step is one ``Trainer`` step
(its generation, reward, reference forward and update). Each runs ``steps`` steps; the first is a
warm-up, the median of the others is reported. Goal: EarthRL's step ≤ 0.7× TRL's.
TRL is optional (``pip install -e ".[bench]"``); without it that side is skipped with the reason.
"""

from __future__ import annotations

import difflib
import gc
import statistics
import tempfile
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

import torch
import yaml

from earthrl.algorithms.estimators import token_advantages
from earthrl.algorithms.learner import Learner, LearnerConfig, PackedBatch, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.bench.inputs import bench_prompts, first_action, resolve_model, unreachable_stop_id
from earthrl.launch.config_schema import defaults
from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import lora_config
from earthrl.models.policy import Policy
from earthrl.rewards.scoring import score
from earthrl.rollout.hf_engine import HFEngine, SamplingParams
from earthrl.rollout.trajectory import Trajectory, Turn

CONF_MODELS = Path(__file__).resolve().parents[1] / "conf" / "model"
REWARD = f"{__name__}:action_similarity"
LR = 5e-5
STAGES = ("score_s", "advantages_s", "update_s", "push_s")


def similarity(text: str, reference: str) -> float:
    """``difflib.SequenceMatcher`` ratio of ``text`` and ``reference`` in [0, 1] (1: identical)."""
    return difflib.SequenceMatcher(None, text, reference).ratio()


def action_similarity(trajectory, task: dict) -> float:
    """Reward of the bench's single-turn task: :func:`similarity` of the first turn's text and the
    task's reference first call as a json action (continuous, so groups have non-zero advantages)."""
    text = trajectory.turns[0].response_text if trajectory.turns else ""
    return similarity(text, first_action(task))


def model_lora(model_path: Path) -> dict:
    """The LoRA settings (rank, alpha, dropout, target_modules) of the model's config in ``conf/model/``
    (by folder name) over the schema's ``model.lora``; the schema's alone for another folder."""
    conf = CONF_MODELS / f"{Path(model_path).name}.yaml"
    return {**defaults("model.lora"), **(yaml.safe_load(conf.read_text())["lora"] if conf.exists() else {})}


def bench_spec(beta: float) -> AlgorithmSpec:
    """The spec of the bench's single-turn task: :func:`action_similarity` reward, GRPO, PPO-clip + KL with β."""
    return AlgorithmSpec.from_config(defaults("algorithm", name="bench", reward=REWARD, estimator="grpo",
                                              policy_loss={"kl_coef": beta}))


class LocalStep:
    """EarthRL's local GRPO step on token-id prompts, stage by stage (engine, score, advantages,
    update, push), without Ray or the EnvPool: the part of a step the trainer owns.

    Args:
        model_path: HF folder; dtype: ``model.dtype`` rule; lora: every ``lora_config`` keyword (:func:`model_lora`).
        spec: the recipe's :class:`~earthrl.algorithms.spec.AlgorithmSpec` (reward, estimator, loss and its inputs).
        max_new_tokens: generated tokens per turn at most (exactly, with the default stop id).
        threads: torch threads.
        lr: AdamW learning rate of the adapter.
        temperature: sampling temperature of the engine and the learner's logit temperature (one value:
            the learner scores the tokens under the distribution they were sampled from).
        stop_ids: the engine's stop ids; default a token id the model cannot sample
            (:func:`~earthrl.bench.inputs.unreachable_stop_id`), so every turn has ``max_new_tokens`` tokens.
        gradient_checkpointing: the policy's setting.
    """

    def __init__(self, model_path: Path, dtype: str, lora: dict, spec: AlgorithmSpec, max_new_tokens: int,
                 threads: int = 2, *, lr: float = LR, temperature: float = 1.0, stop_ids: list[int] | None = None,
                 gradient_checkpointing: bool = True) -> None:
        torch.set_num_threads(threads)
        torch.manual_seed(0)
        resolved = resolve_dtype(dtype)[0]
        self.engine = HFEngine(str(model_path), stop_ids=stop_ids or [unreachable_stop_id(model_path)], lora=lora,
                               dtype=resolved, num_threads=threads)
        self.tokenizer = self._tokenizer(model_path)
        self.policy = Policy(str(model_path), lora, dtype=resolved, gradient_checkpointing=gradient_checkpointing)
        self.initial_adapter = self.policy.adapter_state_dict()
        self.max_new_tokens = max_new_tokens
        self.calls = 0
        self.restart(spec, lr, temperature)

    def restart(self, spec: AlgorithmSpec, lr: float, temperature: float, adam_eps: float = 1e-8) -> None:
        """Start again from the adapter of construction (the engine gets it too), with a fresh AdamW (learning
        rate ``lr``, ε ``adam_eps``, torch's default 1e-8) and a learner for ``spec``: a new run on the loaded model."""
        from peft import set_peft_model_state_dict  # lazy: peft imports transformers; the module stays light

        set_peft_model_state_dict(self.policy.model, self.initial_adapter)
        self.engine.set_lora_weights(self.policy.adapter_state_dict())
        self.spec, self.temperature = spec, temperature
        optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=lr, eps=adam_eps, weight_decay=0.0)
        self.learner = Learner(self.policy, optimizer, POLICY_LOSSES.lookup(spec.loss.name),
                               LearnerConfig(loss=spec.loss, loss_inputs=spec.loss_inputs,
                                             ppo_epochs=defaults("algorithm.ppo_epochs"), micro_batch_size=1,
                                             grad_clip=defaults("algorithm.grad_clip"), temperature=temperature,
                                             correction=spec.correction))

    @staticmethod
    def _tokenizer(model_path: Path):
        from transformers import AutoTokenizer

        return AutoTokenizer.from_pretrained(str(model_path))

    def generate(self, contexts: list[list[int]], seed: int | None = None) -> list[dict]:
        """One engine call: a continuation of each token-id context at the runner's temperature
        (``seed``: the call's sampling seed, default a counter of calls). Returns the engine's dicts."""
        params = SamplingParams(max_new_tokens=self.max_new_tokens, temperature=self.temperature, top_p=1.0,
                                seed=self.calls if seed is None else seed)
        self.calls += 1
        return self.engine.generate(contexts, params)

    def step(self, prompts: list[list[int]], tasks: list[dict], group_size: int, turns: int = 1,
             observation_ids: list[int] | None = None) -> dict:
        """One step over ``group_size`` samples of each prompt; ``turns`` > 1 appends ``observation_ids``
        after each turn and generates again (batched over all rows).

        Returns:
            seconds of ``generate_s``, ``score_s``, ``advantages_s``, ``update_s``, ``push_s``, ``step_s``,
            and ``generated_tokens``, ``sequences``, ``mean_reward``, ``loss``.
        """
        rows = [(i, p) for i, p in enumerate(prompts) for _ in range(group_size)]
        trajs = [Trajectory(task_id=tasks[i]["id"], group=f"g{i}", prompt_ids=list(p)) for i, p in rows]
        context = [list(p) for _, p in rows]
        t0 = time.perf_counter()
        for t in range(turns):
            for traj, ctx, out in zip(trajs, context, self.generate(context)):
                obs = list(observation_ids or []) if t < turns - 1 else []
                text = self.tokenizer.decode(out["response_ids"], skip_special_tokens=True)
                traj.turns.append(Turn(response_ids=out["response_ids"], response_logprobs=out["logprobs"],
                                       observation_ids=obs, response_text=text, finish_reason=out["finish_reason"]))
                ctx.extend(out["response_ids"] + obs)
        t1 = time.perf_counter()
        result = self.train_on(trajs, tasks, start=t1)
        return {"generate_s": t1 - t0, **{k: result[k] for k in STAGES}, "step_s": result["end"] - t0,
                "generated_tokens": sum(len(tn.response_ids) for tr in trajs for tn in tr.turns),
                "sequences": len(trajs), "mean_reward": sum(result["scores"].reward) / len(trajs),
                "loss": result["metrics"]["loss"]}

    def train_on(self, trajs: list[Trajectory], tasks: list[dict], *,
                 advantages_hook: Callable[[list[torch.Tensor]], list[torch.Tensor]] | None = None,
                 batch_hook: Callable[[PackedBatch], PackedBatch] | None = None, start: float | None = None) -> dict:
        """The stages after the rollout on ``trajs``: score, advantages, pack + learner update (one micro-batch
        of every row), push of the new adapter to the engine.

        Args:
            trajs: the step's trajectories; tasks: their TaskSpec dicts.
            advantages_hook, batch_hook: harness hooks (``earthrl bench learn``'s negative controls) applied
                to the per-token advantages and to the packed batch before the update; None: as the trainer.
            start: ``time.perf_counter()`` at which the score stage's time starts (default: on entry); a caller
                that timed the stage before passes that stage's end, so no moment between them goes untimed.

        Returns:
            ``scores`` (:class:`~earthrl.rewards.scoring.Scores`), ``metrics`` (the learner's), and seconds of
            ``score_s``, ``advantages_s``, ``update_s``, ``push_s``; ``end``: ``time.perf_counter()`` after the push.
        """
        t0 = time.perf_counter() if start is None else start
        scores = score(trajs, {t["id"]: t for t in tasks}, self.spec)
        t1 = time.perf_counter()
        advantages = token_advantages(trajs, scores, self.spec)
        if advantages_hook is not None:
            advantages = advantages_hook(advantages)
        t2 = time.perf_counter()
        batch = pack(trajs, advantages, replace(self.learner.cfg, micro_batch_size=max(len(trajs), 1)))
        if batch_hook is not None:
            batch = batch_hook(batch)
        metrics = self.learner.update(batch)
        t3 = time.perf_counter()
        self.engine.set_lora_weights(self.policy.adapter_state_dict())
        t4 = time.perf_counter()
        return {"scores": scores, "metrics": metrics, "score_s": t1 - t0, "advantages_s": t2 - t1,
                "update_s": t3 - t2, "push_s": t4 - t3, "end": t4}

    def close(self) -> None:
        """Free the engine's and the policy's models."""
        del self.engine, self.policy, self.learner
        gc.collect()


def _earthrl(path: Path, prompts, tasks: list[dict], *, group_size: int, max_new_tokens: int, beta: float,
             steps: int, dtype: str, threads: int) -> dict:
    runner = LocalStep(path, dtype, model_lora(path), bench_spec(beta), max_new_tokens, threads)
    try:
        runs = [runner.step(prompts, tasks, group_size) for _ in range(steps)]
    finally:
        runner.close()
    timed = runs[1:] or runs
    out = {f"earthrl_{k}": statistics.median(r[k] for r in timed)
           for k in ("generate_s", "score_s", "advantages_s", "update_s", "push_s", "step_s")}
    out["earthrl_generated_tokens"] = runs[-1]["generated_tokens"]
    out["earthrl_mean_reward"] = runs[-1]["mean_reward"]
    out["rewards_advantages_share"] = (out["earthrl_score_s"] + out["earthrl_advantages_s"]) / out["earthrl_step_s"]
    return out


def _trl(path: Path, bench, tasks: list[dict], *, group_size: int, max_new_tokens: int, beta: float, steps: int,
         dtype: str, threads: int) -> dict:
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    torch.set_num_threads(threads)
    durations: list[float] = []
    tokens: list[int] = []

    class Clock(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            durations.append(time.perf_counter() - self.t0)

    def reward(prompts, completions, reference, completion_ids=(), **kw):
        tokens.append(sum(len(c) for c in completion_ids))
        return [similarity(c[0]["content"] if isinstance(c, list) else c, r) for c, r in zip(completions, reference)]

    rows = len(bench.messages)
    data = Dataset.from_dict({"prompt": bench.messages * steps, "reference": bench.first_actions * steps})
    lora = model_lora(path)
    with tempfile.TemporaryDirectory(prefix="earthrl-bench-trl-") as tmp:
        args = trl.GRPOConfig(
            output_dir=tmp, use_cpu=True, max_steps=steps, per_device_train_batch_size=rows * group_size,
            gradient_accumulation_steps=1, num_generations=group_size, max_completion_length=max_new_tokens,
            generation_kwargs={"min_new_tokens": max_new_tokens}, temperature=1.0, top_p=1.0, beta=beta,
            learning_rate=LR, weight_decay=0.0, max_grad_norm=1.0, gradient_checkpointing=True, shuffle_dataset=False,
            report_to="none", save_strategy="no", logging_steps=1, disable_tqdm=True, seed=0, bf16=False)
        model = AutoModelForCausalLM.from_pretrained(str(path), dtype=getattr(torch, resolve_dtype(dtype)[0]))
        trainer = trl.GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=data,
                                  processing_class=AutoTokenizer.from_pretrained(str(path)),
                                  peft_config=lora_config(**lora), callbacks=[Clock()])
        trainer.train()
        del trainer, model
        gc.collect()
    timed = durations[1:] or durations
    return {"trl_version": trl.__version__, "trl_step_s": statistics.median(timed),
            "trl_generated_tokens": tokens[-1] if tokens else 0}


def bench_train(model: str = "qwen2.5-coder-0.5b", rows: int = 1, group_size: int = 4, max_new_tokens: int = 32,
                beta: float = 0.01, steps: int = 3, dtype: str = "auto", threads: int = 2) -> dict:
    """Median step seconds of EarthRL's local GRPO step and of TRL's ``GRPOTrainer`` on the same work.

    Args:
        model: a fetched model name or an HF folder.
        rows: prompts per step (B); group_size: samples per prompt (G).
        max_new_tokens: tokens per sample (exactly); beta: KL coefficient β.
        steps: steps per side (the first is a warm-up; at least 2 for a warm median).
        dtype: ``model.dtype`` rule; threads: torch threads.

    Returns:
        flat dict: the settings, ``earthrl_<stage>_s`` (median generate, score, advantages, update,
        push, step), ``earthrl_generated_tokens`` (= rows·G·max_new_tokens), ``rewards_advantages_share``
        (score + advantages over the step; goal < 0.01), ``trl_step_s``, ``trl_generated_tokens``,
        ``trl_version`` and ``earthrl_over_trl`` (goal ≤ 0.7), or ``trl_skipped`` (the reason).

    Raises:
        FileNotFoundError: the model is not fetched. ValueError: a size below 1 (group_size below 2).
    """
    if rows < 1 or group_size < 2 or max_new_tokens < 1 or steps < 1:
        raise ValueError("bench train: rows, max_new_tokens and steps must be >= 1 and group_size >= 2")
    path = resolve_model(model)
    bench = bench_prompts(LocalStep._tokenizer(path), rows)
    tasks = bench.tasks
    kw = {"group_size": group_size, "max_new_tokens": max_new_tokens, "beta": beta, "steps": steps,
          "dtype": dtype, "threads": threads}
    out = {"model": path.name, "dtype": resolve_dtype(dtype)[0], "rows": rows, "group_size": group_size,
           "max_new_tokens": max_new_tokens, "beta": beta, "steps": steps,
           "prompt_tokens": sum(map(len, bench.first)) / rows}
    out.update(_earthrl(path, bench.first, tasks, **kw))
    try:
        out.update(_trl(path, bench, tasks, **kw))
        out["earthrl_over_trl"] = out["earthrl_step_s"] / out["trl_step_s"]
    except ImportError as exc:
        out["trl_skipped"] = f"TRL is not installed ({exc}): pip install -e '.[bench]'"
    return out
