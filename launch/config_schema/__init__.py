"""The typed schema of every config group: the one home of each key's type, default, range and meaning.

One module per group (model, tasks, env, algorithm, cluster, logger, trainer, sft, learn, eval) holds its
dataclasses; :mod:`.roots` the root config of each command. :func:`register` stores the roots in Hydra's
ConfigStore (``train_schema``, ``eval_schema``, ``sft_schema``, ``learn_schema``); each primary config in
conf/ lists its schema first in its defaults, so every group option merges onto its typed node (an unknown
key or a value of the wrong type is refused while composing) and the YAML files carry only the presets'
choices. :func:`check_config` checks what OmegaConf's types cannot say (ranges, choices, ``auto``, preset
names) from the fields' metadata (:mod:`.rules`), before anything starts; :func:`composition_error` gives
a refused override the same one-line message.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema.roots import ROOTS
from earthrl.launch.config_schema.rules import (
    Group,
    Mapping,
    Rule,
    Section,
    Unknown,
    field_types,
    rule_of,
    section_problem,
    unwrap,
)

__all__ = ["ROOTS", "check_config", "composition_error", "defaults", "leaf_keys", "register", "rule_for", "to_settings"]

#: keys that moved: old dotted key -> the key that holds the setting now (named by the unknown-key message)
MOVED = {"algorithm.max_turns": "env.max_turns", "env.sandbox.allow_weaker": "env.format_options.sandbox.allow_weaker",
         "env.sandbox": "env.format_options.sandbox", "sft.deepspeed": "cluster.deepspeed"}


def register() -> None:
    """Store each command's root schema in Hydra's ConfigStore as ``<command>_schema`` (idempotent)."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    for command, root in ROOTS.items():
        cs.store(name=f"{command}_schema", node=root)


def rule_for(key: str, command: str = "train") -> Rule | None:
    """The rule of dotted ``key`` in ``command``'s schema (a key under a free mapping: that mapping's value
    rule or None; a key no group has: :class:`~.rules.Unknown` naming the group's keys)."""
    cls: Any = ROOTS[command]
    parts = key.split(".")
    for depth, part in enumerate(parts):
        fields = {f.name: f for f in dataclasses.fields(cls)}
        if part not in fields:
            return Unknown(tuple(fields))
        rule = rule_of(cls, fields[part])
        if depth == len(parts) - 1:
            return rule
        if isinstance(rule, Section):
            cls = rule.schema
        elif isinstance(rule, Group):
            cls = unwrap(field_types(cls)[part])[0]
        else:  # a key inside a free mapping
            return rule.values if isinstance(rule, Mapping) and depth == len(parts) - 2 else None
    return None


def leaf_keys(command: str) -> list[str]:
    """Every dotted key of ``command``'s schema whose value is not a group (free mappings count as one key)."""
    def walk(cls: type, prefix: str):
        for f in dataclasses.fields(cls):
            tp = unwrap(field_types(cls)[f.name])[0]
            if dataclasses.is_dataclass(tp):
                yield from walk(tp, f"{prefix}{f.name}.")
            else:
                yield f"{prefix}{f.name}"
    return list(walk(ROOTS[command], ""))


def _shown(value: Any) -> str:
    """A value as it would be written on the command line (cut at 80 characters; a whole float, which a
    float setting made of ``-1``, as ``-1``)."""
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e15:
        value = int(value)
    text = "null" if value is None else str(value).lower() if isinstance(value, bool) else str(value)
    return text if len(text) <= 80 else text[:79] + "…"


def _bad_string(value: Any) -> bool:
    """True when a string anywhere in ``value`` is not valid Unicode (a lone surrogate, e.g. from
    non-UTF-8 bytes on the command line)."""
    if isinstance(value, str):
        return not value.isascii() and any("\ud800" <= c <= "\udfff" for c in value)
    if isinstance(value, dict):
        return any(_bad_string(k) or _bad_string(v) for k, v in value.items())
    return isinstance(value, list) and any(map(_bad_string, value))


def _value(node: DictConfig, key: str, path: str) -> Any:
    """``node[key]`` resolved to plain Python (a value that does not resolve: ConfigError naming ``path``)."""
    try:
        child = node[key]
        if isinstance(child, (DictConfig, ListConfig)):
            return OmegaConf.to_container(child, resolve=True)
        return child
    except OmegaConfBaseException as exc:
        raise ConfigError(f"{path}: {str(exc).splitlines()[0]}") from None


def _check_node(node: DictConfig, cls: type, prefix: str, command: str, problems: list[str]) -> None:
    """Add to ``problems`` one message per key of ``node`` that schema dataclass ``cls`` does not have and per
    value that breaks its field's rule (recursively).

    Raises:
        ConfigError: a value whose interpolation does not resolve (nothing below it can be checked).
    """
    types = field_types(cls)
    known = {f.name for f in dataclasses.fields(cls)}
    for key in node.keys():  # a key added with +key=… that the group does not have
        if key not in known and f"{prefix}{key}" != "hydra":
            path = f"{prefix}{key}"
            problems.append(unknown_key_message(path, command, _value(node, key, path)))
    for f in dataclasses.fields(cls):
        path = f"{prefix}{f.name}"
        if f.name not in node:
            continue
        tp = unwrap(types[f.name])[0]
        if dataclasses.is_dataclass(tp):
            child = node._get_node(f.name)
            if isinstance(child, DictConfig) and not child._is_none() and not child._is_missing():
                _check_node(node[f.name], tp, path + ".", command, problems)
                continue
        value = _value(node, f.name, path)
        rule = rule_of(cls, f)
        if _bad_string(value):
            problems.append(f"{path}: holds text that is not valid UTF-8; write it as UTF-8 characters")
        elif problem := rule.problem(value):
            problems.append(f"{path}={_shown(value)} {problem}")
        elif isinstance(rule, Section) and value is not None and (bad := section_problem(rule.schema, value, path,
                                                                                            _shown)):
            problems.append(bad)


def _raise_problems(problems: list[str]) -> None:
    """One :class:`ConfigError` line naming every problem (``; `` between them), or nothing."""
    if problems:
        raise ConfigError("; ".join(problems))


def check_config(cfg: DictConfig, command: str) -> None:
    """Check every value of a composed config of ``command`` (train, eval, sft, learn) against its schema.

    Raises:
        ConfigError: one line naming every bad value (``key=value <what is wrong>``, ``; `` between them) and
            every key the schema does not have, a section whose preset was deleted (``~algorithm``), a value
            whose interpolation does not resolve, or a string that is not valid Unicode.
    """
    root = ROOTS[command]
    for f in dataclasses.fields(root):  # a group whose option was removed keeps only the schema's defaults
        sub = cfg._get_node(f.name) if f.name in cfg else None
        if isinstance(sub, DictConfig) and "name" in sub.keys() and OmegaConf.is_missing(sub, "name"):
            raise ConfigError(f"{f.name}: the config needs this section; remove the override that deleted or replaced it")
    problems: list[str] = []
    _check_node(cfg, root, "", command, problems)
    _raise_problems(problems)


def composition_error(exc: BaseException, command: str, overrides: list[str] = ()) -> str | None:
    """The one-line message for an OmegaConf type or key error raised while composing ``command``'s config
    with ``overrides`` (an override or preset value the schema's type refuses, a key no group has, a key
    under a group the preset leaves null), or None when ``exc`` is not one."""
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    if "Unexpected type for root: NoneType" in str(exc):  # OmegaConf 2.3: a key under a null structured node
        keys = [o.lstrip("+~").split("=", 1)[0] for o in overrides if "=" in o]
        key = next((k for k in keys if "." in k), keys[0] if keys else "the override")
        group = key.rpartition(".")[0]
        return (f"{key}: {group} is null in this preset, so its keys cannot be set; choose a preset that has "
                f"{group} ({key.split('.')[0]}=…)")
    err = exc
    while err is not None and not isinstance(err, (ValidationError, ConfigKeyError, ConfigAttributeError,
                                                   AttributeError)):
        err = err.__cause__ or err.__context__
    if err is None:
        return None
    key = str(getattr(err, "full_key", None) or "")
    if not key and (m := re.search(r"full_key: (\S+)", str(err))):
        key = m.group(1)
    if not key:
        return None
    value = getattr(err, "value", None)
    if not isinstance(err, OmegaConfBaseException):  # OmegaConf 2.3: a null structured node cannot be set
        return (f"{key} is null in this preset, so its keys cannot be set from the command line; choose a preset "
                f"that has {key} ({key.split('.')[0]}=…)")
    if isinstance(err, (ConfigKeyError, ConfigAttributeError)) or "not in" in str(err):
        parent, _, last = key.rpartition(".")
        if parent == "agent.options":  # the loop's preset lists its options: an unknown one is most likely a typo
            return _unknown_option(key, last, overrides)
        if isinstance(rule_for(parent, command), Mapping):  # a free mapping: new keys take a +
            return f"unknown config key '{key}': {parent} has no '{last}' yet; add it with +{key}=…"
        given = [o.lstrip("+~").split("=", 1)[0] for o in overrides if "=" in o]
        key = next((g for g in given if g.startswith(key + ".")), key)  # the override's whole key
        return _moved(key)  # None: the did-you-mean of launch/overrides names the closest key
    rule = rule_for(key, command)
    if isinstance(value, (DictConfig, ListConfig)):
        value = OmegaConf.to_container(value, resolve=False)
    problem = rule.problem(value) if rule is not None else None
    if isinstance(rule, Group) and problem is None:
        problem = f"must be a group of settings ({', '.join(rule.keys)})"
    return f"{key}={_shown(value)} {problem or str(err).splitlines()[0]}"


def _unknown_option(key: str, last: str, overrides) -> str:
    """One line for an ``agent.options`` key that the chosen loop's preset (``conf/agent/<agent>.yaml``, ``react``
    unless ``agent=`` says otherwise) does not list: the closest option (did you mean), else the options it has;
    a loop's own new option (``agent.name=package.module:function``) takes a ``+``."""
    from earthrl.launch.override_text import CONF_DIR  # lazy: only for this message

    preset = next((o.split("=", 1)[1] for o in overrides if o.startswith("agent=")), "react")
    path = CONF_DIR / "agent" / f"{preset}.yaml"
    options = sorted((OmegaConf.load(path).get("agent", {}).get("options") or {}).keys()) if path.is_file() else []
    close = difflib.get_close_matches(last, options, n=1)
    if close:
        return f"unknown config key '{key}'; did you mean 'agent.options.{close[0]}'?"
    have = f"its options are {', '.join(options)}" if options else "it has no options"
    return (f"unknown config key '{key}': agent={preset} has no option '{last}' ({have}; docs/agents.md); "
            f"a loop's own new option takes a +: +{key}=…")


def unknown_key_message(key: str, command: str, value: Any = None) -> str:
    """One line for a key no group of ``command`` has (added with ``+key=…``): the key that holds a moved
    setting, else the closest key of the same group (did you mean), else the group's keys."""
    if (moved := _moved(key)) is not None:
        return moved
    parent, _, last = key.rpartition(".")
    rule = rule_for(key, command)
    known = list(rule.known) if isinstance(rule, Unknown) else []
    close = difflib.get_close_matches(last, known, n=1)
    if close:
        fixed = f"{parent}.{close[0]}" if parent else close[0]
        return f"unknown config key '{key}'; did you mean '{fixed}'?"
    if known and value is not None:
        return f"{key}={_shown(value)} {rule.problem(value)}"
    where = parent or f"the {command} config"
    return f"unknown config key '{key}': {where} has no '{last}' (it has: {', '.join(sorted(known))})"


def _moved(key: str) -> str | None:
    """The did-you-mean line for a key of :data:`MOVED` (or a key under one), or None."""
    for old, new in MOVED.items():
        if key == old or key.startswith(old + "."):
            return f"unknown config key '{key}'; did you mean '{new + key[len(old):]}'? ({old} moved there)"
    return None


def defaults(key: str, command: str = "train", **changes) -> Any:
    """The schema's value of dotted ``key`` in ``command``'s config (no preset applied), with ``changes`` merged
    on, as plain Python: a group as a nested dict, a leaf as its value. The one place code outside the launcher
    gets a default (the settings classes below launch/ have none of their own), e.g.
    ``PolicyLossConfig(**defaults("algorithm.policy_loss", kl_coef=0.0))`` or
    ``AlgorithmSpec.from_config(defaults("algorithm", name="grpo", estimator="grpo_tap"))``.

    Args:
        key: a group (``algorithm``), a sub-group (``algorithm.advantage``) or a leaf (``env.max_obs_chars``).
        command: train, eval, sft or learn.
        changes: values for keys of the group (a dict for a sub-group merges into it).

    Raises:
        ConfigError: one line for a key the schema does not have, a change its rules refuse, or a key the
            schema leaves to the preset (e.g. ``algorithm.name``: give it in ``changes``).
    """
    rule = rule_for(key, command)
    if rule is None or isinstance(rule, Unknown):
        raise ConfigError(unknown_key_message(key, command))
    root = OmegaConf.structured(ROOTS[command])
    if changes:
        if not isinstance(rule, Group):
            raise ConfigError(f"{key} is a single setting: changes apply to a group of settings")
        nested: dict = dict(changes)
        for part in reversed(key.split(".")):
            nested = {part: nested}
        try:
            root = OmegaConf.merge(root, nested)
        except OmegaConfBaseException as exc:
            bad = str(getattr(exc, "full_key", "") or "")
            raise ConfigError(composition_error(exc, command) or (unknown_key_message(bad, command) if bad else
                                                                  str(exc).splitlines()[0])) from None
    try:
        node = OmegaConf.select(root, key, throw_on_missing=True)
        if isinstance(rule, Group):
            problems: list[str] = []
            _check_node(node, OmegaConf.get_type(node), key + ".", command, problems)
            _raise_problems(problems)
            return OmegaConf.to_container(node, resolve=True, throw_on_missing=True)
        return node
    except OmegaConfBaseException as exc:
        missing = getattr(exc, "full_key", None) or key
        raise ConfigError(f"{missing} has no default (the preset gives it): pass it, e.g. "
                          f"{missing.rpartition('.')[2]}=...") from None


def to_settings(node: DictConfig):
    """A composed config, or one of its groups (``cfg.env``), as the typed settings the code below launch/
    takes: an instance of its schema dataclass (nested dataclasses, interpolations resolved, each optional
    section such as ``env.inject_errors`` as its schema's instance with the schema's defaults)."""
    obj = OmegaConf.to_object(node)
    _sections(obj)
    return obj


def _sections(obj: Any) -> None:
    """Turn every optional-section mapping under dataclass ``obj`` into its schema's instance, in place."""
    if not dataclasses.is_dataclass(obj):
        return
    for f in dataclasses.fields(obj):
        value = getattr(obj, f.name)
        rule = rule_of(type(obj), f)
        if isinstance(rule, Section) and isinstance(value, dict):
            setattr(obj, f.name, rule.schema(**value))
        else:
            _sections(value)


register()
