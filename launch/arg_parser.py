"""The argument parser of EarthRL's non-Hydra commands (``earthrl export``, ``bench``, ``fetch`` …): a bad
flag or a missing argument is one line naming it and where the usage is, not argparse's usage block."""

from __future__ import annotations

import argparse
import sys


class OneLineParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors are one line on stderr, exit status 2:
    ``earthrl export: error: the following arguments are required: out; see `earthrl export --help```.
    Sub-command parsers (``add_subparsers``) are of this class too (argparse's default ``parser_class``)."""

    def error(self, message: str):
        """Print ``message`` as one line and exit 2 (argparse's own status for usage errors).

        Raises:
            SystemExit: always, code 2.
        """
        print(f"{self.prog}: error: {message}; see `{self.prog} --help`", file=sys.stderr)
        raise SystemExit(2)
