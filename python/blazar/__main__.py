"""``python -m blazar`` is the ``blazar`` command."""

from blazar.cli import main

main()
