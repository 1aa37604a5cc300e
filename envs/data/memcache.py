"""A byte-bounded least-recently-used cache of numpy arrays.

Rasters read from disk (scene bands, artifacts) are kept in memory only up to a byte budget, so a
long series (hundreds of dated rasters) keeps the process's resident memory bounded: what falls
out is read again from its file when a tool needs it. The budgets are set by environment variables
(MiB): ``EARTHRL_BAND_CACHE_MB`` (scene bands, default 256) and ``EARTHRL_ARTIFACT_CACHE_MB``
(artifacts of one episode, default 256).
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict

import numpy as np

MIB = 1 << 20


def budget_bytes(variable: str, default_mb: int) -> int:
    """The byte budget named by environment variable ``variable`` (MiB), else ``default_mb``.

    Raises:
        ValueError: the variable is not a non-negative integer (names it and the fix).
    """
    text = os.environ.get(variable, "").strip()
    if not text:
        return default_mb * MIB
    if not text.isdigit():
        raise ValueError(f"{variable}={text!r}: give a whole number of MiB (e.g. {variable}={default_mb})")
    return int(text) * MIB


class ArrayCache:
    """Arrays by key, at most ``max_bytes`` in total (least recently used dropped first); an
    array larger than the budget is not kept at all. Safe to share between threads.

    Args:
        max_bytes: the budget in bytes (``0``: keep nothing).
    """

    def __init__(self, max_bytes: int):
        self.max_bytes = int(max_bytes)
        self._items: OrderedDict = OrderedDict()
        self.nbytes = 0
        self._lock = threading.RLock()

    def __contains__(self, key) -> bool:
        return key in self._items

    def __len__(self) -> int:
        return len(self._items)

    def sizes(self) -> dict:
        """Key -> bytes of what is held now, least recently used first."""
        with self._lock:
            return {k: size for k, (_, size) in self._items.items()}

    def get(self, key):
        """The value stored under ``key`` (marked recently used), or None."""
        with self._lock:
            if key not in self._items:
                return None
            self._items.move_to_end(key)
            return self._items[key][0]

    def put(self, key, value, nbytes: int | None = None) -> None:
        """Keep ``value`` (an array, or a tuple whose first item is one) under ``key`` while the
        budget allows; older entries are dropped to make room."""
        size = int(nbytes if nbytes is not None else _nbytes(value))
        with self._lock:
            self.pop(key)
            if size > self.max_bytes:
                return
            self._items[key] = (value, size)
            self.nbytes += size
            while self.nbytes > self.max_bytes:
                _, (_, dropped) = self._items.popitem(last=False)
                self.nbytes -= dropped

    def pop(self, key) -> None:
        """Forget ``key`` (nothing when absent)."""
        with self._lock:
            if key in self._items:
                self.nbytes -= self._items.pop(key)[1]

    def clear(self) -> None:
        """Forget everything."""
        with self._lock:
            self._items.clear()
            self.nbytes = 0


def _nbytes(value) -> int:
    if isinstance(value, np.ndarray):
        return value.nbytes
    if isinstance(value, tuple) and value and isinstance(value[0], np.ndarray):
        return value[0].nbytes
    return 0
