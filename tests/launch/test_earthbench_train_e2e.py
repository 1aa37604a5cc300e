"""A tiny-model ``earthrl train`` step on RS-Claw-Evolution's Earth-Bench split in replay mode (issue 24): the
suite preset brings Earth-Bench's env keys, the episodes run on the 12 training tasks through the replay engine,
and every observation is a recorded output, an ``off_record`` error or the model's own format error. (The random
model seldom writes a well-formed call; tests/envs/test_replay.py drives every reference call through the env worker.)"""

from __future__ import annotations

import json

import pytest
import yaml

from earthrl.envs.benchmarks.earthbench_rsclaw import TRAIN_IDS
from earthrl.envs.core.replay import load_recordings, output_text
from tests.launch.test_algorithms_e2e import TINY
from tests.launch.test_train_e2e import earthrl
from tests.paths import EARTHBENCH as EB
from tests.paths import EARTHBENCH_MISSING

# errors a random model's turns can make before any tool runs, and replay's own
ACTION_ERRORS = {"parse_error", "schema_error", "unknown_tool", "off_record", "hallucinated_path", "no_tool_call"}


@pytest.mark.slow
def test_a_train_step_on_earthbench_rsclaw_in_replay_mode(tmp_path, tiny_model):
    if not (EB / "question.json").is_file():
        pytest.skip(reason=EARTHBENCH_MISSING)
    out = earthrl("train", *TINY, "tasks=earthbench-rsclaw", f"tasks.data={EB}", "env.mode=replay",
                  "trainer.heldout.every=0", "trainer.output_dir=run", cwd=tmp_path)
    assert "step 1/1" in out.stdout
    run = tmp_path / "run"
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    # the preset's env keys; TINY's env.max_turns=2 on the command line wins over its 20
    assert (cfg["env"]["mode"], cfg["env"]["toolset"], cfg["env"]["max_context_tokens"], cfg["env"]["max_turns"]) == (
        "replay", "earthbench", 16384, 2)
    rollouts = [json.loads(line) for line in (run / "rollouts.jsonl").read_text().splitlines()]
    assert len(rollouts) == 4 and {r["task_id"] for r in rollouts} <= set(TRAIN_IDS)
    recorded = load_recordings("earthbench", str(EB))
    for r in rollouts:
        outputs = {output_text(c.output) for c in recorded[r["task_id"]]}
        for t in r["turns"]:
            assert t["error"] or t["observation"] in outputs, t
            if t["error"]:
                assert t["error_kind"] in ACTION_ERRORS, t
    steps = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    step = next(m for m in steps if m.get("step") == 1 and "rollout/mean_turns" in m)
    assert step["rollout/mean_turns"] == 2  # no answer in two turns: each episode ran to env.max_turns
    assert step["rollout/sequence_tokens_mean"] > 4500  # the prompt lists Earth-Agent's 83 tools (~4,500 tokens)
