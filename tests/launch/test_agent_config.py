"""The ``agent`` config group: each preset's loop and action format, and the one-line refusals."""

import pytest
from hydra import initialize_config_dir

from earthrl.envs.errors import ConfigError
from earthrl.launch.config_schema import to_settings
from earthrl.launch.job_inputs import check_agent
from earthrl.launch.overrides import CONF_DIR, compose_job


@pytest.fixture(scope="module")
def hydra_ctx():
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        yield


@pytest.mark.parametrize("command", ["config", "eval"])
@pytest.mark.parametrize("preset, loop, action_format, max_turns", [
    ("react", "react", "json", 5), ("codeact", "react", "codeact", 5), ("hierarchical", "hierarchical", "hierarchical", 10),
    ("planner_executor", "planner_executor", "json", 12)])
def test_each_preset_picks_its_loop_and_action_format(hydra_ctx, command, preset, loop, action_format, max_turns):
    cfg = compose_job(command, ["logger=none", f"agent={preset}"])
    assert (cfg.agent.name, cfg.env.action_format, cfg.env.max_turns) == (loop, action_format, max_turns)
    check_agent(to_settings(cfg.agent), cfg.env.action_format, "local")


def test_an_unknown_loop_is_one_line_naming_the_known_ones(hydra_ctx):
    agent = to_settings(compose_job("config", ["agent.name=plan_and_act"]).agent)
    with pytest.raises(ConfigError, match=r"^agent.name=plan_and_act: unknown agent loop 'plan_and_act'; .*react"):
        check_agent(agent, "json", "local")


def test_a_loop_refuses_another_action_format_and_unknown_or_bad_options(hydra_ctx):
    agent = to_settings(compose_job("config", ["agent=hierarchical"]).agent)
    with pytest.raises(ConfigError, match=r"^agent=hierarchical writes hierarchical actions, not env.action_format=json; "
                                          r"set env=hierarchical$"):
        check_agent(agent, "json", "local")
    agent = to_settings(compose_job("config", ["agent=hierarchical", "+agent.options.verfy=false"]).agent)
    with pytest.raises(ConfigError, match=r"^agent.options.verfy: agent=hierarchical has no such option; its options are "
                                          r"verify, structured_state, cross_check, max_replans, memory_chars"):
        check_agent(agent, "hierarchical", "local")
    agent = to_settings(compose_job("config", ["agent=hierarchical", "agent.options.cross_check=twice"]).agent)
    with pytest.raises(ConfigError, match=r"^agent.options: cross_check=twice: use one of alternative, rerun$"):
        check_agent(agent, "hierarchical", "local")


def test_planner_executor_names_both_roles_stops_at_a_plan_and_checks_its_options(hydra_ctx):
    cfg = compose_job("config", ["agent=planner_executor", "agent.adapters.executor=exe"])
    assert dict(cfg.agent.adapters) == {"planner": "shared", "executor": "exe"}
    assert list(cfg.env.stop_strings) == ["</tool_call>", "</plan>"]
    with pytest.raises(ConfigError, match=r"^agent=planner_executor writes json actions, not env.action_format="
                                          r"codeact; set env=json$"):
        check_agent(to_settings(cfg.agent), "codeact", "local")
    agent = to_settings(compose_job("config", ["agent=planner_executor", "+agent.options.node_retries=1"]).agent)
    with pytest.raises(ConfigError, match=r"^agent.options.node_retries: agent=planner_executor has no such option; "
                                          r"its options are max_node_retries, max_repairs, max_plan_retries, "
                                          r"memory_chars, node_candidates"):
        check_agent(agent, "json", "local")
    agent = to_settings(compose_job("config", ["agent=planner_executor", "agent.options.max_repairs=-1"]).agent)
    with pytest.raises(ConfigError, match=r"^agent.options: max_repairs=-1: use a whole number ≥ 0$"):
        check_agent(agent, "json", "local")
    with pytest.raises(ConfigError, match="verl backend runs agent=react only"):
        check_agent(to_settings(compose_job("config", ["agent=planner_executor"]).agent), "json", "verl")


@pytest.mark.parametrize("preset, schema", [("hierarchical", "earthrl.rollout.agents.hirs:HiRSOptions"), (
    "planner_executor", "earthrl.rollout.agents.planner_executor:PlannerExecutorOptions")])
def test_a_presets_options_are_its_loops_defaults_so_they_take_no_plus(hydra_ctx, preset, schema):
    import dataclasses
    import importlib

    module, name = schema.split(":")
    defaults = dataclasses.asdict(getattr(importlib.import_module(module), name)())
    cfg = compose_job("config", [f"agent={preset}"])
    assert dict(cfg.agent.options) == defaults
    key, value = next((k, v) for k, v in defaults.items() if isinstance(v, int) and not isinstance(v, bool))
    assert compose_job("config", [f"agent={preset}", f"agent.options.{key}={value + 1}"]).agent.options[key] == value + 1


def test_the_verl_backend_runs_the_flat_loop_only(hydra_ctx):
    agent = to_settings(compose_job("config", ["agent.name=earthrl.rollout.agent_loop:run_episode"]).agent)
    check_agent(agent, "json", "local")  # a loop given as module:function runs on the local backend
    with pytest.raises(ConfigError, match="verl backend runs agent=react only.*backend=local"):
        check_agent(agent, "json", "verl")


def test_a_role_without_an_adapter_uses_the_shared_one():
    from earthrl.rollout.agent_loop import LoopConfig

    cfg = LoopConfig(max_turns=2, max_context_tokens=64, phrasing="IF", agent="react", options={},
                     adapters={"manager": "mgr"})
    assert (cfg.adapter("manager"), cfg.adapter("specialist")) == ("mgr", "shared")


ROLE_ADAPTERS = ["agent=hierarchical", "agent.adapters.manager=manager", "agent.adapters.specialist=specialist"]


@pytest.mark.parametrize("overrides, action_format, backend, refusal", [
    (ROLE_ADAPTERS, "hierarchical", "local", None),  # a context per role: one adapter each
    (ROLE_ADAPTERS, "hierarchical", "verl", r"^agent=hierarchical: the verl backend runs agent=react only"),  # the loop first
    (["+agent.adapters.manager=manager", "+agent.adapters.agent=other"], "json", "verl",
     r"^agent.adapters names 2 adapters \(manager, other\): the verl backend trains one adapter"),
    (["+agent.adapters.manager=manager", "+agent.adapters.agent=other"], "json", "local",
     r"^agent.adapters names 2 adapters \(manager, other\) but agent=react keeps every role's turns in one context"),
    (["agent=hierarchical", "agent.adapters.manager=my-manager"], "hierarchical", "local",
     r"^agent.adapters.manager='my-manager': an adapter name must be an identifier"),
])
def test_adapters_per_role_are_checked_before_anything_starts(hydra_ctx, overrides, action_format, backend, refusal):
    agent = to_settings(compose_job("config", overrides).agent)
    if refusal is None:
        check_agent(agent, action_format, backend)
        return
    with pytest.raises(ConfigError, match=refusal):
        check_agent(agent, action_format, backend)


def test_a_role_left_out_of_several_adapters_gets_the_shared_one():
    from earthrl.models.lora import adapter_names

    assert adapter_names({"manager": "mgr"}, ("manager", "specialist")) == ("mgr", "shared")
    assert adapter_names({"manager": "mgr", "specialist": "mgr"}, ("manager", "specialist")) == ("mgr",)
    assert adapter_names({}, ("manager", "specialist")) == ("shared",)
    from earthrl.rollout.agent_loop import LoopConfig

    # a one-adapter run: every role, named or not, generates with its one adapter
    one = LoopConfig(max_turns=2, max_context_tokens=64, phrasing="IF", agent="react", options={},
                     adapters={"manager": "mgr"}, default_adapter="mgr")
    assert (one.adapter("manager"), one.adapter("specialist")) == ("mgr", "mgr")


def test_an_eval_folder_recorded_with_another_loop_or_options_is_not_resumed(hydra_ctx, tmp_path):
    import json

    from earthrl.launch.eval import EvalInputs, EvalJob

    def job(*overrides):
        return EvalJob(compose_job("eval", ["model=tiny-llama", f"eval.output_dir={tmp_path}", *overrides]))

    inputs = EvalInputs(output_dir=tmp_path, tasks=[], model_path=tmp_path)
    (tmp_path / "trajectories.jsonl").write_text("{}\n")
    (tmp_path / "eval_config.json").write_text(json.dumps(job("agent=hierarchical").rollout_fingerprint(inputs)))
    job("agent=hierarchical").check_resumable(inputs)  # the same loop and options: resumed
    with pytest.raises(ConfigError, match=f"^{tmp_path} holds trajectories recorded with another "
                                          "agent.options.verify; set eval.resume=false"):
        job("agent=hierarchical", "agent.options.verify=false").check_resumable(inputs)  # the paper's ablation row
    # a folder recorded before the loops were named holds the flat loop's trajectories
    old = job().rollout_fingerprint(inputs)
    del old["agent"]
    (tmp_path / "eval_config.json").write_text(json.dumps(old))
    job().check_resumable(inputs)
    with pytest.raises(ConfigError, match="another agent.name;"):
        job("agent.name=planner_executor").check_resumable(inputs)
    # each loop and action format has a default folder of its own
    names = {str(compose_job("eval", ["model=tiny-llama", f"agent={a}"]).experiment_name) for a in
             ("react", "codeact", "hierarchical", "planner_executor")}
    assert names == {"eval-tiny-llama-earthrl-mini-core-react-json", "eval-tiny-llama-earthrl-mini-core-react-codeact",
                     "eval-tiny-llama-earthrl-mini-core-hierarchical-hierarchical",
                     "eval-tiny-llama-earthrl-mini-core-planner_executor-json"}


def test_an_options_typo_is_named_as_one(hydra_ctx):
    with pytest.raises(ConfigError) as err:
        compose_job("eval", ["agent=hierarchical", "agent.options.verfy=false"])
    assert str(err.value) == "unknown config key 'agent.options.verfy'; did you mean 'agent.options.verify'?"
    with pytest.raises(ConfigError) as err:  # nothing close: the loop's options, and the + of a loop's own option
        compose_job("eval", ["agent=planner_executor", "agent.options.zzz=1"])
    assert str(err.value) == ("unknown config key 'agent.options.zzz': agent=planner_executor has no option 'zzz' (its "
                              "options are max_node_retries, max_plan_retries, max_repairs, memory_chars, "
                              "node_candidates; docs/agents.md); a loop's own new option takes a +: +agent.options.zzz=…")


def test_a_checkpoints_evaluation_has_a_default_folder_of_its_own(hydra_ctx):
    from earthrl.launch.eval import EvalJob

    def folder(*overrides):
        return EvalJob(compose_job("eval", ["model=tiny-llama", *overrides])).default_output_dir()

    base = folder()
    assert base.as_posix() == "runs/eval/eval-tiny-llama-earthrl-mini-core-react-json"
    trained = folder("eval.checkpoint='runs/grpo/a=1,b=2/checkpoints/step_000003'")
    assert trained == base / "a=1,b=2-step_000003"


def test_node_candidates_are_for_training_the_executor_node_estimator_only(hydra_ctx):
    from earthrl.launch.job_inputs import check_node_candidates

    base = ["agent=planner_executor", "agent.options.node_candidates=4"]
    check_node_candidates(compose_job("config", [*base, "algorithm=executor_tiered"]), "train")
    check_node_candidates(compose_job("eval", ["agent=planner_executor"]), "eval")  # G = 1: nothing to refuse
    with pytest.raises(ConfigError, match=r"^agent.options.node_candidates=4: node-level GRPO's candidate calls are "
                                          r"learnt by algorithm.estimator=executor_node only, not grpo; use "
                                          r"algorithm=executor_tiered or set agent.options.node_candidates=1$"):
        check_node_candidates(compose_job("config", [*base, "algorithm=grpo"]), "train")
    with pytest.raises(ConfigError, match=r"^agent.options.node_candidates=4: the extra calls of node-level GRPO are "
                                          r"for training; `earthrl eval` plays one call per node: set "
                                          r"agent.options.node_candidates=1$"):
        check_node_candidates(compose_job("eval", base), "eval")


def test_codeact_refuses_a_toolset_whose_tool_names_are_not_python_names(hydra_ctx):
    from earthrl.launch.job_inputs import check_env

    check_env(to_settings(compose_job("config", ["env.toolset=earthbench"]).env))  # json actions take any name
    env = to_settings(compose_job("config", ["env=codeact", "env.toolset=earthbench"]).env)
    with pytest.raises(ConfigError, match=r"^env.toolset=earthbench has tools that are not Python function names "
                                          r"\(.*mcp-base_get_filelist.*\), which codeact calls as functions; use "
                                          r"env=json \(or env=hierarchical\) with this toolset$"):
        check_env(env)
