"""The step line's rollout-correction fragment, from the metric names the run logs."""

from earthrl.rollout.run_logger import LOGGED_AS, format_correction


def test_correction_fragment_shows_the_weight_the_cut_share_and_masked_sequences():
    m = {LOGGED_AS["is_weight_mean"]: 1.00349, LOGGED_AS["is_truncated_frac"]: 0.0042,
         LOGGED_AS["masked_seq_frac"]: 0.0}
    assert format_correction(m) == " | IS w 1.003, 0.4% cut"
    m[LOGGED_AS["masked_seq_frac"]] = 0.125
    assert format_correction(m) == " | IS w 1.003, 0.4% cut, 12% seqs masked"
    assert format_correction({"rollout/logprob_diff": 0.0, "loss/skipped_update": 1.0}) == ""  # no update ran
    assert LOGGED_AS["is_weight_mean"] == "rollout_corr/rollout_is_mean"  # verl 0.9.1's name
