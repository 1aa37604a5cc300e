"""The inputs ``earthrl train`` and ``earthrl eval`` share, checked before anything starts: the
config tree, the model folder, the data folder and the tasks (a built-in suite or a task file).

Each function raises :class:`~earthrl.envs.errors.ConfigError` with one line naming the field
(for a task file: the file, the line, the task id and the field) and the fix.
"""

from __future__ import annotations

import builtins
import dataclasses
import keyword
import random
import shutil
import tempfile
from pathlib import Path

import numpy as np
from omegaconf import DictConfig, OmegaConf

from earthrl.envs.core.env import MODES
from earthrl.envs.core.replay import DATA_FOLDERS, RECORDINGS, load_recordings
from earthrl.envs.core.sops import load_sops
from earthrl.envs.core.tasks import TaskFileError, load_suite
from earthrl.envs.core.text_embedder import EMBEDDER
from earthrl.envs.data.user_index import user_index_path
from earthrl.envs.errors import ConfigError
from earthrl.envs.formats.registry import available_formats
from earthrl.envs.paths import data_dir, model_dir
from earthrl.envs.sandbox.parent import SandboxUnavailable, sandbox_backend
from earthrl.envs.tools.registry import TOOLS
from earthrl.envs.tools.toolsets import resolve_toolset
from earthrl.launch.config_schema import check_config, to_settings
from earthrl.models.fetch import available_models
from earthrl.models.fs import file_in_the_way
from earthrl.models.lora import adapter_names
from earthrl.rollout.runtime import check_task_data
from earthrl.rollout.vllm_env import EngineUnavailable, vllm_python

OUTPUT_DIR_KEYS = {"train": "trainer.output_dir", "eval": "eval.output_dir", "sft": "sft.output_dir"}


def check_output_dir(key: str, output_dir: str | Path | None) -> None:
    """``output_dir`` (the value of config key ``key``; None: the command's default) can be a folder:
    neither it nor a folder above it is a file, and its nearest existing folder takes a new folder (a
    temporary one is made and removed there: nothing is left). Checked before anything is written.

    Raises:
        ConfigError: one line naming ``key``, the file in the way or the folder that cannot be written, and
            the fix.
    """
    if output_dir is None or str(output_dir) == "":
        return
    path = Path(output_dir).expanduser()
    if (blocker := file_in_the_way(path)) is not None:
        where = "is a file" if blocker == path else f"is under {blocker}, which is a file"
        raise ConfigError(f"{key}={output_dir} {where}; name a folder (a new one, or the run folder "
                          f"to continue) with {key}=DIR")
    base = path.absolute()
    while not base.exists():
        base = base.parent
    try:
        Path(tempfile.mkdtemp(prefix=".earthrl-write-check-", dir=base)).rmdir()
    except OSError as exc:
        raise ConfigError(f"{key}={output_dir}: cannot write in {base} ({exc.strerror or exc}); name a folder "
                          f"you can write with {key}=DIR") from None


def check_env(env) -> None:
    """The typed ``env`` settings against the registries: a registered action format and mode, a known
    toolset, and for codeact a sandbox this machine can run under ``env.format_options.sandbox`` (the one
    check before Ray starts; the sandbox itself refuses the same way).

    Raises:
        ConfigError: the first problem, one line naming the accepted values or the fix.
    """
    if env.action_format not in available_formats():
        raise ConfigError(f"env.action_format={env.action_format}: use one of {', '.join(available_formats())}")
    if env.mode not in MODES:
        raise ConfigError(f"env.mode={env.mode}: use one of {', '.join(MODES)}")
    try:
        shown = resolve_toolset(env.toolset, TOOLS)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if env.action_format == "codeact":
        bad = [n for n in shown if not n.isidentifier() or keyword.iskeyword(n) or hasattr(builtins, n)]
        if bad:
            raise ConfigError(f"env.toolset={env.toolset} has tools that are not Python function names "
                              f"({', '.join(bad[:3])}{', …' if len(bad) > 3 else ''}), which codeact calls as "
                              "functions; use env=json (or env=hierarchical) with this toolset")
        try:
            sandbox_backend(env.format_options.sandbox.allow_weaker)
        except SandboxUnavailable as exc:
            raise ConfigError(str(exc)) from None


def check_agent(agent, action_format: str, backend: str) -> None:
    """The ``agent`` group against the agent-loop registry: a registered loop (or ``module:function``) whose
    action formats (the loop function's ``action_formats``, when it names some) include ``env.action_format``,
    ``agent.options`` that the loop's ``options_schema`` (a dataclass with a ``check()`` that raises
    ValueError) has and accepts; the verl backend runs the flat loop only (its rows hold one sequence each).
    ``agent.adapters`` names valid adapters (:func:`earthrl.models.lora.adapter_names`); several distinct ones
    (one LoRA adapter per role) need a loop whose roles have their own contexts (not the flat ``react`` loop,
    whose one context holds every role's turns) and the local backend.

    Raises:
        ConfigError: the first problem, one line naming the key, the accepted values and the fix.
    """
    from earthrl.rollout.agent_registry import AGENT_LOOPS  # lazy: the built-in loops import torch

    try:
        loop = AGENT_LOOPS.lookup(str(agent.name), error=ValueError)
    except ValueError as exc:
        raise ConfigError(f"agent.name={agent.name}: {exc}") from None
    formats = getattr(loop, "action_formats", None)
    if formats and action_format not in formats:
        raise ConfigError(f"agent={agent.name} writes {' or '.join(formats)} actions, not env.action_format="
                          f"{action_format}; set env={formats[0]}")
    schema = getattr(loop, "options_schema", None)  # a dataclass of the loop's options and their defaults
    known = [f.name for f in dataclasses.fields(schema)] if schema is not None else []
    unknown = sorted(set(agent.options) - set(known))
    if unknown:
        raise ConfigError(f"agent.options.{unknown[0]}: agent={agent.name} has no such option; its options are "
                          f"{', '.join(known) or 'none'} (docs/agents.md)")
    if schema is not None:
        try:
            schema(**agent.options).check()
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"agent.options: {exc}") from None
    if backend == "verl" and agent.name != "react":
        raise ConfigError(f"agent={agent.name}: the verl backend runs agent=react only (one sequence per row); "
                          "train this loop with backend=local")
    try:
        names = adapter_names(dict(agent.adapters), getattr(loop, "roles", ()))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if len(names) > 1 and backend == "verl":
        raise ConfigError(f"agent.adapters names {len(names)} adapters ({', '.join(names)}): the verl backend trains one "
                          "adapter; give every role one name (e.g. agent.adapters={} : the shared adapter) or use "
                          "backend=local")
    if len(names) > 1 and agent.name == "react":
        raise ConfigError(f"agent.adapters names {len(names)} adapters ({', '.join(names)}) but agent=react keeps every "
                          "role's turns in one context, which one adapter must score; use a loop with a context per "
                          "role (agent=hierarchical or agent=planner_executor) or one adapter name")


def check_node_candidates(cfg: DictConfig, command: str) -> None:
    """``agent.options.node_candidates`` G > 1 (Earth-Agent-Pro's node-level GRPO) samples calls that only the
    ``executor_node`` estimator learns from: refused in evaluation and with other estimators.

    Raises:
        ConfigError: names the option, why, and the fix.
    """
    g = OmegaConf.select(cfg, "agent.options.node_candidates", default=1)
    if g is None or int(g) <= 1:
        return
    estimator = OmegaConf.select(cfg, "algorithm.estimator")
    if command != "train":
        raise ConfigError(f"agent.options.node_candidates={g}: the extra calls of node-level GRPO are for training; "
                          f"`earthrl {command}` plays one call per node: set agent.options.node_candidates=1")
    if estimator != "executor_node":
        raise ConfigError(f"agent.options.node_candidates={g}: node-level GRPO's candidate calls are learnt by "
                          f"algorithm.estimator=executor_node only, not {estimator}; use algorithm=executor_tiered "
                          "or set agent.options.node_candidates=1")


def check_job_config(cfg: DictConfig, command: str) -> None:
    """Every config value (:func:`earthrl.launch.config_schema.check_config`), the run folder
    (:func:`check_output_dir`), the ``env`` group's settings (:func:`check_env`), the agent loop
    (:func:`check_agent`) and the rollout engine's name.

    Raises:
        ConfigError: the first bad value.
    """
    from earthrl.rollout.engines import ENGINES  # lazy: rollout.engines imports torch (hf_engine)

    check_config(cfg, command)
    key = OUTPUT_DIR_KEYS[command]
    check_output_dir(key, OmegaConf.select(cfg, key))
    check_env(to_settings(cfg.env))
    check_sops(to_settings(cfg.env).sops)
    if "agent" in cfg:
        check_agent(to_settings(cfg.agent), str(cfg.env.action_format), str(cfg.get("backend", "local")))
        check_node_candidates(cfg, command)
    if cfg.cluster.engine in ("auto", "vllm"):
        try:  # the engine's own check, before anything is written or started
            vllm_python(str(cfg.cluster.vllm.python))
        except EngineUnavailable as exc:
            raise ConfigError(str(exc)) from None
    if cfg.cluster.engine != "auto" and cfg.cluster.engine not in ENGINES:
        raise ConfigError(f"cluster.engine={cfg.cluster.engine}: available engines: auto, {', '.join(sorted(ENGINES))}")


def check_sops(sops, needed_by: str = "env.sops.retrieve=true") -> None:
    """With SOP retrieval on (or ``needed_by`` another setting that retrieves): the encoder is fetched and the SOPs
    (packaged and ``env.sops.folder``) parse.

    Raises:
        ConfigError: the encoder is missing (names the fetch command) or an SOP folder or file is bad.
    """
    if not sops.retrieve and needed_by == "env.sops.retrieve=true":
        return
    if not (model_dir(EMBEDDER) / "config.json").is_file():
        raise ConfigError(f"{needed_by} needs the SOP encoder: run `earthrl fetch model {EMBEDDER}`")
    try:
        load_sops(sops.folder)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def model_path(cfg: DictConfig) -> Path:
    """The model folder: ``model.path`` or the fetched ``$EARTHRL_HOME/models/<model.name>``.

    Raises:
        ConfigError: no ``config.json`` there (names the fetch command).
    """
    path = Path(cfg.model.path) if cfg.model.path else model_dir(cfg.model.name)
    if not (path / "config.json").is_file():
        if cfg.model.path:
            raise ConfigError(f"model.path={cfg.model.path} has no config.json: point it at a Hugging Face model "
                              "folder (config.json, safetensors, tokenizer)")
        fix = (f"run `earthrl fetch model {cfg.model.name}` or set model.path" if cfg.model.name in available_models()
               else f"set model.path to your local Hugging Face folder of {cfg.model.name} (it is never fetched)")
        raise ConfigError(f"model {cfg.model.name} not found at {path}: {fix}")
    return path


def teacher_path(cfg: DictConfig, teacher: dict) -> Path:
    """The folder of an engine teacher (``hf`` / ``vllm``): ``teacher["path"]``, or the config's model
    (:func:`model_path`) when it is unset.

    Raises:
        ConfigError: no ``config.json`` in ``teacher["path"]`` (names ``sft.data.teacher.path`` and the export command).
    """
    if not teacher.get("path"):
        return model_path(cfg)
    path = Path(teacher["path"])
    if not (path / "config.json").is_file():
        raise ConfigError(f"sft.data.teacher.path={path} has no config.json: point it at a Hugging Face model folder, "
                          "or merge a checkpoint into one with `earthrl export CHECKPOINT OUT`")
    return path


def data_root(cfg: DictConfig) -> Path:
    """The fetched data folder of ``tasks.data`` (it may be absent when the user catalogue,
    ``earthrl catalog add``, holds the scenes).

    Raises:
        ConfigError: not fetched and no user catalogue (names the fetch and the add command).
    """
    root = data_dir(cfg.tasks.data)
    if "/" in str(cfg.tasks.data) and not root.is_dir():
        raise ConfigError(f"tasks.data={cfg.tasks.data}: no such folder; give a folder that exists, or the name of a "
                          "fetched data set (`earthrl fetch data NAME`)")
    if not root.is_dir() and not user_index_path().is_file():  # user scenes alone are data too
        raise ConfigError(f"data set {cfg.tasks.data} not found at {root}: run `earthrl fetch data {cfg.tasks.data}`, "
                          "or index your own rasters with `earthrl catalog add DIR|STAC_JSON`")
    return root


def load_tasks(name: str, split: str, root: Path, split_key: str = "tasks.split",
               check_data: bool = True, mode: str | None = None) -> list[dict]:
    """The tasks of suite or task file ``name`` in ``split``, as dicts, each checked against the
    tool registry (every reference tool exists), with ``mode`` against the env mode (:func:`check_mode`)
    and, with ``check_data``, the data (every scene it names exists under ``root``).

    Args:
        split_key: the config key that chose ``split`` (named in the error when it has no tasks).
        check_data: False when no episode will run (scoring recorded trajectories) or none reads scenes (replay).
        mode: the ``env.mode`` the episodes will run in; None when none will run.

    Raises:
        ConfigError: an unknown suite, a missing or malformed task file (one line: file, line,
            task id, field), a suite whose files are not under ``root``, a task naming unknown scenes or
            tools, a replay-only task in another mode, or no task in ``split``.
    """
    try:  # every task of the file or suite is checked, not only those of ``split``
        every = load_suite(name, split=None, data_root=root)
    except TaskFileError:
        raise
    except (KeyError, ValueError) as exc:
        raise ConfigError(f"tasks.name={name}: {exc.args[0] if isinstance(exc, KeyError) else exc}") from None
    except FileNotFoundError as exc:  # a suite read from the user's folder (Earth-Bench): the message names tasks.data
        raise ConfigError(f"tasks={name}: {exc}") from None
    if mode is not None:
        check_mode([t.template for t in every], mode, name)
    by_path = mode == "execute" and any(t.template in DATA_FOLDERS for t in every)  # Earth-Bench's rasters
    for task in every:
        where = f"{task.origin}: " if task.origin else f"suite {name}: "
        unknown = [c.name for c in task.reference if c.name not in TOOLS]
        if unknown:
            raise ConfigError(f"{where}task {task.id!r}: field reference: unknown tools {unknown}; "
                              "tool names: docs/environment.md or earthrl.envs.tools.registry.TOOLS")
        try:
            if check_data and not by_path:
                check_task_data([task.model_dump()], root)
        except ConfigError as exc:
            raise ConfigError(f"{where}{exc}") from None
    tasks = [t.model_dump() for t in every if t.split == split]
    if not tasks:
        raise ConfigError(f"task suite {name} has no tasks in split {split}; choose another with {split_key}=train|test")
    if by_path and check_data:
        check_folders(tasks, root, name)
    return tasks


def check_mode(templates: list[str], mode: str, name: str) -> None:
    """Tasks of a template with recorded tool outputs (a source in :data:`~earthrl.envs.core.replay.RECORDINGS`:
    Earth-Bench, ThinkGeo) run in ``env.mode=replay``, or in ``env.mode=execute`` on the benchmark's own files
    when it reads them by path (:data:`~earthrl.envs.core.replay.DATA_FOLDERS`: Earth-Bench;
    :func:`check_folders` checks them); never in ``mock``. ``templates`` are the templates of suite or task file ``name``.

    Raises:
        ConfigError: one line naming ``env.mode`` and the fix.
    """
    recorded = sorted({t for t in templates if t in RECORDINGS})
    if mode == "replay" or not recorded or (mode == "execute" and all(t in DATA_FOLDERS for t in recorded)):
        return
    only = [t for t in recorded if t not in DATA_FOLDERS]
    if only:  # no tool of the benchmark runs in EarthRL (ThinkGeo's models): replay is the only mode
        raise ConfigError(f"env.mode={mode}: tasks={name} (template {only[0]}) runs in env.mode=replay only: "
                          "EarthRL does not run its tools, a call answers from its recorded output (docs/tasks.md)")
    raise ConfigError(f"env.mode={mode}: tasks={name} (template {recorded[0]}) runs in env.mode=replay (its "
                      "recorded tool outputs), or in env.mode=execute on its rasters under tasks.data "
                      "(docs/earthbench.md)")


def check_folders(tasks: list[dict], root: Path, name: str) -> None:
    """Every task of a benchmark read by path (:data:`~earthrl.envs.core.replay.DATA_FOLDERS`) has its data
    folder under ``root`` (Earth-Bench: ``<tasks.data>/data/questionN``), so execute mode can run its tools.

    Raises:
        ConfigError: one line naming the first missing folder, how many are missing, and the two fixes.
    """
    missing = [DATA_FOLDERS[t["template"]](root, t["data"]) for t in tasks if t["template"] in DATA_FOLDERS]
    missing = [f for f in missing if not f.is_dir()]
    if missing:
        raise ConfigError(f"env.mode=execute: tasks={name} has no rasters to run on for {len(missing)} of "
                          f"{len(tasks)} tasks ({missing[0]} does not exist); put Earth-Bench's benchmark/data/"
                          f"questionN folders under {root / 'data'}, or set env.mode=replay (docs/earthbench.md)")


def check_replay(tasks: list[dict], root: Path) -> None:
    """``env.mode=replay`` can answer ``tasks`` from ``root``: every task's template has a recording source and
    the source's recordings under ``root`` hold the task (replay reads no scenes; the recorded outputs stand in).

    Raises:
        ConfigError: one line naming ``env.mode=replay`` or ``tasks.data`` and the fix.
    """
    for template in sorted({t["template"] for t in tasks}):
        try:
            recorded = load_recordings(template, str(root))
        except KeyError as exc:
            raise ConfigError(f"env.mode=replay: {exc.args[0]}, or run tasks=earthbench, earthbench-rsclaw or "
                              "thinkgeo with tasks.data=the benchmark's folder") from None
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(f"tasks.data={root}: replay reads the recorded tool outputs there: {exc}") from None
        missing = [t["id"] for t in tasks if t["template"] == template and t["id"] not in recorded]
        if missing:
            raise ConfigError(f"tasks.data={root}: no recorded calls for {len(missing)} task(s) ({missing[0]} …); "
                              "give the folder the tasks were loaded from")


def holds_run(output_dir: Path) -> bool:
    """True when ``output_dir`` holds a run of ``earthrl train`` or ``earthrl sft``: a non-empty
    ``checkpoints/`` or a ``metrics.jsonl`` (a new run there would overwrite its checkpoints and append
    duplicate step lines to its metrics)."""
    ckpts = output_dir / "checkpoints"
    return (output_dir / "metrics.jsonl").is_file() or (ckpts.is_dir() and any(ckpts.iterdir()))


def clear_unfinished_sft(folder: Path) -> bool:
    """Remove what an interrupted ``earthrl sft`` left in ``folder`` — ``checkpoints/`` and
    ``metrics.jsonl`` with no ``sft_summary.json`` — so that the stage owning the folder (a warm start, a
    ``learn`` comparison) can run it again; the trajectories it built in ``data/`` are kept and reused.
    Returns True when something was removed; a finished run (``sft_summary.json``) is never touched."""
    if (folder / "sft_summary.json").is_file() or not holds_run(folder):
        return False
    shutil.rmtree(folder / "checkpoints", ignore_errors=True)
    (folder / "metrics.jsonl").unlink(missing_ok=True)
    print(f"{folder}: an interrupted SFT run's checkpoints and metrics removed; running it again", flush=True)
    return True


def start_run_folder(cfg: DictConfig, output_dir: Path, write: bool = True) -> dict:
    """Create ``output_dir``, write the resolved ``config.yaml`` there, seed Python, numpy and torch
    with ``cfg.seed`` and set ``cluster.torch_threads``; returns the resolved config as a dict
    (what the loggers record). Shared by ``earthrl train`` and ``earthrl sft``; ``write=False`` (the other
    processes of a multi-process job) seeds and sets the threads only."""
    import torch  # lazy: torch at import; config checks import this module

    config_dict = OmegaConf.to_container(cfg, resolve=True)
    if write:
        output_dir.mkdir(parents=True, exist_ok=True)
        (output_dir / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    random.seed(cfg.seed)
    np.random.seed(cfg.seed)
    torch.manual_seed(cfg.seed)
    torch.set_num_threads(int(cfg.cluster.torch_threads))
    return config_dict
