"""The planner's workflow skeleton (Earth-Agent-Pro): parsing, checks whose messages tell the planner what to
change, execution order, and the suffix merge of a repair."""

import json

import pytest

from earthrl.rollout.agents.plan import MAX_NODES, Node, Plan, PlanError, Workflow, parse_plan, parse_skill

SKILLS = {"spectral_index": ["spectral_index", "raster_stats", "percentiles", "answer"],
          "water_flood": ["spectral_index", "threshold_mask", "mask_area", "answer"]}


def _text(nodes, skill="spectral_index", tags=True):
    body = json.dumps({"skill": skill, "nodes": nodes} if skill else {"nodes": nodes})
    return f"<plan>{body}</plan>" if tags else body


def _n(node_id, tool, *needs):
    return {"id": node_id, "tool": tool, "needs": list(needs)}


def test_a_plan_comes_back_in_dependency_order_with_answer_last():
    plan = parse_plan(_text([_n("a", "answer", "s"), _n("s", "raster_stats", "i"), _n("p", "percentiles", "i"),
                             _n("i", "spectral_index")]), SKILLS)
    assert plan == Plan("spectral_index", (Node("i", "spectral_index"), Node("s", "raster_stats", ("i",)),
                                           Node("p", "percentiles", ("i",)), Node("a", "answer", ("s",))))


def test_the_line_form_is_the_json_form_in_fewer_tokens():
    lines = ("I bind the skill.\n<plan>\nSkill: spectral_index\n1. n1 spectral_index\n- n2: raster_stats <- n1\n"
             "* n3 percentiles <- n1\nn4 answer <- n2, n3\n</plan>")
    as_json = _text([_n("n1", "spectral_index"), _n("n2", "raster_stats", "n1"), _n("n3", "percentiles", "n1"),
                     _n("n4", "answer", "n2", "n3")])
    assert parse_plan(lines, SKILLS) == parse_plan(as_json, SKILLS)
    assert parse_plan("<plan>\nn4 percentiles <- n1\nn5 answer <- n4</plan>", SKILLS, bound="spectral_index",
                      verified=["n1"]).nodes == (Node("n4", "percentiles", ("n1",)), Node("n5", "answer", ("n4",)))


def test_tags_fences_and_a_missing_needs_are_accepted():
    fenced = "I will plan.\n```json\n" + _text([{"id": "n1", "tool": "spectral_index"}, _n("n2", "answer", "n1")],
                                                tags=False) + "\n```"
    assert [n.needs for n in parse_plan(fenced, SKILLS).nodes] == [(), ("n1",)]


@pytest.mark.parametrize("text, message", [
    ("<plan>first the index, then the mean</plan>", r"^the line 'first the index, then the mean' is not a node"),
    ("<plan>{\"skill\": \"spectral_index\", \"nodes\": [</plan>", r"^the plan is not a JSON object \(invalid JSON"),
    (_text([_n("n1", "answer")], skill=None), r"^the plan binds no skill: give one of spectral_index, water_flood"),
    ("<plan>\nn1 answer\n</plan>", r"^the plan binds no skill"),
    (_text([_n("n1", "answer")], skill="ndvi"), r"^no skill 'ndvi'; bind one of spectral_index, water_flood$"),
    (_text([]), r"^the plan has no nodes"),
    ("<plan>\nskill: spectral_index\n</plan>", r"^the plan has no nodes\. Write the plan as\n<plan>\nskill:"),
    (_text([_n(f"n{i}", "percentiles") for i in range(MAX_NODES)] + [_n("a", "answer")]),
     rf"^the plan has {MAX_NODES + 1} nodes; write at most {MAX_NODES}$"),
    (_text([{"id": "n1", "tool": "spectral_index", "needs": [], "arguments": {"scene": "S"}}, _n("n2", "answer")]),
     r"^node n1 has 'arguments': a node is only an id, a tool and the nodes it needs, with no paths or values"),
    ("<plan>\nskill: spectral_index\nn1 spectral_index scene=S2 index=NDVI\nn2 answer <- n1\n</plan>",
     r"^the line 'n1 spectral_index scene=S2 index=NDVI' is not a node: write `<id> <tool> <- <ids it needs>`"),
    # what Qwen2.5-Coder-0.5B wrote from the IF phrasing's steps (cut at 64 tokens): the values in the nodes
    ('<plan>\nn1 list_files {"scene": "S2_T33UUU_20170216", "index": "EVI"}\nn2 read_metadata {"name": "<artifact',
     r"^the line 'n1 list_files \{\"scene\": \"S2_T33UUU_20170216\", \"index\": \"EVI\"\}' is not a node: write "
     r"`<id> <tool> <- <ids it needs>`, one node a line, with no paths or values"),
    (_text([_n("n1", "threshold_mask"), _n("n2", "answer")]),
     r"^node n1 calls 'threshold_mask', which is not a tool of skill spectral_index; use one of answer, percentiles, "
     r"raster_stats, spectral_index$"),
    (_text([_n("n1", "spectral_index", "scene", "index"), _n("n2", "answer", "n1")]),
     r"^node n1 needs 'scene', 'index', which is not a node id: a node needs the ids of the nodes whose results it "
     r"uses \(here: n1, n2\), never argument names or values$"),
    ("<plan>\nskill: spectral_index\nn1 spectral_index <- scene, index\nn2 answer <- n1\n</plan>",
     r"^node n1 needs 'scene', 'index', which is not a node id"),
    (_text([_n("n1", "spectral_index"), _n("n1", "answer")]), r"^node id n1 is used twice"),
    (_text([_n("n1", "spectral_index")]), r"^the plan has 0 answer nodes"),
    (_text([_n("n1", "answer"), _n("n2", "raster_stats", "n1"), _n("n3", "answer", "n2")]), r"^the plan has 2 answer"),
    (_text([_n("n1", "answer"), _n("n2", "raster_stats", "n1")]), r"^node n2 needs the answer node n1"),
    (_text([_n("n1", "raster_stats", "n2"), _n("n2", "percentiles", "n1"), _n("n3", "answer", "n1")]),
     r"^the nodes n1, n2 need each other in a cycle"),
    (_text([{"id": "n1", "tool": "spectral_index", "needs": "n0"}, _n("n2", "answer")]),
     r'^node n1: "needs" is a list of node ids'),
    (_text(["spectral_index", _n("n2", "answer")]), r"^node 1 is not an object"),
])
def test_each_problem_is_one_message_that_says_what_to_change(text, message):
    with pytest.raises(PlanError, match=message):
        parse_plan(text, SKILLS)


def test_a_suffix_keeps_the_bound_skill_and_may_need_the_verified_prefix():
    suffix = parse_plan(_text([_n("n4", "percentiles", "n1"), _n("n5", "answer", "n4")], skill=None), SKILLS,
                        bound="spectral_index", verified=["n1"])
    assert suffix.skill == "spectral_index" and suffix.nodes[0].needs == ("n1",)
    with pytest.raises(PlanError, match=r"^node id n1 is a verified node's; give the new nodes new ids"):
        parse_plan(_text([_n("n1", "percentiles"), _n("n5", "answer", "n1")], skill=None), SKILLS,
                   bound="spectral_index", verified=["n1"])
    with pytest.raises(PlanError, match=r"^the skill spectral_index is bound; leave the skill out"):
        parse_plan(_text([_n("n5", "answer")], skill="water_flood"), SKILLS, bound="spectral_index")
    with pytest.raises(PlanError, match=r"Write the new suffix as\n<plan>\nn4 <tool> <- n1\n"):  # no skill line
        parse_plan("I have no idea", SKILLS, bound="spectral_index", verified=["n1"])


def test_the_skill_is_bound_first_and_the_skeleton_then_uses_its_tools():
    assert parse_skill("<plan>skill: water_flood</plan>", SKILLS) == "water_flood"
    assert parse_skill("The task needs spectral_index, so: <plan>spectral_index</plan>", SKILLS) == "spectral_index"
    with pytest.raises(PlanError, match=r"^no skill bound: name one of spectral_index, water_flood\. "
                                        r"Write <plan>skill: <skill id></plan>$"):
        parse_skill("<plan>skill: ndvi</plan>", SKILLS)
    plan = parse_plan("<plan>\nn1 spectral_index\nn2 answer <- n1\n</plan>", SKILLS, bound="water_flood")
    assert plan.skill == "water_flood" and [n.tool for n in plan.nodes] == ["spectral_index", "answer"]
    # what an untrained 0.5B planner wrote: the skills as nodes
    with pytest.raises(PlanError, match=r"^node n1 calls the skill water_flood, not a tool: the bound skill is "
                                        r"spectral_index, and a node calls one of its tools: answer, percentiles, "):
        parse_plan("<plan>\nn1 water_flood\nn2 answer <- n1\n</plan>", SKILLS, bound="spectral_index")
    with pytest.raises(PlanError, match=r"Write the plan as\n<plan>\nn1 <tool>\n"):  # bound: no skill line
        parse_plan("<plan>\nI do not know\n</plan>", SKILLS, bound="spectral_index")


def test_repair_archives_the_replaced_suffix_and_keeps_the_prefix():
    plan = parse_plan(_text([_n("n1", "spectral_index"), _n("n2", "raster_stats", "n1"), _n("n3", "answer", "n2")]),
                      SKILLS)
    wf = Workflow(plan.skill, list(plan.nodes))
    suffix = parse_plan(_text([_n("n4", "percentiles", "n1"), _n("n5", "answer", "n4")], skill=None), SKILLS,
                        bound="spectral_index", verified=["n1"])
    wf.repair(1, suffix)
    assert [n.id for n in wf.nodes] == ["n1", "n4", "n5"]
    assert [[n.id for n in rev] for rev in wf.archive] == [["n2", "n3"]]
    with pytest.raises(ValueError, match="repair"):
        wf.repair(4, suffix)
