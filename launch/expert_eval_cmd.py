"""``earthrl expert-eval``: held-out Workflow MCQ / Workflow Order accuracy of one or more models (HiRS-Agent
Expert-tuning; items from ``earthrl sft sft=expert_tuning`` or ``earthrl sft-data build --source expert_tuning``).

    earthrl expert-eval --items runs/<exp>/data/expert_tuning_json_IF_all_s0.heldout.jsonl \\
        --model qwen2.5-coder-0.5b --model runs/<exp>/export --out expert_eval.json

Each model answers every item by greedy decoding with the HF engine (:class:`~earthrl.rollout.hf_engine.HFEngine`,
temperature 0) from the item's chat prompt; answers are scored by :mod:`earthrl.rewards.metrics.expert_items`
(letter parsing, ordering exact match) and reported per kind and overall with bootstrap 95% intervals.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from earthrl.envs.errors import ConfigError
from earthrl.envs.paths import model_dir
from earthrl.launch.arg_parser import OneLineParser
from earthrl.rewards.metrics.expert_items import accuracy, score_answer
from earthrl.rollout.sft_data import read_jsonl


def resolve_model(name: str) -> Path:
    """A Hugging Face folder: ``name`` itself when it has a ``/``, else the fetched model of that name.

    Raises:
        ConfigError: no ``config.json`` there.
    """
    path = Path(name).expanduser() if "/" in name else model_dir(name)
    if not (path / "config.json").is_file():
        raise ConfigError(f"--model {name}: no config.json at {path}; give a fetched model name "
                          "(`earthrl fetch model NAME`) or a merged model folder (an SFT run's export/)")
    return path


def load_items(path: Path) -> list:
    """The held-out records of ``path`` (each with ``answer={"kind", "key", "options"}``).

    Raises:
        ConfigError: no such file, a line that is not a record, or a record without an MCQ/ordering answer.
    """
    if not path.is_file():
        raise ConfigError(f"--items {path}: no such file; it is written by `earthrl sft sft=expert_tuning` "
                          "(<output_dir>/data/*.heldout.jsonl) or `earthrl sft-data build --source expert_tuning`")
    try:
        recs = read_jsonl(path)
    except ValueError as exc:
        raise ConfigError(f"--items {exc}") from None
    if not recs:
        raise ConfigError(f"--items {path}: no held-out item (too few tasks to hold out a group: build the data over "
                          "more tasks, e.g. sft.data.max_tasks=null)")
    bad = [r.task_id for r in recs if (r.answer or {}).get("kind") not in ("mcq", "order")]
    if bad:
        raise ConfigError(f"--items {path}: {len(bad)} record(s) without an MCQ/ordering answer (first: {bad[0]}); "
                          "give the .heldout.jsonl file of the Expert-tuning data")
    return recs


def answer_items(model: Path, recs: list, max_new_tokens: int, batch: int) -> list[str]:
    """Greedy answers of the model in folder ``model`` to ``recs``' prompts (system, user)."""
    from transformers import AutoTokenizer  # lazy: transformers and torch at import

    from earthrl.rollout.chat import ChatCodec  # lazy: with the engine below, only when a model answers
    from earthrl.rollout.hf_engine import HFEngine, SamplingParams  # lazy: torch at import; --help stays fast

    codec = ChatCodec(AutoTokenizer.from_pretrained(str(model)))
    engine = HFEngine(str(model), stop_ids=[codec.eos_id], min_shared_prefix=0)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, top_p=1.0)
    prompts = [codec.prompt_ids(r.system, r.user) for r in recs]
    out = []
    for k in range(0, len(prompts), batch):
        for res in engine.generate(prompts[k:k + batch], params):
            out.append(codec.tokenizer.decode(res["response_ids"], skip_special_tokens=True))
    return out


def evaluate(model: Path, recs: list, max_new_tokens: int = 24, batch: int = 8) -> dict:
    """``{"model", "all", "mcq", "order", "answers"}``: accuracy with its 95% interval overall and per kind
    (:func:`earthrl.rewards.metrics.expert_items.accuracy`), and each item's answer and verdict."""
    texts = answer_items(model, recs, max_new_tokens, batch)
    rows = [{"id": r.task_id, "kind": r.answer["kind"], "key": r.answer["key"], "text": t,
             "correct": score_answer(r.answer["kind"], t, r.answer["key"], len(r.answer["options"]))}
            for r, t in zip(recs, texts)]
    report = {"model": str(model), "all": accuracy([r["correct"] for r in rows])}
    for kind in ("mcq", "order"):
        report[kind] = accuracy([r["correct"] for r in rows if r["kind"] == kind])
    report["answers"] = rows
    return report


def line(report: dict) -> str:
    """One table row: the model and its accuracies with intervals."""
    def cell(a):
        return f"{a['accuracy']:.3f} [{a['ci95'][0]:.3f}, {a['ci95'][1]:.3f}] (n={a['n']})"
    return f"{report['model']} | {cell(report['all'])} | {cell(report['mcq'])} | {cell(report['order'])}"


def main(argv: list[str]) -> int:
    """Entry point of ``earthrl expert-eval``; returns the exit status (2 on a usage error)."""
    p = OneLineParser(prog="earthrl expert-eval", description=__doc__.split("\n\n")[0])
    p.add_argument("--items", type=Path, required=True, help="held-out Expert-tuning items (.heldout.jsonl)")
    p.add_argument("--model", action="append", required=True,
                   help="fetched model name or HF folder (e.g. an SFT run's export/); repeat to compare")
    p.add_argument("--max-new-tokens", type=int, default=24)
    p.add_argument("--out", type=Path, default=None, help="JSON report (accuracies, intervals, every answer)")
    args = p.parse_args(argv)
    try:
        recs = load_items(args.items)
        models = [resolve_model(m) for m in args.model]
        if args.out is not None and args.out.is_dir():
            raise ConfigError(f"--out {args.out} is a folder; name a .json file")
    except ConfigError as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        return 2
    reports = []
    print("model | all | mcq | order   (accuracy [bootstrap 95% CI] (n))")
    for m in models:
        reports.append(evaluate(m, recs, args.max_new_tokens))
        print(line(reports[-1]), flush=True)
    if args.out is not None:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(reports, indent=2))
        print(f"report -> {args.out}")
    return 0
