"""``earthrl eval tasks=thinkgeo env.mode=replay`` with the tiny random model on a ThinkGeo-format file: the preset
runs the AP phrasing with ThinkGeo's tools, every observation is a recorded output or an error of the action, and
the report holds ThinkGeo's five metrics."""

from __future__ import annotations

import json

import pytest

from earthrl.envs.core.replay import output_text
from tests.envs.test_thinkgeo_replay import FIXTURE
from tests.launch.test_train_e2e import earthrl

ACTION_ERRORS = {"parse_error", "schema_error", "unknown_tool", "off_record", "hallucinated_path", "no_tool_call"}


@pytest.mark.long  # an earthrl eval end to end (~65 s on 2 busy cores); the replay itself: tests/envs/test_thinkgeo_replay.py
def test_eval_on_thinkgeo_in_replay_mode_reports_thinkgeos_metrics(tmp_path, tiny_model):
    (tmp_path / "tg").mkdir()
    (tmp_path / "tg" / "ThinkGeoBench.json").write_text(json.dumps(FIXTURE))
    earthrl("eval", "model=tiny-llama", "cluster.engine=hf", "env.num_workers=1", "env.max_turns=2",
            "sampling.max_new_tokens=8", "logger.mode=disabled", "eval.output_dir=out", "eval.bootstrap=20",
            "tasks=thinkgeo", f"tasks.data={tmp_path / 'tg'}", "env.mode=replay", cwd=tmp_path)
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert (report["n_tasks"], report["n_trajectories"], list(report["by_mode"])) == (3, 3, ["AP"])
    # ThinkGeo's rules: Ans. leaves the image-generation task (thinkgeo/2) out, Ans_I scores it
    assert report["thinkgeo"] == {"tasks": 3, "image_tasks": 1}
    for name, n in (("inst", 3), ("tool", 3), ("arg", 3), ("ans", 2), ("ans_i", 3)):
        assert report["metrics"][name]["n"] == n and 0.0 <= report["metrics"][name]["value"] <= 1.0, name
    md = (tmp_path / "out" / "report.md").read_text()
    assert "## ThinkGeo's metrics" in md and "| split / skill | n | Inst. | Tool. | Arg. | Ans. | Ans_I |" in md
    assert md.count("\n| all | 3 | ") == 2  # the main table and ThinkGeo's
    outputs = {output_text(t["content"]["content"]) for task in FIXTURE.values()
               for t in task["dialogs"] if t["role"] == "tool"}
    lines = [json.loads(line) for line in (tmp_path / "out" / "trajectories.jsonl").read_text().splitlines()]
    assert sorted(e["task_id"] for e in lines) == ["thinkgeo/0", "thinkgeo/1", "thinkgeo/2"]
    for e in lines:
        turns = e["trajectory"]["turns"]
        assert 1 <= len(turns) <= 2  # the command line's env.max_turns=2 wins over the preset's 10
        for t in turns:
            assert (t["error_kind"] in ACTION_ERRORS) if t["error"] else t["observation"] in outputs, t
