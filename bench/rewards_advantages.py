"""``earthrl bench algorithms``: cost of the score and advantage stages (rewards, estimator, token
broadcast) for one batch.

Target: under 1 % of a default local training step (~330 s on the 2-core CPU), i.e.
< 3.3 s for 1024 trajectories × 8192 tokens.
"""

from __future__ import annotations

import random
import time

from earthrl.algorithms.broadcast import turn_values_to_tokens
from earthrl.algorithms.estimators import TurnBatch, token_advantages
from earthrl.algorithms.registry import ESTIMATORS
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.launch.config_schema import defaults
from earthrl.rewards.scoring import score
from earthrl.rollout.trajectory import Trajectory, Turn

TASK = {
    "id": "bench/ndvi_share", "skill": "spectral_index",
    "answer": {"kind": "numeric", "value": 12.5, "unit": "%", "tolerance": 0.5},
    "reference": [{"name": "spectral_index", "arguments": {"scene": "s2", "index": "NDVI"}},
                  {"name": "threshold_mask", "arguments": {"name": "ndvi_s2", "op": ">", "value": 0.3}},
                  {"name": "pixel_share", "arguments": {"name": "ndvi_s2_gt0.3"}}],
}
PRESETS = {
    "grpo_tap": {"estimator": "grpo_tap", "reward": "mefr"},
    "hierarchical": {"estimator": "hierarchical", "reward": "hirs_manager", "turn_reward": "hirs_specialist"},
    "executor_node": {"estimator": "executor_node", "reward": "outcome", "turn_reward": "executor_tiered"},
}


def synthetic_batch(batch: int, tokens: int, *, turns: int = 12, group_size: int = 8, seed: int = 0,
                    hierarchical: bool = False) -> list:
    """``batch`` random trajectories of exactly ``tokens`` token ids each (prompt + ``turns`` turns).

    Turns alternate manager/specialist when ``hierarchical``; 20 % of turns have E = 1.
    """
    rng = random.Random(seed)
    prompt = tokens // 16
    per_turn, extra = divmod(tokens - prompt, turns)
    resp = per_turn * 5 // 8
    steps = TASK["reference"]
    out = []
    for i in range(batch):
        tt = []
        for k in range(turns):
            obs = per_turn - resp + (extra if k == turns - 1 else 0)
            err = rng.random() < 0.2
            role = ("manager" if k % 2 == 0 else "specialist") if hierarchical else "agent"
            call = dict(steps[(k // 2 if hierarchical else k) % len(steps)])
            tt.append(Turn(response_ids=[11] * resp, response_logprobs=[-0.5] * resp, observation_ids=[13] * obs,
                           error=err, error_kind="schema_error" if err else None, tool_call=call, role=role,
                           subgoal={"family": "PRA", "subgoal": "x"} if role == "manager" else None,
                           verdict=rng.choice(["pass", "uncertain", "fail"])))
        correct = rng.random() < 0.4
        out.append(Trajectory(task_id=TASK["id"], group=f"g{i // group_size}", prompt_ids=[1] * prompt, turns=tt,
                              answer={"value": 12.5 if correct else 40.0, "unit": "%"},
                              record={"artifacts": [{"name": "ndvi_s2", "tool": "spectral_index", "parents": []}],
                                      "skills_opened": ["spectral_index"], "docs_opened": ["spectral_index"]}))
    return out


def bench_algorithms(batch: int = 1024, tokens: int = 8192, *, estimator: str = "grpo_tap", repeats: int = 3,
                     step_seconds: float = 330.0) -> dict:
    """Time :func:`earthrl.rewards.scoring.score` and the parts of
    :func:`earthrl.algorithms.estimators.token_advantages` (estimator, token broadcast).

    Args:
        batch: trajectories; tokens: token ids per trajectory.
        estimator: a key of :data:`PRESETS` ("grpo_tap" + MEFR, "hierarchical" + HiRS, "executor_node").
        repeats: timed repetitions (the best is reported).
        step_seconds: the training step the cost is compared with.

    Returns:
        ``{"batch", "tokens", "estimator", "rewards_s", "advantages_s", "broadcast_s", "total_s",
        "share_of_step", "within_budget"}`` (seconds; best of ``repeats``; budget = 1 % of a step).
    """
    spec = AlgorithmSpec.from_config(defaults("algorithm", name=estimator, **PRESETS[estimator]))
    trajs = synthetic_batch(batch, tokens, hierarchical=estimator == "hierarchical")
    tasks = {TASK["id"]: TASK}
    token_advantages(trajs[:8], score(trajs[:8], tasks, spec), spec)  # warm-up: imports, registries
    best: dict[str, float] = {}
    for _ in range(repeats):
        t0 = time.perf_counter()
        scores = score(trajs, tasks, spec)
        t1 = time.perf_counter()
        turn_adv = ESTIMATORS.lookup(spec.estimator)(TurnBatch.from_trajectories(trajs, scores), spec.advantage)
        t2 = time.perf_counter()
        out = turn_values_to_tokens(trajs, turn_adv)
        t3 = time.perf_counter()
        assert len(out) == batch and out[0].numel() == tokens
        for k, v in (("rewards_s", t1 - t0), ("advantages_s", t2 - t1), ("broadcast_s", t3 - t2), ("total_s", t3 - t0)):
            best[k] = min(best.get(k, float("inf")), v)
    return {"batch": batch, "tokens": tokens, "estimator": estimator, **best,
            "share_of_step": best["total_s"] / step_seconds, "within_budget": best["total_s"] < 0.01 * step_seconds}
