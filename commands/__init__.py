"""The ``commons-arena`` command line, the product's front door (with ``serving/``).

``commands/cli.py`` holds every subcommand (a dataclass of arguments each, parsed by tyro)
and the one error path they share; ``python -m commands ARGS`` is ``commons-arena ARGS``.
This package sits at the top of the import graph: it may import ``commons_arena``,
``policies``, ``serving`` and ``experiments``, and nothing imports it (tests/test_layout.py).
"""
