"""The documentation stays whole: README.md is a short entry point (at most 250 lines), and every
relative link of README.md and docs/*.md points to a file that exists and, after ``#``, to a heading
of that file.

Anchors are the heading slugs of Python-Markdown's ``toc`` extension (what mkdocs builds): NFKD,
ASCII only, characters other than word characters, spaces and hyphens dropped, lower case, runs of
spaces and hyphens turned into one hyphen; a repeated heading gets ``_1``, ``_2`` …. GitHub's slugs
are the same for the headings of these pages (ASCII, no runs of spaces or hyphens), which
``test_headings_slug_alike_on_github_and_mkdocs`` keeps true.
"""

from __future__ import annotations

import re
import sys
import unicodedata
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
MAX_README_LINES = 250

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^ {0,3}(#{1,6})\s+(.*?)\s*#*\s*$")
INLINE_CODE = re.compile(r"(`+).*?\1")
# [text](target) and ![alt](target); the target ends at whitespace or the closing parenthesis
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]*)>?(?:\s+\"[^\"]*\")?\s*\)")
REFERENCE_DEF = re.compile(r"^ {0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$")


def _prose_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of the lines outside fenced and indented code blocks."""
    out, fenced, previous_blank = [], False, True
    for number, line in enumerate(text.splitlines(), 1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        indented_code = line.startswith("    ") and previous_blank and not line.lstrip().startswith(("-", "*", "|"))
        previous_blank = not line.strip() or (previous_blank and indented_code)
        if fenced or indented_code:
            continue
        out.append((number, line))
    return out


def slugify(heading: str) -> str:
    """Python-Markdown ``toc`` slug of a heading's text (markup removed first)."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", text)
    text = re.sub(r"[*]{1,3}([^*]+)[*]{1,3}", r"\1", text)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    text = re.sub(r"[^\w\s-]", "", text).strip().lower()
    return re.sub(r"[-\s]+", "-", text)


def github_slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation but ``-`` and ``_`` dropped, each space a hyphen."""
    text = re.sub(r"`([^`]*)`", r"\1", heading)
    text = re.sub(r"[*]{1,3}([^*]+)[*]{1,3}", r"\1", text)
    return re.sub(r"[^\w\- ]", "", text.lower()).replace(" ", "-")


def headings(path: Path) -> list[str]:
    return [m.group(2) for _, line in _prose_lines(path.read_text(encoding="utf-8"))
            if (m := HEADING.match(line))]


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in headings(path):
        slug = slugify(heading)
        if slug in seen:
            seen[slug] += 1
            slug = f"{slug}_{seen[slug]}"
        else:
            seen[slug] = 0
        out.add(slug)
    return out


def links(path: Path) -> list[tuple[int, str]]:
    out = []
    for number, line in _prose_lines(path.read_text(encoding="utf-8")):
        line = INLINE_CODE.sub("", line)
        out += [(number, m.group(1)) for m in LINK.finditer(line)]
        if m := REFERENCE_DEF.match(line):
            out.append((number, m.group(1)))
    return out


def broken_links(path: Path) -> list[str]:
    problems = []
    for number, target in links(path):
        if not target or re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):  # http:, https:, mailto: …
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(ROOT)}:{number}: {target}"
        if not linked.exists():
            problems.append(f"{where}: no file {linked}")
        elif anchor and linked.suffix == ".md" and anchor not in anchors(linked):
            problems.append(f"{where}: no heading #{anchor} in {linked.relative_to(ROOT)}")
        elif anchor and linked.suffix != ".md":
            problems.append(f"{where}: an anchor into a file that is not Markdown")
    return problems


def test_readme_is_at_most_250_lines():
    lines = len(README.read_text(encoding="utf-8").splitlines())
    assert lines <= MAX_README_LINES, (f"README.md has {lines} lines, more than {MAX_README_LINES}: move the detail "
                                       "to a page under docs/ and link it")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_existing_files_and_headings(page):
    problems = broken_links(page)
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_one_title_per_page_and_headings_slug_alike_on_github_and_mkdocs(page):
    found = headings(page)
    assert sum(1 for _, line in _prose_lines(page.read_text(encoding="utf-8")) if re.match(r"^# ", line)) == 1
    assert found, f"{page.name} has no heading"
    differ = [h for h in found if slugify(h) != github_slug(h)]
    assert not differ, f"{page.name}: these headings get different anchors on GitHub and in mkdocs: {differ}"


def test_the_checker_finds_a_broken_file_and_a_broken_anchor(tmp_path, monkeypatch):
    """A negative control: the link check fails on a missing file and on a missing heading."""
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A\n\n## Real heading (`x`)\n\ntext\n")
    page = tmp_path / "README.md"
    page.write_text("# T\n\n[ok](docs/a.md#real-heading-x) [gone](docs/b.md) [bad](docs/a.md#nowhere)\n"
                    "`[code](docs/none.md)`\n\n```\n[fenced](docs/none.md)\n```\n[web](https://example.org/x)\n")
    problems = broken_links(page)
    assert len(problems) == 2, problems
    assert "no file" in problems[0] and "docs/b.md" in problems[0]
    assert "no heading #nowhere" in problems[1]
