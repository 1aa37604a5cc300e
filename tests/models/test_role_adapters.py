"""One LoRA adapter per role on one frozen base (issue 23 item 4): the policy's named adapters, the learner's
update of each role on its own rows, and a two-adapter checkpoint that resumes bit-exactly (tiny model)."""

import json

import pytest
import torch
from peft import PeftModel, get_peft_model_state_dict
from transformers import AutoModelForCausalLM

from earthrl.algorithms.learner import Learner, pack
from earthrl.algorithms.registry import POLICY_LOSSES
from earthrl.envs.errors import ConfigError
from earthrl.launch.export_cmd import main as export_main
from earthrl.launch.train_inputs import check_resume_adapters
from earthrl.models.checkpoint import load_adapter_weights, load_checkpoint, save_checkpoint
from earthrl.models.lora import adapter_names
from earthrl.models.policy import Policy
from earthrl.rollout.trajectory import Trajectory, Turn
from earthrl.tests.algorithms.builders import learner_config, loss_config

LORA = {"rank": 4, "alpha": 8, "dropout": 0.0}


def _policy(tiny_model, adapters=("manager", "specialist")) -> Policy:
    torch.manual_seed(0)
    return Policy(str(tiny_model), LORA, dtype="float32", gradient_checkpointing=True, adapters=adapters)


def _episode(k: int) -> Trajectory:
    """A HiRS-like episode: a manager turn, then a specialist turn in its own context."""
    return Trajectory("t", "g", prompt_ids=[1, 2, 3 + k], turns=[
        Turn([4, 5, 6 + k], [-1.0] * 3, role="manager", adapter="manager"),
        Turn([9, 10 + k], [-1.0] * 2, role="specialist", adapter="specialist", context_ids=[1, 2, 8, 8 + k])])


def _advantages(trajs, manager: float, specialist: float) -> list[torch.Tensor]:
    """``manager`` on the manager turn's tokens, ``specialist`` on the specialist's (token_ids() layout)."""
    out = []
    for t in trajs:
        values = [0.0] * len(t.prompt_ids)
        for turn in t.turns:
            a = manager if turn.role == "manager" else specialist
            values += [0.0] * len(turn.context_ids) + [a] * len(turn.response_ids) + [0.0] * len(turn.observation_ids)
        out.append(torch.tensor(values))
    return out


def _learner(policy: Policy) -> Learner:
    cfg = learner_config(loss=loss_config(kl_coef=0.0), ppo_epochs=1, micro_batch_size=4, grad_clip=100.0,
                         temperature=1.0)
    opt = torch.optim.AdamW(policy.trainable_parameters(), lr=1e-2, weight_decay=0.0)
    return Learner(policy, opt, POLICY_LOSSES.lookup("ppo_clip_kl"), cfg)


def _snapshot(policy: Policy) -> dict[str, dict[str, torch.Tensor]]:
    return {name: policy.adapter_state_dict(name) for name in policy.adapter_names}


def _same(a: dict, b: dict) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_adapter_names_are_the_distinct_values_and_bad_names_are_refused():
    assert adapter_names({}) == ("shared",)
    assert adapter_names({"manager": "shared", "specialist": "shared"}) == ("shared",)
    assert adapter_names({"planner": "planner", "executor": "executor", "x": "planner"}) == ("planner", "executor")
    for bad in ("my-adapter", "default", "a", "1st"):
        with pytest.raises(ValueError, match=rf"agent.adapters.manager='{bad}': an adapter name must be an identifier"):
            adapter_names({"manager": bad})


def test_named_adapters_start_equal_and_route_each_batch(tiny_model):
    policy = _policy(tiny_model)
    one = _policy(tiny_model, adapters=("shared",))
    assert policy.adapter_names == ("manager", "specialist")
    snap = _snapshot(policy)
    assert _same(snap["manager"], snap["specialist"])  # each role starts from the same weights
    assert _same(snap["manager"], one.adapter_state_dict())  # ... the one-adapter policy's (same seed)
    n = len(one.trainable_parameters())
    assert len(policy.trainable_parameters()) == 2 * n
    assert all(len(policy.adapter_parameters(a)) == n for a in policy.adapter_names)
    ids = torch.tensor([[1, 2, 3, 4, 5, 6]])
    att, resp = torch.ones_like(ids), torch.tensor([[0, 0, 0, 1, 1, 1]])
    with torch.no_grad():
        for p in policy.adapter_parameters("specialist"):
            p.add_(0.3 * torch.randn_like(p))
        m = policy.token_logprobs(ids, att, resp, adapter="manager")
        s = policy.token_logprobs(ids, att, resp, adapter="specialist")
        ref = policy.ref_logprobs(ids, att, resp)
    assert torch.equal(m, ref)  # the manager's adapter is still an identity (B = 0)
    assert not torch.allclose(s, ref)
    assert all(p.requires_grad for p in policy.adapter_parameters("specialist"))  # the active one
    with pytest.raises(KeyError, match=r"adapter 'planner': the policy has adapters \['manager', 'specialist'\]"):
        policy.token_logprobs(ids, att, resp, adapter="planner")


def test_update_changes_only_the_adapters_whose_rows_had_advantage(tiny_model):
    policy = _policy(tiny_model, adapters=("manager", "specialist", "spare"))
    learner = _learner(policy)
    trajs = [_episode(0), _episode(1)]
    batch = pack(trajs, _advantages(trajs, manager=1.0, specialist=0.0), learner.cfg)
    assert [mb.adapter for mb in batch.micro] == ["manager"]  # the specialist's rows: all-zero advantage
    assert [mb.adapter for mb in batch.zero_micro] == ["specialist"]
    before = _snapshot(policy)
    m = learner.update(batch)
    after = _snapshot(policy)
    assert m["grad_norm"] > 0
    assert not _same(before["manager"], after["manager"])
    assert _same(before["specialist"], after["specialist"])  # zero advantage: AdamW's zero-gradient step is 0
    assert _same(before["spare"], after["spare"])  # no row: no gradient, no optimizer state
    assert all(p.grad is None and p not in learner.optimizer.state for p in policy.adapter_parameters("spare"))
    # the other way round: now only the specialist's rows carry a signal
    before = after
    learner.update(pack(trajs, _advantages(trajs, manager=0.0, specialist=-1.0), learner.cfg))
    after = _snapshot(policy)
    assert not _same(before["specialist"], after["specialist"]) and _same(before["spare"], after["spare"])


def test_a_sequence_with_turns_of_two_adapters_is_refused():
    shared_context = Trajectory("t", "g", prompt_ids=[1, 2], turns=[
        Turn([4, 5], [-1.0] * 2, [7], role="manager", adapter="manager"),
        Turn([9, 10], [-1.0] * 2, role="specialist", adapter="specialist")])
    with pytest.raises(ValueError, match=r"one sequence holds turns of adapters \['manager', 'specialist'\]"):
        pack([shared_context], _advantages([shared_context], 1.0, 1.0), learner_config())


def test_two_adapter_checkpoint_resumes_bit_exactly(tiny_model, tmp_path):
    trajs = [_episode(0), _episode(1)]
    adv_1, adv_2 = _advantages(trajs, 1.0, -0.5), _advantages(trajs, -1.0, 0.5)
    first = _learner(_policy(tiny_model))
    first.update(pack(trajs, adv_1, first.cfg))
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, first.policy.model, first.optimizer, str(tiny_model), {})
    assert sorted(p.name for p in (ckpt / "adapter").iterdir() if p.is_dir()) == ["manager", "specialist"]
    first.update(pack(trajs, adv_2, first.cfg))  # the uninterrupted run's second step

    resumed = _learner(_policy(tiny_model))
    with torch.no_grad():  # weights the resume must overwrite
        for p in resumed.policy.trainable_parameters():
            p.add_(1.0)
    assert load_checkpoint(ckpt, resumed.policy.model, resumed.optimizer) == 1
    resumed.update(pack(trajs, adv_2, resumed.cfg))
    a, b = _snapshot(first.policy), _snapshot(resumed.policy)
    assert all(_same(a[n], b[n]) for n in a)
    assert not _same(a["manager"], a["specialist"])


def test_a_one_adapter_checkpoint_starts_every_role(tiny_model, tmp_path):
    one = _policy(tiny_model, adapters=("shared",))
    with torch.no_grad():
        for p in one.trainable_parameters():
            p.add_(0.1)
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, one.model, None, str(tiny_model), {})
    roles = _policy(tiny_model)
    load_adapter_weights(ckpt, roles.model)
    snap = _snapshot(roles)
    assert _same(snap["manager"], one.adapter_state_dict()) and _same(snap["specialist"], one.adapter_state_dict())


def _saved_with_specialist_moved(tiny_model, tmp_path, delta: float, step: int):
    """A manager/specialist policy whose specialist adapter moved by ``delta``, and its checkpoint at ``step``."""
    policy = _policy(tiny_model)
    with torch.no_grad():
        for p in policy.adapter_parameters("specialist"):
            p.add_(delta)
    return policy, save_checkpoint(tmp_path / "checkpoints", step, policy.model, None, str(tiny_model), {})


def test_export_writes_each_roles_adapter_with_its_alpha(tiny_model, tmp_path):
    policy, ckpt = _saved_with_specialist_moved(tiny_model, tmp_path, 0.2, step=3)
    assert export_main([str(ckpt), str(tmp_path / "out"), "--lora-alpha", "8"]) == 0
    out = tmp_path / "out"
    marker = json.loads((out / "earthrl_export.json").read_text())
    assert (marker["adapters"], marker["merged"], marker["lora_alpha"], marker["step"]) == (
        ["manager", "specialist"], False, 8, 3)
    assert (out / "tokenizer_config.json").is_file() and not (out / "config.json").exists()
    for name in policy.adapter_names:
        base = AutoModelForCausalLM.from_pretrained(str(tiny_model), dtype=torch.float32)
        loaded = PeftModel.from_pretrained(base, str(out / "adapters" / name))
        assert _same(get_peft_model_state_dict(loaded), policy.adapter_state_dict(name))


def test_resuming_a_checkpoint_of_other_adapters_is_refused_by_name(tiny_model, tmp_path):
    ckpt = save_checkpoint(tmp_path / "checkpoints", 1, _policy(tiny_model).model, None, str(tiny_model), {})
    check_resume_adapters(ckpt, ("specialist", "manager"))
    with pytest.raises(ConfigError, match=r"holds adapters manager, specialist, the run's agent.adapters give one "
                                          r"adapter; resume with the checkpoint's agent.adapters"):
        check_resume_adapters(ckpt, ("shared",))


def test_eval_loads_each_roles_adapter_and_refuses_other_names(tiny_model, tmp_path):
    from earthrl.launch.eval import load_adapter

    policy, ckpt = _saved_with_specialist_moved(tiny_model, tmp_path, 0.3, step=2)
    lora, weights = load_adapter(ckpt, ("specialist", "manager"))
    assert lora == {"rank": 4, "alpha": 8.0} and sorted(weights) == ["manager", "specialist"]
    for name in policy.adapter_names:
        assert _same(weights[name], policy.adapter_state_dict(name))
    with pytest.raises(ConfigError, match="holds the adapters manager, specialist, but agent.adapters gives shared"):
        load_adapter(ckpt, ("shared",))
    one = save_checkpoint(tmp_path / "one", 1, _policy(tiny_model, adapters=("shared",)).model, None, str(tiny_model), {})
    assert list(load_adapter(one, ("manager", "specialist"))[1]) == [None]  # one adapter: pushed to every role
