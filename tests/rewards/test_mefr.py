import pytest

from earthrl.rewards.mefr import data_progress, doc_progress, mefr_reward, skill_progress
from earthrl.rewards.registry import REWARDS
from earthrl.tests.algorithms.builders import TASK, traj, turn

RECORD = {"artifacts": [{"name": "ndvi_s2", "tool": "spectral_index", "parents": ["s2"]}],
          "docs_opened": ["spectral_index", "pixel_share", "ndwi"],
          "skills_opened": ["spectral_index", "water_flood"]}


def _episode(answer_value):
    return traj([turn(), turn(error=True), turn(), turn()], answer={"value": answer_value, "unit": "%"}, record=RECORD)


def test_progress_terms_hand_computed():
    # data-flow steps: spectral_index (raster) and threshold_mask (mask); pixel_share gives a number
    assert data_progress(RECORD, TASK) == 0.5
    # every reference step counts when data_output_kinds=None: 1 of 3
    assert data_progress(RECORD, TASK, data_output_kinds=None) == pytest.approx(1 / 3)
    # docs of spectral_index and pixel_share read, threshold_mask not ("answer" is not a workflow tool)
    assert doc_progress(RECORD, TASK) == pytest.approx(2 / 3)
    assert skill_progress(RECORD, TASK) == 1.0
    assert skill_progress(RECORD, TASK, needed_skills=["spectral_index", "cloud_masking"]) == 0.5


def test_artifacts_match_reference_steps_one_to_one():
    task = dict(TASK, reference=[{"name": "spectral_index", "arguments": {}}] * 2)
    assert data_progress(RECORD, task) == 0.5
    two = {"artifacts": RECORD["artifacts"] * 2}
    assert data_progress(two, task) == 1.0
    assert data_progress({}, task) == 0.0


def test_mefr_every_term_correct_and_incorrect():
    progress = 1.0 * 0.5 + 0.25 * (2 / 3) + 0.2 * 1.0
    t = _episode(12.6)  # within ±0.5 of 12.5 %
    # α_success − λ·T − μ·N_err + progress = 10 − 0.4 − 0.25 + 0.8667
    assert mefr_reward(t, TASK) == pytest.approx(10 - 0.1 * 4 - 0.25 * 1 + progress)
    t = _episode(14.0)
    assert REWARDS.lookup("mefr")(t, TASK) == pytest.approx(-1 - 0.4 - 0.25 + progress)
    # no answer and nothing done: α_fail − λ·T only
    assert mefr_reward(traj([turn()]), TASK) == pytest.approx(-1.1)


def test_mefr_weights_are_configurable():
    t = _episode(12.6)
    r = mefr_reward(t, TASK, alpha_success=1.0, turn_penalty=0.0, error_penalty=1.0, w_data=2.0, w_doc=0.0, w_skill=0.0)
    assert r == pytest.approx(1.0 - 1.0 + 2.0 * 0.5)
