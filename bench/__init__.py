"""EarthRL's benchmark, fuzz and local-Ray harness: ``earthrl bench SUITE`` (:mod:`earthrl.bench.cli`) and
the measurements it runs, one module each; the top layer, above launch: no product module imports it
(``earthrl bench``'s lazy entry in :mod:`earthrl.launch.cli` aside).

- ``cli``: the suites registry, goals and the ``earthrl bench`` command
- ``ndvi``: the NDVI tool path against bare numpy; ``env_step``: the EnvPool step overhead;
  ``sandbox_exec``: CodeAct sandbox start-up and per-exec overhead
- ``envpool_load``: concurrent scripted episodes over EnvPool actors and the leak check
- ``fuzz``: the long fuzz run of ``env.step`` and the parsers' linearity; ``fuzz_cases``: the hypothesis
  strategies it and the fuzz tests draw from
- ``rewards_advantages``: the score and advantage stages' cost for one batch
- ``engine_speed``: tokens/s of the rollout engines against bare transformers and standalone vLLM
  (``vllm_standalone``, run by path in the vLLM environment's Python)
- ``grpo_step``: the local GRPO step against TRL's GRPOTrainer; ``step_scaling``: its step time against
  group size, turns and prompt length
- ``action_tokens``: CodeAct against JSON action, observation and episode tokens
- ``inputs``: the model folder and real earthrl-mini prompts the model benchmarks share
- ``local_ray``: a local Ray instance whose workers run at the driver's CPU priority
"""
