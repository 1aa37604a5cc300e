import pytest

from earthrl.algorithms.group_filter import outcome_groups


def test_all_correct_and_all_wrong_groups_are_dropped_mixed_kept():
    groups = ["a", "a", "b", "b", "c", "c", "c"]
    correct = [True, True, False, False, True, False, False]
    v = outcome_groups(groups, correct)
    assert v.keep == [4, 5, 6] and v.kept_groups == ["c"]
    assert v.all_correct == ["a"] and v.all_wrong == ["b"]


def test_the_decision_ignores_shaped_rewards():
    # an all-wrong group whose shaped (MEFR-like) rewards differ is still dropped: only `correct` is read
    groups = ["g"] * 4
    assert outcome_groups(groups, [False] * 4).all_wrong == ["g"]
    assert outcome_groups(groups, [False, False, True, False]).keep == [0, 1, 2, 3]


def test_interleaved_groups_keep_batch_order_and_lengths_must_match():
    v = outcome_groups(["x", "y", "x", "y"], [True, True, False, True])
    assert v.keep == [0, 2] and v.all_correct == ["y"]
    with pytest.raises(ValueError, match="3 group keys for 2 outcomes"):
        outcome_groups(["x", "y", "z"], [True, False])
