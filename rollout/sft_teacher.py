"""Teacher rollouts as SFT trajectories, kept only when they end correct.

Two ways in:

- a rollout engine of :data:`earthrl.rollout.engines.ENGINES` (``hf``, ``vllm``) driven by the agent
  loop (:class:`~earthrl.rollout.runtime.RolloutRuntime`, run by ``earthrl sft-data build --source teacher
  --engine hf|vllm``): its :class:`~earthrl.rollout.trajectory.Trajectory` records become text records
  with :func:`from_trajectory`;
- an OpenAI-compatible chat-completions endpoint (any server with ``POST {base_url}/chat/completions``:
  vLLM's, llama.cpp's, a hosted API): :func:`endpoint_episode` plays one episode in a real
  :class:`~earthrl.envs.core.env.RSEnv`, the assistant's text in, the env's observation out as the next
  user message. It uses the ``openai`` package when it is installed and ``urllib`` otherwise.

A teacher turn is cut after the first stop string of the format (``env.stop_strings``: ``</tool_call>``
for json), as the engine stops there, so the recorded action is exactly what the env ran.
"""

from __future__ import annotations

import itertools
import json
import socket
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable

from earthrl.envs.core.env import RSEnv
from earthrl.rollout.sft_data import Judge, SFTTrajectory, SFTTurn, finish, start, step
from earthrl.rollout.trajectory import Trajectory

Chat = Callable[[list[dict]], str]
"""``chat(messages) -> assistant text`` (OpenAI message dicts in)."""


class EndpointError(RuntimeError):
    """The endpoint could not be reached or answered with something that is not a chat completion."""


def cut_at_stop(text: str, stop_strings: tuple[str, ...]) -> str:
    """``text`` up to and including the first stop string in it (unchanged when none occurs)."""
    hits = [(text.find(s), s) for s in stop_strings if s and s in text]
    if not hits:
        return text
    pos, s = min(hits)
    return text[: pos + len(s)]


def check_reachable(base_url: str, timeout_s: float = 3.0) -> None:
    """Open (and close) a TCP connection to ``base_url``'s host and port, so that an endpoint that is not
    running is found before a run writes anything; says nothing of what answers there.

    Raises:
        EndpointError: no host in the URL, or the connection is refused or times out.
    """
    parts = urllib.parse.urlsplit(base_url)
    if not parts.hostname:
        raise EndpointError(f"{base_url}: not a URL with a host (e.g. http://127.0.0.1:8000/v1)")
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
    except OSError as exc:
        raise EndpointError(f"{base_url}: {type(exc).__name__}: {exc}") from None


def openai_chat(base_url: str, model: str, *, temperature: float = 0.0, max_tokens: int = 512,
                api_key: str = "EMPTY", timeout_s: float = 120.0) -> Chat:
    """A :data:`Chat` over an OpenAI-compatible endpoint.

    Args:
        base_url: e.g. ``http://127.0.0.1:8000/v1`` (``/chat/completions`` is appended).
        model: the model name the server knows.

    Raises (when called):
        EndpointError: connection refused, an HTTP error or a reply without ``choices[0].message.content``.
    """
    try:  # the official client when installed
        import openai  # lazy: optional dependency
    except ImportError:
        openai = None
    if openai is not None:
        client = openai.OpenAI(base_url=base_url, api_key=api_key, timeout=timeout_s)

        def chat(messages: list[dict]) -> str:
            try:
                out = client.chat.completions.create(model=model, messages=messages, temperature=temperature,
                                                     max_tokens=max_tokens)
            except openai.OpenAIError as exc:
                raise EndpointError(f"{base_url}: {exc}") from None
            return out.choices[0].message.content or ""
        return chat

    url = base_url.rstrip("/") + "/chat/completions"

    def chat(messages: list[dict]) -> str:
        body = json.dumps({"model": model, "messages": messages, "temperature": temperature,
                           "max_tokens": max_tokens}).encode()
        req = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json",
                                                              "Authorization": f"Bearer {api_key}"})
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:
                reply = json.loads(resp.read().decode())
            return reply["choices"][0]["message"]["content"] or ""
        except (urllib.error.URLError, OSError, ValueError, KeyError, IndexError, TypeError) as exc:
            raise EndpointError(f"{url}: {type(exc).__name__}: {exc}") from None
    return chat


def endpoint_episode(env: RSEnv, task: dict, chat: Chat, judge: Judge, *, phrasing: str = "IF", max_turns: int = 5,
                     stop_strings: tuple[str, ...] = (), source: str = "teacher", prefix: list[SFTTurn] | None = None,
                     hint: str | None = None) -> SFTTrajectory:
    """One episode of ``task`` with the teacher ``chat`` acting in ``env`` (module doc).

    Args:
        prefix: turns of an earlier episode of ``task`` replayed first (their actions run again in ``env``, the
            record takes the env's observations of this replay); the teacher goes on after them.
        hint: text the teacher sees after the last observation before its first own turn (after the first user
            message when there is no prefix). It is put in the teacher's messages only; the record keeps the
            env's observations and notes the hint on the teacher's first turn (``SFTTurn.hint``).

    ``env.history`` holds the episode's :class:`~earthrl.envs.core.env.StepResult` s until the next reset.
    """
    traj = start(env, task, phrasing, source)
    messages = [{"role": "system", "content": traj.system}, {"role": "user", "content": traj.user}]
    for turn in prefix or []:
        res = step(env, traj, turn.action, turn.role)
        if res.done:
            return finish(traj, task, judge)
        messages += [{"role": "assistant", "content": turn.action}, {"role": "user", "content": res.observation}]
    if hint:
        messages[-1] = {**messages[-1], "content": messages[-1]["content"] + "\n\n" + hint}
    for k in range(max_turns - len(prefix or [])):
        action = cut_at_stop(chat(messages), stop_strings)
        res = step(env, traj, action, hint=hint if k == 0 else None)
        if res.done:
            break
        messages += [{"role": "assistant", "content": action}, {"role": "user", "content": res.observation}]
    return finish(traj, task, judge)


def engine_chat(engine, tokenizer, *, temperature: float = 0.0, max_new_tokens: int = 512, seed: int = 0) -> Chat:
    """A :data:`Chat` over an in-process rollout engine (:class:`~earthrl.rollout.hf_engine.HFEngine` or
    :class:`~earthrl.rollout.vllm_engine.VLLMEngine`: ``generate(prompt ids, SamplingParams)``).

    The messages are rendered with ``tokenizer``'s chat template (generation prompt added); the reply is the
    response ids decoded without special tokens. Each call draws with the next seed (``seed``, ``seed + 1``, …),
    so that repeated calls on one context differ when ``temperature`` > 0.
    """
    from earthrl.rollout.hf_engine import SamplingParams  # lazy: torch

    calls = itertools.count(seed)

    def chat(messages: list[dict]) -> str:
        text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        ids = list(tokenizer(text, add_special_tokens=False)["input_ids"])
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=temperature, top_p=1.0, seed=next(calls))
        out = engine.generate([ids], params)[0]
        return tokenizer.decode(out["response_ids"], skip_special_tokens=True)
    return chat


def build_endpoint(env: RSEnv, tasks: list[dict], chat: Chat, judge: Judge, *, samples: int = 1, phrasing: str = "IF",
                   max_turns: int = 5, stop_strings: tuple[str, ...] = ()) -> tuple[list[SFTTrajectory], dict]:
    """``samples`` endpoint episodes per task, kept when correct.

    Returns:
        (kept trajectories, counts ``{"episodes", "kept", "incorrect"}``).
    """
    kept, n = [], 0
    for task in tasks:
        for _ in range(samples):
            n += 1
            traj = endpoint_episode(env, task, chat, judge, phrasing=phrasing, max_turns=max_turns,
                                    stop_strings=stop_strings)
            if traj.correct:
                kept.append(traj)
    return kept, {"episodes": n, "kept": len(kept), "incorrect": n - len(kept)}


def from_trajectory(traj: Trajectory, task: dict, *, system: str, user: str, action_format: str, phrasing: str,
                    judge: Judge) -> SFTTrajectory:
    """A rollout engine's trajectory (agent loop) as a text record, judged against ``task``."""
    rec = SFTTrajectory(task_id=traj.task_id, source="teacher", action_format=action_format, phrasing=phrasing,
                        system=system, user=user, answer=traj.answer,
                        turns=[SFTTurn(action=t.response_text, observation=t.observation, error=t.error,
                                       error_kind=t.error_kind, role=t.role) for t in traj.turns])
    return finish(rec, task, judge)
