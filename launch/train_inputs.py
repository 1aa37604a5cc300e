"""The pre-flight of ``earthrl train``: everything the GRPO recipe needs, resolved and checked before
anything is written or started, as one frozen :class:`TrainInputs`.

:func:`prepare_train` sizes ``auto`` settings for this machine, resolves the device and dtype, loads the
task splits, picks the checkpoint to resume or start from and plans the vLLM engine's host memory
(``launch/host_memory.py``); :func:`with_warm_start` then builds the SFT warm start (once per setting,
cached; RS-Claw-Evolution §4: SFT, then RL) whose adapter starts the run. The recipe
(:class:`earthrl.launch.train.LocalGRPORecipe`) takes the result and never calls these checks itself.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import model_dir
from earthrl.launch.compute import job_device, job_dtype
from earthrl.launch.config_schema import to_settings
from earthrl.launch.host_memory import job_budget, train_rows
from earthrl.launch.job_inputs import check_job_config, check_replay, data_root, holds_run, load_tasks, model_path
from earthrl.launch.machine_size import resolve_auto_sizes
from earthrl.launch.warm_start import ensure_warm_start, warm_start_folder
from earthrl.models.checkpoint import check_init_checkpoint, checkpoint_adapters, checkpoint_step, resolve_resume
from earthrl.models.lora import adapter_names, merge_lora
from earthrl.rollout.runtime import loop_roles


@dataclass(frozen=True)
class TrainInputs:
    """What :func:`prepare_train` resolved and checked for one ``earthrl train`` job (nothing was written or
    started to get it); :func:`with_warm_start` sets :attr:`init_from` to the warm start's checkpoint."""

    model_path: Path  # the model folder (a backend=verl dry run's may not exist yet: verl_dry_run_path)
    data_root: Path  # the data folder of tasks.data
    spec: AlgorithmSpec  # the algorithm group's names resolved (reward, turn reward, estimator, policy loss)
    tasks: list[dict]  # the tasks.split tasks, in suite order
    heldout_tasks: list[dict]  # the first trainer.heldout.max_tasks of trainer.heldout.split; [] when .every is 0
    output_dir: Path  # the run folder, trainer.output_dir
    lora: dict  # the adapter's settings: model.lora overridden by algorithm.lora (merge_lora)
    device: str  # "cpu" or "cuda": cluster.device resolved on this machine (learner and engine)
    dtype: str  # the compute dtype model.dtype resolves to on this device (learner and engine)
    resume_from: Path | None  # the checkpoint trainer.resume picked
    init_from: Path | None  # the checked checkpoint whose adapter starts the run: trainer.init_from, or the
    #                         warm start's SFT checkpoint once with_warm_start built it
    warm_start: str | None  # the conf/sft preset whose (cached) SFT checkpoint starts the run; None when unset
    #                         or ignored (beside trainer.init_from or a resume)
    kv_cache_gib: float | None  # the vLLM engine's KV cache on a CPU (GiB); None: another engine, a GPU, verl
    notes: tuple[str, ...]  # the start-up lines: each `auto` size resolved, an ignored warm start, the memory
    #                         plan, the device and the dtype chosen

    def finished_step(self, steps: int) -> int | None:
        """The step of :attr:`resume_from` when it already reached ``steps`` (``trainer.steps``: the run is
        finished, nothing to train), else None."""
        if self.resume_from is None:
            return None
        step = checkpoint_step(self.resume_from)
        return step if step >= steps else None


def prepare_train(cfg: DictConfig) -> TrainInputs:
    """Check everything that can be checked before anything is written; returns what it resolved.

    Nothing is written or started. ``cfg`` itself changes in one way: an ``auto`` among
    ``trainer.warm_start`` / ``trainer.steps`` is replaced by its value for this machine
    (:func:`~earthrl.launch.machine_size.resolve_auto_sizes`), the value the run folder's config.yaml and the
    warm start record.

    Args:
        cfg: the composed ``earthrl train`` config (``conf/config.yaml``).

    Raises:
        ConfigError: with one line naming the field and the fix.
    """
    notes = resolve_auto_sizes(cfg)  # trainer.warm_start / trainer.steps = auto, by the dtype rule
    check_job_config(cfg, "train")
    device, device_why = job_device(cfg)
    dtype, dtype_why = job_dtype(cfg, device)
    model = verl_dry_run_path(cfg) or model_path(cfg)
    root = data_root(cfg)
    spec = algorithm_spec(cfg)
    scenes = cfg.env.mode != "replay"  # replay mode reads no scenes: the recorded outputs stand in for them
    tasks = load_tasks(cfg.tasks.name, cfg.tasks.split, root, check_data=scenes, mode=str(cfg.env.mode))
    if not scenes:
        check_replay(tasks, root)
    ho = cfg.trainer.heldout
    heldout = []
    if int(ho.every) > 0:
        heldout = load_tasks(cfg.tasks.name, ho.split, root, split_key="trainer.heldout.split",
                             check_data=scenes)[: int(ho.max_tasks)]
    output_dir = Path(cfg.trainer.output_dir)
    if str(cfg.backend) != "verl" and str(cfg.trainer.resume) in ("off", "") and holds_run(output_dir):
        raise ConfigError(f"trainer.output_dir={output_dir} already holds a run (checkpoints/ or metrics.jsonl): "
                          "continue it with trainer.resume=auto, or choose another (or an empty) trainer.output_dir")
    try:
        resume_from = resolve_resume(str(cfg.trainer.resume), output_dir / "checkpoints")
    except FileNotFoundError as exc:
        raise ConfigError(str(exc)) from exc
    lora = merge_lora(to_settings(cfg.model.lora), to_settings(cfg.algorithm.lora))
    if resume_from is not None and str(cfg.backend) != "verl":
        check_resume_adapters(resume_from, adapter_names(dict(cfg.agent.adapters), loop_roles(str(cfg.agent.name))))
    init_from = None
    if cfg.trainer.get("init_from"):  # e.g. an `earthrl sft` checkpoint: its adapter weights start the run
        try:
            init_from = check_init_checkpoint(Path(cfg.trainer.init_from), lora)
        except (FileNotFoundError, ValueError) as exc:
            raise ConfigError(f"trainer.init_from={cfg.trainer.init_from}: {exc}") from None
    # the vLLM engine's host-memory plan on CPU, checked before the warm start
    memory = job_budget(cfg, model, train_rows(cfg), learner=True) if str(cfg.backend) != "verl" else None
    warm_start = None
    preset = cfg.trainer.get("warm_start")
    if preset and init_from is None and resume_from is None:
        warm_start_folder(cfg, str(preset))  # the preset exists
        warm_start = str(preset)
    elif preset:
        why = "trainer.init_from is set" if init_from is not None else f"resuming from {resume_from}"
        notes.append(f"trainer.warm_start={preset} ignored: {why}")
    notes += [memory.line()] if memory is not None else []
    notes += [f"cluster.device={cfg.cluster.device} -> {device} ({device_why}); learner and engine",
              f"model.dtype={cfg.model.dtype} -> {dtype} ({dtype_why}); learner and engine"]
    return TrainInputs(model_path=model, data_root=root, spec=spec, tasks=tasks, heldout_tasks=heldout,
                       output_dir=output_dir, lora=lora, device=device, dtype=dtype, resume_from=resume_from,
                       init_from=init_from, warm_start=warm_start,
                       kv_cache_gib=memory.kv if memory is not None else None, notes=tuple(notes))


def _adapters_text(names: list[str]) -> str:
    return "one adapter" if names == ["default"] else "adapters " + ", ".join(names)


def check_resume_adapters(checkpoint: Path, names: tuple[str, ...]) -> None:
    """The checkpoint to resume holds the run's adapters (``agent.adapters``): one adapter for a run of one, the
    same names for a run of one per role.

    Raises:
        ConfigError: they differ (names both and the fix: the checkpoint's ``agent.adapters``, or a new run
            started from it with ``trainer.init_from``).
    """
    held = sorted(checkpoint_adapters(checkpoint))
    want = ["default"] if len(names) == 1 else sorted(names)
    if held != want:
        raise ConfigError(f"trainer.resume: {checkpoint} holds {_adapters_text(held)}, the run's agent.adapters give "
                          f"{_adapters_text(want)}; "
                          "resume with the checkpoint's agent.adapters, or start a new run from it with "
                          "trainer.init_from")


def with_warm_start(cfg: DictConfig, inputs: TrainInputs) -> TrainInputs:
    """``inputs`` with :attr:`TrainInputs.init_from` set to the SFT checkpoint of ``inputs.warm_start``,
    built first when it is not cached (:func:`~earthrl.launch.warm_start.ensure_warm_start`); ``inputs``
    itself when there is no warm start.

    Raises:
        ConfigError: the SFT run failed or wrote no checkpoint.
        ValueError: the built checkpoint's adapter does not match ``inputs.lora``.
    """
    if not inputs.warm_start:
        return inputs
    return replace(inputs, init_from=check_init_checkpoint(ensure_warm_start(cfg, inputs.warm_start), inputs.lora))


def verl_dry_run_path(cfg: DictConfig) -> Path | None:
    """``model.path`` of a ``backend=verl`` dry run whose path does not exist yet (not downloaded) but
    whose ``model.arch`` gives the memory estimate (conf/model/qwen3-4b.yaml); with no ``model.path``,
    ``$EARTHRL_HOME/models/<model.name>`` when it holds no model (:func:`~earthrl.launch.verl_config.job_arch`
    says so). None otherwise: an existing path (a folder, empty or not, or a file) is checked as usual."""
    if str(cfg.backend) != "verl" or not bool(cfg.trainer.verl_dry_run) or not cfg.model.get("arch"):
        return None
    if not cfg.model.path:
        stand_in = model_dir(str(cfg.model.name))
        return None if (stand_in / "config.json").is_file() else stand_in  # job_arch says so
    return None if Path(cfg.model.path).expanduser().exists() else Path(cfg.model.path)


def algorithm_spec(cfg: DictConfig) -> AlgorithmSpec:
    """The job's :class:`~earthrl.algorithms.spec.AlgorithmSpec`, built from the ``algorithm`` group, with
    every name resolved through it (reward, turn reward, estimator, policy loss, action format).

    Raises:
        ConfigError: an unknown name (with the registered ones) or a bad key, naming the field.
    """
    try:
        spec = AlgorithmSpec.from_config(OmegaConf.to_container(cfg.algorithm, resolve=True))
        spec.check(str(cfg.env.action_format))
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    return spec
