"""``env``: the remote-sensing environment and the agent loop's limits (conf/env/<format>.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from earthrl.envs.sandbox.parent import SandboxSettings
from earthrl.launch.config_schema.rules import Num, setting


@dataclass
class InjectErrorsConfig:
    """Injected tool errors (:class:`earthrl.envs.core.mock.ErrorInjector`, any mode)."""

    rate: float = setting(0.1, "probability that a tool call fails with an injected error", range=(0, 1))
    seed: int = setting(0, "seed of the injector's random draws", range=(0, None))
    kinds: list[str] | None = setting(None, "error kinds to inject; null: every injectable kind", nonempty=True)


@dataclass
class FormatOptionsConfig:
    """Options of the action format (read by the codeact format; the others take none)."""

    limits: dict[str, Any] = setting({}, "CodeAct sandbox limits: keyword arguments of "
                                         "earthrl.envs.sandbox.parent.SandboxLimits (seconds, MiB, counts); "
                                         "a limit not named keeps SandboxLimits' value",
                                     values=Num(0, lo_open=True))
    sandbox: SandboxSettings = setting(factory=lambda: SandboxSettings(allow_weaker=False),
                                       doc="how the CodeAct sandbox may run on this machine (allow_weaker: where "
                                           "bubblewrap cannot run, run on a weaker backend that says what it lacks)")


@dataclass
class SOPConfig:
    """SOP retrieval into the first user message (SimCRAFT CRAFT, envs/core/sops.py)."""

    retrieve: bool = setting(False, "append the top-k retrieved SOPs to each episode's first user message "
                                    "(unperturbed; needs `earthrl fetch model all-minilm-l6-v2`)")
    folder: str | None = setting(None, "a folder of your own Markdown SOPs, added to the packaged ones "
                                       "(envs/sops/*.md; a file of the same name replaces one); null: packaged only")
    top_k: int = setting(2, "SOPs retrieved at most (SimCRAFT: 2)", range=(1, None))
    threshold: float = setting(0.6, "least cosine similarity of a retrieved SOP (SimCRAFT: 0.6)", range=(-1, 1))


@dataclass
class EnvConfig:
    """Schema of conf/env/*.yaml."""

    action_format: str = setting("json", "how an action is written: json (<tool_call>), codeact (a Python block), "
                                         "hierarchical (manager/specialist turns); envs.formats registry")
    mode: str = setting("execute", "execute: real computation on the rasters; mock: SimCRAFT mock engine (no pixels); "
                                   "replay: a call matching a recorded reference call returns its recorded output "
                                   "(tasks=earthbench or thinkgeo with tasks.data=the benchmark's folder; "
                                   "envs/core/replay.py)")
    toolset: Any = setting("mini", "mini (the 11 earthrl-mini tools) | all (EarthRL's tools) | skills (progressive "
                                   "disclosure) | earthbench (Earth-Agent's 83 tools that Earth-Bench calls) | "
                                   "thinkgeo (ThinkGeo's 14 tools) | a list of tool names")
    inject_errors: Any = setting(None, "injected tool errors, e.g. {rate: 0.1, seed: 0} "
                                                            "(keys: InjectErrorsConfig); null: none",
                                                      schema=InjectErrorsConfig, null=True)
    nan_max: float = setting(0.5, "verifier: share of NaN pixels above which a raster step is uncertain",
                             range=(0, 1))
    format_options: FormatOptionsConfig = setting(factory=FormatOptionsConfig, doc="options of the action format")
    num_workers: int = setting(2, "EnvPool Ray actors (episodes run in parallel)", range=(1, None))
    step_timeout_s: float | None = setting(300.0, "seconds an env call may take before it is marked env_timeout "
                                                     "and its worker replaced; null: no limit",
                                              range=(0, None), lo_open=True)
    keep_workspaces: bool = setting(False, "keep the workspaces (output rasters, quick-look PNGs) of the last "
                                           "env.keep_workspaces_max episodes in <output folder>/workspaces for "
                                           "earthrl view; false: each removed when its episode ends")
    keep_workspaces_max: int = setting(20, "episode workspaces kept at most with env.keep_workspaces=true (the "
                                           "newest; older ones removed)", range=(1, None))
    max_turns: int = setting(5, "assistant turns per episode before it is cut (no answer: incorrect)",
                             range=(1, None))
    max_obs_chars: int = setting(600, "observations are truncated to this many characters", range=(1, None))
    max_context_tokens: int = setting(3072, "an episode stops when its tokens exceed this", range=(1, None))
    max_action_tokens: int = setting(128, "tokens one assistant turn needs for a call: the default of "
                                          "sampling.max_new_tokens (eval) and algorithm.sampling.max_new_tokens "
                                          "(train); 128 holds every earthrl-mini-core reference call (at most 80 "
                                          "Qwen2.5 tokens; 97 of its 960 calls exceed 64); the Earth-Bench suites "
                                          "set 1024", range=(1, None))
    sops: SOPConfig = setting(factory=SOPConfig, doc="SOP retrieval (SimCRAFT): retrieve, folder, top_k, threshold")
    stop_strings: list[str] = setting(["</tool_call>"], "a generated turn ends after any of these strings "
                                                        "([]: at the end-of-turn token)")
