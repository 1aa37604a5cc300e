"""The SOP knowledge base and its retrieval (SimCRAFT §3.5.1 and App. E, "PKB retrieval").

A standard operating procedure (SOP) is one Markdown file per workflow family: a ``# title`` line, a ``Use when:``
paragraph, ``Example requests:`` (a bulleted list), the ``Steps:`` of the family's reference workflow with their
parameters, and its ``Constraints:``. The family is the file's stem. EarthRL's SOPs are in ``envs/sops/*.md``, written
from earthrl-mini's reference workflows and the skill tree (:mod:`earthrl.envs.core.skills`); a user's folder adds
more (a file with the same stem replaces the packaged one).

Retrieval (:class:`SOPRetriever`): a frozen dual encoder (:class:`~earthrl.envs.core.text_embedder.SentenceEmbedder`)
embeds each SOP's keys — its title, its ``Use when`` paragraph and each example request — and a query; an SOP's
similarity is the largest cosine between the query and its keys; the top-k SOPs whose similarity is at least δ are
returned, best first (SimCRAFT: k = 2, δ = 0.6). Nothing above δ: no SOP. The retrieved SOPs are appended to the
first user message of an episode (:func:`with_sops`) by :meth:`earthrl.envs.core.env.RSEnv.reset`, which every
agent loop calls, and by the CRAFT SFT data (:mod:`earthrl.rollout.sft_craft`) the same way.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from earthrl.envs.core.text_embedder import SentenceEmbedder

PACKAGED = Path(__file__).resolve().parents[1] / "sops"
"""The packaged SOPs, one Markdown file per workflow family."""

SOP_HEADER = "Standard operating procedures retrieved for this task (adapt them; they may not fit it exactly):"
"""The first line of the SOP block of a user message (:func:`render_sops`)."""

DATA_MARK = "\n\nData "
"""Where the data manifest of a first user message starts (:meth:`~earthrl.envs.core.env.RSEnv.reset`)."""

STEPS_MARK = "\nSteps:"
"""Where the steps of an IF-phrased question start: the query is the request before them."""


@dataclass(frozen=True)
class SOP:
    """One standard operating procedure.

    Attributes:
        family: the workflow family (the file's stem).
        title: the ``# `` line.
        text: the whole Markdown text (what the model is shown).
        keys: what retrieval embeds: the title, the ``Use when`` paragraph, each example request.
    """

    family: str
    title: str
    text: str
    keys: tuple[str, ...]


def parse_sop(family: str, text: str) -> SOP:
    """The :class:`SOP` of one Markdown text (module doc).

    Raises:
        ValueError: no ``# title`` first line or no ``Steps:`` section (names the family).
    """
    lines = text.strip().splitlines()
    if not lines or not lines[0].startswith("# "):
        raise ValueError(f"SOP {family}: the first line must be '# <title>'")
    if "Steps:" not in text:
        raise ValueError(f"SOP {family}: no 'Steps:' section")
    title = lines[0][2:].strip()
    use = re.search(r"^Use when:\s*(.+?)(?:\n\s*\n|\Z)", text, re.M | re.S)
    examples = re.search(r"^Example requests:\s*\n((?:\s*- .+\n?)+)", text, re.M)
    keys = [title] + ([" ".join(use.group(1).split())] if use else [])
    keys += [ln.strip()[2:].strip() for ln in examples.group(1).splitlines() if ln.strip()] if examples else []
    return SOP(family=family, title=title, text=text.strip(), keys=tuple(keys))


def load_sops(folder: str | Path | None = None) -> list[SOP]:
    """The packaged SOPs and those of ``folder`` (its ``*.md``; a stem already packaged replaces that SOP), sorted by
    family.

    Raises:
        ValueError: ``folder`` is not a folder or holds no ``*.md`` file, or a file is not an SOP (names the file
            and the fix).
    """
    files = {p.stem: p for p in sorted(PACKAGED.glob("*.md"))}
    if folder is not None:
        user = Path(folder).expanduser()
        found = sorted(user.glob("*.md")) if user.is_dir() else []
        if not found:
            raise ValueError(f"env.sops.folder={folder}: no folder with *.md SOP files there; give a folder of "
                             "Markdown SOPs (# title, Use when:, Example requests:, Steps:, Constraints:) or null")
        files.update({p.stem: p for p in found})
    out = []
    for family, path in sorted(files.items()):
        try:
            out.append(parse_sop(family, path.read_text()))
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}; write it as the files in {PACKAGED} are") from None
    return out


def render_sops(sops: list[SOP]) -> str:
    """The SOP block of a user message: :data:`SOP_HEADER`, then each SOP's text under ``[SOP i]``; "" without SOPs."""
    if not sops:
        return ""
    return "\n\n".join([SOP_HEADER] + [f"[SOP {i}] {s.text}" for i, s in enumerate(sops, 1)])


def with_sops(user: str, sops: list[SOP]) -> str:
    """``user`` with the block of ``sops`` appended (an SOP block it already has is replaced first)."""
    base = split_sops(user)
    block = render_sops(sops)
    return f"{base}\n\n{block}" if block else base


def split_sops(user: str) -> str:
    """``user`` without its SOP block (:func:`with_sops`' inverse)."""
    return user.split(f"\n\n{SOP_HEADER}", 1)[0]


def question_of(user: str) -> str:
    """The retrieval query of a first user message: the request before its steps (IF phrasing), data manifest and
    SOP block."""
    return split_sops(user).split(DATA_MARK, 1)[0].split(STEPS_MARK, 1)[0].strip()


class SOPRetriever:
    """Top-k SOPs above a similarity threshold (module doc).

    Args:
        sops: the knowledge base (:func:`load_sops`).
        embedder: an object with ``encode(list[str]) -> float array (n, d)`` of unit rows.
        top_k: SOPs returned at most (SimCRAFT: 2).
        threshold: the least cosine similarity δ of a returned SOP (SimCRAFT: 0.6).

    Raises:
        ValueError: an empty knowledge base, ``top_k < 1`` or ``threshold`` outside [-1, 1].
    """

    def __init__(self, sops: list[SOP], embedder, top_k: int = 2, threshold: float = 0.6) -> None:
        if not sops:
            raise ValueError("the SOP knowledge base is empty")
        if top_k < 1 or not -1.0 <= threshold <= 1.0:
            raise ValueError(f"top_k={top_k} must be >= 1 and threshold={threshold} in [-1, 1]")
        self.sops, self.embedder, self.top_k, self.threshold = list(sops), embedder, int(top_k), float(threshold)
        self.owner = np.array([i for i, s in enumerate(self.sops) for _ in s.keys])
        self.keys = embedder.encode([k for s in self.sops for k in s.keys])

    def scores(self, query: str) -> np.ndarray:
        """Each SOP's similarity to ``query`` (the largest cosine over its keys), shape ``(len(sops),)``."""
        cos = self.keys @ self.embedder.encode([query])[0]
        best = np.full(len(self.sops), -np.inf)
        np.maximum.at(best, self.owner, cos)
        return best

    def retrieve(self, query: str) -> list[tuple[SOP, float]]:
        """The top-k ``(SOP, similarity)`` at or above the threshold, best first; [] when none reaches it."""
        s = self.scores(query)
        order = [int(i) for i in np.argsort(-s, kind="stable")[: self.top_k]]
        return [(self.sops[i], float(s[i])) for i in order if s[i] >= self.threshold]


_RETRIEVERS: dict[tuple, SOPRetriever] = {}


def retriever(embedder_folder: str | Path, folder: str | Path | None = None, top_k: int = 2,
              threshold: float = 0.6) -> SOPRetriever:
    """The process's :class:`SOPRetriever` for these settings (built once: every env of a worker shares the encoder
    and the SOP embeddings)."""
    key = (str(embedder_folder), str(folder) if folder else None, int(top_k), float(threshold))
    if key not in _RETRIEVERS:
        _RETRIEVERS[key] = SOPRetriever(load_sops(folder), SentenceEmbedder(Path(embedder_folder)), top_k, threshold)
    return _RETRIEVERS[key]
