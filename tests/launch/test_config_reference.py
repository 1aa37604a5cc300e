"""The configuration reference page (launch/config_schema/reference.py) says each key's rule, default and
meaning as the schema has them."""

from __future__ import annotations

from earthrl.launch.config_schema import ROOTS, leaf_keys
from earthrl.launch.config_schema.reference import _cell, reference_markdown, rows, rule_text
from earthrl.launch.config_schema.rules import AutoOr, Flag, ListOf, Num, Preset, Text


def test_rules_in_words():
    assert rule_text(Num(0, 0.99)) == "number in [0, 0.99]"
    assert rule_text(Num(0, None, lo_open=True)) == "number > 0"
    assert rule_text(Num(1, None, integer=True, null=True)) == "integer ≥ 1 or null"
    assert rule_text(Num(0, 1, lo_open=True)) == "number in (0, 1]"
    assert rule_text(Text(("local", "verl"))) == "one of `local`, `verl`"
    assert rule_text(Flag()) == "true or false"
    assert rule_text(ListOf(Text(("IF", "AP")), nonempty=True)) == "non-empty list, each one of `IF`, `AP`"
    assert rule_text(AutoOr(Num(1, None, integer=True))) == "`auto` or integer ≥ 1"
    assert rule_text(Preset("sft", null=True)) == "a `conf/sft` preset name or null"


def test_table_cells_escape_pipes_tags_and_stars_outside_code():
    assert _cell("a|b <name> `x|<y>*` conf/*.yaml") == "a\\|b &lt;name> `x\\|<y>*` conf/\\*.yaml"


def test_defaults_are_the_roots_not_the_classes():
    """`earthrl eval`'s sampling is SamplingConfig(temperature=0.1); training's keeps the class's 0.5."""
    eval_rows = {key: (rule, default) for key, rule, default, _ in rows("eval")}
    train_rows = {key: (rule, default) for key, rule, default, _ in rows("train")}
    assert eval_rows["sampling.temperature"] == ("number ≥ 0", "`0.1`")
    assert train_rows["algorithm.sampling.temperature"] == ("number ≥ 0", "`0.5`")
    assert train_rows["backend"] == ("one of `local`, `verl`", "`local`")


def test_every_key_of_every_command_is_on_the_page():
    page = reference_markdown()
    missing = [key for command in ROOTS for key in leaf_keys(command) if f"| `{key}` |" not in page]
    assert not missing, missing
    assert "| `trainer.steps` | `auto` or integer ≥ 1 | `3` | GRPO steps;" in page
