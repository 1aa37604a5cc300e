"""The typed config schema (launch/config_schema) is the one home of every key's type, default and range.

The rules, each a test below:

1. Every composed config is typed by its command's schema: each node has the schema's dataclass type and
   every leaf key is a schema key (a key inside a free mapping, e.g. ``algorithm.reward_kwargs``, belongs to
   the mapping).
2. Every YAML file under conf/ validates against its schema: a group preset merged onto its group's
   dataclass (an unknown key or a wrong type is refused), and every job it composes passes
   :func:`~earthrl.launch.config_schema.check_config`.
3. A default appears in exactly one place: a YAML file sets a key only to a value that differs from what the
   key has without it (the schema's default, or the preset it extends through its defaults list). A YAML
   value equal to it is a second home of the default.
4. No product dataclass below launch/ (the settings the code there takes) has a default for a config key: a
   dataclass of rollout/, algorithms/, rewards/, envs/ or models/ that shares two or more field names with a
   schema dataclass mirrors that config group, and gets those fields' values from the config.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil

import pytest
from hydra import initialize_config_dir
from omegaconf import OmegaConf

from earthrl.launch.config_schema import ROOTS, check_config, rule_for
from earthrl.launch.config_schema.rules import Section, Unknown, field_types, rule_of, unwrap
from earthrl.launch.overrides import CONF_DIR, compose_job

#: command -> its primary config in conf/
PRIMARY = {"train": "config", "eval": "eval", "sft": "sft", "learn": "learn"}
#: config group -> the commands that compose it
GROUPS = {"model": ["train", "eval", "sft"], "tasks": ["train", "eval", "sft"], "env": ["train", "eval", "sft"],
          "cluster": ["train", "eval", "sft"], "logger": ["train", "eval", "sft"], "algorithm": ["train"],
          "trainer": ["train"], "sft": ["sft"], "learn": ["learn"], "agent": ["train", "eval"]}


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


def _presets(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def _group_schema(group: str) -> type:
    root = ROOTS[GROUPS[group][0]]
    return unwrap(field_types(root)[group])[0]


def _schemas() -> set[type]:
    """Every dataclass of the schema (roots, groups, sub-groups, optional sections)."""
    found: set[type] = set()

    def walk(cls: type) -> None:
        found.add(cls)
        for f in dataclasses.fields(cls):
            tp = unwrap(field_types(cls)[f.name])[0]
            rule = rule_of(cls, f)
            if dataclasses.is_dataclass(tp):
                walk(tp)
            elif isinstance(rule, Section):
                walk(rule.schema)

    for root in ROOTS.values():
        walk(root)
    return found


def _leaves(d: dict, prefix: str = ""):
    for key, value in d.items():
        if isinstance(value, dict) and value:
            yield from _leaves(value, f"{prefix}{key}.")
        else:
            yield f"{prefix}{key}", value


def test_the_groups_are_every_folder_of_conf():
    assert sorted(GROUPS) == sorted(p.name for p in CONF_DIR.iterdir() if p.is_dir() and any(p.glob("*.yaml")))


@pytest.mark.parametrize("command", sorted(PRIMARY))
def test_every_composed_config_is_typed_by_the_schema(hydra_ctx, command):
    cfg = compose_job(PRIMARY[command], [])
    assert OmegaConf.get_type(cfg) is ROOTS[command]
    for f in dataclasses.fields(ROOTS[command]):
        tp = unwrap(field_types(ROOTS[command])[f.name])[0]
        if dataclasses.is_dataclass(tp):
            assert OmegaConf.get_type(cfg, f.name) is tp, f.name
    unknown = [k for k, _ in _leaves(OmegaConf.to_container(cfg, resolve=False))
               if isinstance(rule_for(k, command), Unknown)]
    assert unknown == []


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_every_yaml_validates_against_its_schema(hydra_ctx, group):
    for preset in _presets(group):
        schema = OmegaConf.structured(ROOTS["train"] if group == "algorithm" or _is_global(group, preset)
                                      else _group_schema(group))
        raw = OmegaConf.load(CONF_DIR / group / f"{preset}.yaml") or OmegaConf.create({})
        raw.pop("defaults", None)
        content = raw if _is_global(group, preset) or group != "algorithm" else OmegaConf.create({"algorithm": raw})
        OmegaConf.merge(schema, content)  # an unknown key or a value of the wrong type raises
        for command in GROUPS[group]:
            check_config(compose_job(PRIMARY[command], [f"{group}={preset}"]), command)


def _is_global(group: str, preset: str) -> bool:
    return (CONF_DIR / group / f"{preset}.yaml").read_text().startswith("# @package _global_")


def _inherited(group: str, preset: str) -> dict:
    """What the keys of ``conf/<group>/<preset>.yaml`` would be without its own values: the schema's defaults
    with the presets of its defaults list merged on, at the root for a ``# @package _global_`` file, else
    at the group's node."""
    glob = _is_global(group, preset)
    base = OmegaConf.structured(ROOTS["train"] if glob else _group_schema(group))
    raw = OmegaConf.load(CONF_DIR / group / f"{preset}.yaml") or OmegaConf.create({})
    for parent in raw.get("defaults", []):
        if isinstance(parent, str) and parent != "_self_":  # {override /env: …}: another group's choice
            assert _is_global(group, parent) == glob, f"conf/{group}/{preset}.yaml: its parent {parent} has another package"
            base = OmegaConf.merge(base, _own(group, parent))
    return OmegaConf.to_container(base, resolve=False)


def _own(group: str, preset: str):
    """The preset's values with its defaults list applied."""
    raw = OmegaConf.load(CONF_DIR / group / f"{preset}.yaml") or OmegaConf.create({})
    merged = OmegaConf.create({})
    for parent in raw.pop("defaults", []):
        if isinstance(parent, str):
            merged = OmegaConf.merge(merged, _own(group, parent) if parent != "_self_" else raw)
    return OmegaConf.merge(merged, raw)


def _get(d: dict, key: str):
    for part in key.split("."):
        if not isinstance(d, dict) or part not in d:
            return "<absent>"
        d = d[part]
    return d


@pytest.mark.parametrize("group", sorted(GROUPS))
def test_a_yaml_value_never_repeats_the_default_it_would_have(group):
    repeated = []
    for preset in _presets(group):
        base = _inherited(group, preset)
        raw = OmegaConf.load(CONF_DIR / group / f"{preset}.yaml") or OmegaConf.create({})
        raw.pop("defaults", None)
        for key, value in _leaves(OmegaConf.to_container(raw, resolve=False)):
            if _get(base, key) == value:
                repeated.append(f"conf/{group}/{preset}.yaml: {key}={value}")
    assert repeated == [], "these values are the schema's default or the parent preset's: remove them"


@pytest.mark.parametrize("command", sorted(PRIMARY))
def test_a_primary_config_sets_only_values_the_schema_does_not_have(command):
    raw = OmegaConf.to_container(OmegaConf.load(CONF_DIR / f"{PRIMARY[command]}.yaml"), resolve=False)
    raw.pop("defaults"), raw.pop("hydra")
    base = OmegaConf.to_container(OmegaConf.structured(ROOTS[command]), resolve=False)
    assert [k for k, v in _leaves(raw) if _get(base, k) == v] == []


def _product_dataclasses():
    for package in ("rollout", "algorithms", "rewards", "envs", "models"):
        root = importlib.import_module(f"earthrl.{package}")
        for info in pkgutil.walk_packages(root.__path__, f"earthrl.{package}."):
            try:
                module = importlib.import_module(info.name)
            except ImportError:  # an optional backend (verl, vllm) that is not installed here
                continue
            for obj in vars(module).values():
                if isinstance(obj, type) and dataclasses.is_dataclass(obj) and obj.__module__ == info.name:
                    yield obj


#: dataclasses that share field names with a schema group but are not its settings (another meaning)
NOT_SETTINGS = {"earthrl.rewards.episode.EpisodeRecord",   # an episode's record: the format and mode it ran in
                "earthrl.envs.suites.templates.Skeleton",  # a task template: the split of its tasks
                "earthrl.models.fetch.DebPackage"}         # a Debian package: its architecture


def test_no_product_dataclass_below_launch_has_a_default_for_a_config_key():
    schemas = _schemas()
    keys = {cls: {f.name for f in dataclasses.fields(cls)} for cls in schemas}
    found = []
    for cls in _product_dataclasses():
        name = f"{cls.__module__}.{cls.__qualname__}"
        if cls in schemas or name in NOT_SETTINGS:
            continue
        fields = {f.name: f for f in dataclasses.fields(cls)}
        for schema, names in keys.items():
            common = set(fields) & names
            defaulted = sorted(n for n in common if fields[n].default is not dataclasses.MISSING
                               or fields[n].default_factory is not dataclasses.MISSING)
            if len(common) >= 2 and defaulted:
                found.append(f"{cls.__module__}.{cls.__qualname__} mirrors {schema.__name__}: defaults for {defaulted}")
    assert found == [], "take these values from the config (the schema holds the defaults)"


def test_every_field_says_what_it_means():
    undocumented = [f"{cls.__module__}.{cls.__name__}.{f.name}" for cls in _schemas()
                    if cls.__module__.startswith("earthrl.launch.config_schema")
                    for f in dataclasses.fields(cls) if not f.metadata.get("doc")]
    assert undocumented == []


def test_a_moved_key_names_where_it_went(hydra_ctx):
    from earthrl.envs.errors import ConfigError

    for override, new in [("algorithm.max_turns=5", "env.max_turns"),
                          ("env.sandbox.allow_weaker=true", "env.format_options.sandbox.allow_weaker")]:
        with pytest.raises(ConfigError) as err:
            compose_job("config", [override])
        assert f"did you mean '{new}'?" in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(ConfigError, match=r"^unknown config key 'algorithm.max_turns'; did you mean 'env.max_turns'\?"):
        check_config(compose_job("config", ["+algorithm.max_turns=5"]), "train")


def test_an_algorithm_preset_sets_the_turns_of_the_env(hydra_ctx):
    assert compose_job("config", ["algorithm=mefr_tap"]).env.max_turns == 25
    assert compose_job("config", ["algorithm=mefr_only"]).env.max_turns == 25
    assert compose_job("config", ["algorithm=mefr_tap", "env.max_turns=5"]).env.max_turns == 5
    assert compose_job("config", []).env.max_turns == 5


@pytest.mark.parametrize("override, message", [
    ("algorithm.rollout_correction.cap=0.5", "algorithm.rollout_correction.cap=0.5 must be at least 1"),
    ("algorithm.rollout_correction.weights=tis", "algorithm.rollout_correction.weights=tis must be one of token, "
                                                 "sequence, none"),
    ("algorithm.rollout_correction.mask_lower=0", "algorithm.rollout_correction.mask_lower=0 must be greater than 0"),
    ("algorithm.rollout_correction.mask_upper=0.9", "algorithm.rollout_correction.mask_upper=0.9 must be at least 1")])
def test_a_bad_rollout_correction_is_one_line(hydra_ctx, override, message):
    from earthrl.envs.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        check_config(compose_job("config", [override]), "train")
    assert str(err.value) == message


def test_every_bad_value_is_named_in_the_one_line(hydra_ctx):
    from earthrl.envs.errors import ConfigError

    with pytest.raises(ConfigError) as err:
        check_config(compose_job("config", ["algorithm.group_size=0", "tasks.phrasing=XX", "algorithm.lr=-1"]), "train")
    assert str(err.value) == ("tasks.phrasing=XX must be one of IF, AP, OW; algorithm.group_size=0 must be at least 2; "
                              "algorithm.lr=-1 must be greater than 0")  # in the schema's order
    for steps, line in (("2.5", "trainer.steps=2.5 must be auto or an integer"),  # a step count is whole
                        ("0", "trainer.steps=0 must be auto or at least 1")):
        with pytest.raises(ConfigError) as err:
            check_config(compose_job("config", [f"trainer.steps={steps}"]), "train")
        assert str(err.value) == line
    check_config(compose_job("config", ["trainer.steps=auto"]), "train")


def test_an_unknown_key_gets_the_closest_key_and_a_plus_only_under_a_free_mapping(hydra_ctx):
    from earthrl.envs.errors import ConfigError

    expected = {"trainer.stepz=3": "unknown config key 'trainer.stepz'; did you mean 'trainer.steps'?",
                "algoritm.lr=1": "unknown config key 'algoritm.lr'; did you mean 'algorithm.lr'?",
                "algorithm.reward_kwargs.foo=1": "unknown config key 'algorithm.reward_kwargs.foo': algorithm.reward_kwargs "
                                                 "has no 'foo' yet; add it with +algorithm.reward_kwargs.foo=…"}
    for override, line in expected.items():
        with pytest.raises(ConfigError) as err:
            compose_job("config", [override])
        assert str(err.value) == line


def test_defaults_give_the_schemas_values_to_python(hydra_ctx):
    from earthrl.envs.errors import ConfigError
    from earthrl.launch.config_schema import defaults

    assert defaults("algorithm.advantage") == {"eps": 1e-6, "std_floor": 1e-2, "norm_by_std": True,
                                               "protect_recovery": False, "step_weight": 1.0, "gamma": 0.95}
    assert defaults("env.max_obs_chars") == 600 and defaults("model.lora")["dropout"] == 0.0
    alg = defaults("algorithm", name="x", advantage={"protect_recovery": True})
    assert (alg["name"], alg["advantage"]["protect_recovery"], alg["advantage"]["eps"]) == ("x", True, 1e-6)
    refused = [("algorithm", {}, "algorithm.name has no default (the preset gives it): pass it, e.g. name=..."),
               ("algorithm.policy_loss", {"kl_cof": 1},
                "unknown config key 'algorithm.policy_loss.kl_cof'; did you mean 'algorithm.policy_loss.kl_coef'?"),
               ("algorithm.policy_loss", {"kl_coef": -1, "clip_ratio_low": 2},
                "algorithm.policy_loss.clip_ratio_low=2 must be between 0 and 0.99; "
                "algorithm.policy_loss.kl_coef=-1 must be at least 0")]
    for key, changes, line in refused:
        with pytest.raises(ConfigError) as err:
            defaults(key, **changes)
        assert str(err.value) == line
