"""``python -m earthrl.launch`` is the ``earthrl`` command."""

import sys

try:
    from earthrl.launch.cli import main
except KeyboardInterrupt:  # a Ctrl-C while the command's own modules load
    print("\nearthrl: interrupted before the run started; nothing was started", file=sys.stderr)
    raise SystemExit(130) from None

main()
