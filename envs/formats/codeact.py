"""``codeact`` action format (CodeAct, Wang et al. 2024, "Executable Code
Actions Elicit Better LLM Agents", §2): the model writes one fenced Python block per turn::

    ```python
    ndvi = spectral_index(scene="S2_T33UUU_20170216", index="NDVI")
    print(raster_stats(name=ndvi["artifact"]))
    ```

It runs in the episode's persistent :class:`~earthrl.envs.sandbox.parent.Sandbox` with the tools bound as
functions; only printed output comes back, cut to the observation budget. E(a_t, o_t) of the turn
is :attr:`ExecResult.error <earthrl.envs.sandbox.parent.ExecResult>`.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

from earthrl.envs.formats.parsers import ActionError
from earthrl.envs.sandbox.parent import ExecResult, Sandbox, SandboxLimits, ToolHandler

_TAG_RE = re.compile(r"[\w+-]*")
_PYTHON_TAGS = ("python", "py", "python3", "")
CODE_HINT = ("Write one Python block per turn:\n```python\n"
             'r = raster_stats(name="...")\nprint(r)\n```')
TRUNCATED = "…[truncated]"


def code_blocks(text: str) -> list[str]:
    """Bodies of the fenced Python blocks of ``text`` (tag ``python``/``py``/``python3`` or no
    tag), in order; a block left open at the end of the text counts (a cut-off generation).

    A fence is three backticks, an optional tag and the rest of its line; the body runs to the
    next three backticks or the end. One left-to-right scan with ``str.find``: linear in
    ``len(text)`` whatever the model wrote (a regex with a lazy body was quadratic on long runs
    of fences).
    """
    blocks, pos = [], 0
    while True:
        start = text.find("```", pos)
        if start < 0:
            return blocks
        line_end = text.find("\n", start + 3)
        if line_end < 0:  # no newline after this fence, hence after any later one either
            return blocks
        tag = _TAG_RE.match(text[start + 3:line_end].lstrip(" \t")).group(0)
        close = text.find("```", line_end + 1)
        body = text[line_end + 1:] if close < 0 else text[line_end + 1:close]
        if tag.lower() in _PYTHON_TAGS:
            blocks.append(body)
        if close < 0:
            return blocks
        pos = close + 3


def parse_codeact(text: str) -> str:
    """The code of the first fenced Python block of a ``codeact`` turn (later blocks are ignored;
    :func:`code_blocks` counts them).

    Raises:
        ActionError: ``parse_error`` when the turn has no fenced Python block or it is empty.
    """
    blocks = code_blocks(text)
    if not blocks:
        other = re.search(r"```[ \t]*(\w+)", text)
        found = f" (found a ```{other.group(1)} block)" if other else ""
        raise ActionError("parse_error", f"no ```python code block found{found}. {CODE_HINT}")
    code = blocks[0].strip("\n")
    if not code.strip():
        raise ActionError("parse_error", f"the ```python block is empty. {CODE_HINT}")
    return code


def truncate(text: str, max_chars: int | None) -> str:
    """``text`` cut to ``max_chars`` characters, ending in ``…[truncated]`` when cut (None: never cut)."""
    if max_chars is None or len(text) <= max_chars:
        return text
    return text[: max(0, max_chars - len(TRUNCATED))] + TRUNCATED


class CodeActSession:
    """One episode of the ``codeact`` format: parse a turn, run it in the sandbox, cut the output.

    Args:
        workspace: the episode's folder (see :class:`~earthrl.envs.sandbox.parent.Sandbox`).
        tool_handler: ``handler(name, kwargs) -> {"text", "data", "error", "error_kind"}``.
        limits: :class:`~earthrl.envs.sandbox.parent.SandboxLimits`.
        max_output_chars: budget of the printed output and of the error message, characters
            (the observation is at most notes + 2 x this); None: no budget (the env's ``max_obs_chars``).
        tools, read_roots, allow_weaker: passed to the sandbox.

    Raises:
        SandboxUnavailable: no isolation on this machine and not ``allow_weaker``.
    """

    def __init__(self, workspace: Path, tool_handler: ToolHandler | None = None,
                 limits: SandboxLimits = SandboxLimits(), max_output_chars: int | None = None, *,  # noqa: B008 - frozen
                 tools: dict | None = None, read_roots: Sequence[Path] = (),
                 allow_weaker: bool = False):
        self.sandbox = Sandbox(workspace, limits, tool_handler, tools=tools, read_roots=read_roots,
                               allow_weaker=allow_weaker)
        self.max_output_chars = max_output_chars

    def run(self, action_text: str) -> ExecResult:
        """Parse and run one turn. A turn without a code block is a ``parse_error`` result
        (nothing runs); otherwise see :meth:`Sandbox.exec <earthrl.envs.sandbox.parent.Sandbox.exec>`.
        ``stdout`` and ``message`` are cut to ``max_output_chars``."""
        try:
            code = parse_codeact(action_text)
        except ActionError as e:
            return ExecResult("", True, e.kind, e.message)
        res = self.sandbox.exec(code)
        extra = len(code_blocks(action_text)) - 1
        if extra > 0:
            res.notes.append(f"Only the first code block of a turn runs; {extra} more ignored.")
        res.stdout = truncate(res.stdout, self.max_output_chars)
        res.message = truncate(res.message, self.max_output_chars)
        return res

    def close(self) -> None:
        """Stop the interpreter."""
        self.sandbox.close()


_PY_TYPES = {"string": "str", "number": "float", "integer": "int", "boolean": "bool",
             "array": "list", "object": "dict", "null": "None"}


def _py_type(p: dict) -> str:
    if "enum" in p:
        return "|".join(repr(v) for v in p["enum"])
    if "anyOf" in p:
        return "|".join(_py_type(o) for o in p["anyOf"])
    t = p.get("type", "any")
    types = [_PY_TYPES.get(x, x) for x in (t if isinstance(t, list) else [t])]
    if "items" in p and "list" in types:
        types[types.index("list")] = f"list[{_py_type(p['items'])}]"
    return "|".join(types)


def python_signature(schema: dict) -> str:
    """``def name(arg: type, opt: type = default) -> dict  # description`` of an OpenAI
    function schema (:func:`earthrl.envs.tools.registry.openai_schema`); required arguments first."""
    fn = schema.get("function", schema)
    params = fn.get("parameters", {})
    props = params.get("properties", {})
    required = [k for k in props if k in params.get("required", [])]
    args = [f"{k}: {_py_type(props[k])}" for k in required]
    args += [f"{k}: {_py_type(p)} = {p.get('default')!r}" for k, p in props.items()
             if k not in required]
    doc = f"  # {fn['description']}" if fn.get("description") else ""
    return f"def {fn['name']}({', '.join(args)}) -> dict{doc}"


def codeact_system_prompt(tool_schemas: list[dict]) -> str:
    """System prompt of the ``codeact`` format: role, the tools as Python signatures (one line
    each), how a turn runs, and "finish with answer(...)".

    Args:
        tool_schemas: OpenAI function schemas (``RSEnv.tool_schemas()``).
    """
    sigs = "\n".join(python_signature(s) for s in tool_schemas)
    return ("You are a remote-sensing analyst. Solve the task by writing Python code on the "
            "listed satellite scenes. Each turn, write one ```python block; it runs in a "
            "persistent interpreter (variables stay between turns) and you see only what it "
            "prints.\nThese tool functions are defined (keyword arguments; each returns a dict, "
            "print(result) shows a summary; a failed call raises ToolCallError):\n"
            f"{sigs}\nUse scene ids and artifact names exactly as given; do not name variables "
            "after tools. Finish by calling answer(value=..., unit=...).")
