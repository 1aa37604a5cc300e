"""One spec per recipe: what each conf/algorithm config resolves to, and the extra inputs it asks for."""

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import OmegaConf

from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.launch.config_schema import defaults, to_settings
from earthrl.launch.overrides import CONF_DIR
from earthrl.tests.algorithms.builders import spec

# recipe → (estimator, loss, extra estimator inputs on a tensor backend, extra loss inputs)
EXPECTED = {
    "grpo": ("grpo", "ppo_clip_kl", (), ()),
    "dr_grpo": ("grpo", "ppo_clip_kl", (), ()),
    "mefr_tap": ("grpo_tap", "ppo_clip_kl", ("error_mask",), ()),
    "mefr_tap_no_tap": ("grpo", "ppo_clip_kl", (), ()),
    "mefr_only": ("grpo", "ppo_clip_kl", (), ()),
    "tap_only": ("grpo_tap", "ppo_clip_kl", ("error_mask",), ()),
    "vg_hrl": ("hierarchical", "mixed_role", ("role_mask",), ("role_mask",)),
    "executor_tiered": ("executor_node", "ppo_clip_kl", (), ()),
    "gigpo": ("gigpo", "ppo_clip_kl", ("anchor_ids",), ()),
}


def _spec(name: str) -> AlgorithmSpec:
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=[f"algorithm={name}"])
    return AlgorithmSpec.from_config(OmegaConf.to_container(cfg.algorithm, resolve=True))


def test_every_recipe_config_has_its_spec():
    assert sorted(EXPECTED) == sorted(p.stem for p in (CONF_DIR / "algorithm").glob("*.yaml"))
    for name, (estimator, loss, adv_inputs, loss_inputs) in EXPECTED.items():
        spec = _spec(name)
        assert (spec.estimator, spec.loss.name, spec.advantage_inputs, spec.loss_inputs) == \
            (estimator, loss, adv_inputs, loss_inputs), name
        spec.check("hierarchical" if name == "vg_hrl" else "json")  # every name resolves
    assert _spec("dr_grpo").advantage.norm_by_std is False and _spec("grpo").advantage.norm_by_std is True
    vg = _spec("vg_hrl")
    assert (vg.reward, vg.turn_reward, vg.action_format, vg.loss.manager_weight) == \
        ("hirs_manager", "hirs_specialist", "hierarchical", 0.5)
    assert _spec("mefr_tap").reward_kwargs["alpha_success"] == 10.0
    gigpo = _spec("gigpo").advantage  # verl-agent's GiGPO defaults: ω 1, γ 0.95, mean_std_norm
    assert (gigpo.step_weight, gigpo.gamma, gigpo.norm_by_std) == (1.0, 0.95, True)


def test_check_names_the_field_and_the_fix():
    with pytest.raises(ValueError, match="algorithm=vg_hrl needs env.action_format=hierarchical .*add env=hierarchical"):
        _spec("vg_hrl").check("json")
    with pytest.raises(ValueError, match="algorithm.turn_reward=nope: unknown turn reward 'nope'"):
        spec(turn_reward="nope").check("json")
    with pytest.raises(ValueError, match="algorithm.policy_loss.name=nope: unknown policy loss"):
        spec(policy_loss={"name": "nope"}).check("json")
    whole = defaults("algorithm", name="t")
    with pytest.raises(ValueError, match=r"algorithm.policy_loss has unknown key\(s\) \['clip'\]"):
        AlgorithmSpec.from_config({**whole, "policy_loss": {**whole["policy_loss"], "clip": 0.2}})


def test_the_spec_takes_every_value_from_the_config():
    # no defaults of its own: a partial config is refused, naming what is missing and where the defaults are
    with pytest.raises(ValueError, match=r"the algorithm config is missing \['name', 'reward', .*defaults\('algorithm'"):
        AlgorithmSpec.from_config({"estimator": "grpo_tap"})
    with pytest.raises(ValueError, match=r"algorithm.policy_loss is missing \['manager_weight'\]"):
        whole = defaults("algorithm", name="t")
        AlgorithmSpec.from_config({**whole, "policy_loss": {k: v for k, v in whole["policy_loss"].items()
                                                            if k != "manager_weight"}})
    # the typed settings of a composed config (a dataclass) give the same spec as its plain mapping
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["algorithm=vg_hrl", "algorithm.advantage.eps=0.125",
                                           "algorithm.policy_loss.manager_weight=0.75"])
    typed = AlgorithmSpec.from_config(to_settings(cfg.algorithm))
    assert typed == AlgorithmSpec.from_config(OmegaConf.to_container(cfg.algorithm, resolve=True))
    assert (typed.advantage.eps, typed.loss.manager_weight, typed.loss.name) == (0.125, 0.75, "mixed_role")


def test_rollout_correction_is_composed_into_the_spec():
    """Every recipe runs token-level TIS with cap 2 and no sequence dropped unless told otherwise."""
    from earthrl.algorithms.rollout_correction import RolloutCorrection

    assert {_spec(name).correction for name in EXPECTED} == {RolloutCorrection("token", 2.0, "none", 0.5, 2.0)}
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        cfg = compose("config", overrides=["algorithm.rollout_correction.mask=geometric",
                                           "algorithm.rollout_correction.mask_upper=1.5"])
    spec = AlgorithmSpec.from_config(OmegaConf.to_container(cfg.algorithm, resolve=True))
    assert spec.correction == RolloutCorrection("token", 2.0, "geometric", 0.5, 1.5)
    whole = defaults("algorithm", name="t")
    assert AlgorithmSpec.from_config({**whole, "rollout_correction": None}).correction is None  # null: no correction
