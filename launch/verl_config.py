"""``backend=verl``: EarthRL's config → verl 0.9.1's PPO trainer config, its dataset and its launch.

:func:`compose_verl_config` starts from verl's own full default config
(``verl/trainer/config/_generated_ppo_trainer.yaml``, no Hydra needed), sets every key EarthRL maps
(model + LoRA with ``lora.merge=False``: adapter-only sync to vLLM; FSDP2; vLLM async rollout with
``n = algorithm.group_size``; EarthRL's agent loop, estimator, loss and reward; DAPO
``filter_groups`` on the outcome metric ``acc``; ``algorithm.rollout_correction`` from EarthRL's
(:meth:`~earthrl.algorithms.rollout_correction.RolloutCorrection.verl_keys`); the cluster's GPUs and nodes), merged in struct mode
so that a key verl does not have is an error, and adds what EarthRL's code inside verl reads: the
``earthrl`` section (the agent loop), ``algorithm.earthrl_advantage`` (the run's ``algorithm.advantage``,
for the estimators) and the ``EARTHRL_POLICY_LOSS`` variable of every Ray worker (the run's
``algorithm.policy_loss``, for the losses; :mod:`earthrl.algorithms.verl_plugin`).
:func:`run_verl` prints the config (``trainer.verl_dry_run=true`` stops there) and starts verl's
``main_ppo`` in the trainer's Ray cluster; without CUDA it stops with one line, since verl's trainer
has no CPU rollout backend.
"""

from __future__ import annotations

import json
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from earthrl.algorithms.rollout_correction import RolloutCorrection
from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import to_settings
from earthrl.models.lora import merge_lora
from earthrl.rollout.run_logger import wandb_mode

VERL_MODULES = "earthrl.algorithms.verl_plugin,earthrl.rollout.verl_loop"
"""``VERL_USE_EXTERNAL_MODULES`` of every Ray worker: estimators, losses and the agent loop."""


def verl_default_config() -> DictConfig:
    """verl's full default PPO config (the installed verl's generated YAML)."""
    import verl  # lazy: verl is heavy; only backend=verl needs it

    return OmegaConf.load(Path(verl.__file__).parent / "trainer" / "config" / "_generated_ppo_trainer.yaml")


def write_verl_dataset(tasks: list[dict], path: Path) -> Path:
    """Write ``tasks`` as the parquet rows verl's ``RLHFDataset`` reads: ``prompt`` (the question, for
    verl's length filter; the agent loop builds the real prompt), ``data_source``, ``agent_name``
    (``earthrl``), ``reward_model.ground_truth`` and ``extra_info.earthrl_task`` (the TaskSpec as JSON)."""
    import pandas as pd  # lazy: only backend=verl

    rows = [{"data_source": "earthrl", "agent_name": "earthrl",
             "prompt": [{"role": "user", "content": str(t["question"].get("IF") or next(iter(t["question"].values())))}],
             "reward_model": {"style": "rule", "ground_truth": json.dumps(t["answer"])},
             "extra_info": {"earthrl_task": json.dumps(t), "index": i}} for i, t in enumerate(tasks)]
    path.parent.mkdir(parents=True, exist_ok=True)
    pd.DataFrame(rows).to_parquet(path)
    return path


def verl_loggers(cfg: DictConfig) -> list[str]:
    """verl's ``trainer.logger`` for EarthRL's ``logger`` setting: ``console``, plus ``wandb`` unless
    ``logger.mode`` resolves to disabled (``logger=none``), as the local backend logs."""
    return ["console"] + (["wandb"] if wandb_mode(str(cfg.logger.mode)) != "disabled" else [])


def wandb_env(cfg: DictConfig) -> dict[str, str]:
    """The Ray workers' wandb variables for verl's wandb logger: ``WANDB_MODE`` (``logger.mode`` resolved:
    offline without ``WANDB_API_KEY``) and ``WANDB_DIR`` (the run folder, as the local backend writes it);
    {} with wandb off."""
    mode = wandb_mode(str(cfg.logger.mode))
    if mode == "disabled":
        return {}
    return {"WANDB_MODE": mode, "WANDB_DIR": str(Path(cfg.trainer.output_dir))}


def compose_verl_config(cfg: DictConfig, *, model_path: Path, data_root: Path, train_file: Path, val_file: Path,
                        env: dict) -> DictConfig:
    """verl's config for this EarthRL job (module doc).

    Raises:
        ConfigError: a mapped key verl 0.9.1 does not have (names it), or settings verl refuses.
    """
    from earthrl.algorithms.verl_plugin import ADVANTAGE_KEY, POLICY_LOSS_ENV  # lazy: imports verl
    from earthrl.algorithms.verl_reward import __file__ as reward_file  # lazy: imports the rewards stack

    alg, cl, v = cfg.algorithm, cfg.cluster, cfg.cluster.verl
    lora = merge_lora(to_settings(cfg.model.lora), to_settings(alg.lora))
    loss = alg.policy_loss
    out_dir = Path(cfg.trainer.output_dir)
    prompts = int(cfg.tasks.tasks_per_step)
    mapped = {
        "data": {"train_files": str(train_file), "val_files": str(val_file), "train_batch_size": prompts,
                 "max_prompt_length": int(v.max_prompt_length), "max_response_length": int(v.max_response_length),
                 "return_raw_chat": True, "filter_overlong_prompts": False},
        "actor_rollout_ref": {
            "model": {"path": str(model_path), "lora_rank": int(lora["rank"]), "lora_alpha": float(lora["alpha"]),
                      "target_modules": list(lora["target_modules"]),
                      "enable_gradient_checkpointing": bool(cfg.model.gradient_checkpointing),
                      "lora": {"merge": False}},
            "actor": {"strategy": "fsdp2", "ppo_mini_batch_size": prompts,
                      "ppo_micro_batch_size_per_gpu": int(v.micro_batch_size_per_gpu), "ppo_epochs": int(alg.ppo_epochs),
                      "use_kl_loss": float(loss.kl_coef) > 0, "kl_loss_coef": float(loss.kl_coef),
                      "kl_loss_type": str(loss.kl_estimator), "clip_ratio_low": float(loss.clip_ratio_low),
                      "clip_ratio_high": float(loss.clip_ratio_high), "loss_agg_mode": str(loss.loss_agg_mode),
                      "policy_loss": {"loss_mode": f"earthrl_{loss.name}"}, "grad_clip": float(alg.grad_clip),
                      "optim": {"lr": float(alg.lr), "weight_decay": float(alg.weight_decay)},
                      "fsdp_config": {"param_offload": bool(v.param_offload), "optimizer_offload": bool(v.optimizer_offload)}},
            "ref": {"log_prob_micro_batch_size_per_gpu": int(v.micro_batch_size_per_gpu),
                    "fsdp_config": {"param_offload": bool(v.param_offload)}},
            "rollout": {"name": "vllm", "mode": "async", "n": int(alg.group_size),
                        "temperature": float(alg.sampling.temperature), "top_p": float(alg.sampling.top_p),
                        "prompt_length": int(v.max_prompt_length), "response_length": int(v.max_response_length),
                        "gpu_memory_utilization": float(cl.vllm.gpu_memory_utilization),
                        "tensor_model_parallel_size": int(v.tensor_parallel), "calculate_log_probs": True,
                        "log_prob_micro_batch_size_per_gpu": int(v.micro_batch_size_per_gpu),
                        "agent": {"default_agent_loop": "earthrl"}}},
        "algorithm": {"adv_estimator": f"earthrl_{alg.estimator}",
                      "norm_adv_by_std_in_grpo": bool(alg.advantage.norm_by_std), "use_kl_in_reward": False,
                      "filter_groups": {"enable": bool(alg.filter_groups.enabled), "metric": "acc",
                                        "max_num_gen_batches": int(alg.filter_groups.max_rounds)},
                      "rollout_correction": RolloutCorrection.from_mapping(
                          OmegaConf.to_container(alg.rollout_correction, resolve=True)).verl_keys()},
        "reward": {"custom_reward_function": {"path": str(reward_file), "name": "compute_score"}},
        "trainer": {"n_gpus_per_node": int(v.n_gpus_per_node), "nnodes": int(v.nnodes), "use_v1": False,
                    "total_training_steps": int(cfg.trainer.steps), "save_freq": int(cfg.trainer.save_every),
                    "default_local_dir": str(out_dir / "verl_checkpoints"), "project_name": str(cfg.logger.project),
                    "experiment_name": str(cfg.experiment_name), "logger": verl_loggers(cfg), "test_freq": -1,
                    "val_before_train": False, "device": "cuda"},
    }
    base = verl_default_config()
    OmegaConf.set_struct(base, True)
    try:
        merged = OmegaConf.merge(base, OmegaConf.create(mapped))
    except Exception as exc:  # noqa: BLE001 - omegaconf's key errors are several classes
        raise ConfigError(f"verl config: {str(exc).splitlines()[0]} (the installed verl is not 0.9.1?)") from None
    OmegaConf.set_struct(merged, False)
    merged.ray_kwargs.ray_init.runtime_env.env_vars = {
        "VERL_USE_EXTERNAL_MODULES": VERL_MODULES,
        POLICY_LOSS_ENV: json.dumps(OmegaConf.to_container(loss, resolve=True), sort_keys=True),
        **wandb_env(cfg)}
    merged.algorithm[ADVANTAGE_KEY] = OmegaConf.to_container(alg.advantage, resolve=True)
    timeout = cfg.env.get("step_timeout_s")
    merged.earthrl = {"data_root": str(data_root), "workspace_root": str(out_dir / "workspaces"), "env": env,
                      "num_workers": int(cfg.env.num_workers), "step_timeout_s": timeout,
                      "phrasing": str(cfg.tasks.phrasing),
                      "max_turns": int(cfg.env.max_turns),
                      "max_new_tokens": int(alg.sampling.max_new_tokens), "stop_strings": list(cfg.env.stop_strings),
                      "algorithm": OmegaConf.to_container(alg, resolve=True)}
    check_verl_config(merged)
    return merged


def check_verl_config(vc: DictConfig) -> None:
    """The batch arithmetic verl asserts at start, as one line each.

    Raises:
        ConfigError: naming the EarthRL key to change.
    """
    gpus = int(vc.trainer.n_gpus_per_node) * int(vc.trainer.nnodes)
    tp = int(vc.actor_rollout_ref.rollout.tensor_model_parallel_size)
    if gpus % tp:
        raise ConfigError(f"cluster.verl.tensor_parallel={tp} must divide the {gpus} GPUs of the cluster")
    rows = int(vc.data.train_batch_size) * int(vc.actor_rollout_ref.rollout.n)
    if rows % gpus:
        raise ConfigError(f"tasks.tasks_per_step × algorithm.group_size = {rows} trajectories must split evenly over "
                          f"{gpus} GPUs: change tasks.tasks_per_step")


def run_verl(cfg: DictConfig, vc: DictConfig) -> None:
    """Print the composed verl config and start verl's trainer (module doc).

    Raises:
        ConfigError: no CUDA device (verl's trainer needs GPUs), after printing the config.
    """
    import os

    print(OmegaConf.to_yaml(vc, resolve=True), flush=True)
    if bool(cfg.trainer.verl_dry_run):
        print("trainer.verl_dry_run=true: verl config composed and checked; not started", flush=True)
        return
    import torch  # lazy: only when verl would start

    if not torch.cuda.is_available():
        raise ConfigError("backend=verl needs CUDA GPUs (verl has no CPU rollout backend); the verl config above is "
                          "composed and checked: run on a GPU node (docs/cluster.md), or use backend=local")
    os.environ["VERL_USE_EXTERNAL_MODULES"] = VERL_MODULES
    from earthrl.launch.verl_run import main  # lazy: verl's trainer stack, GPU only

    main(vc)


def job_arch(cfg: DictConfig, model_path: Path):
    """The :class:`~earthrl.launch.memory.Arch` of the job's model: the folder's config.json when it is
    there, else ``model.arch`` (a dry run before the download). Prints one line saying which, when the
    folder is not there yet or its config.json disagrees with ``model.arch`` (hidden size, layers, heads).

    Raises:
        ConfigError: neither is there, or a key is missing (named).
    """
    from earthrl.launch.memory import Arch  # lazy: only backend=verl

    arch_cfg = cfg.model.get("arch")
    yaml_arch = Arch.from_mapping(OmegaConf.to_container(arch_cfg, resolve=True)) if arch_cfg else None
    if not (Path(model_path) / "config.json").is_file():
        if yaml_arch is None:
            raise ConfigError(f"model.path={model_path} has no config.json and model={cfg.model.name} has no model.arch: "
                              "point model.path at the downloaded Hugging Face folder")
        where = (f"model.path={model_path} is not there yet" if cfg.model.path else
                 f"model.path is not set (the dry run's verl config names {model_path}; set it for the real run)")
        print(f"{where}: the memory estimate comes from model.arch (conf/model/{cfg.model.name}.yaml)", flush=True)
        return yaml_arch
    arch = Arch.from_folder(model_path)
    if yaml_arch is not None and arch.summary() != yaml_arch.summary():
        print(f"warning: {Path(model_path) / 'config.json'} ({arch.summary()}) differs from model.arch of "
              f"model={cfg.model.name} ({yaml_arch.summary()}): the estimate uses config.json; check that model.path "
              f"is {cfg.model.name}", flush=True)
    return arch


def memory_estimate(cfg: DictConfig, model_path: Path):
    """The job's :class:`~earthrl.launch.memory.Estimate` (the arch of :func:`job_arch`)."""
    from earthrl.launch.memory import estimate  # lazy: only backend=verl

    arch = job_arch(cfg, model_path)
    v = cfg.cluster.verl
    lora = merge_lora(to_settings(cfg.model.lora), to_settings(cfg.algorithm.lora))
    return estimate(arch, gpus=int(v.n_gpus_per_node) * int(v.nnodes), card_gib=float(v.gpu_memory_gib),
                    lora_rank=int(lora["rank"]), lora_targets=list(lora["target_modules"]),
                    micro_batch=int(v.micro_batch_size_per_gpu),
                    seq_len=int(v.max_prompt_length) + int(v.max_response_length),
                    gradient_checkpointing=bool(cfg.model.gradient_checkpointing),
                    rollout_rows=int(cfg.tasks.tasks_per_step) * int(cfg.algorithm.group_size),
                    tensor_parallel=int(v.tensor_parallel),
                    gpu_memory_utilization=float(cfg.cluster.vllm.gpu_memory_utilization),
                    param_offload=bool(v.param_offload))


def verl_job(cfg: DictConfig, *, model_path: Path, data_root: Path, tasks: list[dict], heldout: list[dict]) -> DictConfig:
    """Everything ``earthrl train backend=verl`` does after the shared checks: compose and check verl's
    config, print the memory estimate and refuse what cannot fit, write verl's dataset, start verl
    (:func:`run_verl`). Returns the composed verl config.

    Raises:
        ConfigError: the cluster has no ``verl`` section, a figure does not fit, or no CUDA (after printing).
    """
    from earthrl.launch.memory import check_fits  # lazy: only backend=verl
    from earthrl.rollout.runtime import env_kwargs  # lazy: runtime imports Ray

    if not cfg.cluster.get("verl"):
        raise ConfigError(f"backend=verl: cluster={cfg.cluster.name} has no verl section; "
                          "use cluster=4090x2|4090x4|a100x8|a100x16")
    data_dir = Path(cfg.trainer.output_dir) / "verl_data"
    train_file, val_file = data_dir / "train.parquet", data_dir / "val.parquet"
    vc = compose_verl_config(cfg, model_path=model_path, data_root=data_root, train_file=train_file,
                             val_file=val_file, env=env_kwargs(to_settings(cfg.env)))
    est = memory_estimate(cfg, model_path)
    print(est.lines(), flush=True)
    check_fits(est)
    if not bool(cfg.trainer.verl_dry_run):
        import torch  # lazy: only when verl would start

        if not torch.cuda.is_available():  # before anything is written
            print(OmegaConf.to_yaml(vc, resolve=True), flush=True)
            raise ConfigError("backend=verl needs CUDA GPUs (verl has no CPU rollout backend); the verl config above "
                              "is composed and checked: run on a GPU node (docs/cluster.md), or use "
                              "backend=local (trainer.verl_dry_run=true only prints it)")
        write_verl_dataset(tasks, train_file)
        write_verl_dataset(heldout or tasks[:1], val_file)
    run_verl(cfg, vc)
    return vc
