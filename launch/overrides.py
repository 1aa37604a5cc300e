"""One-line errors for bad command-line overrides, before Hydra runs anything.

Hydra reports a bad override as a multi-line block (search path, grammar tokens, a stack
trace hint). ``earthrl train`` composes the config first and turns such errors into one line
that names the override and the fix.
"""

from __future__ import annotations

import re

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import composition_error
from earthrl.launch.hydra_app import CONFIG_NAMES  # importing it registers the ${slug:…} resolver and the schemas
from earthrl.launch.override_text import CONF_DIR  # noqa: F401 - re-exported: tests and callers take it from here


def one_line(exc: Exception) -> str:
    """Condense a Hydra composition / override-parsing error into one line."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    head = lines[0].removeprefix("In 'config': ")
    if "Available options in" in str(exc):
        start = next(i for i, line in enumerate(lines) if line.startswith("Available options in"))
        stop = next((i for i, line in enumerate(lines) if line.startswith("Config search path")), len(lines))
        return f"{head}; choose one of: {', '.join(lines[start + 1:stop])}"
    if type(exc).__name__ == "OverrideParseException":
        head = head.removeprefix("LexerNoViableAltException: ")  # the grammar's internal name says nothing to a user
        tilde = (" ('~' is not expanded inside an override: write the home folder out, e.g. "
                 "key=$HOME/path)") if "~" in str(exc) else ""
        return (f"{head}: write key=value{tilde}, and quote a value that holds '=', ',' or spaces (a run folder of a sweep: "
                f"\"eval.checkpoint='runs/a=1,b=2/checkpoints/step_000003'\"; Hydra override grammar: "
                "https://hydra.cc/docs/advanced/override_grammar/basic/)")
    hint = next((re.sub(r"^\d+\.\s*", "", line) for line in lines[1:]
                 if re.match(r"^(\d+\.\s*)?to ", line, re.IGNORECASE)), None)
    return f"{head.rstrip('.')}; {hint[0].lower() + hint[1:]}" if hint else head


SWEEP_FLAGS = ("-m", "--multirun")


def job_overrides(argv: list[str]) -> list[list[str]]:
    """The override lists of the jobs ``argv`` starts: one for a single run, one per combination
    for a sweep (``-m``; Hydra's grammar: ``a=1,2``, ``range(…)``, ``choice(…)``, ``glob(…)``),
    in Hydra's order. Call inside an initialised Hydra context (``glob`` lists config options).

    Raises:
        ConfigError: an override Hydra cannot parse (one line).
    """
    import itertools

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    args = [a for a in argv if a not in SWEEP_FLAGS]
    try:
        parsed = OverridesParser.create(config_loader=GlobalHydra.instance().config_loader()).parse_overrides(args)
        if not any(a in SWEEP_FLAGS for a in argv):
            return [args]
        axes = [[f"{o.get_key_element()}={v}" for v in o.sweep_string_iterator()] if o.is_sweep_override()
                else [o.input_line] for o in parsed]
    except HydraException as exc:
        raise ConfigError(one_line(exc)) from None
    return [list(combo) for combo in itertools.product(*axes)]


def compose_job(name: str, overrides: list[str]):
    """Compose config ``name`` with ``overrides`` as Hydra's launcher would, with ``${hydra:…}``
    resolvable (the run folder names the overrides); call inside an initialised Hydra context.

    Raises:
        ConfigError: one line naming the bad override and the fix.
    """
    from hydra import compose
    from hydra.core.hydra_config import HydraConfig
    from hydra.errors import HydraException
    from omegaconf import open_dict
    from omegaconf.errors import OmegaConfBaseException

    command = next((c for c, n in CONFIG_NAMES.items() if n == name), "train")
    try:
        cfg = compose(name, overrides=list(overrides), return_hydra_config=True)
    except (HydraException, OmegaConfBaseException) as exc:
        raise ConfigError(composition_error(exc, command, overrides) or _did_you_mean(exc, overrides, name)
                          or one_line(exc)) from None
    except Exception as exc:  # noqa: BLE001 - Hydra raises ValueError/TypeError… for some malformed overrides
        raise ConfigError(composition_error(exc, command, overrides) or f"{one_line(exc)}: write key=value "
                          "(https://hydra.cc/docs/advanced/override_grammar/basic/)") from None
    HydraConfig.instance().set_config(cfg)
    with open_dict(cfg):
        del cfg["hydra"]
    return cfg


def check_overrides(argv: list[str], config_name: str = "train") -> None:
    """Compose the command's config (``conf/config.yaml`` for train, ``conf/eval.yaml`` for eval)
    with ``argv``'s overrides and run the job's whole validation
    (:func:`earthrl.launch.train_inputs.prepare_train` / :meth:`earthrl.launch.eval.EvalJob.validate`:
    config values, model, data, tasks) — for a sweep (``-m``), for every job of the sweep, so that
    no job starts before all are known good. Hydra's other flags (``--help``, ``--cfg``, …) are left
    to Hydra, as are ``hydra.…``/``hydra/…`` overrides.

    Raises:
        ConfigError: one line naming the bad override or value and the fix (for a sweep, prefixed
            by the job's overrides).
    """
    if any(a.startswith("-") and a not in SWEEP_FLAGS for a in argv):
        return
    from hydra import initialize_config_dir

    name = CONFIG_NAMES.get(config_name, config_name)
    argv = [a for a in argv if not a.lstrip("+~").startswith(("hydra.", "hydra/"))]
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        jobs = job_overrides(argv)
        check_sweep_folders(jobs, config_name)
        for overrides in jobs:
            checked = overrides
            if config_name == "eval" and len(jobs) > 1 and not any(
                    o.lstrip("+").startswith("eval.output_dir=") for o in overrides):
                # a sweep's evaluation writes to a folder of its own (runs/eval/<exp>/<its overrides>), not to the
                # single run's folder this compose names: nothing there to resume against (the job checks its own)
                checked = [*overrides, "eval.resume=false"]
            try:
                validate_job(compose_job(name, checked), config_name)
            except ConfigError as exc:
                raise ConfigError(f"job {' '.join(overrides)}: {exc}" if len(jobs) > 1 else str(exc)) from None


def check_sweep_folders(jobs: list[list[str]], command: str) -> None:
    """Refuse a sweep whose jobs all name one fixed run folder (``trainer.output_dir=X`` beside
    ``algorithm.lr=1e-5,2e-5``): the second job would be refused only after the first had run.

    Raises:
        ConfigError: one line naming the key, the folder and the fix.
    """
    from earthrl.launch.job_inputs import OUTPUT_DIR_KEYS  # lazy: the rollout runtime at import; CLI startup stays fast

    key = OUTPUT_DIR_KEYS.get(command)
    if key is None or len(jobs) < 2:
        return
    folders = {next((o.split("=", 1)[1] for o in job if o.lstrip("+").startswith(f"{key}=")), None) for job in jobs}
    if len(folders) == 1 and (folder := folders.pop()) is not None and "${" not in folder:
        raise ConfigError(f"{key}={folder} is the same folder for all {len(jobs)} jobs of the sweep; leave {key} out "
                          "(each job gets its own sub-folder named after its overrides) or give one per job")


def validate_job(cfg, command: str) -> None:
    """The validation the job itself runs first (so that a sweep checks every job up front).

    Raises:
        ConfigError: the first problem, one line.
    """
    if command == "train":
        # lazy: torch at import, only to check train overrides
        from earthrl.launch.train_inputs import prepare_train

        prepare_train(cfg)
    elif command == "sft":
        from earthrl.launch.sft import SFTRecipe  # lazy: torch at import, only to check sft overrides

        SFTRecipe(cfg).validate()
    elif command == "learn":
        from earthrl.launch.learn import LearnRecipe  # lazy: metrics and scipy, only to check learn overrides

        recipe = LearnRecipe(cfg)
        recipe.validate()
        for stage, (name, overrides) in recipe.stage_jobs().items():  # every stage's own checks, up front
            try:
                stage_cfg = compose_job(CONFIG_NAMES[name], overrides)
                validate_job(stage_cfg, name)
                recipe.note_stage(stage, name, stage_cfg)
            except ConfigError as exc:
                raise ConfigError(f"learn stage '{stage}' (earthrl {name}): {recipe.learn_keys(str(exc))}") from None
        recipe.check_rows()  # every RL row from the same SFT warm start
    else:
        from earthrl.launch.eval import EvalJob  # lazy: rollout runtime, envs and scipy; CLI startup stays fast

        EvalJob(cfg).validate()


def _did_you_mean(exc: Exception, argv: list[str], name: str = "config") -> str | None:
    """For an override of a key that does not exist, name the closest existing key at the first
    level that is misspelt (``algoritm.lr`` -> ``algorithm.lr``), or say that the section has no
    such key (e.g. a train-only key given to ``earthrl eval``). The schema knows every key, so a new key
    is never the fix (a key under a free mapping such as ``algorithm.reward_kwargs`` gets its ``+key``
    hint from :func:`~earthrl.launch.config_schema.composition_error` before this runs)."""
    import difflib

    from hydra import compose

    m = re.match(r"Could not override '([^']+)'", str(exc))
    if m is None:
        return None
    key = m.group(1)
    groups = [a for a in argv if "=" in a and "." not in a.split("=", 1)[0]]  # keep model=…, tasks=…
    try:
        node = compose(name, overrides=groups)
    except Exception:  # noqa: BLE001 - a bad group override: no suggestion, Hydra's message stands
        return None
    parts = key.split(".")
    for depth, part in enumerate(parts):  # walk down; the first missing part gets the suggestion
        keys = [str(k) for k in node.keys()] if hasattr(node, "keys") else []
        if part in keys and depth < len(parts) - 1:
            node = node.get(part)
            continue
        if part in keys:
            return None
        close = difflib.get_close_matches(part, keys, n=1)
        if not close:
            where = ".".join(parts[:depth]) or f"the {name} config"
            return (f"unknown config key '{key}': {where} has no '{part}' (it has: {', '.join(sorted(keys))}); "
                    "check the spelling or remove the override")
        fixed = ".".join([*parts[:depth], close[0], *parts[depth + 1:]])
        return f"unknown config key '{key}'; did you mean '{fixed}'?"
    return None
