"""``earthrl bench learn`` (bench/learn.py, bench/learn_envs.py): the synthetic envs write turns that EarthRL's own
rewards score as computed by hand here, the negative-control hooks move exactly one token, and each algorithm
preset learns the one-turn env from chance to its goal while both controls miss it (the bounded version of the
bench; every env of every preset is ``make test-long``)."""

from __future__ import annotations

import json

import pytest
import torch
from transformers import AutoTokenizer

from earthrl.algorithms.estimators import token_advantages
from earthrl.algorithms.learner import MicroBatch, PackedBatch
from earthrl.bench.cli import main
from earthrl.bench.learn import CONTROLS, LearnRunner, algorithm_pairs, flip_sign, shift_mask
from earthrl.bench.learn_envs import LEARN_ENVS, VocabSplit, new_episodes, play_turn
from earthrl.rewards.scoring import score
from earthrl.rollout.chat import ChatCodec

UP, DOWN = 1000, 2000  # the only token ids in the upper half of the test split, and one in the lower half


@pytest.fixture(scope="module")
def pairs():
    found, notes = algorithm_pairs()
    assert notes == []
    return {p.name: p for p in found}


@pytest.fixture(scope="module")
def codec(tiny_model):
    tok = AutoTokenizer.from_pretrained(str(tiny_model))
    return ChatCodec(tok), tok


def split() -> VocabSplit:
    w = torch.zeros(49152, 3)
    w[UP], w[DOWN] = 1.0, -1.0  # median 0 on every coordinate: only UP lies above it
    return VocabSplit(w)


def play(env_name: str, style: str, firsts: list[int], codec, hidden: str = "A"):
    """One episode of question 0 whose hidden answer is ``hidden``, turn k's first token ``firsts[k]``."""
    env = LEARN_ENVS[env_name]
    codec_, tok = codec
    ep = next(e for e in new_episodes(env, style, codec_, 8, step=0) if e.task["answer"]["value"] == hidden)
    for k, first in enumerate(firsts):
        assert not ep.done
        play_turn(env, style, split(), ep, k, {"response_ids": [first], "logprobs": [-0.1], "finish_reason": "length"},
                  codec_, tok)
        assert ep.context == ep.traj.token_ids()  # token in, token out: the next turn sees exactly these ids
    assert ep.done
    return env, ep


def test_vocab_split_is_the_upper_half_of_each_coordinate():
    w = torch.tensor([[0.1, -1.0], [0.3, 2.0], [-0.2, 0.5], [0.0, 0.4]])
    s = VocabSplit(w)  # medians (lower middle) 0.0 and 0.4
    assert [s.is_upper(i, 0) for i in range(4)] == [True, True, False, False]
    assert [s.is_upper(i, 1) for i in range(4)] == [False, True, True, False]


def test_coin_axes_rank_coordinates_by_the_worst_question_distance_from_a_fair_coin():
    s = VocabSplit(torch.tensor([[1.0, 1.0], [-1.0, 1.0], [1.0, -1.0], [-1.0, -1.0]]))  # upper: {0, 2} and {0, 1}
    probs = torch.tensor([[0.4, 0.1, 0.1, 0.4], [0.5, 0.1, 0.2, 0.2]])
    # P(upper): question 0 0.5 on both; question 1 0.7 on coordinate 0, 0.6 on 1: gaps 0.2 and 0.1
    assert s.coin_axes(0.5 * probs.log(), temperature=0.5, n=2) == (1, 0)
    assert VocabSplit(s.upper.float(), axes=(1, 0)).decides(2, 0) is False and s.decides(2, 0) is True
    with pytest.raises(ValueError, match="3 decision turns but only 2 coordinates"):
        s.coin_axes(probs, 1.0, 3)


def test_two_turn_scored_by_each_style_reward(pairs, codec):
    # agent style, outcome (grpo) and MEFR (mefr_tap): right tool then A; right tool then B; wrong tool (dead end)
    runs = {"good": play("two_turn", "agent", [UP, UP], codec), "wrong answer": play("two_turn", "agent", [UP, DOWN], codec),
            "wrong tool": play("two_turn", "agent", [DOWN], codec)}
    assert "class " + " ".join(["A"] * 32) in runs["good"][1].traj.turns[0].observation
    for name, want in (("grpo", [1.0, 0.0, 0.0]), ("mefr_tap", [10 - 0.2 + 1.0, -1 - 0.2 + 1.0, -1 - 0.1 + 0.0])):
        spec = pairs[name].spec
        got = [score([ep.traj], {ep.task["id"]: ep.task}, spec).reward[0] for _, ep in runs.values()]
        assert got == pytest.approx(want)
    # hierarchical (vg_hrl): the call is a specialist turn routed to PRA, the answer a manager turn
    good, bad = play("two_turn", "hierarchical", [UP, UP], codec)[1], play("two_turn", "hierarchical", [DOWN], codec)[1]
    assert [t.role for t in good.traj.turns] == ["specialist", "manager"]
    s = score([good.traj, bad.traj], {good.task["id"]: good.task}, pairs["vg_hrl"].spec)
    assert s.reward == pytest.approx([1.0 - 0.1 * 2 / 25, -0.1 * 1 / 25])  # C_route 0: the manager never routes here
    assert s.turn_rewards == [pytest.approx([0.5 + 0.2 + 0.3, 0.0]), pytest.approx([-0.5 + 0.2])]
    # executor: the answer is the node class_area(class_name=…) against the reference step
    runs = [play("two_turn", "executor", f, codec)[1] for f in ([UP, UP], [UP, DOWN], [DOWN])]
    s = score([ep.traj for ep in runs], {runs[0].task["id"]: runs[0].task}, pairs["executor_tiered"].spec)
    assert s.turn_rewards == [[1.0, 1.0], [1.0, 0.5], [0.0]]


def test_tap_env_error_turn_gets_no_positive_advantage(pairs, codec):
    (env, err), (_, clean) = play("tap", "agent", [DOWN, UP], codec), play("tap", "agent", [UP, DOWN], codec)
    assert (err.traj.turns[0].error, err.traj.turns[0].error_kind) == (True, "schema_error")
    assert env.success(clean.traj, clean.task) and not env.success(err.traj, err.task)
    trajs, tasks = [err.traj, clean.traj], {"tap-0A": err.task}
    adv = token_advantages(trajs, score(trajs, tasks, pairs["tap_only"].spec), pairs["tap_only"].spec)
    a = 0.5 / (0.5 ** 0.5 + 1e-6)  # rewards 1 (A) and 0 (B): GRPO ±0.5 / std, std = √0.5
    (s0, e0), (s1, e1) = err.traj.turn_spans()
    assert adv[0][s0:e0].tolist() == [0.0]  # TAP: the error turn of the successful episode
    assert adv[0][s1:e1].tolist() == pytest.approx([a])
    assert adv[1][adv[1] != 0].tolist() == pytest.approx([-a, -a])  # the failed episode: both turns


def test_presets_compose_into_pairs_with_their_styles_and_envs(pairs):
    assert (pairs["grpo"].style, pairs["vg_hrl"].style, pairs["executor_tiered"].style) == (
        "agent", "hierarchical", "executor")
    assert pairs["vg_hrl"].lora == {"rank": 64, "alpha": 128}
    assert pairs["grpo"].envs == ["one_turn", "two_turn", "final_only"]
    assert pairs["mefr_tap"].envs == pairs["tap_only"].envs == ["one_turn", "two_turn", "final_only", "tap"]
    assert "mefr_tap_no_tap" not in pairs and pairs["mefr_only"].aliases == ("mefr_tap_no_tap",)  # one spec, run once
    assert algorithm_pairs(["grpo", "no_such"])[1] == ["algorithm=no_such: no conf/algorithm/no_such.yaml here, skipped"]


def test_controls_flip_the_sign_and_shift_the_mask_one_token_early():
    assert flip_sign([torch.tensor([0.0, 1.5, -2.0])])[0].tolist() == [0.0, -1.5, 2.0]
    mask = torch.tensor([[0, 1, 1, 0], [0, 0, 1, 1]])
    mb = MicroBatch(torch.tensor([[5, 6, 7, 0], [5, 6, 8, 9]]), torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]]), mask,
                    torch.tensor([[0, -0.5, -0.25, 0], [0, 0, -1.0, -2.0]]), torch.tensor([[0, 2.0, 2.0, 0], [0, 0, -1.0, -1.0]]),
                    {"role_mask": mask.float()})
    out = shift_mask(PackedBatch([mb], 4, 2, zero_micro=[mb]))
    for got in (out.micro[0], out.zero_micro[0]):
        assert got.response_mask.tolist() == [[1, 1, 0, 0], [0, 1, 1, 0]]
        assert got.advantages.tolist() == [[2.0, 2.0, 0, 0], [0, -1.0, -1.0, 0]]
        assert got.rollout_logprobs.tolist() == [[-0.5, -0.25, 0, 0], [0, -1.0, -2.0, 0]]
        assert got.inputs["role_mask"].tolist() == [[1, 1, 0, 0], [0, 1, 1, 0]]
        assert torch.equal(got.input_ids, mb.input_ids) and torch.equal(got.attention_mask, mb.attention_mask)
    assert (out.num_tokens, out.num_sequences) == (4, 2)


@pytest.fixture(scope="module")
def learn(tiny_model):
    runner = LearnRunner(str(tiny_model))
    yield runner
    runner.close()


@pytest.mark.parametrize("name", ["grpo", "dr_grpo", "mefr_tap", "vg_hrl", "executor_tiered", "gigpo"])
def test_preset_learns_one_turn_and_both_controls_miss(learn, name):
    found, notes = algorithm_pairs([name])
    assert found and notes == [], notes  # every preset named here ships in conf/algorithm
    r = learn.run(found[0], "one_turn")
    assert abs(r["start"] - 0.5) <= 0.1 and r["met"], r  # from chance (64 episodes: sd 0.06) to the goal in 15 steps
    for control in CONTROLS:
        c = learn.run(found[0], "one_turn", control)
        assert c["start"] == r["start"] and not c["met"], c  # the same first rollout; the control must miss


@pytest.mark.long
def test_every_preset_learns_every_env(learn, pairs):
    runs = [learn.run(p, env) for p in pairs.values() for env in p.envs if env != "one_turn"]
    assert [(r["algorithm"], r["env"]) for r in runs if not r["met"]] == [], runs


def test_cli_writes_the_runs_and_exits_non_zero_on_a_missed_goal(tmp_path, capsys):
    out = tmp_path / "learn.json"
    with pytest.raises(SystemExit, match="check failed in learn/learn"):
        main(["learn", "--algorithms", "grpo", "--envs", "two_turn", "--steps", "1", "--no-controls", "--out", str(out)])
    assert "learn/grpo/two_turn: " in capsys.readouterr().out
    run, = json.loads(out.read_text())["results"]["learn"]["runs"]
    assert (run["env"], run["steps"], run["met"], len(run["success"])) == ("two_turn", 1, False, 1)
    with pytest.raises(SystemExit) as exc:
        main(["env", "--envs", "one_turn"])
    assert exc.value.code == 2 and "it is an option of learn" in capsys.readouterr().err
