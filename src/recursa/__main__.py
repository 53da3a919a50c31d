"""``python -m recursa`` is the ``recursa`` command."""

from recursa.cli import main

main()
