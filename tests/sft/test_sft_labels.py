"""Per-turn label masks of SFT trajectories (RS-Claw-Evolution error-turn masking) on hand-built
trajectories, with the tiny model's tokenizer and chat codec."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.sft_data import SFTTrajectory, SFTTurn
from earthrl.rollout.sft_tokens import IGNORE_INDEX, encode, hf_labels, label_mask, to_trajectory

STOP = ("</tool_call>",)
WRONG = '<tool_call>{"name": "raster_stats", "arguments": {"name": "spectral_index_output"}}</tool_call>'
RIGHT = 'Hint (dependency): use the artifact.\n<tool_call>{"name": "raster_stats", "arguments": {"name": "ndvi_S2"}}</tool_call>'
FIRST = '<tool_call>{"name": "spectral_index", "arguments": {"scene": "S2", "index": "NDVI"}}</tool_call>'
ANSWER = '<tool_call>{"name": "answer", "arguments": {"value": 0.18, "unit": ""}}</tool_call>'


@pytest.fixture(scope="module")
def codec(tiny_model):
    return ChatCodec(AutoTokenizer.from_pretrained(str(tiny_model)))


def _record() -> SFTTrajectory:
    return SFTTrajectory(task_id="t", source="failure", action_format="json", phrasing="IF", system="SYSTEM PROMPT",
                         user="What is the mean NDVI?", answer={"value": 0.18, "unit": ""}, correct=True, turns=[
                             SFTTurn(FIRST, "saved ndvi_S2"),
                             SFTTurn(WRONG, "Error (hallucinated_path): artifact 'spectral_index_output' does not exist",
                                     error=True, error_kind="hallucinated_path"),
                             SFTTurn(RIGHT, "ndvi_S2: mean 0.18", hint="Hint (dependency): use the artifact."),
                             SFTTurn(ANSWER, "answer recorded: 0.18")])


def _spans(traj):
    """[(start, end)] of each turn's response and of each observation, in token_ids() order."""
    resp, obs, pos = [], [], len(traj.prompt_ids)
    for t in traj.turns:
        resp.append((pos, pos + len(t.response_ids)))
        obs.append((pos + len(t.response_ids), pos + len(t.response_ids) + len(t.observation_ids)))
        pos += len(t.response_ids) + len(t.observation_ids)
    return resp, obs


def test_masked_mode_drops_only_the_error_turn(codec):
    traj = to_trajectory(_record(), codec, STOP)
    ids, mask = traj.token_ids(), label_mask(traj, "masked")
    resp, obs = _spans(traj)
    assert len(mask) == len(ids)
    assert not any(mask[: len(traj.prompt_ids)])  # system + user + generation prompt
    for k, (a, b) in enumerate(resp):
        assert b > a
        assert all(m == (0 if k == 1 else 1) for m in mask[a:b]), k  # turn 1 has E=1
    for a, b in obs:  # every observation (the error observation included) is context only
        assert not any(mask[a:b])
    assert obs[1][1] > obs[1][0] and obs[-1] == (obs[-1][0], obs[-1][0])  # no observation after the answer
    # the error observation stays in the context; the recovery turn (with its hint) is supervised
    tok = codec.tokenizer
    assert "spectral_index_output" in tok.decode(ids[obs[1][0]:obs[1][1]])
    assert tok.decode(ids[resp[2][0]:resp[2][1]]) == RIGHT
    supervised = [i for i, m in zip(ids, mask) if m]
    assert tok.decode(supervised) == FIRST + RIGHT + ANSWER


def test_unmasked_and_oracle_supervise_every_assistant_turn(codec):
    traj = to_trajectory(_record(), codec, STOP)
    for mode in ("unmasked", "oracle"):
        mask = label_mask(traj, mode)
        assert mask == traj.response_mask()
        assert sum(mask) == sum(len(t.response_ids) for t in traj.turns)
    assert sum(label_mask(traj, "masked")) == sum(mask) - len(traj.turns[1].response_ids)
    with pytest.raises(ValueError, match="oracle, unmasked, masked"):
        label_mask(traj, "half")


def test_token_layout_is_the_agent_loops(codec):
    """prompt_ids + response + the codec's observation delta per turn, as run_episode builds it; an action
    ending in a stop string has no end-of-turn token (the codec adds it on the observation side)."""
    rec = _record()
    traj = to_trajectory(rec, codec, STOP)
    expected = codec.prompt_ids(rec.system, rec.user)
    for i, t in enumerate(rec.turns):
        resp = list(codec.tokenizer(t.action, add_special_tokens=False)["input_ids"])
        expected += resp + (codec.observation_ids(t.observation, resp) if i + 1 < len(rec.turns) else [])
    assert traj.token_ids() == expected
    assert codec.eos_id not in traj.turns[0].response_ids
    assert traj.turns[0].observation_ids[0] == codec.eos_id  # supplied on the observation side: label 0
    no_stop = to_trajectory(rec, codec, ())  # codeact: a turn ends at the end-of-turn token, which is supervised
    assert no_stop.turns[0].response_ids[-1] == codec.eos_id and label_mask(no_stop, "masked")[
        len(no_stop.prompt_ids) + len(no_stop.turns[0].response_ids) - 1] == 1


def test_hf_labels_and_encode_counts(codec):
    examples, counts = encode([_record()], codec, "masked", STOP)
    (ex,) = examples
    labels = hf_labels(ex.input_ids, ex.label_mask)
    assert [lab for lab in labels if lab != IGNORE_INDEX] == [i for i, m in zip(ex.input_ids, ex.label_mask) if m]
    assert labels.count(IGNORE_INDEX) == len(labels) - ex.supervised_tokens
    assert counts["kept"] == 1 and counts["masked_error_turns"] == 1 and counts["supervised_tokens"] == ex.supervised_tokens
    short, counts = encode([_record()], codec, "masked", STOP, max_tokens=10)
    assert short == [] and counts["too_long"] == 1
