"""CRAFT contexts: retrieved SOPs with noise perturbations in SFT trajectories (SimCRAFT §3.5.2 and App. E).

SimCRAFT's Contextual Retrieval-Augmented Fine-Tuning pairs each validated trajectory with the SOPs retrieved for
its query and, with probability ε (ε_ctx = 0.15 in the paper), perturbs that context while the target stays the
validated trajectory, so that the model learns to transfer an SOP's structure and to override misleading details
rather than copy it. The two perturbations (:data:`KINDS`):

- ``inject`` (irrelevant context injection): an SOP of a family that was not retrieved, drawn uniformly, takes the
  place of the lowest-ranked retrieved SOP (or is added when fewer than top-k were retrieved);
- ``mutate`` (parameter mutation): one numeric parameter value in the steps of one retrieved SOP is changed to
  another value (:func:`mutate_number`).

A perturbed draw picks either kind with probability 1/2; ``mutate`` falls back to ``inject`` when no retrieved SOP
has a number to change. Inference retrieves without perturbation (:meth:`earthrl.envs.core.env.RSEnv.reset`).
Everything here is a pure function of its inputs and the given ``numpy.random.Generator``.
"""

from __future__ import annotations

import re
from dataclasses import replace

import numpy as np

from earthrl.envs.core.sops import SOP, with_sops
from earthrl.rollout.sft_data import SFTTrajectory

KINDS = ("clean", "inject", "mutate")
EPSILON = 0.15
"""SimCRAFT's perturbation probability ε_ctx (App. E; the best of its sweep, Table 4)."""

_PARAM = re.compile(r'("[a-z_]+": \[?)(-?\d+(?:\.\d+)?)')
"""A numeric parameter value in an SOP's steps: ``"value": 0.3``, ``"q": [95.0]``."""


def mutate_number(value: str, rng: np.random.Generator) -> str:
    """Another value for the number written ``value``: an integer moves by 1-3 (never below 0 when it was not), a
    value in [-1, 1] by ±0.05-0.25 (kept in [-1, 1]), a larger value by ±10-50 %; written as the original is
    (integer or decimals)."""
    v = float(value)
    sign = 1 if rng.random() < 0.5 else -1
    if "." not in value:
        new = int(v) + sign * int(rng.integers(1, 4))
        new = abs(new) if v >= 0 and new < 0 else new
        return str(new if new != int(v) else int(v) + 1)
    if abs(v) <= 1:
        new = float(np.clip(v + sign * rng.uniform(0.05, 0.25), -1.0, 1.0))
        new = new if abs(new - v) > 1e-9 else v - sign * 0.1
    else:
        new = v * (1 + sign * rng.uniform(0.1, 0.5))
    decimals = max(len(value.split(".")[1]), 2)
    return f"{new:.{decimals}f}"


def mutate_sop(sop: SOP, rng: np.random.Generator) -> SOP | None:
    """``sop`` with one numeric parameter of its ``Steps:`` section changed (:func:`mutate_number`), or None when
    it has none."""
    head, sep, steps = sop.text.partition("Steps:")
    hits = list(_PARAM.finditer(steps))
    if not sep or not hits:
        return None
    m = hits[int(rng.integers(len(hits)))]
    steps = steps[: m.start(2)] + mutate_number(m.group(2), rng) + steps[m.end(2):]
    return replace(sop, text=head + sep + steps)


def craft_context(retrieved: list[SOP], library: list[SOP], rng: np.random.Generator, epsilon: float = EPSILON,
                  top_k: int = 2) -> tuple[list[SOP], str]:
    """The SOP context of one training example (module doc).

    Args:
        retrieved: the SOPs retrieved for the example's query, best first (at most ``top_k``).
        library: the whole knowledge base (the irrelevant SOPs are drawn from it).
        rng: the generator of every draw.
        epsilon: probability of a perturbation, in [0, 1].
        top_k: the retrieval's k.

    Returns:
        (context SOPs, kind in :data:`KINDS`). ``retrieved`` itself is never changed.

    Raises:
        ValueError: ``epsilon`` outside [0, 1].
    """
    if not 0.0 <= epsilon <= 1.0:
        raise ValueError(f"epsilon={epsilon} must lie in [0, 1]")
    if rng.random() >= epsilon:
        return list(retrieved), "clean"
    if rng.random() < 0.5 and retrieved:
        i = int(rng.integers(len(retrieved)))
        mutated = mutate_sop(retrieved[i], rng)
        if mutated is not None:
            return [*retrieved[:i], mutated, *retrieved[i + 1:]], "mutate"
    families = {s.family for s in retrieved}
    others = [s for s in library if s.family not in families]
    if not others:
        return list(retrieved), "clean"
    pick = others[int(rng.integers(len(others)))]
    kept = list(retrieved[: top_k - 1]) if len(retrieved) >= top_k else list(retrieved)
    return [*kept, pick], "inject"


def craft_records(records: list[SFTTrajectory], retrieved: list[list[SOP]], library: list[SOP],
                  rng: np.random.Generator, epsilon: float = EPSILON, top_k: int = 2) -> tuple[list[SFTTrajectory], dict]:
    """Copies of ``records`` whose first user message carries a CRAFT context (:func:`craft_context`; an SOP block
    already there is replaced); their turns — the targets — are the records' own.

    Args:
        retrieved: per record, the SOPs retrieved for its question (the same order as ``records``).

    Returns:
        (records, counts per kind).
    """
    out, counts = [], dict.fromkeys(KINDS, 0)
    for rec, found in zip(records, retrieved, strict=True):
        context, kind = craft_context(found, library, rng, epsilon, top_k)
        counts[kind] += 1
        out.append(replace(rec, user=with_sops(rec.user, context)))
    return out, counts
