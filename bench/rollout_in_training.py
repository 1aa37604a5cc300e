"""``earthrl bench rollout``, measurement ``in_training``: the tokens/s of a real multi-turn GRPO rollout against
the same engine's batched figure, in one run on one machine.

The rollout is what one ``earthrl train`` step samples, through the training code: the composed ``earthrl
train`` config (``model=<model>``, every other group at its default, so the settings ``make train`` uses: the
json format in execute mode, ``env.max_turns``, ``algorithm.sampling``, ``cluster.engine``), its
:class:`~earthrl.rollout.runtime.RolloutRuntime` (Ray, the engine actor, the EnvPool actors, the async agent
loop), ``tasks.tasks_per_step`` train tasks × ``algorithm.group_size`` samples, with the LoRA adapter of
``model.lora`` (its first-step value, B = 0) pushed before each rollout as after every training step. Its rate
is the generated tokens over the rollout's wall time (environment steps and all); the engine-busy rate
(generated tokens over the seconds the engine had a request of the rollout) and the share of prompt tokens the
prefix cache served are reported beside it.

The batched figure is ``earthrl bench rollout``'s (:mod:`earthrl.bench.engine_speed`): the same engine, before
any adapter push, generating exactly ``max_new_tokens`` tokens for each of tasks × G real first-turn prompts in
one call, then for their second turns in another, after a warm-up call.

The rollout runs once per way the agent loop can drive the engine (:class:`~earthrl.rollout.agent_loop.
BatchingEngineClient`): lock-step (one batch of all live episodes per turn), and continuous (each turn sent at
once) where the engine batches concurrent calls itself; back to back, each after its own adapter push.
``in_training_over_batched`` is the rate of the way training uses (``cluster.<engine>.continuous_batching``)
over the batched rate; goal ≥ 0.7. Where that engine merges the LoRA adapter into its weights (vLLM on a CPU),
a second engine that serves it as vLLM LoRA requests plays a lock-step rollout after it: the rollout as it ran
before merged adapters and continuous batching, over the same batched rate.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path

from earthrl.bench.engine_speed import TEMPERATURE, measure_generate
from earthrl.bench.inputs import bench_prompts, resolve_model
from earthrl.bench.local_ray import init_local_ray

MODES = ("lockstep", "continuous")


def _settings(model: str, overrides: list[str]):
    """The typed settings of ``earthrl train model=<model> logger=none <overrides>``; a model that is no
    ``conf/model`` preset is a folder, run as ``model.path=<folder>`` with the default model preset's settings."""
    from hydra import initialize_config_dir

    from earthrl.launch.config_schema import to_settings
    from earthrl.launch.overrides import CONF_DIR, compose_job

    choice = [f"model={model}"] if (CONF_DIR / "model" / f"{model}.yaml").is_file() else [f"model.path={model}"]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return to_settings(compose_job("config", [*choice, "logger=none", *overrides]))


def _identity_adapter(model_path: Path, lora: dict, dtype: str) -> dict:
    """The learner's LoRA state dict before its first update (peft's init: B = 0)."""
    from earthrl.models.policy import Policy

    policy = Policy(str(model_path), lora, dtype=dtype, gradient_checkpointing=False)
    state = {k: v.detach().clone() for k, v in policy.adapter_state_dict().items()}
    del policy
    return state


def _rollouts(runtime, modes: tuple[str, ...], prefix: str, job: dict, batched_tok_s: float) -> dict:
    """One rollout of ``job``'s tasks per client mode on ``runtime``, each after an adapter push; their numbers under
    ``<prefix><mode>_…`` (see :func:`bench_in_training`)."""
    out = {}
    training_mode = runtime.continuous
    for mode in modes:
        runtime.continuous = mode == "continuous"
        runtime.push_lora(job["adapter"])  # as after every training step: a new adapter, a cold prefix cache
        t0 = time.perf_counter()
        trajs, stats = runtime.rollout(job["tasks"], job["group_size"], 0, job["sampling"], job["phrasing"], seed=0)
        wall = time.perf_counter() - t0
        generated, key = stats["generated_tokens"], f"{prefix}{mode}"
        out.update({f"{key}_tokens": generated, f"{key}_turns": float(sum(t.num_turns for t in trajs)),
                    f"{key}_wall_s": wall, f"{key}_tok_s": generated / wall,
                    f"{key}_engine_tok_s": generated / max(stats["generate_s"], 1e-9),
                    f"{key}_prefix_cache_hit": stats["cached_prompt_tokens"] / max(stats["prompt_tokens"], 1.0),
                    f"{key}_over_batched": generated / wall / batched_tok_s})
        print(f"rollout/in_training: {key}: {generated:.0f} tokens in {wall:.1f} s = {generated / wall:.2f} tok/s "
              f"({generated / wall / batched_tok_s:.2f} of batched)", flush=True)
    runtime.continuous = training_mode
    return out


def bench_in_training(model: str = "qwen2.5-coder-0.5b", group_size: int | None = None,
                      max_new_tokens: int | None = None, overrides: list[str] | None = None) -> dict:
    """The rollout of one training step against the engine's batched tokens/s (module doc).

    Where the engine merges the adapter into its weights (vLLM on a CPU, ``cluster.vllm.lora_mode=auto``), a second
    engine with ``lora_mode=requests`` then plays one lock-step rollout too: how the rollout ran before merged
    adapters and continuous batching (``requests_lockstep_…``, over the same batched figure).

    Args:
        model: a ``conf/model`` preset name (fetched) or an HF folder (``model.path``, the default preset's
            settings).
        group_size: samples per task (default: ``algorithm.group_size``).
        max_new_tokens: tokens per turn at most, and per row of the batched figure (default:
            ``algorithm.sampling.max_new_tokens``).
        overrides: more ``earthrl train`` overrides (e.g. ``["env.max_turns=2"]``).

    Returns:
        flat dict: ``engine``, ``tasks``, ``group_size``, ``max_new_tokens``, ``max_turns``, ``mode`` (the way
        training drives the engine), ``batched_tok_s``; per rollout run (``lockstep``, ``continuous``,
        ``requests_lockstep``): ``<run>_tokens`` (generated), ``<run>_turns``, ``<run>_wall_s``, ``<run>_tok_s``
        (tokens / wall), ``<run>_engine_tok_s`` (tokens / engine-busy seconds), ``<run>_prefix_cache_hit`` (cached /
        prompt tokens; 0 for an engine that does not report it), ``<run>_over_batched``;
        ``in_training_over_batched`` (the training mode's; goal ≥ 0.7); ``loadavg_start`` / ``loadavg_end``
        (1-minute load average).

    Raises:
        FileNotFoundError: the model or the task data is not fetched.
        earthrl.envs.errors.ConfigError: a bad override.
    """
    import ray

    from earthrl.envs.core.tasks import load_suite
    from earthrl.envs.paths import data_dir
    from earthrl.models.dtype import resolve_dtype
    from earthrl.models.lora import merge_lora
    from earthrl.rollout.hf_engine import SamplingParams
    from earthrl.rollout.runtime import RolloutRuntime

    path = resolve_model(model)
    sets = [*(overrides or [])]
    if group_size is not None:
        sets.append(f"algorithm.group_size={group_size}")
    if max_new_tokens is not None:
        sets.append(f"algorithm.sampling.max_new_tokens={max_new_tokens}")
    settings = _settings(model, sets)
    alg, env = settings.algorithm, settings.env
    root = data_dir(str(settings.tasks.data))
    if not root.is_dir():
        raise FileNotFoundError(f"data {settings.tasks.data} is not fetched: run `earthrl fetch data {settings.tasks.data}`")
    suite = [t.model_dump() for t in load_suite(str(settings.tasks.name), "train", root)]
    n_tasks, g = int(settings.tasks.tasks_per_step), int(alg.group_size)
    stride = max(len(suite) // n_tasks, 1)
    lora = merge_lora(settings.model.lora, settings.algorithm.lora)
    job = {"tasks": [suite[(k * stride) % len(suite)] for k in range(n_tasks)], "group_size": g,
           "sampling": alg.sampling, "phrasing": str(settings.tasks.phrasing),
           "adapter": _identity_adapter(path, lora, resolve_dtype(str(settings.model.dtype))[0])}
    tokens = int(alg.sampling.max_new_tokens)
    out: dict = {"tasks": n_tasks, "group_size": g, "max_new_tokens": tokens, "max_turns": int(env.max_turns),
                 "loadavg_start": os.getloadavg()[0]}
    own_ray = init_local_ray(int(settings.cluster.num_cpus), configure_logging=False)
    workspace = Path(tempfile.mkdtemp(prefix="earthrl-bench-rollout-"))

    def stop(runtime) -> None:  # Ray stays (for the next engine, or its owner): stop what this runtime started
        for actor in (runtime.engine, *runtime.pool.workers):
            ray.kill(actor, no_restart=True)

    try:
        runtime = RolloutRuntime(settings, path, root, workspace, lora)
        try:
            out.update(engine=runtime.engine_name, mode=MODES[runtime.continuous])
            prompts = bench_prompts(runtime.tokenizer, n_tasks * g, suite=str(settings.tasks.name),
                                    toolset=env.toolset, phrasing=job["phrasing"], data_root=root)
            params = SamplingParams(max_new_tokens=tokens, temperature=TEMPERATURE, top_p=1.0, seed=0, ignore_eos=True)
            timed = measure_generate(
                lambda ps: [len(r["response_ids"]) for r in ray.get(runtime.engine.generate.remote(ps, params))],
                {"turn1": prompts.first, "turn2": prompts.second}, 0)
            out["batched_tok_s"] = (sum(t["batched"]["tokens"] for t in timed.values())
                                    / sum(t["batched"]["seconds"] for t in timed.values()))
            print(f"rollout/in_training: batched {out['batched_tok_s']:.2f} tok/s", flush=True)
            out.update(_rollouts(runtime, MODES[: 1 + runtime.continuous], "", job, out["batched_tok_s"]))
            merged = runtime.engine_name == "vllm" and ray.get(runtime.engine.__ray_call__.remote(lambda e: e.merged))
        finally:
            stop(runtime)
        out["in_training_over_batched"] = out[f"{out['mode']}_over_batched"]
        if merged:
            before = RolloutRuntime(_settings(model, [*sets, "cluster.vllm.lora_mode=requests"]), path, root,
                                    workspace, lora)
            try:
                out.update(_rollouts(before, ("lockstep",), "requests_", job, out["batched_tok_s"]))
            finally:
                stop(before)
    finally:
        if own_ray:
            RolloutRuntime.shutdown()
        shutil.rmtree(workspace, ignore_errors=True)
    out["loadavg_end"] = os.getloadavg()[0]
    return out
