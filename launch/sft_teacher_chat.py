"""The teacher of ``earthrl sft-data build --source teacher_loop`` and ``sft.data.source=teacher_loop`` as a
:data:`~earthrl.rollout.sft_teacher.Chat`: an OpenAI-compatible endpoint (``openai``), or a rollout engine of the
config's model (or ``sft.data.teacher.path``) run in this process (``hf``: :class:`~earthrl.rollout.hf_engine.HFEngine`, ``vllm``:
:class:`~earthrl.rollout.vllm_engine.VLLMEngine`, with ``cluster.<engine>``'s settings), no Ray.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict

from omegaconf import DictConfig

from earthrl.envs.errors import ConfigError
from earthrl.launch.compute import job_device
from earthrl.launch.config_schema import to_settings
from earthrl.rollout.sft_teacher import Chat, engine_chat, openai_chat

TEACHER_ENGINES = ("hf", "vllm", "openai")


def teacher_chat(cfg: DictConfig, teacher: dict) -> tuple[Chat, Callable[[], None]]:
    """``(chat, close)`` of ``teacher`` (``{"engine", "model", "path", "base_url", "api_key", "temperature",
    "max_new_tokens", "seed"}``; an engine teacher runs the folder ``path``, else ``cfg``'s model, on
    ``cluster.device``).

    Raises:
        ConfigError: an unknown engine; ``openai`` without ``base_url`` and ``model``.
    """
    engine = teacher.get("engine")
    temperature, max_new = float(teacher.get("temperature", 0.0)), int(teacher.get("max_new_tokens", 512))
    if engine == "openai":
        if not (teacher.get("base_url") and teacher.get("model")):
            raise ConfigError("teacher engine openai needs a base URL and a model name (--base-url URL --model NAME, "
                              "or sft.data.teacher.base_url and sft.data.teacher.model)")
        return openai_chat(teacher["base_url"], teacher["model"], temperature=temperature, max_tokens=max_new,
                           api_key=teacher.get("api_key") or "EMPTY"), lambda: None
    if engine not in ("hf", "vllm"):
        raise ConfigError(f"teacher engine {engine!r}: use one of {', '.join(TEACHER_ENGINES)}")
    from transformers import AutoTokenizer  # lazy: the engines load torch

    from earthrl.launch.job_inputs import teacher_path  # lazy: the model folder only for an engine teacher
    from earthrl.rollout.chat import ChatCodec  # lazy: transformers
    from earthrl.rollout.engines import ENGINE_OPTIONS  # lazy: the engines' registry loads torch

    path = str(teacher_path(cfg, teacher))
    print(f"teacher: {engine} engine, model {path}", flush=True)
    tokenizer = AutoTokenizer.from_pretrained(path)
    eos, codec_eos = tokenizer.eos_token_id, ChatCodec(tokenizer).eos_id
    stop_ids = [codec_eos] + ([eos] if eos is not None and eos != codec_eos else [])
    options = {k: v for k, v in asdict(to_settings(cfg.cluster)).get(engine, {}).items() if k in ENGINE_OPTIONS[engine]}
    common = dict(stop_strings=list(cfg.env.stop_strings), dtype=str(cfg.model.dtype),
                  num_threads=int(cfg.cluster.torch_threads), device=job_device(cfg)[0])
    if engine == "hf":
        from earthrl.rollout.hf_engine import HFEngine  # lazy: torch

        gen = HFEngine(path, stop_ids, **common, **options)
        close = lambda: None  # noqa: E731 - freed with the process
    else:
        from earthrl.rollout.vllm_engine import VLLMEngine  # lazy: the vLLM client

        gen = VLLMEngine(path, stop_ids, **common, **options)
        close = gen.close
    return engine_chat(gen, tokenizer, temperature=temperature, max_new_tokens=max_new,
                       seed=int(teacher.get("seed", 0))), close
