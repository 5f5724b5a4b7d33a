"""The ``commons-arena`` command line, the product's front door (with ``serving/``).

``commands/cli.py`` names every subcommand and holds the one error path they share; each
subcommand (a dataclass of arguments, parsed by tyro) lives in its group's module
(``play``, ``evaluate``, ``train``, ``serve``), beside ``common`` (what they share).
``python -m commands ARGS`` is ``commons-arena ARGS``.
This package sits at the top of the import graph: it may import ``commons_arena``,
``policies``, ``serving`` and ``experiments``, and nothing imports it (tests/test_layout.py).
"""
