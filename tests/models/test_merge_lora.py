"""merge_lora: the one rule for the LoRA settings a run trains with (model.lora, then algorithm.lora key by key)."""

from omegaconf import OmegaConf

from earthrl.launch.config_schema.model import LoraConfig
from earthrl.models.lora import merge_lora

QWEN_05B = {"rank": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def test_an_algorithm_override_replaces_only_the_keys_it_sets():
    # conf/algorithm/vg_hrl.yaml: lora: {rank: 64, alpha: 128} over conf/model/qwen2.5-coder-0.5b.yaml
    assert merge_lora(QWEN_05B, {"rank": 64, "alpha": 128}) == {
        "rank": 64, "alpha": 128, "dropout": 0.0, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
    assert merge_lora(QWEN_05B, {"target_modules": ["q_proj", "v_proj"]}) == {
        "rank": 16, "alpha": 32, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


def test_no_override_gives_the_model_settings_as_a_new_dict():
    for override in (None, {}):
        merged = merge_lora(QWEN_05B, override)
        assert merged == {"rank": 16, "alpha": 32, "dropout": 0.0,
                          "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}
        merged["rank"] = 8
        merged["target_modules"].append("up_proj")
    assert QWEN_05B == {"rank": 16, "alpha": 32, "dropout": 0.0,
                        "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}  # the input is untouched


def test_typed_settings_become_plain_values():
    cfg = OmegaConf.create({"model": {"lora": {"rank": 4, "alpha": "${.rank}", "dropout": 0.0,
                                               "target_modules": ["q_proj", "k_proj"]}},
                            "algorithm": {"lora": {"alpha": 16}}, "grpo": {"lora": {}}})
    model_lora = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(LoraConfig), cfg.model.lora))
    merged = merge_lora(model_lora, OmegaConf.to_container(cfg.algorithm.lora))
    assert merged == {"rank": 4, "alpha": 16, "dropout": 0.0, "target_modules": ["q_proj", "k_proj"]}
    assert type(merged["target_modules"]) is list
    alone = merge_lora(model_lora, {})  # conf/algorithm/grpo.yaml: lora is the schema's {}
    assert alone == {"rank": 4, "alpha": 4.0, "dropout": 0.0, "target_modules": ["q_proj", "k_proj"]}
    assert type(alone["target_modules"]) is list
    assert merge_lora({"rank": 2, "alpha": 4, "target_modules": ("q_proj",)}) == {
        "rank": 2, "alpha": 4, "target_modules": ["q_proj"]}  # a tuple becomes a list
