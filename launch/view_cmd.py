"""``earthrl view RUN_OR_EVAL_FOLDER [OTHER_FOLDER]``: a local web page of a run's or an evaluation's episodes.

Lists the episodes (task, skill, step, reward, correctness, verdicts, faults, errors) with filters, shows each
episode turn by turn, one task's episodes of two folders side by side (two checkpoints' evaluations), and the
training curves of ``metrics.jsonl`` (:mod:`earthrl.launch.view`). Binds 127.0.0.1 unless told otherwise; the
page loads nothing from outside the machine. Exit status 2 with one line on a missing folder or a folder
without episodes.
"""

from __future__ import annotations

import sys
from pathlib import Path

from earthrl.envs.errors import ConfigError
from earthrl.launch.arg_parser import OneLineParser


def _parser() -> OneLineParser:
    p = OneLineParser(prog="earthrl view", description="A local web page of a run's or an evaluation's episodes.")
    p.add_argument("folders", nargs="+", type=Path, metavar="RUN_OR_EVAL_FOLDER",
                   help="a training run folder (runs/<exp>) or an evaluation folder (runs/eval/<name>); "
                        "a second one shows the same task of both side by side")
    p.add_argument("--port", type=int, default=8765, help="port to serve on (default 8765; 0: a free one)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: this machine only)")
    return p


def main(argv: list[str]) -> int:
    """CLI of ``earthrl view``: load the folders, print the URL, serve until Ctrl-C. Returns the exit status."""
    from earthrl.launch.view.episodes import Folder  # lazy: the product's loaders; --help stays fast
    from earthrl.launch.view.server import make_server

    parser = _parser()
    args = parser.parse_args(argv)
    if len(args.folders) > 2:
        parser.error(f"RUN_OR_EVAL_FOLDER: {len(args.folders)} folders given; give one, or two to compare")
    if not 0 <= args.port <= 65535:
        parser.error(f"--port {args.port}: give a port between 1 and 65535, or 0 for a free one")
    try:
        folders = [Folder.load(f) for f in args.folders]
    except ConfigError as exc:
        print(f"earthrl view: error: {exc}", file=sys.stderr)
        return 2
    try:
        server = make_server(folders, args.host, args.port)
    except OSError as exc:
        print(f"earthrl view: error: --port {args.port}: cannot serve on {args.host} ({exc.strerror}); "
              "choose another with --port, or --port 0 for a free one", file=sys.stderr)
        return 2
    host, port = server.server_address[:2]
    for f in folders:
        print(f"earthrl view: {len(f.episodes)} episodes of {f.path} ({f.kind})" + (f"; {f.note}" if f.note else ""))
    print(f"earthrl view: http://{host}:{port}/ (Ctrl-C stops)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0
