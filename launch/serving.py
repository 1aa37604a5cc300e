"""How an exported model is served with vLLM's OpenAI-compatible server: its tool-call parser and its
``vllm serve`` command line (vLLM docs, "Tool Calling" and "OpenAI-Compatible Server").

vLLM turns a model's text into OpenAI ``tool_calls`` with a parser that knows the model's call syntax
(``--enable-auto-tool-choice --tool-call-parser NAME``); without one, a request with ``tools`` must say
``"tool_choice": "none"`` (vLLM answers 400 to the default ``auto``). The parser is chosen, in order:

1. the run trained EarthRL's ``json`` action format: the model writes ``<tool_call>{"name", "arguments"}</tool_call>``,
   which is the Hermes format, so ``hermes``;
2. the base model's family (``config.json`` ``model_type``) has a parser in vLLM's docs and its chat template
   renders ``tools``: Qwen2 / Qwen2.5 / Qwen3 → ``hermes``, Llama 3.1+ → ``llama3_json``;
3. otherwise none, and the reason says so.

An export of one merged model is served under its folder's name; an export of one adapter per role
(``adapters/<name>/``) serves the base model with each adapter as a LoRA module of its name.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from earthrl.models.export import EXPORT_MARKER

FAMILY_PARSERS = {"qwen2": "hermes", "qwen2_moe": "hermes", "qwen3": "hermes", "qwen3_moe": "hermes",
                  "llama": "llama3_json"}
"""vLLM tool-call parser of a ``model_type`` whose chat template renders ``tools`` (vLLM docs, "Tool Calling":
Qwen2.5 and Qwen3 use ``hermes``, Llama 3.1/3.2 JSON tool calls ``llama3_json``)."""
HERMES_ACTION_FORMATS = ("json",)
"""EarthRL action formats whose turns are Hermes tool calls (``<tool_call>{json}</tool_call>``)."""


class ServeError(ValueError):
    """A folder cannot be served; the message is one line naming the argument and the fix."""


@dataclass(frozen=True)
class ToolParser:
    """The tool-call parser of a served model: ``name`` (None: no parser, no automatic tool choice) and why."""

    name: str | None
    reason: str


def chat_template(model_dir: Path) -> str:
    """The chat template of an HF folder: ``chat_template.jinja`` or ``tokenizer_config.json``'s; '' without one."""
    jinja = Path(model_dir) / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text()
    config = Path(model_dir) / "tokenizer_config.json"
    template = json.loads(config.read_text()).get("chat_template") if config.is_file() else None
    return template if isinstance(template, str) else ""


def tool_parser(model_dir: Path, action_format: str | None) -> ToolParser:
    """The tool-call parser for the model in ``model_dir`` trained with ``action_format`` (module doc's order).

    Args:
        model_dir: an HF folder with ``config.json`` (the export, or the base model of an adapter export).
        action_format: the run's ``env.action_format`` (None: not known, e.g. a verl adapter).
    """
    if action_format in HERMES_ACTION_FORMATS:
        return ToolParser("hermes", f"the run trained EarthRL's {action_format} action format, "
                                    "<tool_call>{\"name\", \"arguments\"}</tool_call>: the Hermes format")
    config = Path(model_dir) / "config.json"
    family = json.loads(config.read_text()).get("model_type") if config.is_file() else None
    parser = FAMILY_PARSERS.get(str(family))
    if parser is not None and "tools" in chat_template(model_dir):
        return ToolParser(parser, f"vLLM's parser for the {family} family (its chat template renders tools)")
    why = (f"the {family} family's chat template renders no tools" if parser is not None
           else f"vLLM documents no tool-call parser for the {family} family")
    trained = f"action format {action_format}" if action_format else "action format not recorded"
    return ToolParser(None, f"{why} ({trained}): served without automatic tool choice; "
                            "send requests with \"tool_choice\": \"none\"")


def read_export(folder: Path, arg: str = "EXPORT") -> dict:
    """The provenance record (``earthrl_export.json``) of an ``earthrl export`` folder.

    Raises:
        ServeError: ``folder`` is not there, not a folder, or holds no export (one line naming ``arg`` and the fix).
    """
    folder = Path(folder)
    fix = "give a folder that `earthrl export CHECKPOINT OUT` wrote (OUT), e.g. runs/<exp>/export"
    if not folder.exists():
        raise ServeError(f"{arg} {folder}: no such folder; {fix}")
    if not folder.is_dir():
        raise ServeError(f"{arg} {folder} is a file, not an export folder; {fix}")
    if not (folder / EXPORT_MARKER).is_file():
        raise ServeError(f"{arg} {folder} is not an EarthRL export (no {EXPORT_MARKER}); {fix}")
    try:
        record = json.loads((folder / EXPORT_MARKER).read_text())
    except ValueError as exc:
        raise ServeError(f"{arg} {folder}: {EXPORT_MARKER} is not valid JSON ({exc}); export the checkpoint again "
                         "with --overwrite") from exc
    if record.get("merged", True) and not (folder / "config.json").is_file():
        raise ServeError(f"{arg} {folder} has no config.json (an unfinished export); export the checkpoint again "
                         "with --overwrite")
    return record


def served_name(folder: Path) -> str:
    """The model name the server answers to: the export folder's name."""
    return Path(folder).resolve().name


def serve_args(folder: Path, record: dict, *, host: str = "127.0.0.1", port: int = 8000,
               max_model_len: int | None = None, dtype: str | None = None,
               kv_cache_gib: float | None = None) -> list[str]:
    """``vllm serve``'s arguments (after ``vllm serve``) for the export in ``folder``.

    Args:
        record: :func:`read_export`'s; ``tool_call_parser`` in it (written by ``earthrl export``) sets
            ``--enable-auto-tool-choice --tool-call-parser``.
        max_model_len, dtype: vLLM's ``--max-model-len`` / ``--dtype`` (None: vLLM's default).
        kv_cache_gib: the KV cache in GiB (``--kv-cache-memory-bytes``; the CPU backend's explicit size).
    """
    folder = Path(folder).resolve()
    name = served_name(folder)
    if record.get("merged", True):
        args = [str(folder), "--served-model-name", name]
    else:  # one adapter per role on the base model (module doc)
        adapters = [f"{a}={folder / 'adapters' / a}" for a in record.get("adapters", [])]
        rank = record.get("lora_r") or 16
        args = [str(record["base_model"]), "--served-model-name", name, "--tokenizer", str(folder),
                "--enable-lora", "--max-lora-rank", str(rank), "--max-loras", str(max(1, len(adapters))),
                "--lora-modules", *adapters]
    args += ["--host", host, "--port", str(int(port))]
    if max_model_len:
        args += ["--max-model-len", str(int(max_model_len))]
    if dtype:
        args += ["--dtype", dtype]
    if kv_cache_gib:
        args += ["--kv-cache-memory-bytes", str(int(kv_cache_gib * 2**30))]
    if record.get("tool_call_parser"):
        args += ["--enable-auto-tool-choice", "--tool-call-parser", record["tool_call_parser"]]
    return args
