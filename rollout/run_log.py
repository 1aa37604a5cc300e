"""The run's log file (``<run folder>/run.log``): what third-party code says goes there, not to the terminal.

The terminal of a run shows EarthRL's own lines (settings, one progress bar per long task, one line per
step, the summary). Everything else a run's libraries print through :mod:`logging` — Ray's banners
("Token authentication is enabled …"), DeepSpeed's accelerator notice, transformers' and wandb's notes —,
every Python warning (:func:`logging.captureWarnings`) and everything Ray's worker processes (the engine and
env actors) print is written to ``run.log`` with its time and source, never dropped. A record of ERROR or
above still reaches the terminal as well. transformers' and huggingface_hub's own progress bars (loading
weights, writing shards) are switched off: EarthRL's bars say what the run is doing.

:func:`open_run_log` starts this for the process; :func:`quiet_loggers` moves the terminal handlers of
loggers created since then (a library imported late) to the file; :func:`route_ray_workers` does it for
Ray's worker output once ``ray.init`` ran.
"""

from __future__ import annotations

import logging
from pathlib import Path

LOG_NAME = "run.log"
OWN = ("earthrl", "__main__")
"""Logger names (and their children) whose INFO lines belong on the terminal."""

_HANDLER: logging.FileHandler | None = None


class _OwnOrError(logging.Filter):
    """Lets through EarthRL's records and any record of ERROR or above."""

    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.ERROR or record.name.split(".")[0] in OWN


def _is_terminal(handler: logging.Handler) -> bool:
    """A handler that writes to a stream other than a file (the terminal's stdout or stderr)."""
    return isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler)


def open_run_log(folder: Path) -> Path:
    """Send third-party logging, warnings and progress bars of this process to ``folder/run.log``
    (appended, so a resumed run keeps its history; module doc). Calling it again for another folder moves
    the file there.

    Returns:
        the log file's path.
    """
    global _HANDLER
    path = Path(folder) / LOG_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    root = logging.getLogger()
    if _HANDLER is not None:
        root.removeHandler(_HANDLER)
        _HANDLER.close()
    _HANDLER = logging.FileHandler(path, encoding="utf-8")
    _HANDLER.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root.addHandler(_HANDLER)
    if root.level > logging.INFO or root.level == logging.NOTSET:
        root.setLevel(logging.INFO)
    logging.captureWarnings(True)
    quiet_loggers()
    try:  # lazy: only where transformers is installed (every EarthRL run)
        from huggingface_hub.utils import disable_progress_bars
        from transformers.utils import logging as hf_logging

        hf_logging.disable_progress_bar()
        disable_progress_bars()
    except ImportError:
        pass
    return path


def quiet_loggers() -> None:
    """While a run log is open: filter the root logger's terminal handlers to EarthRL's records and errors,
    and take the terminal handlers off every other logger (Ray's, DeepSpeed's), which then passes its records
    on to the root logger: the run log, and the terminal for ERROR and above. Idempotent."""
    if _HANDLER is None:
        return
    for h in logging.getLogger().handlers:
        if _is_terminal(h) and not any(isinstance(f, _OwnOrError) for f in h.filters):
            h.addFilter(_OwnOrError())
    for name, logger in list(logging.root.manager.loggerDict.items()):
        if not isinstance(logger, logging.Logger) or name.split(".")[0] in OWN:
            continue
        terminal = [h for h in logger.handlers if _is_terminal(h)]
        for h in terminal:
            logger.removeHandler(h)
        if terminal:
            logger.propagate = True


def route_ray_workers() -> None:
    """While a run log is open: write what Ray's worker processes print (actor and task output, which
    ``log_to_driver`` would print on the terminal) to the run log, one line each with its process, instead."""
    if _HANDLER is None:
        return
    from ray._private.ray_logging import global_worker_stdstream_dispatcher  # lazy: only after ray.init

    workers = logging.getLogger("ray.workers")

    def to_log(data: dict) -> None:
        if data.get("pid") == "autoscaler":  # the autoscaler's status reports, no worker's output
            return
        who = f"{data.get('actor_name') or data.get('task_name') or 'worker'} pid={data.get('pid')}"
        for line in data.get("lines", []):
            workers.log(logging.WARNING if data.get("is_err") else logging.INFO, "(%s) %s", who, line)

    global_worker_stdstream_dispatcher.remove_handler("ray_print_logs")
    global_worker_stdstream_dispatcher.remove_handler("earthrl_run_log")
    global_worker_stdstream_dispatcher.add_handler("earthrl_run_log", to_log)
    quiet_loggers()  # the loggers ray.init set up
