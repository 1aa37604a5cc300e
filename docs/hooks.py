"""mkdocs hooks of the EarthRL documentation site (mkdocs.yml `hooks:`; https://www.mkdocs.org/user-guide/configuration/#hooks).

- The home page is README.md itself: its links into docs/ (``docs/x.md``, right on GitHub) become site links
  (``x.md``), and the pages' links to ``../README.md`` point at the home page.
- ``reference/config.md`` is written at every build from the typed configuration schema
  (:func:`earthrl.launch.config_schema.reference.reference_markdown`): never committed, never stale.
"""

from __future__ import annotations

import re
from pathlib import Path

from mkdocs.structure.files import File, Files

from earthrl.launch.config_schema.reference import reference_markdown

ROOT = Path(__file__).resolve().parents[1]
README_LINK = re.compile(r"\]\((?:\.\./)+README\.md(#[^)]*)?\)")


def readme_page(text: str) -> str:
    """README.md as the site's home page: ``](docs/x.md#a)`` → ``](x.md#a)``."""
    return text.replace("](docs/", "](")


def on_files(files: Files, config) -> Files:
    """Add the home page (README.md) and the generated configuration reference."""
    files.append(File.generated(config, "index.md", content=readme_page((ROOT / "README.md").read_text("utf-8"))))
    files.append(File.generated(config, "reference/config.md", content=reference_markdown()))
    return files


def on_page_markdown(markdown: str, page, config, files) -> str:
    """A page's link to ``../README.md`` (right on GitHub) → the home page, relative to the page."""
    depth = page.file.src_uri.count("/")
    return README_LINK.sub(lambda m: f"]({'../' * depth}index.md{m.group(1) or ''})", markdown)
