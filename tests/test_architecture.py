"""Imports flow one way: the import-linter contracts of pyproject.toml hold.

``bench > launch > algorithms > rewards > rollout > models > envs`` (a layers contract: no lower package
imports a higher one, in-function imports included; the benchmark harness ``bench`` is on top, so no
product module imports it, except the lazy ``earthrl bench`` entry of ``launch.cli``), the same inside
envs for its sub-packages
(``suites | benchmarks > core > formats > sandbox > tools > data > root modules``), and no import
cycle between the modules of a package (acyclic_siblings); our own imports sit at module top unless
marked ``# lazy: <reason>``. Docs: https://import-linter.readthedocs.io/en/stable/contract_types.html
"""

from __future__ import annotations

import ast
import tomllib
from pathlib import Path

import grimp
from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "pyproject.toml"
LAYERS = ["earthrl.bench", "earthrl.launch", "earthrl.algorithms", "earthrl.rewards", "earthrl.rollout",
          "earthrl.models", "earthrl.envs"]
#: the only product import of the harness: the CLI's lazy entry of `earthrl bench`
BENCH_ENTRY = ["earthrl.launch.cli -> earthrl.bench.cli"]
ENVS_LAYERS = ["suites | benchmarks", "core", "formats", "sandbox", "tools", "data",
               "registry | paths | errors | kill_points"]
PACKAGES = ["envs", "rollout", "rewards", "algorithms", "models", "launch", "bench"]


def test_contracts_are_the_layers_of_the_design():
    cfg = tomllib.loads(CONFIG.read_text())["tool"]["importlinter"]
    layers = [c for c in cfg["contracts"] if c["type"] == "layers"]
    assert [(c["layers"], c.get("containers")) for c in layers] == [(LAYERS, None), (ENVS_LAYERS, ["earthrl.envs"])]
    assert [c.get("ignore_imports", []) for c in layers] == [BENCH_ENTRY, []]
    assert set(cfg["root_packages"]) == {f"earthrl.{p}" for p in PACKAGES}
    # every envs sub-package (folder with an __init__.py) and root module is in a layer
    named = {m.strip() for layer in ENVS_LAYERS for m in layer.split("|")}
    envs = ROOT / "envs"
    present = {p.parent.name for p in envs.glob("*/__init__.py")} | {p.stem for p in envs.glob("*.py")} - {"__init__"}
    assert present == named
    assert {"acyclic_siblings"} <= {c["type"] for c in cfg["contracts"]}


def test_import_linter_contracts_hold():
    assert lint_imports(config_filename=str(CONFIG), no_cache=True, no_logo=True) == 0


def test_lazy_imports_count_for_the_graph():
    """An import inside a function is an edge too (so a lazy upward import breaks the layers)."""
    graph = grimp.build_graph("earthrl.rollout", "earthrl.envs", cache_dir=None)
    # rollout.runtime imports the EnvPool only inside RolloutRuntime.__init__
    assert graph.direct_import_exists(importer="earthrl.rollout.runtime", imported="earthrl.envs.core.pool")
    # rollout.runtime imports the agent loop (torch) only inside RolloutRuntime.rollout
    rollout = grimp.build_graph("earthrl.rollout", cache_dir=None)
    assert rollout.direct_import_exists(importer="earthrl.rollout.runtime", imported="earthrl.rollout.agent_loop")


def _own_imports_in_functions(path: Path) -> list[tuple[int, str]]:
    """(line, source) of each ``earthrl`` import inside a function of ``path`` with no ``# lazy:``
    comment on its line or the line above."""
    lines = path.read_text().splitlines()
    found = []
    for fn in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level:
                names = [node.module or ""]
            else:
                continue
            marked = "# lazy:" in lines[node.lineno - 1] or (node.lineno > 1 and "# lazy:" in lines[node.lineno - 2])
            if any(n.split(".")[0] == "earthrl" for n in names) and not marked:
                found.append((node.lineno, lines[node.lineno - 1].strip()))
    return found


def test_own_imports_at_module_top_unless_marked_lazy():
    unmarked = {f"{p.relative_to(ROOT)}:{line}": src for pkg in PACKAGES for p in sorted((ROOT / pkg).rglob("*.py"))
                for line, src in _own_imports_in_functions(p)}
    assert unmarked == {}, "move these imports to module top, or mark them '# lazy: <reason>'"


def test_unmarked_in_function_import_is_found(tmp_path):
    mod = tmp_path / "m.py"
    mod.write_text("def f():\n    from earthrl.envs.paths import data_dir\n    return data_dir\n\n\n"
                   "def g():\n    # lazy: torch\n    from earthrl.models.policy import Policy\n    return Policy\n")
    assert _own_imports_in_functions(mod) == [(2, "from earthrl.envs.paths import data_dir")]
