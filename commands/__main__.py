"""``python -m commands ARGS`` is ``commons-arena ARGS``."""

from commands.cli import main

main()
