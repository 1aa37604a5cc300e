"""The documentation site builds with ``mkdocs build --strict`` (mkdocs.yml): every page of README.md and
docs/, the configuration reference written from the typed schema, and no broken link or anchor (a broken one
fails the build, shown by the negative control). The site goes to a temporary folder, never into the repo."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECIPES = ("hirs-agent", "rs-claw-evolution", "earth-agent-pro", "simcraft")


def build(root: Path, site: Path) -> subprocess.CompletedProcess:
    """``mkdocs build --strict`` of ``root``/mkdocs.yml into ``site`` (offline: the theme loads no web fonts)."""
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    return subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=root, env=env, capture_output=True, text=True, timeout=300)


def test_the_site_builds_strict_with_every_page(tmp_path):
    site = tmp_path / "site"
    done = build(ROOT, site)
    assert done.returncode == 0, done.stdout + done.stderr
    # the home page is README.md, its docs/ links turned into site links
    home = (site / "index.html").read_text("utf-8")
    assert 'href="cluster/#not-run-yet"' in home and "docs/cluster.md" not in home
    # a page's link to ../README.md (right on GitHub) reaches the home page
    assert 'href="../#two-commands"' in (site / "install" / "index.html").read_text("utf-8")
    for name in RECIPES:
        assert (site / "recipes" / name / "index.html").is_file(), name
    # the configuration reference, from the schema: trainer.steps = setting(3, …, auto=True, range=(1, None))
    # (typed Any, so its rule is a number, not an integer)
    config = (site / "reference" / "config" / "index.html").read_text("utf-8")
    assert "<td><code>trainer.steps</code></td>\n<td><code>auto</code> or integer ≥ 1</td>\n<td><code>3</code></td>" in config
    assert "<td><code>model.lora.dropout</code></td>\n<td>number in [0, 0.99]</td>" in config
    # offline: no page loads a font, script or style sheet from the web
    for page in site.rglob("*.html"):
        text = page.read_text("utf-8")
        assert 'src="http' not in text and "fonts.googleapis" not in text, page


def test_a_broken_anchor_fails_the_build(tmp_path):
    """Negative control: the same site with one link to a heading that does not exist does not build."""
    copy = tmp_path / "repo"
    copy.mkdir()
    for name in ("mkdocs.yml", "README.md"):
        shutil.copy(ROOT / name, copy / name)
    shutil.copytree(ROOT / "docs", copy / "docs")
    page = copy / "docs" / "metrics.md"
    page.write_text(page.read_text("utf-8") + "\n[gone](evaluation.md#no-such-heading)\n", "utf-8")
    done = build(copy, tmp_path / "site")
    assert done.returncode != 0
    assert "does not contain an anchor '#no-such-heading'" in done.stdout + done.stderr
