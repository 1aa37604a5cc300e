"""Mock replay: the mock engine names an artifact as execute mode does (one naming function per
tool, :attr:`Tool.output_name`), so every earthrl-mini reference workflow replays in mock mode
without an error, and an injected recoverable error is the only error a correct workflow sees."""

from __future__ import annotations

from collections import Counter

import pytest

from earthrl.envs.core.env import RSEnv
from earthrl.envs.core.reference_actions import scripted_actions
from earthrl.envs.core.tasks import load_suite


@pytest.fixture(scope="module")
def mini_tasks(data_root):
    return load_suite("earthrl-mini", data_root=data_root)


def _play(env: RSEnv, task, action_format: str, retries: int = 0) -> tuple[Counter, bool]:
    """Error kinds of the scripted reference policy's steps; an ``injected_error`` step is retried
    (the same action) up to ``retries`` times. Returns ``(kinds, answered)``."""
    kinds: Counter = Counter()
    env.reset(task)
    for action in scripted_actions(task.model_dump(), action_format):
        for _ in range(retries + 1):
            r = env.step(action)
            if r.error:
                kinds[r.error_kind] += 1
            if r.error_kind != "injected_error":
                break
        if r.done:
            return kinds, r.answer is not None
    return kinds, False


def test_every_reference_workflow_replays_in_mock_mode_json(data_root, tmp_path, mini_tasks):
    env = RSEnv(data_root, tmp_path / "ws", mode="mock", toolset="all")
    kinds, answered, steps = Counter(), 0, 0
    for task in mini_tasks:
        k, ok = _play(env, task, "json")
        kinds += k
        answered += ok
        steps += len(task.reference) + 1
    env.close()
    assert len(mini_tasks) == 490 and steps == 1734
    # the former <tool>_<sha1(call)[:8]> names made 649 of these steps hallucinated_path errors
    assert dict(kinds) == {} and answered == 490


def test_one_workflow_per_template_replays_in_mock_mode_codeact(data_root, tmp_path, mini_tasks):
    by_template = {}
    for task in mini_tasks:
        by_template.setdefault(task.id.split("/")[1], task)
    env = RSEnv(data_root, tmp_path / "ws", mode="mock", toolset="all", action_format="codeact")
    results = {tid: _play(env, task, "codeact") for tid, task in by_template.items()}
    env.close()
    assert len(results) == 43
    assert {tid: r for tid, r in results.items() if r != (Counter(), True)} == {}


@pytest.mark.parametrize("task_id, names", [
    # threshold on a scene band: the band as the scene spells it, ':' -> '_'
    ("mini/s2_nir_water/S2_T33UUU_20170216/B08_lt0.05", ["S2_T33UUU_20170216_B08_lt0.05"]),
    ("mini/ls_ndvi_change/LE70350322008166EDC00_LE70350322012161EDC00",
     ["ndvi_LE70350322008166EDC00", "ndvi_LE70350322012161EDC00",
      "diff_ndvi_LE70350322012161EDC00_ndvi_LE70350322008166EDC00"]),
    # k-means names by the call's argument hash: sha1('{"k": 4, "names": [...], "seed": 0}')[:8]
    ("mini/ls_kmeans_veg/LE70350322008166EDC00/k4", ["ndvi_LE70350322008166EDC00", "km4_deb8812e"]),
])
def test_mock_registers_the_names_execute_mode_writes(data_root, tmp_path, mini_tasks, task_id, names):
    task = next(t for t in mini_tasks if t.id == task_id)
    got = {}
    for mode in ("execute", "mock"):
        env = RSEnv(data_root, tmp_path / mode, mode=mode, toolset="all")
        kinds, answered = _play(env, task, "json")
        assert (dict(kinds), answered) == ({}, True), mode
        got[mode] = {n: (a.units, a.parents, a.call["name"]) for n, a in env.registry.artifacts.items()}
        files = sorted(p.name for p in env.workspace.iterdir())
        env.close()
        if mode == "execute":  # real rasters were written under those names
            assert files == sorted(f"{n}.tif" for n in names)
        else:
            assert files == []  # no pixels, no files
    assert list(got["execute"]) == list(got["mock"]) == names
    for n in names:  # lineage as execute mode records it; units "mock" on the placeholders
        (units, parents, tool), (m_units, m_parents, m_tool) = got["execute"][n], got["mock"][n]
        assert (m_units, m_parents, m_tool) == ("mock", parents, tool) and units != "mock"


def test_injected_errors_are_the_only_errors_a_correct_workflow_sees(data_root, tmp_path, mini_tasks):
    env = RSEnv(data_root, tmp_path / "ws", mode="mock", toolset="all", inject_errors={"rate": 0.3, "seed": 11})
    kinds, answered = Counter(), 0
    for task in mini_tasks:
        k, ok = _play(env, task, "json", retries=30)
        kinds += k
        answered += ok
    env.close()
    assert set(kinds) == {"injected_error"} and answered == 490
    # 1,244 non-answer calls, each failing with p = 0.3 until it succeeds: ~ 1244 * 0.3 / 0.7 = 533
    assert 400 < kinds["injected_error"] < 670
