"""RS-Claw-Evolution and SimCRAFT metrics (rewards/metrics/agent.py) and EpisodeRecord.from_trajectory."""

from __future__ import annotations

from earthrl.rewards.episode import EpisodeRecord
from earthrl.rewards.metrics import agent as m
from earthrl.rollout.trajectory import Trajectory, Turn

TASK = {"id": "t1", "skill": "spectral_index",
        "answer": {"kind": "numeric", "value": 0.42, "unit": "", "tolerance": 0.01}}
REF = [{"name": "load", "arguments": {"scene": "s2"}}, {"name": "ndvi", "arguments": {"src": "s2"}}]


def turn(n_resp, n_obs, *, error=False, kind=None, calls=()):
    return Turn(response_ids=list(range(n_resp)), response_logprobs=[0.0] * n_resp,
                observation_ids=list(range(n_obs)), error=error, error_kind=kind, tool_calls=list(calls))


def call(name, error=False, kind=None, **args):
    return {"name": name, "arguments": args, "error": error, "error_kind": kind}


def make_traj():
    # 4 turns: a parse error, a good call, a call to a non-existent tool, then the answer.
    return Trajectory(task_id="t1", group="g", prompt_ids=[1, 2, 3], turns=[
        turn(10, 5, error=True, kind="parse_error"),
        turn(20, 30, calls=[call("load", scene="s2")]),
        turn(15, 8, error=True, kind="unknown_tool", calls=[call("ndvy", True, "unknown_tool", src="s2")]),
        turn(7, 0, calls=[call("answer", value=0.425, unit="")]),
    ], answer={"value": 0.425, "unit": ""})


def test_from_trajectory_builds_calls_turns_and_judges_answer():
    rec = EpisodeRecord.from_trajectory(make_traj(), TASK, mode="AP", action_format="json")
    # the answer call is not a workflow call
    assert [c["name"] for c in rec.calls] == ["load", "ndvy"]
    assert rec.calls[1]["error_kind"] == "unknown_tool"
    assert [t["action_tokens"] for t in rec.turns] == [10, 20, 15, 7]
    assert [t["observation_tokens"] for t in rec.turns] == [5, 30, 8, 0]
    # |0.425 - 0.42| = 0.005 <= tolerance 0.01
    assert rec.correct is True
    assert (rec.skill, rec.mode, rec.action_format, rec.faulted) == ("spectral_index", "AP", "json", False)


def test_from_trajectory_uses_tool_call_when_turn_logged_no_calls():
    traj = Trajectory(task_id="t1", group="g", prompt_ids=[], answer=None, turns=[
        Turn(response_ids=[1], response_logprobs=[0.0], tool_call={"name": "load", "arguments": {"scene": "s2"}})])
    rec = EpisodeRecord.from_trajectory(traj, TASK, mode="IF", action_format="json")
    assert rec.calls == [{"name": "load", "arguments": {"scene": "s2"}, "error": False, "error_kind": None}]
    assert rec.correct is False


def test_rs_claw_metrics():
    rec = EpisodeRecord.from_trajectory(make_traj(), TASK, mode="AP", action_format="json")
    assert m.error_turns(rec) == (2, 4)          # EIR pair: 2 error turns of 4
    assert m.num_turns(rec) == 4
    assert m.action_tokens(rec) == 52            # 10 + 20 + 15 + 7
    assert m.observation_tokens(rec) == 43       # 5 + 30 + 8 + 0
    assert m.format_errors(rec) == (1, 4)        # one parse_error turn of 4
    assert m.hallucinated_calls(rec) == (1, 2)   # ndvy of the 2 workflow calls


def rec_with(calls):
    return EpisodeRecord(task_id="t1", calls=calls)


def test_simcraft_plan_metrics():
    exact = rec_with([dict(c) for c in REF])
    assert (m.plan_success(exact, REF), m.tool_set_accuracy(exact, REF), m.argument_exact_match(exact, REF)) == (1, 1, 1)
    # right tools and order, one argument differs: PSR 1, TSA 1, AEM 0
    wrong_arg = rec_with([REF[0], {"name": "ndvi", "arguments": {"src": "l7"}}])
    assert (m.plan_success(wrong_arg, REF), m.tool_set_accuracy(wrong_arg, REF),
            m.argument_exact_match(wrong_arg, REF)) == (1, 1, 0)
    # swapped order and a repeat: names {load, ndvi} as a set -> TSA 1; PSR 0, AEM 0
    swapped = rec_with([REF[1], REF[0], REF[1]])
    assert (m.plan_success(swapped, REF), m.tool_set_accuracy(swapped, REF),
            m.argument_exact_match(swapped, REF)) == (0, 1, 0)
    # an extra tool changes the set: all 0
    extra = rec_with([*REF, {"name": "plot", "arguments": {}}])
    assert (m.plan_success(extra, REF), m.tool_set_accuracy(extra, REF)) == (0, 0)


def test_hallucinated_path_counts_and_other_errors_do_not():
    rec = rec_with([call("load", True, "hallucinated_path"), call("ndvi", True, "schema_error"), call("x")])
    assert m.hallucinated_calls(rec) == (1, 3)


def test_faulted_trajectory_and_missing_task_answer():
    traj = make_traj()
    traj.faulted = True
    rec = EpisodeRecord.from_trajectory(traj, {"id": "t1"}, mode="AP", action_format="codeact")
    assert rec.faulted is True and rec.correct is None and rec.skill == ""


def test_to_dict_round_trip():
    rec = EpisodeRecord.from_trajectory(make_traj(), TASK, mode="AP", action_format="json")
    assert EpisodeRecord(**rec.to_dict()) == rec
