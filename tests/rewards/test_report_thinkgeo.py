"""ThinkGeo's metrics in the evaluation report of EarthRL's own runs (rewards/metrics/report.py build_report, scored by
rewards/metrics/thinkgeo.py through compute.py): scripted policies play the hand-written ThinkGeo file in replay mode,
their turns become trajectories, and the report gives Inst., Tool., Arg., Ans. and Ans_I as ThinkGeo counts them."""

from __future__ import annotations

import json

import pytest

from earthrl.envs.benchmarks.thinkgeo import load_thinkgeo
from earthrl.envs.core.env import RSEnv
from earthrl.rewards.metrics.report import build_report, to_markdown, write_report
from tests.envs.test_thinkgeo_replay import FIXTURE, _action, folder  # noqa: F401 (folder: the fixture)

NAMES = ("inst", "tool", "arg", "ans", "ans_i")


def play(folder, tmp_path, script: dict[str, list[tuple[str, dict]]]) -> list[dict]:
    """``trajectories.jsonl`` entries of ``script`` (``{task id: [(tool, arguments), ...]}``, the last an ``answer``)
    played through the replay environment, one turn per action."""
    entries = []
    for task in load_thinkgeo(folder):
        env = RSEnv(folder, tmp_path / "ws" / task.id.replace("/", "_"), mode="replay", toolset="thinkgeo")
        env.reset(task, "AP")
        turns, answer = [], None
        for name, args in script[task.id]:
            r = env.step(_action(name, args))
            turns.append({"response_ids": [1, 2], "response_logprobs": [0.0, 0.0], "error": r.error,
                          "error_kind": r.error_kind, "tool_call": r.tool_call, "tool_calls": r.tool_calls})
            answer = r.answer or answer
        env.close()
        entries.append({"task_id": task.id, "mode": "AP", "action_format": "json",
                        "trajectory": {"task_id": task.id, "group": "g", "prompt_ids": [0], "turns": turns,
                                       "answer": answer}})
    return entries


def tasks_of(folder) -> dict[str, dict]:
    return {t.id: t.model_dump() for t in load_thinkgeo(folder)}


def reference_script() -> dict[str, list[tuple[str, dict]]]:
    """Each dialog's reference calls, then its final answer."""
    out = {}
    for key, task in FIXTURE.items():
        calls = [(c["function"]["name"], c["function"]["arguments"]) for t in task["dialogs"]
                 for c in t.get("tool_calls", [])]
        out[f"thinkgeo/{key}"] = [*calls, ("answer", {"value": task["dialogs"][-1]["content"]})]
    return out


def values(report: dict) -> dict[str, tuple[float, int]]:
    return {k: (report["metrics"][k]["value"], report["metrics"][k]["n"]) for k in NAMES}


def test_replaying_the_reference_calls_and_answers_gives_every_thinkgeo_metric_its_maximum(folder, tmp_path):
    report = build_report(play(folder, tmp_path, reference_script()), tasks_of(folder), n_resamples=0)
    # Ans. leaves the image-generation task (thinkgeo/2, gt_answer null) out; Ans_I scores it by DrawBox's arguments
    assert values(report) == {"inst": (1.0, 3), "tool": (1.0, 3), "arg": (1.0, 3), "ans": (1.0, 2), "ans_i": (1.0, 3)}
    assert report["thinkgeo"] == {"tasks": 3, "image_tasks": 1}
    # the outcome check has no answer to grade on the image task: Accuracy 2 of 3, Ans. 2 of 2
    assert report["metrics"]["accuracy"]["value"] == pytest.approx(2 / 3)


def off_script() -> dict[str, list[tuple[str, dict]]]:
    return {
        # the detection as recorded; the count asked for boats (off the record: an error); a blacklisted answer
        "thinkgeo/0": [("ObjectDetection", {"image": "image/harbor.png"}),
                       ("CountGivenObject", {"image": "image/harbor.png", "text": "boat"}),
                       ("answer", {"value": "There are four ships."})],
        # the last reference call first (recorded, no error), then the right answer
        "thinkgeo/1": [("Calculator", {"expression": "(180 - 112) * 0.5"}),
                       ("answer", {"value": "It is white, about 34 m long."})],
        # the box drawn straight away with the reference's arguments; no answer step on an image task
        "thinkgeo/2": [("DrawBox", {"image": "image/port.png", "bbox": "(5, 6, 70, 20)",
                                    "annotation": "largest ship"}),
                       ("answer", {"value": "done"})],
    }


def test_off_record_calls_and_a_wrong_answer_give_the_hand_counted_values(folder, tmp_path):
    entries = play(folder, tmp_path, off_script())
    assert [t["error_kind"] for t in entries[0]["trajectory"]["turns"]] == [None, "off_record", None]
    report = build_report(entries, tasks_of(folder), n_resamples=0)
    # position by position against the reference steps (tool calls, then an answer step where gt_answer is set):
    # task 0: OD = OD; CGO errored (not aligned, same name, other args); answer = answer -> inst 2/3, tool 2/2, arg 1/2
    # task 1: Calculator vs TextToBbox (tool = tool: aligned, names differ); answer vs RAD -> inst 1/4, tool 0/3
    # task 2: DrawBox vs TextToBbox -> inst 1/2, tool 0/2; the answer is no step (no gt_answer)
    # Ans.: task 0 names "four" (blacklisted) 0, task 1 names white and 34: 1 -> 1/2
    # Ans_I: + task 2, DrawBox called without error with the reference's arguments: 1 -> 2/3
    assert values(report) == {"inst": (pytest.approx(4 / 9), 3), "tool": (pytest.approx(2 / 7), 3),
                              "arg": (pytest.approx(1 / 7), 3), "ans": (0.5, 2), "ans_i": (pytest.approx(2 / 3), 3)}
    assert report["metrics"]["accuracy"]["value"] == pytest.approx(1 / 3)  # the image task counts as wrong there

    paths = write_report(report, tmp_path, plots=False)
    saved = json.loads(paths["json"].read_text())
    assert saved["metrics"]["arg"]["value"] == pytest.approx(1 / 7) and saved["thinkgeo"]["image_tasks"] == 1
    md = paths["markdown"].read_text()
    assert "## ThinkGeo's metrics" in md and "Ans. over the 2 tasks with a textual answer; Ans_I over all 3, with the image-generation tasks (1)" in md
    assert "| split / skill | n | Inst. | Tool. | Arg. | Ans. | Ans_I |" in md
    assert "| all | 3 | 0.444 | 0.286 | 0.143 | 0.500 | 0.667 |" in md


def test_other_suites_keep_thinkgeos_metrics_out_of_the_markdown(folder, tmp_path):
    tasks = {k: {**t, "template": "mine"} for k, t in tasks_of(folder).items()}
    report = build_report(play(folder, tmp_path, reference_script()), tasks, n_resamples=0)
    assert "thinkgeo" not in report and "Inst." not in to_markdown(report)
    # on other tasks Ans. and Ans_I are Accuracy (every task has an answer step): 2 of 3
    assert report["metrics"]["ans"]["value"] == pytest.approx(2 / 3) == report["metrics"]["ans_i"]["value"]
