"""Fuzzed command-line overrides (hypothesis, fixed seed, bounded count) through the config
validation of `earthrl train` and `earthrl eval`: each gives a checked config or ONE-line
ConfigError, never another exception. And every leaf of every composed config is a key of the schema
(launch/config_schema), so that a new setting cannot slip past the checks unnoticed."""

from __future__ import annotations

import pytest
from hydra import initialize_config_dir
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import check_config, leaf_keys, rule_for
from earthrl.launch.config_schema.rules import Free, Mapping, Unknown
from earthrl.launch.job_inputs import check_job_config
from earthrl.launch.overrides import CONF_DIR, compose_job, job_overrides

FUZZ = settings(max_examples=120, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
NAMES = {"train": "config", "eval": "eval"}


def _leaf_keys(name: str, overrides: list[str]) -> list[str]:
    from omegaconf import OmegaConf

    def walk(d, pre=""):
        for k, v in d.items():
            if isinstance(v, dict) and v:
                yield from walk(v, f"{pre}{k}.")
            else:
                yield f"{pre}{k}"

    return list(walk(OmegaConf.to_container(compose_job(name, overrides), resolve=False)))


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


GROUPS = {"train": ["algorithm", "env", "model", "logger"], "eval": ["env", "model", "logger"]}


@pytest.mark.parametrize("command", ["train", "eval"])
def test_every_leaf_of_every_config_has_a_rule_and_the_defaults_pass(hydra_ctx, command):
    name, uncovered = NAMES[command], set()
    for group in GROUPS[command]:
        for option in sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml")):
            overrides = [f"{group}={option}"]
            check_config(compose_job(name, overrides), command)  # the shipped configs are valid
            uncovered |= {k for k in _leaf_keys(name, overrides) if isinstance(rule_for(k, command), Unknown)}
    assert not uncovered, f"add a field to the schema (launch/config_schema) for: {sorted(uncovered)}"


KEYS = sorted(k for command in ("train", "eval") for k in leaf_keys(command)
              if not isinstance(rule_for(k, command), (Free, Mapping))) + [
    "algorithm.sampling.temperature", "trainer.heldout.sampling.top_p", "model.lora.rank", "env.format_options.limits.wall_s"]
_junk = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=12)
_values = st.one_of(st.integers(-10**6, 10**6).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                    st.sampled_from(["null", "true", "false", "[]", "{}", "[1,2]", "{a: 1}", "''", "nan", "-inf",
                                     "IF", "abc", "${nope}", "${seed}", "1e999", "0", "-1", "1e-300"]), _junk)
_override = st.one_of(st.builds(lambda k, v: f"{k}={v}", st.sampled_from(KEYS), _values),
                      st.builds(lambda k, v: f"{k}={v}", _junk, _values), _junk,
                      st.builds(lambda k, a, b: f"{k}={a},{b}", st.sampled_from(KEYS), _values, _values))


@FUZZ
@given(command=st.sampled_from(["train", "eval"]), argv=st.lists(_override, max_size=3), sweep=st.booleans())
def test_fuzzed_overrides_give_a_config_or_one_line(hydra_ctx, command, argv, sweep):
    try:
        for overrides in job_overrides((["-m"] if sweep else []) + argv)[:4]:
            check_job_config(compose_job(NAMES[command], overrides), command)
    except ConfigError as exc:
        assert "\n" not in str(exc) and str(exc).strip(), repr(str(exc))


def test_known_bad_values_name_the_key(hydra_ctx):
    cases = {"algorithm.lr=-1": "algorithm.lr=-1 must be greater than 0",
             "algorithm.group_size=0": "algorithm.group_size=0 must be at least 2",
             "algorithm.ppo_epochs=1.5": "algorithm.ppo_epochs=1.5 must be an integer",
             "env.max_turns=0": "env.max_turns=0 must be at least 1",
             "algorithm.sampling.temperature=-0.1": "algorithm.sampling.temperature=-0.1 must be at least 0",
             "algorithm.sampling.max_new_tokens=0": "algorithm.sampling.max_new_tokens=0 must be at least 1",
             "trainer.heldout.sampling.top_p=0": "trainer.heldout.sampling.top_p=0 must be greater than 0",
             "algorithm.lr=abc": "algorithm.lr=abc must be a number",
             "algorithm.lr=nan": "algorithm.lr=nan must be a finite number",
             "trainer.export=maybe": "trainer.export=maybe must be true or false",
             "model.lora.rank=true": "model.lora.rank=true must be an integer",
             "env.stop_strings=5": "env.stop_strings=5 must be a list",
             "tasks.phrasing=XX": "tasks.phrasing=XX must be one of IF, AP, OW",
             "env.inject_errors={rat: 0.1}": "env.inject_errors.rat=0.1 is not a known setting there"}
    for override, expected in cases.items():
        with pytest.raises(ConfigError) as err:
            check_job_config(compose_job("config", [override]), "train")
        assert str(err.value).startswith(expected), (override, str(err.value))
    with pytest.raises(ConfigError, match=r"^eval.samples=0 must be at least 1$"):
        check_job_config(compose_job("eval", ["eval.samples=0"]), "eval")
    assert job_overrides(["-m", "algorithm.lr=1e-5,2e-5", "seed=3"]) == [["algorithm.lr=1e-05", "seed=3"],
                                                                       ["algorithm.lr=2e-05", "seed=3"]]
