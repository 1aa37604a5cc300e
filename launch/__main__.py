"""``python -m earthrl.launch`` is the ``earthrl`` command."""

from earthrl.launch.cli import main

main()
