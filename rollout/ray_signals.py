"""Ray and this process's stop signals: ``ray.init`` replaces the driver's SIGTERM handler with one that
exits at once, which would bypass a run's clean stop (Ctrl-C / SIGTERM, :mod:`earthrl.launch.lifecycle`)."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager


@contextmanager
def keep_stop_handlers():
    """Keep this process's SIGINT/SIGTERM handlers across the block: ``ray.init`` installs its own SIGTERM
    handler (exit at once), which would bypass the run's clean stop."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    saved = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for s, handler in saved.items():
            if handler is not None:
                signal.signal(s, handler)
