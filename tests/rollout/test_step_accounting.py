"""Per-step accounting: the local split, verl 0.9.1's metrics (built by verl's own functions) mapped to the
shared names, and the hooks EarthRL's verl task runner installs in the process that runs ``fit``."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from verl import DataProto
from verl.experimental.agent_loop.agent_loop import AgentLoopManager
from verl.trainer.ppo import ray_trainer
from verl.trainer.ppo.metric_utils import compute_timing_metrics
from verl.utils import tracking
from verl.utils.py_functional import rename_dict

from earthrl.algorithms import verl_plugin
from earthrl.launch import verl_run
from earthrl.rollout.step_accounting import (
    ENV_S,
    GEN_TOKENS,
    GENERATE_S,
    GPU_MEM_PEAK_GIB,
    REWARD_S,
    ROLLOUT_S,
    SHARED,
    STEP_S,
    TOKENS_PER_S_PER_GPU,
    UPDATE_S,
    WEIGHT_SYNC_S,
    from_verl,
    local_accounting,
)

ON_GPU = torch.cuda.is_available() and torch.cuda.is_initialized()


def assert_step_accounting(m: dict) -> None:
    """A local run's metrics.jsonl line carries every shared name with values that add up (used by the e2e run)."""
    missing = [k for k in SHARED if k != GPU_MEM_PEAK_GIB and k not in m]
    assert not missing, missing
    assert (GPU_MEM_PEAK_GIB in m) == ON_GPU  # absent on a CPU run, never a made-up 0
    assert all(m[k] >= 0 for k in SHARED if k in m)
    parts = m[ROLLOUT_S] + m[REWARD_S] + m[UPDATE_S] + m[WEIGHT_SYNC_S]
    assert parts == pytest.approx(m[STEP_S], rel=1e-6)  # nothing of the step is left uncounted
    assert m[GENERATE_S] <= m[ROLLOUT_S] and m[ENV_S] == pytest.approx(m[ROLLOUT_S] - m[GENERATE_S])
    assert m[GEN_TOKENS] == m["engine/generated_tokens"] > 0
    assert m[TOKENS_PER_S_PER_GPU] == pytest.approx(m[GEN_TOKENS] / m[GENERATE_S]) == m["perf/gen_tokens_per_s"]
    if not m.get("loss/skipped_update"):
        assert m[WEIGHT_SYNC_S] > 0  # the adapter was pushed, and timed apart from the update


def test_local_accounting_splits_the_step():
    out = local_accounting({"rollout": 10.0, "reward": 0.5, "update": 4.0, "weight_sync": 0.25, "step": 15.0},
                           generated_tokens=300, generate_s=6.0)
    assert {k: out[k] for k in (ROLLOUT_S, GENERATE_S, ENV_S, REWARD_S, UPDATE_S, WEIGHT_SYNC_S, STEP_S)} == {
        ROLLOUT_S: 10.0, GENERATE_S: 6.0, ENV_S: 4.0, REWARD_S: 0.5, UPDATE_S: 4.0, WEIGHT_SYNC_S: 0.25, STEP_S: 15.0}
    assert out[GEN_TOKENS] == 300 and out[TOKENS_PER_S_PER_GPU] == 50.0
    assert (GPU_MEM_PEAK_GIB in out) == ON_GPU
    with pytest.raises(KeyError, match="weight_sync"):
        local_accounting({"rollout": 1.0, "reward": 0.0, "update": 1.0, "step": 2.0}, 1, 1.0)


def _verl_step_metrics() -> dict:
    """One step's metrics dict as ``RayPPOTrainer.fit`` assembles it, from verl's own functions:
    2 rows, prompt 3 / response 4 positions; row 0 generated 2 of its 3 response tokens (1 observation),
    row 1 generated 1; timing sections as fit's ``marked_timer`` names them."""
    attention = torch.tensor([[0, 1, 1, 1, 1, 1, 0], [1, 1, 1, 1, 0, 0, 0]])
    response_mask = torch.tensor([[1, 0, 1, 0], [1, 0, 0, 0]])
    batch = DataProto.from_single_dict({"prompts": torch.zeros(2, 3, dtype=torch.long),
                                        "responses": torch.zeros(2, 4, dtype=torch.long),
                                        "attention_mask": attention, "response_mask": response_mask})
    batch.meta_info["global_token_num"] = attention.sum(-1).tolist()
    agent = [[{"generate_sequences": 3.0, "tool_calls": 4.5, "compute_score": 0.1, "num_preempted": 0},
              {"generate_sequences": 6.0, "tool_calls": 1.5, "compute_score": 0.2, "num_preempted": 0}]]
    timing_raw = {**AgentLoopManager._performance_metrics(None, agent, batch),
                  "gen": 8.0, "reward": 0.5, "old_log_prob": 1.0, "ref": 1.5, "adv": 0.25, "update_actor": 6.0,
                  "update_weights": 0.75, "step": 18.5}
    actor = rename_dict({"pg_loss": 0.1, "perf/max_memory_allocated_gb": 17.25}, "actor/")
    return {**actor, **compute_timing_metrics(batch=batch, timing_raw=timing_raw),
            **ray_trainer.compute_throughout_metrics(batch=batch, timing_raw=timing_raw, n_gpus=2)}


@pytest.fixture
def hooked(monkeypatch):
    """EarthRL's verl task runner run in-process (verl's own ``run`` stubbed); verl's names restored after."""
    for module, name in ((tracking, "Tracking"), (ray_trainer, "compute_throughout_metrics"), (ray_trainer, "compute_data_metrics"),
                         (ray_trainer, "compute_advantage")):
        monkeypatch.setattr(module, name, getattr(module, name))
    ran = []
    monkeypatch.setattr(verl_run.TaskRunner.__ray_actor_class__, "run", lambda self, config: ran.append(config))
    runner = verl_run.EarthRLTaskRunner.__ray_actor_class__
    runner.run(object.__new__(runner), {"trainer": {}})
    assert ran == [{"trainer": {}}]
    return ran


def test_task_runner_hooks_the_logger_and_throughput_fit_uses(hooked):
    from verl.utils.tracking import Tracking  # as fit imports it when it starts

    assert Tracking is verl_run.StepAccountingTracking
    assert ray_trainer.compute_throughout_metrics.earthrl_wraps is not None
    assert ray_trainer.compute_advantage is verl_plugin.compute_advantage
    verl_run.install_step_accounting()  # idempotent: wrapped once
    assert not hasattr(ray_trainer.compute_throughout_metrics.earthrl_wraps, "earthrl_wraps")


def test_verl_step_metrics_map_to_the_shared_names(hooked, capsys):
    m = _verl_step_metrics()
    assert m[GEN_TOKENS] == 3.0 and m["perf/total_num_tokens"] == 9  # the hook counts generated tokens only
    out = from_verl(m, n_gpus=2)
    # slowest episode: the second (6 + 1.5 + 0.2 s); its 6 s of generation bound the rollout's
    assert out == {ROLLOUT_S: 8.0, GENERATE_S: 6.0, ENV_S: 2.0, REWARD_S: 0.75, UPDATE_S: 8.5, WEIGHT_SYNC_S: 0.75,
                   STEP_S: 18.5, GEN_TOKENS: 3.0, TOKENS_PER_S_PER_GPU: 0.25, GPU_MEM_PEAK_GIB: 17.25}
    assert out[ROLLOUT_S] + out[REWARD_S] + out[UPDATE_S] + out[WEIGHT_SYNC_S] <= out[STEP_S]
    # verl's logger, as fit creates it, prints the shared names next to verl's own
    logger = tracking.Tracking("p", "e", default_backend="console", config={"trainer": {"n_gpus_per_node": 2, "nnodes": 1}})
    logger.log(data=m, step=3)
    line = capsys.readouterr().out
    assert "timing_s/update_actor:6.0" in line and "time/update_s:8.5" in line and "time/weight_sync_s:0.75" in line
    assert "perf/gen_tokens_per_s_per_gpu:0.25" in line and "perf/gpu_mem_peak_gib:17.25" in line
    logger.log(data={"val-core/acc": 0.5}, step=3)  # validation metrics: nothing added
    assert capsys.readouterr().out.strip() == "step:3 - val-core/acc:0.5"


def test_from_verl_without_earthrl_inputs_logs_no_made_up_figures():
    assert from_verl({"val-core/acc": 1.0}, n_gpus=8) == {}
    out = from_verl({"timing_s/step": 5.0, "timing_s/gen": 3.0, "timing_s/update_actor": 1.0}, n_gpus=8)
    assert out == {ROLLOUT_S: 3.0, GENERATE_S: 3.0, ENV_S: 0.0, REWARD_S: 0.0, UPDATE_S: 1.0, WEIGHT_SYNC_S: 0.0,
                   STEP_S: 5.0}  # no token count, no memory figure: those names are absent
    assert not np.isnan(list(out.values())).any()


def test_verl_batches_log_reward_and_accuracy_per_skill(hooked):
    """4 rows as verl 0.9.1's v0 trainer holds them after the reward (``acc`` spread from reward_extra_info,
    each row's extra_fields one key each): rewards 10, -1, 2 on their last token; the faulted row left out."""
    scores = torch.zeros(4, 3)
    scores[0, 2], scores[1, 1], scores[2, 0], scores[3, 2] = 10.0, -1.0, 2.0, 7.0
    batch = DataProto.from_single_dict({"token_level_scores": scores})
    tasks = [{"skill": "water"}, {"skill": "water"}, {"skill": "vegetation"}, {"skill": "vegetation"}]
    batch.non_tensor_batch.update({"acc": np.array([1.0, 0.0, 1.0, 1.0]),
                                   "earthrl_task": np.array(tasks, dtype=object),
                                   "earthrl_failure": np.array([None, None, None, "env_failure"], dtype=object)})
    m = verl_run.batch_by_skill(batch)
    assert m == {"rollout/by_skill/vegetation/reward": 2.0, "rollout/by_skill/vegetation/accuracy": 1.0,
                 "rollout/by_skill/water/reward": 4.5, "rollout/by_skill/water/accuracy": 0.5}
    assert ray_trainer.compute_data_metrics.earthrl_wraps is not None  # fit's call gets them too
    assert verl_run.batch_by_skill(DataProto.from_single_dict({"token_level_scores": scores})) == {}
