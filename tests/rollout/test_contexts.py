"""Trajectories whose turns bring contexts of their own (planner/executor, manager/specialist): the ids,
masks and spans by hand, the learner's rows one per context, and the refusals where one row cannot hold them."""

import pytest
import torch

from earthrl.algorithms.broadcast import turn_values_to_tokens
from earthrl.algorithms.learner import pack
from earthrl.rollout.sft_tokens import label_mask
from earthrl.rollout.trajectory import Trajectory, Turn
from earthrl.rollout.verl_loop import to_agent_loop_output
from earthrl.tests.algorithms.builders import learner_config


def two_contexts() -> Trajectory:
    """Planner prompt [1,1,1] -> plan [2,2] ; executor context [3,3,3,3] -> call [4] + obs [9] -> retry [5,5]."""
    return Trajectory(task_id="t", group="g", prompt_ids=[1, 1, 1], turns=[
        Turn(response_ids=[2, 2], response_logprobs=[-0.1, -0.2], role="planner", node="plan"),
        Turn(response_ids=[4], response_logprobs=[-0.3], observation_ids=[9], context_ids=[3, 3, 3, 3],
             role="executor", node="n1", error=True),
        Turn(response_ids=[5, 5], response_logprobs=[-0.4, -0.5], role="executor", node="n1")])


def test_ids_masks_spans_and_sequences_by_hand():
    t = two_contexts()
    assert t.token_ids() == [1, 1, 1, 2, 2, 3, 3, 3, 3, 4, 9, 5, 5]
    assert t.response_mask() == [0, 0, 0, 1, 1, 0, 0, 0, 0, 1, 0, 1, 1]
    assert t.rollout_logprobs() == [0, 0, 0, -0.1, -0.2, 0, 0, 0, 0, -0.3, 0, -0.4, -0.5]
    assert t.turn_spans() == [(3, 5), (9, 10), (11, 13)]
    assert t.sequence_bounds() == [(0, 5), (5, 13)]
    assert label_mask(t, "masked") == [0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 1, 1]  # the error turn is not taught
    values = turn_values_to_tokens([t], torch.tensor([1.0, 2.0, 3.0]))[0]
    assert values.tolist() == [0, 0, 0, 1, 1, 0, 0, 0, 0, 2, 0, 3, 3]


def test_a_flat_trajectory_is_one_sequence_and_an_empty_prompt_drops_out():
    flat = Trajectory(task_id="t", group="g", prompt_ids=[1, 1],
                      turns=[Turn(response_ids=[2], response_logprobs=[-1.0], observation_ids=[9]),
                             Turn(response_ids=[3], response_logprobs=[-1.0])])
    assert flat.sequence_bounds() == [(0, 5)]
    fresh = Trajectory(task_id="t", group="g", prompt_ids=[],
                       turns=[Turn(response_ids=[2], response_logprobs=[-1.0], context_ids=[1, 1])])
    assert fresh.sequence_bounds() == [(0, 3)]


def test_the_learner_packs_one_row_per_context_equal_to_that_context_alone():
    t = two_contexts()
    adv = turn_values_to_tokens([t], torch.tensor([1.0, -1.0, 0.5]))
    batch = pack([t], adv, learner_config(micro_batch_size=8))
    (mb,) = batch.micro
    assert batch.num_sequences == 2 and batch.num_tokens == 5
    assert mb.input_ids[0, :5].tolist() == [1, 1, 1, 2, 2] and mb.attention_mask[0].tolist() == [1] * 5 + [0] * 3
    assert mb.input_ids[1].tolist() == [3, 3, 3, 3, 4, 9, 5, 5]  # the executor's row never sees the planner's tokens
    assert mb.response_mask.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, 1, 0, 1, 1]]
    assert mb.advantages.tolist() == [[0, 0, 0, 1, 1, 0, 0, 0], [0, 0, 0, 0, -1, 0, 0.5, 0.5]]
    assert torch.allclose(mb.rollout_logprobs[1], torch.tensor([0, 0, 0, 0, -0.3, 0, -0.4, -0.5]))


def test_a_context_with_zero_advantage_is_a_zero_row():
    t = two_contexts()
    adv = turn_values_to_tokens([t], torch.tensor([0.0, 1.0, 1.0]))
    batch = pack([t], adv, learner_config(micro_batch_size=8, loss=None))
    assert [mb.input_ids.shape[0] for mb in batch.micro] == [1]
    assert [mb.input_ids[0, :5].tolist() for mb in batch.zero_micro] == [[1, 1, 1, 2, 2]]


def test_verl_rows_refuse_a_trajectory_of_several_contexts():
    with pytest.raises(ValueError, match="backend=local"):
        to_agent_loop_output(two_contexts(), uid="u", response_length=64)
