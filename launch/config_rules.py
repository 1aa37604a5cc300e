"""The value rules of the whole config tree of ``earthrl train`` and ``earthrl eval``.

Hydra composes any value it is given (``algorithm.lr=abc``, ``algorithm.group_size=0``); the
recipes would fail on it only once Ray and the model run. :func:`check_config` checks every leaf
of the composed config against :data:`RULES` (type, range, choices), every string for valid
Unicode, every interpolation for resolving, before anything starts. Keys match by
:func:`fnmatch.fnmatchcase` on the dotted path (``*`` spans dots), first match wins.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from earthrl.envs.errors import ConfigError
from earthrl.launch.override_text import presets
from earthrl.models.dtype import DTYPES


@dataclass(frozen=True)
class Num:
    """A finite number in ``[lo, hi]`` (``lo_open``: ``lo`` excluded); ``integer`` for whole numbers;
    ``null`` allows None. A bool is never a number."""

    lo: float | None = None
    hi: float | None = None
    lo_open: bool = False
    integer: bool = False
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if v is None and self.null:
            return None
        kind = "an integer" if self.integer else "a number"
        if isinstance(v, bool) or not isinstance(v, (int, float)) or (self.integer and not isinstance(v, int)):
            return f"must be {kind}" + (" or null" if self.null else "")
        if not math.isfinite(v):
            return "must be a finite number"
        if self.lo is not None and (v <= self.lo if self.lo_open else v < self.lo):
            if self.lo_open:
                return f"must be greater than {self.lo:g}"
            return f"must be at least {self.lo:g}" if self.hi is None else f"must be between {self.lo:g} and {self.hi:g}"
        if self.hi is not None and v > self.hi:
            return f"must be at most {self.hi:g}" if self.lo is None else f"must be between {self.lo:g} and {self.hi:g}"
        return None


@dataclass(frozen=True)
class Text:
    """A string (``empty`` allows ""), one of ``choices`` when given; ``null`` allows None."""

    choices: tuple[str, ...] = ()
    empty: bool = False
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if v is None and self.null:
            return None
        if self.choices and v not in self.choices:
            return f"must be one of {', '.join(self.choices)}"
        if not isinstance(v, str):
            return "must be a string" + (" or null" if self.null else "")
        if not v.strip() and not self.empty:
            return "must not be empty"
        return None


@dataclass(frozen=True)
class Flag:
    """``true`` or ``false``."""

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        return None if isinstance(v, bool) else "must be true or false"


@dataclass(frozen=True)
class ListOf:
    """A list whose items follow ``item``; ``nonempty`` refuses ``[]``."""

    item: Num | Text
    nonempty: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if not isinstance(v, list) or (self.nonempty and not v):
            return "must be a " + ("non-empty " if self.nonempty else "") + "list"
        bad = next((p for p in map(self.item.problem, v) if p), None)
        return f"items {bad}" if bad else None


@dataclass(frozen=True)
class Group:
    """A mapping of settings (its keys have their own rules); ``null`` allows None."""

    example: str
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` breaks the rule, or None."""
        if isinstance(v, dict) or (v is None and self.null):
            return None
        return "must be " + ("null or " if self.null else "") + f"a mapping like {self.example}"


@dataclass(frozen=True)
class Unknown:
    """A key under a group whose keys are all known: always refused, naming the known ones."""

    known: tuple[str, ...]

    def problem(self, v: Any) -> str | None:
        """Always the list of known keys."""
        return f"is not a known setting there; known: {', '.join(self.known)}"


@dataclass(frozen=True)
class Preset:
    """The name of a preset ``conf/<group>/<name>.yaml``, as text (a name with no file is refused, with
    the same list, by the code that loads it); ``null`` allows None."""

    group: str
    null: bool = False

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is not a preset name (lists the presets), or None."""
        if (v is None and self.null) or (isinstance(v, str) and v.strip()):
            return None
        return (f"must be {'null or ' if self.null else ''}a conf/{self.group} preset: one of "
                f"{', '.join(presets(self.group))}")


@dataclass(frozen=True)
class AutoOr:
    """``auto`` or a value that follows ``rule``."""

    rule: Num

    def problem(self, v: Any) -> str | None:
        """Why ``v`` is neither ``auto`` nor allowed by ``rule``, or None."""
        if v == "auto":
            return None
        bad = self.rule.problem(v)
        return f"must be auto or {bad.removeprefix('must be ')}" if bad else None


@dataclass(frozen=True)
class Free:
    """Anything (checked by the code that uses it, e.g. a registry or a user's reward)."""

    def problem(self, v: Any) -> str | None:
        """Never a problem."""
        return None


POS_INT, NONNEG_INT, POS, NONNEG, UNIT = Num(1, integer=True), Num(0, integer=True), Num(0, lo_open=True), Num(0), Num(0, 1)
PHRASING, SPLIT = Text(("IF", "AP", "OW")), Text(("train", "test"))
KL_ESTIMATORS = ("k1", "kl", "k2", "mse", "k3", "low_var_kl", "abs")
LOSS_AGG_MODES = ("token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm", "token-sum")

#: dotted-key pattern -> rule; the first matching pattern decides. Keys no pattern matches are free.
RULES: dict[str, Num | Text | Flag | ListOf | Group | Unknown | Preset | AutoOr | Free] = {
    "seed": NONNEG_INT,
    "backend": Text(("local", "verl")),
    "experiment_name": Text(),
    "model.name": Text(),
    "model.path": Text(null=True),
    "model.dtype": Text(DTYPES),
    "model.gradient_checkpointing": Flag(),
    "model.arch": Group("{hidden_size: 2560, num_hidden_layers: 36, …}"),  # launch/memory.py (backend=verl)
    "model.arch.tie_word_embeddings": Flag(),
    "model.arch.*": POS_INT,
    "*lora.rank": POS_INT,
    "*lora.alpha": POS,
    "*lora.dropout": Num(0, 0.99),
    "*lora.target_modules": ListOf(Text(), nonempty=True),
    "tasks.name": Text(),
    "tasks.data": Text(),
    "tasks.split": SPLIT,
    "tasks.tasks_per_step": POS_INT,
    "tasks.phrasing": PHRASING,
    "env.action_format": Text(),  # registry: envs.formats (runtime.env_kwargs)
    "env.mode": Text(),
    "env.toolset": Free(),  # a name or a list of tools (envs.toolsets.resolve_toolset)
    "env.inject_errors": Group("{rate: 0.1, seed: 0}", null=True),
    "env.inject_errors.rate": UNIT,
    "env.inject_errors.seed": NONNEG_INT,
    "env.inject_errors.kinds": ListOf(Text(), nonempty=True),
    "env.inject_errors.*": Unknown(("rate", "seed", "kinds")),
    "env.nan_max": UNIT,
    "env.num_workers": POS_INT,
    "env.step_timeout_s": Num(0, lo_open=True, null=True),
    "env.max_turns": POS_INT,
    "env.max_obs_chars": POS_INT,
    "env.max_context_tokens": POS_INT,
    "env.stop_strings": ListOf(Text()),
    "env.format_options": Group("{limits: {wall_s: 30}}", null=True),
    "env.format_options.limits": Group("{wall_s: 30, cpu_s: 30, memory_mb: 2048}"),
    "env.format_options.limits.*": POS,
    "env.format_options.*": Free(),
    "env.sandbox.allow_weaker": Flag(),
    "algorithm.name": Text(),
    "algorithm.group_size": Num(2, integer=True),  # G = 1: every group-normalised advantage is 0
    "algorithm.max_turns": Num(1, integer=True, null=True),
    "algorithm.action_format": Text(null=True),
    "algorithm.estimator": Text(),
    "algorithm.reward": Text(),
    "algorithm.turn_reward": Text(null=True),
    "algorithm.*_kwargs": Free(),
    "algorithm.*_kwargs.*": Free(),
    "algorithm.lora": Free(),
    "algorithm.advantage.eps": POS,
    "algorithm.advantage.std_floor": NONNEG,
    "algorithm.advantage.norm_by_std": Flag(),
    "algorithm.advantage.protect_recovery": Flag(),
    "algorithm.policy_loss.name": Text(),
    "algorithm.policy_loss.clip_ratio_low": Num(0, 0.99),
    "algorithm.policy_loss.clip_ratio_high": NONNEG,
    "algorithm.policy_loss.kl_coef": NONNEG,
    "algorithm.policy_loss.kl_estimator": Text(KL_ESTIMATORS),
    "algorithm.policy_loss.loss_agg_mode": Text(LOSS_AGG_MODES),
    "algorithm.policy_loss.manager_weight": UNIT,
    "algorithm.lr": POS,
    "algorithm.weight_decay": NONNEG,
    "algorithm.grad_clip": POS,
    "algorithm.ppo_epochs": POS_INT,
    "algorithm.filter_groups": Group("{enabled: true, max_rounds: 3}"),
    "algorithm.filter_groups.enabled": Flag(),
    "algorithm.filter_groups.max_rounds": POS_INT,
    "algorithm.micro_batch_size": POS_INT,
    "*sampling.temperature": NONNEG,  # 0: greedy
    "*sampling.top_p": Num(0, 1, lo_open=True),
    "*sampling.max_new_tokens": POS_INT,
    "cluster.name": Text(),
    "cluster.engine": Text(),  # "auto" or a name in rollout.engines.ENGINES
    "cluster.hf": Group("{min_shared_prefix: 64}"),
    "cluster.hf.min_shared_prefix": Num(0, integer=True),
    "cluster.vllm": Group("{python: auto, cpu_memory_gib: auto}"),
    "cluster.vllm.python": Text(),  # "auto" or a path (rollout.vllm_engine.vllm_python)
    "cluster.vllm.max_model_len": Num(256, integer=True),
    "cluster.vllm.cpu_memory_gib": AutoOr(Num(0.5)),  # launch/host_memory.plan derives or checks it
    "cluster.vllm.gpu_memory_utilization": Num(0, 1, lo_open=True),
    "cluster.vllm.enforce_eager": Flag(),
    "cluster.device": Text(("cpu", "cuda")),
    "cluster.verl": Group("{nnodes: 1, n_gpus_per_node: 8}"),  # backend=verl (launch/verl_config.py)
    "cluster.verl.param_offload": Flag(),
    "cluster.verl.optimizer_offload": Flag(),
    "cluster.verl.gpu_memory_gib": POS,
    "cluster.verl.max_*_length": Num(16, integer=True),
    "cluster.verl.*": POS_INT,
    "cluster.num_cpus": POS_INT,
    "cluster.torch_threads": POS_INT,
    "cluster.object_store_memory_mb": Num(75, integer=True),  # Ray's smallest object store
    "logger.name": Text(),
    "logger.project": Text(),
    "logger.mode": Text(("auto", "offline", "online", "disabled")),
    "trainer.steps": AutoOr(POS_INT),  # auto: by the dtype rule (launch/machine_size)
    "trainer.save_every": POS_INT,
    "trainer.keep_checkpoints": POS_INT,
    "trainer.resume": Text(),  # off | auto | a checkpoint path (launch.checkpoint.resolve_resume)
    "trainer.export": Flag(),
    "trainer.verl_dry_run": Flag(),  # backend=verl: print the composed verl config and stop
    "trainer.output_dir": Text(),
    "trainer.max_consecutive_failures": POS_INT,
    "trainer.heldout.every": NONNEG_INT,
    "trainer.heldout.split": SPLIT,
    "trainer.heldout.max_tasks": POS_INT,
    "trainer.heldout.samples": POS_INT,
    "trainer.heldout.phrasing": PHRASING,
    "trainer.heldout.bootstrap": NONNEG_INT,
    "eval.modes": ListOf(PHRASING, nonempty=True),
    "eval.samples": POS_INT,
    "eval.max_tasks": Num(1, integer=True, null=True),
    "eval.batch_tasks": POS_INT,
    "eval.checkpoint": Text(null=True),
    "eval.trajectories": Text(null=True),
    "eval.predictions": Text(null=True),
    "eval.earthbench": Text(null=True),
    "eval.metrics_mode": Text(("earthrl", "earthbench")),
    "eval.bootstrap": NONNEG_INT,
    "eval.plots": Flag(),
    "eval.resume": Flag(),
    "eval.output_dir": Text(null=True),
    "trainer.init_from": Text(null=True),  # an SFT (or any) checkpoint whose adapter weights start the run
    "trainer.warm_start": Preset("sft", null=True),  # a name with no file: refused by launch/warm_start.py
    "learn.name": Text(),
    "learn.model": Text(),
    "learn.tasks": Text(),
    "learn.env": Text(("json", "codeact", "hierarchical")),
    "learn.heldout_split": SPLIT,
    "learn.warm_start": Preset("sft"),  # a name with no file: refused by launch/learn.py
    "learn.compare_modes": ListOf(Text(("oracle", "unmasked", "masked"))),
    "learn.common.*": Free(),  # each stage's settings are checked by that stage's own rules, before the first starts
    "learn.grpo.*": Free(),
    "learn.eval.*": Free(),
    "learn.bootstrap": NONNEG_INT,
    "learn.output_dir": Text(),
    "sft.name": Text(),
    "sft.mode": Text(("oracle", "unmasked", "masked")),
    "sft.data.path": Text(null=True),
    "sft.data.max_tasks": Num(1, integer=True, null=True),
    "sft.data.max_tokens": Num(64, integer=True),
    "sft.data.phrasing": PHRASING,
    "sft.data.seed": NONNEG_INT,
    "sft.data.*": Unknown(("path", "max_tasks", "max_tokens", "phrasing", "seed")),
    "sft.epochs": POS_INT,
    "sft.max_steps": Num(1, integer=True, null=True),
    "sft.global_batch": POS_INT,
    "sft.micro_batch_size": POS_INT,
    "sft.lr": POS,
    "sft.lr_min": NONNEG,
    "sft.warmup_steps": NONNEG_INT,
    "sft.weight_decay": NONNEG,
    "sft.grad_clip": POS,
    "sft.save_every": NONNEG_INT,
    "sft.keep_checkpoints": POS_INT,
    "sft.export": Flag(),
    "sft.output_dir": Text(),
    "sft.deepspeed.zero_stage": Num(0, 3, integer=True, null=True),
    "sft.deepspeed.offload_optimizer": Flag(),
    "sft.deepspeed.offload_param": Flag(),
    "sft.deepspeed.*": Unknown(("zero_stage", "offload_optimizer", "offload_param")),
}
#: sections each command needs (a deleted section, ``~algorithm``, is refused).
SECTIONS = {"train": ("model", "tasks", "env", "algorithm", "cluster", "logger", "trainer"),
            "eval": ("model", "tasks", "env", "cluster", "logger", "eval", "sampling"),
            "sft": ("model", "tasks", "env", "cluster", "logger", "sft"),
            "learn": ("learn",)}


def rule_for(key: str):
    """The first rule of :data:`RULES` whose pattern matches the dotted ``key``, or None."""
    return next((rule for pattern, rule in RULES.items() if fnmatchcase(key, pattern)), None)


def _leaves(node: DictConfig | ListConfig, prefix: str = ""):
    """(dotted key, resolved plain value) of every leaf; a list of scalars is one leaf. A value
    that does not resolve raises ConfigError naming its key."""
    for key in node.keys():
        path = f"{prefix}{key}"
        if path == "hydra":  # Hydra's own node (present when composed with return_hydra_config)
            continue
        try:
            child = node[key]
        except OmegaConfBaseException as exc:
            raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
        if isinstance(child, DictConfig) and (child or rule_for(path) is None):
            yield from _leaves(child, path + ".")
        elif isinstance(child, (DictConfig, ListConfig)):
            try:
                yield path, OmegaConf.to_container(child, resolve=True)
            except OmegaConfBaseException as exc:
                raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None
        else:
            yield path, child


def _bad_string(value: Any) -> bool:
    """True when a string anywhere in ``value`` is not valid Unicode (a lone surrogate, e.g. from
    non-UTF-8 bytes on the command line)."""
    if isinstance(value, str):
        return not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_bad_string(k) or _bad_string(v) for k, v in value.items())
    return isinstance(value, list) and any(map(_bad_string, value))


def check_config(cfg: DictConfig, command: str) -> None:
    """Check every value of a composed ``earthrl train`` / ``earthrl eval`` config.

    Args:
        cfg: the composed config (Hydra's own ``hydra`` node, if present, is skipped).
        command: ``"train"`` or ``"eval"`` (which sections must be there).

    Raises:
        ConfigError: one line ``key=value <what is wrong>`` for the first bad value, a missing
            section, a value whose interpolation does not resolve, or a string that is not valid Unicode.
    """
    missing = [s for s in SECTIONS[command] if not isinstance(cfg.get(s), DictConfig)]
    if missing:
        raise ConfigError(f"{missing[0]}: the config needs this section; remove the override that deleted or replaced it")
    for key, value in _leaves(cfg):
        if _bad_string(value):
            raise ConfigError(f"{key}: holds text that is not valid UTF-8; write it as UTF-8 characters")
        rule = rule_for(key)
        prefixes = [p for p in RULES if "*" not in p and p.startswith(key + ".")]
        if rule is None and prefixes and not isinstance(value, dict):
            raise ConfigError(f"{key}={_shown(value)} must be a group of settings ({prefixes[0]}, …), not a value; "
                              f"set its keys instead, e.g. {prefixes[0]}=…")
        problem = rule.problem(value) if rule is not None else None
        if problem:
            raise ConfigError(f"{key}={_shown(value)} {problem}")


def _shown(value: Any) -> str:
    """A value as it would be written on the command line (cut at 80 characters)."""
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"
