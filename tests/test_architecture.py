"""Imports flow one way (issue 10): the import-linter contracts of pyproject.toml hold.

``launch > algorithms > rewards > rollout > models > envs`` (a layers contract: no lower package
imports a higher one, in-function imports included) and no import cycle between the modules of a
package (acyclic_siblings). Docs: https://import-linter.readthedocs.io/en/stable/contract_types.html
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
LAYERS = ["earthrl.launch", "earthrl.algorithms", "earthrl.rewards", "earthrl.rollout", "earthrl.models", "earthrl.envs"]


def test_contracts_are_the_layers_of_the_design():
    cfg = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]
    layers = [c for c in cfg["contracts"] if c["type"] == "layers"]
    assert [c["layers"] for c in layers] == [LAYERS]
    assert {"acyclic_siblings"} <= {c["type"] for c in cfg["contracts"]}


def test_import_linter_contracts_hold():
    assert lint_imports(config_filename=str(CONFIG), no_cache=True, no_logo=True) == 0


def test_lazy_imports_count_for_the_graph():
    """An import inside a function is an edge too (so a lazy upward import breaks the layers)."""
    graph = grimp.build_graph("earthrl.rollout", "earthrl.envs", cache_dir=None)
    # rollout.runtime imports the EnvPool only inside RolloutRuntime.__init__
    assert graph.direct_import_exists(importer="earthrl.rollout.runtime", imported="earthrl.envs.core.pool")
