"""Per-step accounting under one set of names on both backends (``metrics.jsonl`` / wandb / verl's loggers).

Every training step of ``backend=local`` (``launch/train.py``) and ``backend=verl`` (verl 0.9.1's
``RayPPOTrainer.fit``, hooked by ``launch/verl_run.py``) logs these names, next to the backend's own:

=================================  ===========================================================================
name                               meaning (seconds are wall-clock seconds of the step)
=================================  ===========================================================================
``time/rollout_s``                 sampling the step's trajectories: generation + environment steps
``time/generate_s``                generation time of the rollout (local: the engine's busy seconds)
``time/env_s``                     ``rollout_s − generate_s``: environment steps and other rollout work
``time/reward_s``                  scoring the trajectories + computing advantages
``time/update_s``                  the learner's update only (log-prob passes, backward, optimizer step)
``time/weight_sync_s``             pushing the new weights / LoRA adapter to the rollout engine
``time/step_s``                    the whole step (≥ rollout + reward + update + weight sync)
``perf/gen_tokens``                model-generated tokens of the step (observation tokens not counted)
``perf/gen_tokens_per_s_per_gpu``  ``gen_tokens / generate_s / GPUs`` (local: per engine process, see below)
``perf/gpu_mem_peak_gib``          peak torch-allocated GPU memory of the training process, GiB (2**30 bytes)
=================================  ===========================================================================

Both also log, per skill of the step's tasks (:func:`by_skill`), ``rollout/by_skill/<skill>/reward`` (the
mean reward of that skill's trajectories) and ``rollout/by_skill/<skill>/accuracy`` (the share the outcome
check judged correct); ``earthrl train`` plots them (``launch/run_plots.py``).

Local backend (:func:`local_accounting`): one rollout-engine process (HF or vLLM actor), so the
per-GPU figure is per engine process — on a CPU machine it is the CPU engine's tokens/s.
``perf/gpu_mem_peak_gib`` is the running peak (since the process started) of
``torch.cuda.max_memory_allocated`` in the learner process, written only where that process has
initialised CUDA; on a CPU run the key is absent (no zero, no NaN). A vLLM engine's memory, in its
own process, is not counted.

verl backend (:func:`from_verl`): the mapping table is in its docstring.
"""

from __future__ import annotations

ROLLOUT_S, GENERATE_S, ENV_S = "time/rollout_s", "time/generate_s", "time/env_s"
REWARD_S, UPDATE_S, WEIGHT_SYNC_S, STEP_S = "time/reward_s", "time/update_s", "time/weight_sync_s", "time/step_s"
GEN_TOKENS, TOKENS_PER_S_PER_GPU = "perf/gen_tokens", "perf/gen_tokens_per_s_per_gpu"
GPU_MEM_PEAK_GIB = "perf/gpu_mem_peak_gib"
SHARED = (ROLLOUT_S, GENERATE_S, ENV_S, REWARD_S, UPDATE_S, WEIGHT_SYNC_S, STEP_S, GEN_TOKENS, TOKENS_PER_S_PER_GPU,
          GPU_MEM_PEAK_GIB)
"""Every shared name (``perf/gpu_mem_peak_gib`` only where a GPU was used)."""


def _accounting(rollout: float, generate: float, reward: float, update: float, weight_sync: float, step: float,
                gen_tokens: float, gpus: int) -> dict[str, float]:
    return {ROLLOUT_S: rollout, GENERATE_S: generate, ENV_S: max(rollout - generate, 0.0), REWARD_S: reward,
            UPDATE_S: update, WEIGHT_SYNC_S: weight_sync, STEP_S: step, GEN_TOKENS: gen_tokens,
            TOKENS_PER_S_PER_GPU: gen_tokens / max(generate, 1e-9) / max(gpus, 1)}


def local_accounting(times: dict[str, float], generated_tokens: float, generate_s: float) -> dict[str, float]:
    """The shared names of one ``backend=local`` step.

    Args:
        times: seconds of ``rollout`` (sampling, scoring excluded), ``reward`` (scoring + advantages),
            ``update`` (learner only), ``weight_sync`` (LoRA push to the engine) and ``step``.
        generated_tokens, generate_s: the batching client's ``generated_tokens`` and ``generate_s``.

    Returns:
        the :data:`SHARED` names (``perf/gpu_mem_peak_gib`` via :func:`gpu_memory_peak`).

    Raises:
        KeyError: a time of ``times`` is missing (names it).
    """
    return {**_accounting(times["rollout"], generate_s, times["reward"], times["update"], times["weight_sync"],
                          times["step"], float(generated_tokens), 1), **gpu_memory_peak()}


def gpu_memory_peak() -> dict[str, float]:
    """``{perf/gpu_mem_peak_gib: …}`` of this process where it has initialised CUDA, else ``{}``."""
    import torch  # lazy: keeps this module import-light for verl's workers

    if not (torch.cuda.is_available() and torch.cuda.is_initialized()):
        return {}
    return {GPU_MEM_PEAK_GIB: torch.cuda.max_memory_allocated() / 2**30}


def by_skill(skills: list[str], rewards: list[float], correct: list[float]) -> dict[str, float]:
    """``rollout/by_skill/<skill>/reward`` (mean reward) and ``…/accuracy`` (share correct) of one step's
    trajectories, one entry per trajectory in each list (those hit by a fault left out by the caller, as
    from every metric); {} for no trajectory.

    Raises:
        ValueError: the three lists differ in length.
    """
    if not len(skills) == len(rewards) == len(correct):
        raise ValueError(f"by_skill: {len(skills)} skills, {len(rewards)} rewards, {len(correct)} outcomes")
    groups: dict[str, list[int]] = {}
    for i, skill in enumerate(skills):
        groups.setdefault(str(skill), []).append(i)
    out = {}
    for skill, idx in sorted(groups.items()):
        out[f"rollout/by_skill/{skill}/reward"] = sum(float(rewards[i]) for i in idx) / len(idx)
        out[f"rollout/by_skill/{skill}/accuracy"] = sum(float(correct[i]) for i in idx) / len(idx)
    return out


def _sum(metrics: dict, keys: tuple[str, ...]) -> float:
    return float(sum(float(metrics.get(f"timing_s/{k}", 0.0)) for k in keys))


def from_verl(metrics: dict, n_gpus: int) -> dict[str, float]:
    """The shared names of one verl 0.9.1 training step, from the metrics dict ``RayPPOTrainer.fit``
    logs (``verl/trainer/ppo/ray_trainer.py``; ``timing_s/<name>`` are ``compute_timing_metrics`` of
    its ``marked_timer`` sections and of the agent-loop manager's ``_performance_metrics``
    (``timing_s/agent_loop/…``, merged into ``timing_raw``), ``actor/perf/*`` the actor worker's
    ``engine_workers.py`` figures renamed by ``_update_actor``):

    =================================  ===================================================================
    shared name                        verl 0.9.1 keys
    =================================  ===================================================================
    ``time/rollout_s``                 ``timing_s/gen`` (agent loops: generation, env steps, in-loop scoring)
    ``time/generate_s``                ``timing_s/agent_loop/slowest/generate_sequences``: the generation
                                       seconds of the episode that bounds the rollout (verl has no batch-wide figure);
                                       ``timing_s/gen`` where verl did not report it
    ``time/env_s``                     ``time/rollout_s − time/generate_s`` (≥ 0)
    ``time/reward_s``                  ``timing_s/reward + timing_s/adv``
    ``time/update_s``                  ``timing_s/old_log_prob + timing_s/ref + timing_s/values
                                       + timing_s/update_critic + timing_s/update_actor`` (those present)
    ``time/weight_sync_s``             ``timing_s/update_weights``
    ``time/step_s``                    ``timing_s/step``
    ``perf/gen_tokens``                ``perf/gen_tokens``: Σ ``response_mask`` of the batch, added to verl's
                                       throughput metrics by :func:`earthrl.launch.verl_run.install_step_accounting`
    ``perf/gen_tokens_per_s_per_gpu``  ``perf/gen_tokens / time/generate_s / n_gpus``
    ``perf/gpu_mem_peak_gib``          ``actor/perf/max_memory_allocated_gb`` (verl divides by 1024**3:
                                       GiB; the actor worker's running peak; vLLM's memory not included)
    =================================  ===================================================================

    Args:
        metrics: one step's dict as verl logs it (a validation-only dict, without ``timing_s/step``, gives {}).
        n_gpus: GPUs of the run (``trainer.n_gpus_per_node × trainer.nnodes``).

    Returns:
        the shared names that ``metrics`` has the inputs for (tokens/s only with ``perf/gen_tokens``;
        GPU memory only with verl's figure).
    """
    if "timing_s/step" not in metrics:
        return {}
    rollout = _sum(metrics, ("gen",))
    generate = float(metrics.get("timing_s/agent_loop/slowest/generate_sequences", rollout))
    out = _accounting(rollout, generate, _sum(metrics, ("reward", "adv")),
                      _sum(metrics, ("old_log_prob", "ref", "values", "update_critic", "update_actor")),
                      _sum(metrics, ("update_weights",)), _sum(metrics, ("step",)),
                      float(metrics.get(GEN_TOKENS, 0.0)), int(n_gpus))
    if GEN_TOKENS not in metrics:
        del out[GEN_TOKENS], out[TOKENS_PER_S_PER_GPU]
    if "actor/perf/max_memory_allocated_gb" in metrics:
        out[GPU_MEM_PEAK_GIB] = float(metrics["actor/perf/max_memory_allocated_gb"])
    return out
