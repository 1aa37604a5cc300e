"""DAPO dynamic sampling in the local recipe: dropped groups are replaced by fresh tasks, up to a cap."""

from types import SimpleNamespace

from omegaconf import OmegaConf

from earthrl.launch import train as train_mod
from earthrl.rewards.scoring import Scores
from earthrl.rollout.trajectory import Trajectory

# outcome per task: 2 samples each, (first, second) correct?
OUTCOMES = {"t0": (True, True), "t1": (False, False), "t2": (True, False), "t3": (False, False), "t4": (False, True),
            "t5": (True, False)}


def _recipe(enabled: bool, max_rounds: int):
    r = train_mod.LocalGRPORecipe(OmegaConf.create(
        {"seed": 0, "algorithm": {"filter_groups": {"enabled": enabled, "max_rounds": max_rounds}}}))
    r.inputs = SimpleNamespace(tasks=[{"id": f"t{i}"} for i in range(6)], spec=None)  # what sample_batch reads
    r.calls = []

    def rollout(step, tasks):
        r.calls.append([t["id"] for t in tasks])
        trajs = [Trajectory(task_id=t["id"], group=f"{step}/{t['id']}", prompt_ids=[1]) for t in tasks for _ in range(2)]
        return trajs, {"generate_s": 1.0, "generated_tokens": 10}
    r.rollout = rollout
    return r


def _score(trajs, tasks, spec):
    correct, seen = [], {}
    for t in trajs:
        k = seen.get(t.task_id, 0)
        seen[t.task_id] = k + 1
        correct.append(OUTCOMES[t.task_id][k % 2])
    return Scores(reward=[float(c) for c in correct], turn_rewards=[[] for _ in trajs], correct=correct)


def test_without_filtering_everything_is_kept_in_one_round(monkeypatch):
    monkeypatch.setattr(train_mod, "score", _score)
    r = _recipe(False, 3)
    batch = r.sample_batch(0, [{"id": "t0"}, {"id": "t1"}])
    assert batch.keep == [0, 1, 2, 3] and batch.filter_metrics == {} and len(r.calls) == 1


def test_dropped_groups_are_replaced_by_fresh_tasks_until_the_batch_is_full(monkeypatch):
    monkeypatch.setattr(train_mod, "score", _score)
    r = _recipe(True, 5)
    batch = r.sample_batch(0, [{"id": "t0"}, {"id": "t1"}])
    trajs, stats, scores, filt = batch.trajs, batch.engine_stats, batch.scores, batch.filter_metrics
    assert r.calls[0] == ["t0", "t1"]  # all-correct t0, all-wrong t1: both dropped
    assert all(t not in ("t0", "t1") for call in r.calls[1:] for t in call)  # fresh tasks only
    kept = {trajs[i].task_id for i in batch.keep}
    assert len(kept) == 2 and kept <= {"t2", "t4", "t5"}  # mixed groups only, tasks_per_step of them
    assert stats["generate_s"] == len(r.calls) and filt["filter/rounds"] == len(r.calls)
    assert filt["filter/kept_groups"] == 2 and filt["filter/all_correct_groups"] >= 1 and filt["filter/all_wrong_groups"] >= 1
    assert len(scores.correct) == len(trajs)


def test_the_round_cap_holds_and_an_all_filtered_step_keeps_nothing(monkeypatch):
    monkeypatch.setattr(train_mod, "score", _score)
    r = _recipe(True, 1)
    batch = r.sample_batch(0, [{"id": "t1"}, {"id": "t3"}])
    assert batch.keep == [] and batch.filter_metrics["filter/rounds"] == 1
    assert batch.filter_metrics["filter/all_wrong_groups"] == 2
