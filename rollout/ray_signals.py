"""Ray and this process's stop signals: ``ray.init`` replaces the driver's SIGTERM handler with one that
exits at once, which would bypass a run's clean stop (Ctrl-C / SIGTERM, :mod:`earthrl.launch.lifecycle`)."""

from __future__ import annotations

import os
import signal
import threading
from contextlib import contextmanager


@contextmanager
def keep_stop_handlers():
    """Keep this process's SIGINT/SIGTERM handlers across the block: ``ray.init`` installs its own SIGTERM
    handler (exit at once), which would bypass the run's clean stop.

    Ray's core worker also installs a C-level handler for SIGTERM (absl's failure-signal handler: it aborts
    the process with exit code -6) while ``ray.init`` connects; a SIGTERM in that window would kill the
    driver before any cleanup. ``RAY_DISABLE_FAILURE_SIGNAL_HANDLER=1`` (unless the user set it) keeps it
    out, so a signal at any moment reaches the run's own handler.

    A SIGTERM that lands after ``ray.init`` installed its Python handler and before the block ends meets Ray's
    handler, which raises ``SystemExit(15)`` (``ray._private.worker.connect``, Ray 2.x). The block turns that
    exit into a call of the handler saved before it (the run's clean stop) instead of letting the process exit
    with status 15."""
    os.environ.setdefault("RAY_DISABLE_FAILURE_SIGNAL_HANDLER", "1")
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except SystemExit as exc:
        own = saved[signal.SIGTERM]
        if exc.code != signal.SIGTERM or not callable(own) or signal.getsignal(signal.SIGTERM) is own:
            raise
        _restore(saved)
        own(signal.SIGTERM, None)  # the run's handler: raises its stop exception
        raise
    finally:
        _restore(saved)


def _restore(saved: dict) -> None:
    for s, handler in saved.items():
        if handler is not None:
            signal.signal(s, handler)
