"""Env-level actions of the skill tree (RS-Claw progressive disclosure): ``list_skills``,
``open_skill(skill)``, ``read_tool_doc(tool)``.

They are not RS tools: they read no data and write no artifact, they change what the agent may
see and call, and the env counts what was opened (``RSEnv.episode_record()``: ``skills_opened``,
``docs_opened``; MEFR's P_skill and P_doc). They are callable in every action format, exactly like
tools (json ``<tool_call>``, a codeact function, a manager or specialist turn). Each is a
:class:`~earthrl.envs.tools.registry.Tool` whose ``fn`` is ``fn(env, args) -> ToolResult``.
"""

from __future__ import annotations

import inspect
import json

from earthrl.envs.core.skills import SKILL_IDS, SKILLS, skill_tools
from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.registry import Registry
from earthrl.envs.tools.registry import Args, Tool, ToolResult, openai_schema


class _NoArgs(Args):
    pass


class _SkillArgs(Args):
    skill: str


class _DocArgs(Args):
    tool: str


def list_skills(env, args: _NoArgs) -> ToolResult:
    """One line per skill: id and description."""
    lines = [f"{s.id}: {s.description}" for s in SKILLS.values()]
    return ToolResult("\n".join(lines) + "\nOpen one with open_skill.", {"skills": list(SKILL_IDS)})


def open_skill(env, args: _SkillArgs) -> ToolResult:
    """Open a skill: its tools become callable (toolset ``skills``) and are listed as the tool
    catalogue (:func:`catalogue_line`; full docs via ``read_tool_doc``).

    Raises:
        ToolError: ``unknown_skill`` naming the seven skill ids.
    """
    if args.skill not in SKILLS:
        raise ToolError("unknown_skill", f"argument 'skill': no skill {args.skill!r}; "
                        f"skills: {', '.join(SKILL_IDS)}")
    names = skill_tools(args.skill, env.tools)
    env.open_skill(args.skill, names)
    lines = [catalogue_line(env.tools[n]) for n in names]
    return ToolResult(f"skill {args.skill} tools (read_tool_doc for details):\n" + "\n".join(lines),
                      {"skill": args.skill, "tools": names})


MAX_LISTED_OPTIONS = 6
"""A tool with more optional arguments lists them as ``+N options`` in its catalogue line."""


def catalogue_line(tool: Tool) -> str:
    """``name(required, optional=…): description`` — one tool-catalogue line (``name(required,
    +N options)`` past :data:`MAX_LISTED_OPTIONS` optional arguments; read_tool_doc has them)."""
    fields = tool.args_model.model_fields
    args = [k if f.is_required() else f"{k}=…" for k, f in fields.items()]
    if (n := sum(not f.is_required() for f in fields.values())) > MAX_LISTED_OPTIONS:
        args = [k for k, f in fields.items() if f.is_required()] + [f"+{n} options"]
    return f"{tool.name}({', '.join(args)}): {tool.description}"


def read_tool_doc(env, args: _DocArgs) -> ToolResult:
    """Full documentation of a tool: its docstring and JSON schema.

    Raises:
        ToolError: ``unknown_tool`` listing the tools.
    """
    tool = env.tools.get(args.tool)
    if tool is None:
        raise ToolError("unknown_tool", f"argument 'tool': no tool {args.tool!r}; tools: "
                        f"{', '.join(env.tools)}")
    env.docs_opened.append(tool.name)
    doc = inspect.getdoc(tool.fn) or tool.description
    schema = openai_schema(tool)["function"]["parameters"]
    return ToolResult(f"{tool.name}: {doc}\nparameters: {json.dumps(schema, separators=(',', ':'))}",
                      {"tool": tool.name, "family": tool.family, "skills": list(tool.skills)})


def _action(name: str, fn, args, description: str) -> Tool:
    return Tool(name, fn, args, description, "Data & Preprocessing", "SPA", ("skill_tree",),
                ("any",), "catalogue")


ENV_ACTIONS: Registry = Registry("env action")
"""The skill tree's env-level actions (toolset ``"skills"``), Tool records by name."""
for _t in (_action("list_skills", list_skills, _NoArgs, "List the skills."),
           _action("open_skill", open_skill, _SkillArgs, "Open a skill: shows its tools."),
           _action("read_tool_doc", read_tool_doc, _DocArgs, "Full doc of a tool.")):
    ENV_ACTIONS.register(_t.name, _t)
