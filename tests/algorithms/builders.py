"""Hand-made trajectories for reward and algorithm tests (token ids are placeholders), and the algorithm
settings of the config schema's defaults with a test's changes."""

from __future__ import annotations

from earthrl.algorithms.estimators import AdvantageConfig
from earthrl.algorithms.learner import LearnerConfig
from earthrl.algorithms.policy_loss import PolicyLossConfig
from earthrl.algorithms.spec import AlgorithmSpec
from earthrl.launch.config_schema import defaults
from earthrl.rewards.scoring import Scores
from earthrl.rollout.trajectory import Trajectory, Turn


def turn(error: bool = False, *, n_resp: int = 2, n_obs: int = 1, call: tuple | None = None, **kw) -> Turn:
    """A turn with ``n_resp`` response and ``n_obs`` observation tokens; ``call=(name, arguments)``."""
    tool_call = {"name": call[0], "arguments": call[1]} if call else None
    return Turn(response_ids=[5] * n_resp, response_logprobs=[-1.0] * n_resp, observation_ids=[7] * n_obs,
                error=error, tool_call=tool_call, **kw)


def traj(turns: list[Turn], *, group: str = "g", task_id: str = "t", n_prompt: int = 2, **kw) -> Trajectory:
    """A trajectory of ``turns`` after a ``n_prompt``-token prompt."""
    return Trajectory(task_id=task_id, group=group, prompt_ids=[1] * n_prompt, turns=turns, **kw)


def scores(rewards: list[float], turn_rewards: list[list[float]] | None = None) -> Scores:
    """Hand-set :class:`Scores` (correct all False) for estimator tests."""
    return Scores(reward=list(rewards), turn_rewards=turn_rewards or [[] for _ in rewards],
                  correct=[False] * len(rewards))


REFERENCE = [
    {"name": "spectral_index", "arguments": {"scene": "s2", "index": "NDVI"}},
    {"name": "threshold_mask", "arguments": {"name": "ndvi_s2", "op": ">", "value": 0.3}},
    {"name": "pixel_share", "arguments": {"name": "ndvi_s2_gt0.3"}},
    {"name": "answer", "arguments": {"value": 12.5, "unit": "%"}},
]
TASK = {"id": "t", "skill": "spectral_index", "reference": REFERENCE,
        "answer": {"kind": "numeric", "value": 12.5, "unit": "%", "tolerance": 0.5}}
"""A TaskSpec-like dict: NDVI → threshold mask (SPA) → pixel share (SAA), answer 12.5 % ± 0.5."""


def loss_config(**changes) -> PolicyLossConfig:
    """The schema's ``algorithm.policy_loss`` with ``changes``."""
    return PolicyLossConfig(**defaults("algorithm.policy_loss", **changes))


def advantage_config(**changes) -> AdvantageConfig:
    """The schema's ``algorithm.advantage`` with ``changes``."""
    return AdvantageConfig(**defaults("algorithm.advantage", **changes))


def spec(**changes) -> AlgorithmSpec:
    """The spec of the schema's ``algorithm`` (named ``test``) with ``changes``."""
    return AlgorithmSpec.from_config(defaults("algorithm", **{"name": "test", **changes}))


def learner_config(*, loss: PolicyLossConfig | None = None, **changes) -> LearnerConfig:
    """A :class:`LearnerConfig` of the schema's ``algorithm`` settings (sampling temperature 1: logits as the
    model gives them; no rollout correction) with ``changes``."""
    fields = {key: defaults(f"algorithm.{key}") for key in ("ppo_epochs", "micro_batch_size", "grad_clip")}
    return LearnerConfig(loss=loss or loss_config(), **{**fields, "temperature": 1.0, "correction": None, **changes})
