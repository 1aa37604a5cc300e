"""`earthrl sft`: LoRA SFT warm start on multi-turn trajectories with per-turn label masks.

``validate → data → setup → train → checkpoint``: the trajectories (``sft.data.path``, or built from
the train split by the source ``sft.data.source`` names, or else the one ``sft.mode`` needs: oracle for ``oracle``,
failure-aware for ``unmasked``/``masked``; Earth-Agent-Pro's planner and executor turns for ``planner``,
:mod:`earthrl.rollout.sft_planner`; HiRS Expert-tuning's chat items for ``expert_tuning``,
:mod:`earthrl.rollout.sft_expert`; the teacher loop's hint-guided re-explorations for ``teacher_loop``,
:mod:`earthrl.rollout.sft_teacher_loop`, the teacher ``sft.data.teacher``;
:func:`earthrl.launch.sft_data.build_records`) are tokenised with the model's chat codec into the agent
loop's token layout and labelled per turn (:mod:`earthrl.rollout.sft_tokens`); the same :class:`~earthrl.models.policy.Policy` and AdamW as
``earthrl train`` take ``epochs × ⌈N / global_batch⌉`` steps of :func:`~earthrl.algorithms.sft_loss.sft_update`
under the cosine schedule, on ``cluster.device``. Under a multi-process launcher with
``cluster.deepspeed.zero_stage`` set, the processes share each global batch through DeepSpeed ZeRO
(:mod:`earthrl.launch.deepspeed_config`, :func:`~earthrl.algorithms.sft_loss.sft_update_deepspeed`); process 0
alone builds the data and writes the run folder. The checkpoint is written by
:func:`~earthrl.models.checkpoint.save_checkpoint` (adapter, optimizer, meta), so ``earthrl train
trainer.init_from=<it>``, ``earthrl eval eval.checkpoint=<it>`` and ``earthrl export <it>`` take it.
Config: ``conf/sft.yaml`` and ``conf/sft/{cpu,paper}.yaml`` (docs/sft.md).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from omegaconf import DictConfig, OmegaConf
from tqdm import tqdm

from earthrl.algorithms.sft_loss import cosine_lr, sft_eval_loss, sft_update, sft_update_deepspeed
from earthrl.envs.core.sops import question_of, retriever
from earthrl.envs.errors import ConfigError
from earthrl.envs.kill_points import kill_point
from earthrl.launch import lifecycle
from earthrl.launch.compute import job_device, job_dtype
from earthrl.launch.config_schema import to_settings
from earthrl.launch.deepspeed_config import Launch, deepspeed_config, launcher_process
from earthrl.launch.job_inputs import (
    check_job_config,
    check_sops,
    data_root,
    holds_run,
    load_tasks,
    model_path,
    start_run_folder,
    teacher_path,
)
from earthrl.launch.sft_data import build_records, counts_text
from earthrl.launch.sft_deepspeed import DeepSpeedJob
from earthrl.models.checkpoint import save_checkpoint
from earthrl.models.export import export_merged
from earthrl.models.lora import merge_lora
from earthrl.models.policy import Policy
from earthrl.rollout.agents.plan import PLAN_STOP
from earthrl.rollout.chat import ChatCodec
from earthrl.rollout.run_log import open_run_log
from earthrl.rollout.run_logger import RunLogger
from earthrl.rollout.runtime import sop_settings
from earthrl.rollout.sft_craft import craft_records
from earthrl.rollout.sft_data import SOURCES, read_jsonl, write_jsonl
from earthrl.rollout.sft_expert import SOURCE as EXPERT
from earthrl.rollout.sft_expert import build_expert
from earthrl.rollout.sft_planner import spread
from earthrl.rollout.sft_teacher import EndpointError, check_reachable
from earthrl.rollout.sft_teacher_loop import SOURCE as LOOP
from earthrl.rollout.sft_tokens import MASK_MODES, encode

SOURCE_OF_MODE = {"oracle": "oracle", "unmasked": "failure", "masked": "failure"}


def endpoint_down(exc: EndpointError) -> ConfigError:
    """The one line of a teacher endpoint that cannot be reached or answers with an error."""
    return ConfigError(f"sft.data.teacher.base_url: {exc}; start the endpoint (e.g. `earthrl serve`) or fix the URL")


def check_teacher(cfg: DictConfig) -> None:
    """The checks of ``sft.data.teacher`` before anything is written: a teacher path only where a local teacher
    reads it; an endpoint teacher's URL and model given, and its host reachable; a local teacher's folder a model.

    Raises:
        ConfigError: one line naming the setting and the fix.
    """
    data, teacher = cfg.sft.data, cfg.sft.data.teacher
    plays = data.source == LOOP and not data.path  # a teacher plays (no prebuilt data)
    if plays and teacher.engine == "openai" and not (teacher.base_url and teacher.model):
        raise ConfigError("sft.data.source=teacher_loop with sft.data.teacher.engine=openai needs "
                          "sft.data.teacher.base_url=URL and sft.data.teacher.model=NAME (or engine hf: the model "
                          "being trained)")
    if teacher.path and (data.source != LOOP or teacher.engine == "openai"):
        raise ConfigError(f"sft.data.teacher.path={teacher.path} is read only by a local teacher (sft=teacher_loop "
                          f"with sft.data.teacher.engine=hf or vllm), and this run has sft.data.source="
                          f"{data.source} with engine {teacher.engine}: drop sft.data.teacher.path, "
                          "or use sft=teacher_loop with engine hf or vllm")
    if plays and teacher.engine == "openai":
        try:  # a teacher endpoint that is not running stops the run before its folder is written
            check_reachable(str(teacher.base_url))
        except EndpointError as exc:
            raise endpoint_down(exc) from None
    elif plays:
        teacher_path(cfg, OmegaConf.to_container(teacher))  # a teacher folder that is not one stops here


@dataclass(frozen=True)
class SFTInputs:
    """What :meth:`SFTRecipe.validate` resolved and checked for one ``earthrl sft`` job (nothing was written
    to get it)."""

    model_path: Path  # the model folder
    data_root: Path  # the data folder of tasks.data
    output_dir: Path  # the run folder, sft.output_dir
    lora: dict  # the adapter's settings, model.lora (merge_lora)
    device: str  # "cpu" or "cuda": cluster.device resolved on this machine
    device_why: str  # why, for the start-up line
    dtype: str  # the compute dtype model.dtype resolves to on this device
    dtype_why: str  # why, for the start-up line
    given_records: list | None  # the trajectory records of sft.data.path, read and checked; None without it
    tasks: list[dict]  # the train split's tasks the records are built from ([] with sft.data.path)
    launch: Launch | None = None  # this process's place under a multi-process launcher; None: one process
    deepspeed: dict | None = None  # the DeepSpeed JSON config when the job trains through DeepSpeed

    @property
    def leader(self) -> bool:
        """Whether this process writes the run folder (the only one, or process 0 of a launcher's job)."""
        return self.launch is None or self.launch.rank == 0


class SFTRecipe:
    """LoRA SFT on one machine (module doc). Args: cfg, the composed ``conf/sft.yaml``.

    ``validate()`` returns the job's :class:`SFTInputs`; ``setup(inputs)`` prepares data, policy and
    optimizer from them; ``train()`` runs the steps.
    """

    def __init__(self, cfg: DictConfig) -> None:
        self.cfg = cfg
        self.inputs: SFTInputs | None = None  # what validate() returned, given to setup()
        self.config_dict: dict | None = None  # the resolved config (config.yaml; the logger and checkpoints record it)
        self.data_file: str | None = None  # the trajectories file the examples came from
        self.examples: list = []  # the tokenised, labelled examples (rollout.sft_tokens.encode)
        self.epoch_examples: list[list] = []  # with CRAFT: each epoch's examples, their contexts drawn anew
        self.counts: dict = {}  # encode's counts (examples, dropped, labelled tokens, …)
        self.policy: Policy | None = None
        self.optimizer: torch.optim.AdamW | None = None
        self.ds: DeepSpeedJob | None = None  # this process's part of a DeepSpeed job (launch/sft_deepspeed.py)
        self.engine = None  # the DeepSpeed engine around policy.model (a DeepSpeed job only)
        self.logger: RunLogger | None = None  # process 0 only
        self.checkpoint_path: Path | None = None  # the final checkpoint, written by train()

    def validate(self) -> SFTInputs:
        """Check config, model, data, tasks and the data file before anything is written; returns what
        it resolved.

        Raises:
            ConfigError: one line naming the field and the fix.
        """
        cfg = self.cfg
        check_job_config(cfg, "sft")
        if cfg.sft.mode not in MASK_MODES:
            raise ConfigError(f"sft.mode={cfg.sft.mode}: use one of {', '.join(MASK_MODES)}")
        if cfg.sft.data.source in ("planner", "simcraft") and cfg.env.action_format != "json":
            raise ConfigError(f"sft.data.source={cfg.sft.data.source} with env={cfg.env.action_format}: its records "
                              "hold json calls; use env=json")
        check_teacher(cfg)
        if cfg.sft.craft.enabled:
            check_sops(to_settings(cfg.env).sops, needed_by="sft.craft.enabled=true")
        model = model_path(cfg)
        root = data_root(cfg)
        output_dir = Path(cfg.sft.output_dir)
        if holds_run(output_dir):
            raise ConfigError(f"sft.output_dir={output_dir} already holds an SFT run (checkpoints/ or "
                              "metrics.jsonl): choose another (or an empty) sft.output_dir; its trajectories "
                              "can be reused with sft.data.path=FILE (they are in its data/)")
        path = cfg.sft.data.path
        if path and not Path(path).is_file():
            raise ConfigError(f"sft.data.path={path}: no such file; build one with `earthrl sft-data build "
                              f"--source {'|'.join(SOURCES)} --out FILE` or set sft.data.path=null")
        given = None
        if path:  # every line a trajectory record, before the run folder is written (kept for records())
            try:
                given = read_jsonl(Path(path))
            except ValueError as exc:
                raise ConfigError(f"sft.data.path={exc}; give a file that `earthrl sft-data build` wrote") from None
        tasks = [] if path else load_tasks(cfg.tasks.name, "train", root)
        device, device_why = job_device(cfg)
        dtype, dtype_why = job_dtype(cfg, device)
        launch, ds = launcher_process(), None
        zero = cfg.cluster.deepspeed.zero_stage
        if launch is not None and zero is not None:
            ds = deepspeed_config(to_settings(cfg.cluster.deepspeed), to_settings(cfg.sft), dtype, launch.world_size)
        elif launch is not None and launch.world_size > 1:
            raise ConfigError(f"earthrl sft runs as {launch.world_size} processes (WORLD_SIZE) but "
                              "cluster.deepspeed.zero_stage is null: set it (e.g. cluster.deepspeed.zero_stage=2, or "
                              "a cluster card that sets it: cluster=a100x8), or start one process")
        return SFTInputs(model_path=model, data_root=root, output_dir=output_dir,
                         lora=merge_lora(to_settings(cfg.model.lora), to_settings(cfg.sft.lora)),
                         device=device, device_why=device_why, dtype=dtype, dtype_why=dtype_why, given_records=given,
                         tasks=tasks, launch=launch, deepspeed=ds)

    def records(self):
        """The SFT trajectories: ``sft.data.path``, or built into ``<output_dir>/data/<source>_<format>.jsonl``
        (reused when that file exists)."""
        cfg, data, inputs = self.cfg, self.cfg.sft.data, self.inputs
        if data.path:
            return inputs.given_records, str(data.path)  # read and checked by validate()
        source = str(data.source or SOURCE_OF_MODE[str(cfg.sft.mode)])
        n = data.max_tasks
        tag = f"{source}_{cfg.env.action_format}_{data.phrasing}_{n or 'all'}_s{data.seed}"
        if source == LOOP:  # another teacher builds other data: its settings name the file
            tag += "_t" + hashlib.sha256(json.dumps(OmegaConf.to_container(data.teacher, resolve=True),
                                                    sort_keys=True).encode()).hexdigest()[:8]
        cache = inputs.output_dir / "data" / f"{tag}.jsonl"
        if cache.is_file():
            return read_jsonl(cache), str(cache)
        if source == "planner":  # a few tasks cover every workflow skeleton
            tasks = spread(inputs.tasks, int(n) if n else None)
        else:
            tasks = inputs.tasks[: int(n)] if n else inputs.tasks
        t0 = time.perf_counter()
        if source == EXPERT:  # plain chat items, no environment; the held-out 20% beside them for the MCQ/ordering eval
            recs, held, counts = build_expert(tasks, seed=int(data.seed))
            write_jsonl(held, cache.with_name(cache.stem + ".heldout.jsonl"))
            if not held:
                print(f"sft data: no held-out Expert-tuning item from {len(tasks)} train tasks (20% of too few groups); "
                      "`earthrl expert-eval` needs more: sft.data.max_tasks=null", flush=True)
        else:
            teacher = None
            if source == LOOP:  # the teacher: sft.data.teacher.path or the model being trained (hf, vllm), or an endpoint
                teacher = {**OmegaConf.to_container(data.teacher), "seed": int(data.seed),
                           "api_key": os.environ.get("OPENAI_API_KEY")}
            try:
                recs, counts = build_records(source, cfg, tasks, seed=int(data.seed), phrasing=str(data.phrasing),
                                             teacher=teacher)
            except EndpointError as exc:  # a teacher endpoint down or refusing: one line, as a bad setting is
                raise endpoint_down(exc) from None
            if source == LOOP:  # what became of every task, beside the data
                cache.parent.mkdir(parents=True, exist_ok=True)
                cache.with_name(cache.stem + ".counts.json").write_text(json.dumps(counts, indent=1) + "\n")
        write_jsonl(recs, cache)
        print(f"sft data: {len(recs)} {source} trajectories from {len(tasks)} train tasks in "
              f"{time.perf_counter() - t0:.1f}s ({counts_text(counts)}) -> {cache}",
              flush=True)
        return recs, str(cache)

    def setup(self, inputs: SFTInputs) -> None:
        """Seed, data, tokenised examples, policy and optimizer, from what :meth:`validate` returned. In a
        DeepSpeed job every process joins the process group first; process 0 writes the run folder and builds
        the data while the others wait, then read it."""
        from transformers import AutoTokenizer  # lazy: transformers at import

        cfg = self.cfg
        self.inputs = inputs
        if inputs.deepspeed is not None:
            self.ds = DeepSpeedJob(inputs.launch, inputs.deepspeed, inputs.device)
            self.ds.start()
        self.config_dict = start_run_folder(cfg, inputs.output_dir, write=inputs.leader)
        if inputs.leader:
            lifecycle.attach(inputs.output_dir)
            open_run_log(inputs.output_dir)  # third-party logs and warnings there, not on the terminal
        zero = cfg.cluster.deepspeed.zero_stage
        if zero is not None and self.ds is None:
            self.say(f"cluster.deepspeed.zero_stage={zero}: DeepSpeed runs under a multi-process launcher "
                     "(`deepspeed --no_local_rank -m earthrl.launch sft …` or `torchrun -m earthrl.launch sft …`); "
                     "this single process trains without it")
        if self.ds is not None and not inputs.leader:
            self.ds.barrier()  # process 0 builds the data
        recs, self.data_file = self.records()
        if self.ds is not None and inputs.leader:
            self.ds.barrier()
        tok = AutoTokenizer.from_pretrained(str(inputs.model_path))
        # a planner turn ends in </plan>, where the planner_executor loop's engine stops (conf/agent)
        stops = (*cfg.env.stop_strings, *((PLAN_STOP,) if any(r.source == "planner" for r in recs) else ()))
        if cfg.sft.craft.enabled:
            self.epoch_examples = self.craft_examples(recs, ChatCodec(tok), stops)
            self.examples, self.counts = self.epoch_examples[0]
            self.epoch_examples = [ex for ex, _ in self.epoch_examples]
        else:
            self.examples, self.counts = encode(recs, ChatCodec(tok), str(cfg.sft.mode), stops,
                                                max_tokens=int(cfg.sft.data.max_tokens))
        if not recs:
            raise ConfigError(f"no SFT trajectory in {self.data_file}: the data builder kept none (its counts are "
                              "printed above and written beside it); a teacher that solves no task needs a stronger "
                              "sft.data.teacher or more sft.data.max_tasks")
        if not self.examples:
            raise ConfigError(f"no SFT example left from {self.data_file} ({self.counts}); raise sft.data.max_tokens "
                              "or build more data")
        self.say(f"sft examples ({cfg.sft.mode}): " + ", ".join(f"{k} {v}" for k, v in self.counts.items()))
        self.say(f"cluster.device={cfg.cluster.device} -> {inputs.device} ({inputs.device_why}); "
                 f"model.dtype={cfg.model.dtype} -> {inputs.dtype} ({inputs.dtype_why})")
        self.policy = Policy(str(inputs.model_path), inputs.lora, dtype=inputs.dtype,
                             gradient_checkpointing=bool(cfg.model.gradient_checkpointing), device=inputs.device)
        if self.ds is not None:
            self.engine = self.ds.wrap(self.policy)
            ds = inputs.deepspeed
            self.say(f"DeepSpeed ZeRO-{self.ds.stage} on {inputs.launch.world_size} processes: global batch "
                     f"{ds['train_batch_size']} = {ds['train_micro_batch_size_per_gpu']} x "
                     f"{ds['gradient_accumulation_steps']} accumulation steps x {inputs.launch.world_size}")
            if inputs.leader:
                (inputs.output_dir / "deepspeed.json").write_text(json.dumps(ds, indent=2))
        else:
            self.optimizer = torch.optim.AdamW(self.policy.trainable_parameters(), lr=float(cfg.sft.lr),
                                               weight_decay=float(cfg.sft.weight_decay))
        if inputs.leader:
            self.logger = RunLogger(inputs.output_dir, cfg.logger.project, cfg.experiment_name, cfg.logger.mode,
                                    self.config_dict)

    def craft_examples(self, recs: list, codec: ChatCodec, stops: tuple) -> list[tuple[list, dict]]:
        """Per epoch, the examples of ``recs`` with CRAFT contexts (:func:`~earthrl.rollout.sft_craft.craft_records`:
        the SOPs retrieved once for each question, perturbed with probability ``sft.craft.epsilon`` by a generator
        seeded with ``(sft.craft.seed, epoch)``) and encode's counts."""
        cfg, craft = self.cfg, self.cfg.sft.craft
        settings = sop_settings(to_settings(cfg.env).sops)
        retr = retriever(**settings)
        found = [[s for s, _ in retr.retrieve(question_of(r.user))] for r in recs]
        self.say(f"sft craft: SOPs retrieved for {sum(map(bool, found))} of {len(recs)} trajectories "
                 f"(top_k {settings['top_k']}, threshold {settings['threshold']})")
        out = []
        for epoch in range(int(cfg.sft.epochs)):
            rng = np.random.default_rng([int(craft.seed), epoch])
            crafted, kinds = craft_records(recs, found, retr.sops, rng, float(craft.epsilon), settings["top_k"])
            self.say(f"sft craft epoch {epoch + 1}: contexts " + ", ".join(f"{k} {v}" for k, v in kinds.items()))
            out.append(encode(crafted, codec, str(cfg.sft.mode), stops, max_tokens=int(cfg.sft.data.max_tokens)))
        return out

    def say(self, line: str) -> None:
        """Print ``line`` once per job (process 0 of a multi-process job), above the step bar while one runs."""
        if self.inputs is None or self.inputs.leader:
            tqdm.write(line)
            sys.stdout.flush()

    def batches(self) -> list[list]:
        """The global batches of every epoch in order (a seeded shuffle per epoch; with CRAFT, of that epoch's
        contexts), capped by ``sft.max_steps``.
        In a DeepSpeed job an epoch's last, short batch is filled up with the epoch's first examples (as torch's
        ``DistributedSampler`` pads), since every process must run the same number of micro-batches."""
        s = self.cfg.sft
        out = []
        gb = int(s.global_batch)
        for epoch in range(int(s.epochs)):
            pool = self.epoch_examples[epoch] if self.epoch_examples else self.examples
            order = np.random.default_rng([int(self.cfg.seed), epoch]).permutation(len(pool))
            for k in range(0, len(order), gb):
                idx = order[k:k + gb]
                if self.ds is not None and len(idx) < gb:
                    idx = np.concatenate([idx, np.resize(order, gb - len(idx))])
                out.append([pool[i] for i in idx])
        return out[: int(s.max_steps)] if s.max_steps else out

    def step(self, batch: list, lr: float) -> dict:
        """One optimizer step over the global ``batch``: :func:`sft_update`, or in a DeepSpeed job
        :func:`sft_update_deepspeed` on this process's share with the loss summed over the processes."""
        s = self.cfg.sft
        if self.engine is None:
            return sft_update(self.policy, self.optimizer, batch, int(s.micro_batch_size), float(s.grad_clip), lr=lr)
        num_tokens = sum(sum(e.label_mask) for e in batch)
        m = sft_update_deepspeed(self.policy, self.engine, self.ds.share(batch), int(s.micro_batch_size), num_tokens,
                                 self.inputs.launch.world_size, lr=lr)
        m["loss"] = self.ds.sum(m["loss"])
        return m

    def train(self) -> dict:
        """Every step of :meth:`batches`; returns the summary (first/last loss, the first batch's loss
        before and after, seconds)."""
        s = self.cfg.sft
        batches = self.batches()
        total, mb = len(batches), int(s.micro_batch_size)
        t0 = time.perf_counter()
        history = []
        bar = tqdm(total=total, desc="sft", unit="step", file=sys.stdout, dynamic_ncols=True,
                   disable=not self.inputs.leader)  # one bar per job: process 0's
        for k, batch in enumerate(batches):
            lifecycle.at(f"step {k + 1}")
            t = time.perf_counter()
            lr = cosine_lr(k, total, float(s.lr), float(s.lr_min), int(s.warmup_steps))
            kill_point("update", k + 1)
            m = self.step(batch, lr)
            m["step_s"] = time.perf_counter() - t
            history.append(m)
            if self.logger is not None:
                self.logger.log({f"sft/{key}": v for key, v in m.items()}, step=k + 1)
            self.say(f"sft step {k + 1}/{total} | loss {m['loss']:.4f} | lr {lr:.2e} | grad {m['grad_norm']:.3f} | "
                     f"{int(m['tokens'])} tok | {m['step_s']:.1f}s")
            bar.update(1)
            if int(s.save_every) > 0 and (k + 1) % int(s.save_every) == 0 and k + 1 < total:
                self.checkpoint(k + 1)
        bar.close()
        after = sft_eval_loss(self.policy, batches[0], mb)
        summary = {"steps": total, "examples": len(self.examples), "train_s": time.perf_counter() - t0,
                   "loss_first": history[0]["loss"], "loss_last": history[-1]["loss"],
                   "first_batch_loss_before": history[0]["loss"], "first_batch_loss_after": after,
                   "data_file": self.data_file, **{f"data/{k}": v for k, v in self.counts.items()}}
        self.checkpoint_path = self.checkpoint(total)
        if self.inputs.leader:
            (self.inputs.output_dir / "sft_summary.json").write_text(json.dumps(summary, indent=2))
        return summary

    def checkpoint(self, step: int) -> Path:
        """Write ``<output_dir>/checkpoints/step_NNNNNN`` (:func:`~earthrl.models.checkpoint.save_checkpoint`;
        process 0 of a DeepSpeed job, with the adapter gathered and no optimizer state, since ZeRO partitions it
        and an SFT checkpoint starts a run by its adapter only)."""
        path = self.inputs.output_dir / "checkpoints" / f"step_{step:06d}"
        with self.ds.full_adapter(self.policy) if self.ds is not None else contextlib.nullcontext():
            if self.inputs.leader:
                with lifecycle.protected():  # a stop signal waits for the write to finish
                    path = save_checkpoint(self.inputs.output_dir / "checkpoints", step, self.policy.model,
                                           self.optimizer, str(self.inputs.model_path), self.config_dict,
                                           keep=int(self.cfg.sft.keep_checkpoints))
        if self.ds is not None:
            self.ds.barrier()
        self.say(f"checkpoint: {path}")
        return path

    def cleanup(self) -> None:
        """Finish wandb; leave a DeepSpeed job's process group."""
        if self.logger is not None:
            self.logger.finish()
        if self.ds is not None:
            self.ds.close()


def next_commands(cfg: DictConfig, checkpoint, data_file: str | None, export: str | None) -> str:
    """The ``next:`` line after a run: what uses its checkpoint with the overrides the stage trained for (the
    planner's loop, the action format, SOP retrieval), or, after Expert-tuning, ``earthrl expert-eval`` on its
    held-out items."""
    model = f"model={cfg.model.name}" if not cfg.model.path else f"model.path={cfg.model.path}"
    if cfg.sft.data.source == EXPERT and data_file:
        held = Path(data_file).with_name(Path(data_file).stem + ".heldout.jsonl")
        tuned = export or f"<earthrl export {checkpoint} OUT>"
        return f"next: earthrl expert-eval --items {held} --model {cfg.model.path or cfg.model.name} --model {tuned}"
    extra = [f"env={cfg.env.action_format}"] if cfg.env.action_format != "json" else []
    if cfg.sft.data.source == "planner":
        extra.append("agent=planner_executor")
    if cfg.sft.craft.enabled:
        extra.append("env.sops.retrieve=true")
    args = " ".join([model, *extra])
    return (f"next: earthrl train {args} trainer.init_from={checkpoint}  |  "
            f"earthrl eval {args} eval.checkpoint={checkpoint}")


def run(cfg: DictConfig) -> dict:
    """Validate, build or read data, train, checkpoint (and export with ``sft.export``); returns the summary."""
    recipe = SFTRecipe(cfg)
    try:
        recipe.setup(recipe.validate())
        summary = recipe.train()
        if not recipe.inputs.leader:  # process 0 of a DeepSpeed job exports and reports
            return summary
        if cfg.sft.export:
            summary["export"] = str(export_merged(recipe.checkpoint_path, recipe.inputs.output_dir / "export",
                                                  overwrite=True))
        print(f"sft: {summary['steps']} steps on {summary['examples']} examples in {summary['train_s']:.0f}s; "
              f"loss {summary['loss_first']:.4f} -> {summary['loss_last']:.4f}; first batch "
              f"{summary['first_batch_loss_before']:.4f} -> {summary['first_batch_loss_after']:.4f}")
        print(f"sft checkpoint: {recipe.checkpoint_path}")
        model = f"model={cfg.model.name} " if not cfg.model.path else f"model.path={cfg.model.path} "
        print(f"next: earthrl train {model}trainer.init_from={recipe.checkpoint_path}  |  "
              f"earthrl eval {model}eval.checkpoint={recipe.checkpoint_path}")
        sys.stdout.flush()
        return summary
    finally:
        recipe.cleanup()

