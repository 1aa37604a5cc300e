import math

import pytest
import torch

from earthrl.algorithms.grpo import grpo_advantages


def test_hand_computed_group():
    # group a: rewards 1,0,0,1 -> mean .5, unbiased std = sqrt(1/3) = 0.57735
    adv = grpo_advantages(torch.tensor([1.0, 0.0, 0.0, 1.0, 3.0, 5.0]), ["a", "a", "a", "a", "b", "b"], eps=0.0)
    s = math.sqrt(1 / 3)
    expected = [0.5 / s, -0.5 / s, -0.5 / s, 0.5 / s, -1 / math.sqrt(2), 1 / math.sqrt(2)]
    assert adv.tolist() == pytest.approx(expected, rel=1e-6)


def test_all_equal_group_and_singleton_give_zero():
    adv = grpo_advantages(torch.tensor([0.7, 0.7, 0.7, 2.0]), [0, 0, 0, 1])
    assert adv.tolist() == [0.0, 0.0, 0.0, 0.0]


def test_float_residue_split_is_bounded_by_floor():
    # a 7-vs-1 split whose only difference is float residue (1 ulp of float32 at 1.0)
    r = torch.tensor([1.0] * 7 + [1.0 + 1.2e-7])
    assert r[7] != r[0]
    adv = grpo_advantages(r, [0] * 8, eps=1e-6, std_floor=1e-2)
    # |centred| <= 1e-7 so |adv| <= 1e-7 / 1e-2 = 1e-5
    assert adv.abs().max().item() < 2e-5
    unfloored = grpo_advantages(r, [0] * 8, eps=1e-6, std_floor=0.0)
    assert unfloored.abs().max().item() > 0.1  # what the floor protects against


def test_dr_grpo_does_not_divide():
    adv = grpo_advantages(torch.tensor([2.0, 0.0]), ["t", "t"], norm_by_std=False)
    assert adv.tolist() == [1.0, -1.0]


def test_bad_input_names_the_problem():
    with pytest.raises(ValueError, match="group_ids"):
        grpo_advantages(torch.tensor([1.0, 2.0]), [0])
    with pytest.raises(ValueError, match="NaN"):
        grpo_advantages(torch.tensor([1.0, float("nan")]), [0, 0])
