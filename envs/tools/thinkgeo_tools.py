"""ThinkGeo's tool surface: the 14 tools of ThinkGeo's benchmark (``agentlego/benchmark_toollist.txt``
of mbzuai-oryx/ThinkGeo) with their argument schemas, registered in
:data:`~earthrl.envs.tools.registry.TOOLS` as surface ``"thinkgeo"`` (shown by ``env.toolset=thinkgeo``;
the ``all`` and ``skills`` toolsets keep to EarthRL's own tools).

ThinkGeo (Shabbir et al. 2025) runs its tools through AgentLego. Sources of the schemas, read in the
public repositories (:data:`SOURCES`):

- **ThinkGeo's own copy of AgentLego** (mbzuai-oryx/ThinkGeo, commit 95086de5, ``agentlego/agentlego/tools``):
  ``TextToBbox(image, text, top1=True)``, ``ObjectDetection(image)``, ``CountGivenObject(image, text)``,
  ``SegmentObjectPixels(image, text, flag=True)``;
- **GTA's AgentLego** (open-compass/GTA, the benchmark whose file layout and evaluator ThinkGeo
  inherits): ``DrawBox(image, bbox, annotation=None)``, ``AddText(image, text, position, color='red')``,
  ``RegionAttributeDescription(image, bbox, attribute)`` and the optional ``bbox`` of ``CountGivenObject``;
- **AgentLego** (InternLM/agentlego): ``Calculator(expression)``, ``Solver(command)``, ``Plot(command)``,
  ``OCR(image)``, ``ImageDescription(image)``, ``GoogleSearch(query)``;
- **not published**: ``ChangeDetection`` (ThinkGeo's SAR/optical change tool) is not in the public
  repository; its schema accepts the arguments a call passes (any names), so replay compares them with
  the recorded call's.

The outputs' GTA/AgentLego output-file arguments (``output_dir``, ``filename``) are left out: ThinkGeo's
references do not pass them. EarthRL runs none of these tools (detection, segmentation and captioning
models, a web search, Python execution): every one answers only in ``env.mode=replay``, from the
recorded output of a matching reference call (:mod:`earthrl.envs.core.replay`); in other modes a call
is a ``replay_only`` error observation.
"""

from __future__ import annotations

from pydantic import ConfigDict

from earthrl.envs.data.artifacts import ToolError
from earthrl.envs.tools.arg_spec import spec_model
from earthrl.envs.tools.registry import Args, ToolContext, ToolResult, register_tool

SURFACE = "thinkgeo"

_THINKGEO = "mbzuai-oryx/ThinkGeo agentlego/agentlego/tools (commit 95086de5)"
_GTA = "open-compass/GTA agentlego/agentlego/tools"
_AGENTLEGO = "InternLM/agentlego agentlego/tools"
_UNPUBLISHED = "not in ThinkGeo's public repository: any arguments, compared with the recorded call's"

_PERCEPTION = ("SPA", "AI Interpretation")
_OPERATION = ("SAA", "Visualization")
_LOGIC = ("SAA", "Spatio-Temporal Analysis")

#: name -> (family and domain, output kind, description, argument spec (:mod:`~earthrl.envs.tools.arg_spec`), source)
SPECS: dict[str, tuple[tuple[str, str], str, str, str, str]] = {
    "TextToBbox": (_PERCEPTION, "table", "Bbox (x1, y1, x2, y2) and score of the object a text names (all: top1=false).", "image:str!, text:str!, top1:bool=True",
                   _THINKGEO),
    "ObjectDetection": (_PERCEPTION, "table", "Detect all objects of the image: name, bbox (x1, y1, x2, y2), score.",
                        "image:str!", _THINKGEO),
    "CountGivenObject": (_LOGIC, "number", "Count the objects of a kind in the image (or in a bbox of it).",
                         "image:str!, text:str!, bbox:str", _THINKGEO),
    "SegmentObjectPixels": (_PERCEPTION, "number", "Pixel count of each object of a kind (flag=true) or their total.", "image:str!, text:str!, flag:bool=True", _THINKGEO),
    "RegionAttributeDescription": (_PERCEPTION, "metadata", "Describe an attribute of a region (x1, y1, x2, y2) of "
                                   "the image.", "image:str!, bbox:str!, attribute:str!", _GTA),
    "DrawBox": (_OPERATION, "image", "Draw a box (x1, y1, x2, y2) with an optional annotation on the image.",
                "image:str!, bbox:str!, annotation:str", _GTA),
    "AddText": (_OPERATION, "image", "Write a text on the image at a position ((x, y) or lt, mt, rb …).",
                "image:str!, text:str!, position:str!, color:str='red'", _GTA),
    "ImageDescription": (_PERCEPTION, "metadata", "Describe the image.", "image:str!", _AGENTLEGO),
    "OCR": (_PERCEPTION, "metadata", "Recognise the text on the image.", "image:str!", _AGENTLEGO),
    "ChangeDetection": (_PERCEPTION, "metadata", "Detect and describe the changes between images of two dates.",
                        "", _UNPUBLISHED),
    "Calculator": (_LOGIC, "number", "Evaluate one Python expression (math functions without import).",
                   "expression:str!", _AGENTLEGO),
    "Solver": (_LOGIC, "metadata", "Run Python code defining solution() (SymPy) and return its result.",
               "command:str!", _AGENTLEGO),
    "Plot": (_LOGIC, "image", "Run Python code whose solution(path) draws with Matplotlib and saves to path.",
             "command:str!", _AGENTLEGO),
    "GoogleSearch": (_OPERATION, "metadata", "Search the web for a query.", "query:str!", _AGENTLEGO),
}

#: tool name -> where its signature was read
SOURCES = {name: spec[4] for name, spec in SPECS.items()}


class OpenArgs(Args):
    """Arguments of a tool whose definition is not published: any names are accepted (and recorded)."""

    model_config = ConfigDict(extra="allow")


def _replay_only(ctx: ToolContext, args) -> ToolResult:
    """A ThinkGeo tool outside replay mode: a ``replay_only`` error observation.

    Raises:
        ToolError: always (kind ``replay_only``).
    """
    raise ToolError("replay_only", f"{ctx.call.get('name')} runs a model or service that EarthRL does not run; its "
                                   "results exist only as ThinkGeo's recorded outputs (env.mode=replay)")


def _register_all() -> None:
    for name, ((family, domain), output_kind, description, spec, source) in SPECS.items():
        model = (OpenArgs if not spec else
                 spec_model(name, spec, f"Arguments of ThinkGeo's {name} ({source}).", prefix="TG"))
        register_tool(name, args=model, description=description, domain=domain, family=family,
                      skills=("land_cover", "change_trend") if name == "ChangeDetection" else ("land_cover",),
                      output_kind=output_kind, surface=SURFACE)(_replay_only)


_register_all()
