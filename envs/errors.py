"""User-facing errors: one line naming the field and the fix, exit code 2."""

from __future__ import annotations

import re

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u2028\u2029\ud800-\udfff]")


def flatten(text: object, limit: int = 2000) -> str:
    """``text`` as one printable line: control characters, line separators and lone surrogates
    become ``\\n``/``\\x..``/``\\ud800`` escapes, and the line is cut to ``limit`` characters."""
    line = _CONTROL.sub(lambda m: m.group().encode("unicode_escape", "backslashreplace").decode("ascii"), str(text))
    return line if len(line) <= limit else line[: limit - 1] + "…"


class ConfigError(ValueError):
    """A bad config value, task file, or a model/data set that has not been fetched.

    The message is always one line (:func:`flatten`), whatever the input quoted in it holds.
    """

    def __init__(self, message: object) -> None:
        super().__init__(flatten(message))
