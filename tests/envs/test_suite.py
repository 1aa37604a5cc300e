"""earthrl-mini: size, skills, splits, caching, and answers against independent numpy."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from earthrl.envs.tasks import TaskSpec, load_suite, register_suite

S2 = "S2_T33UUU_20170216"


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        h = tmp_path_factory.mktemp("earthrl_home")
        mp.setenv("EARTHRL_HOME", str(h))
        yield h


@pytest.fixture(scope="module")
def tasks(home, data_root):
    return load_suite("earthrl-mini", data_root=data_root)


def test_size_skills_and_reference_lengths(tasks):
    assert len(tasks) >= 24
    skills = Counter(t.skill for t in tasks)
    assert len(skills) >= 4 and {"spectral_index", "vegetation", "water_mapping",
                                 "change_detection", "cloud_masking"} <= set(skills)
    assert len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert 2 <= len(t.reference) <= 4
        assert set(t.question) >= {"IF", "AP"} and t.question["IF"] != t.question["AP"]
        for call in t.reference:  # IF spells out each step's tool, AP does not
            assert call.name in t.question["IF"] and call.name not in t.question["AP"]
        assert t.answer.kind == "numeric" and t.answer.tolerance > 0


def test_split_is_deterministic_and_disjoint(tasks, data_root):
    train = load_suite("earthrl-mini", "train", data_root=data_root)
    test = load_suite("earthrl-mini", "test", data_root=data_root)
    assert len(train) + len(test) == len(tasks)
    assert 0.15 <= len(test) / len(tasks) <= 0.35
    assert {t.skill for t in test} == {t.skill for t in tasks}
    # no instance in both: the (data, final reference call) of a test task never occurs in train
    def inst(t):
        first = t.reference[0]
        return (tuple(t.data), json.dumps(first.arguments, sort_keys=True),
                json.dumps(t.reference[1].arguments, sort_keys=True))
    assert not {inst(t) for t in train} & {inst(t) for t in test}


def test_suite_is_cached_as_jsonl(home, tasks, data_root):
    files = list((home / "suites").glob("earthrl-mini-*.jsonl"))
    assert len(files) == 1
    lines = files[0].read_text().splitlines()
    assert len(lines) == len(tasks)
    assert TaskSpec.model_validate_json(lines[0]) == tasks[0]
    # a tampered cache is what is read: proof the second load does not rebuild
    t0 = json.loads(lines[0])
    t0["answer"]["value"] = 123.0
    files[0].write_text("\n".join([json.dumps(t0)] + lines[1:]) + "\n")
    try:
        assert load_suite("earthrl-mini", data_root=data_root)[0].answer.value == 123.0
    finally:
        files[0].write_text("\n".join(lines) + "\n")


def test_unknown_suite_lists_available():
    with pytest.raises(KeyError, match="available: .*earthrl-mini"):
        load_suite("earthbench-mini")
    with pytest.raises(ValueError, match="split"):
        load_suite("earthrl-mini", split="val")
    with pytest.raises(ValueError, match="already registered"):
        register_suite("earthrl-mini")(lambda root: [])


def _by_id(tasks, prefix):
    return [t for t in tasks if t.id.startswith(prefix)]


def _check(task, want):
    assert abs(task.answer.value - want) <= max(task.answer.tolerance / 10, 10.0 ** -3), (
        task.id, task.answer.value, want)


def test_answers_match_independent_numpy(tasks, raw):
    n, red, g = raw.s2("B08"), raw.s2("B04"), raw.s2("B03")
    ndvi, ndwi = (n - red) / (n + red), (g - n) / (g + n)
    _check(_by_id(tasks, "mini/s2_mean_index/S2_T33UUU_20170216/NDVI")[0], ndvi.mean())
    _check(_by_id(tasks, "mini/s2_mean_index/S2_T33UUU_20170216/NDWI")[0], ndwi.mean())
    for t in _by_id(tasks, "mini/s2_veg_share/"):
        thr = t.reference[1].arguments["value"]
        _check(t, 100 * (ndvi.astype(np.float32) > thr).mean())
    area = _by_id(tasks, "mini/s2_water_area/NDWI")[0]
    want_km2 = (ndwi > 0).sum() * 10 * 10 / 1e6
    assert area.answer.unit == "km2"
    assert abs(area.answer.value - want_km2) <= 0.01 * want_km2 / 10
    assert area.answer.tolerance == pytest.approx(0.01 * want_km2, rel=1e-2)
    for t in _by_id(tasks, "mini/ls_cloud_share/") + _by_id(tasks, "mini/ls_clear_share/"):
        fm = raw.fmask(t.data[0])
        cls = t.reference[0].arguments["classes"]
        _check(t, 100 * np.isin(fm[fm != 255], cls).mean())
        assert t.answer.unit == "%"
    for t in _by_id(tasks, "mini/ls_ndvi_change/"):
        early, late = t.data
        nd = {s: (raw.ls(s, "b4") - raw.ls(s, "b3")) / (raw.ls(s, "b4") + raw.ls(s, "b3"))
              for s in (early, late)}
        _check(t, np.nanmean(nd[late] - nd[early]))
    for t in _by_id(tasks, "mini/ls_mean_ndvi/"):
        s = t.data[0]
        _check(t, np.nanmean((raw.ls(s, "b4") - raw.ls(s, "b3")) / (raw.ls(s, "b4") + raw.ls(s, "b3"))))
